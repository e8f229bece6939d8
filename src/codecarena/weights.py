"""The weights a run asks for (`--weights`, a worker job's `weights`): `real` (the registry's pin),
`user` (the user's pin, registry/user_pins.py) or `synthetic[:SEED]` (seeded weights written to a
checkpoint file and read back through the real loader). Parsed once here, for the harness's selection
and for the adapters (`codecarena.plugin.parse_weights`)."""

from __future__ import annotations


def parse_weights(text: str) -> tuple[str, int | None]:
    """`real` (the registry's pin), `user` (the user's pin, registry/user_pins.py) or
    `synthetic[:SEED]` (seed 0 by default) -> (kind, seed)."""
    kind, _, seed = text.partition(":")
    if kind in ("real", "user") and not seed:
        return kind, None
    if kind == "synthetic":
        if seed and not seed.isdigit():
            raise ValueError(f"weights {text!r}: the seed must be a non-negative integer")
        return "synthetic", int(seed or 0)
    raise ValueError(f"weights {text!r}: expected real, user or synthetic[:SEED]")
