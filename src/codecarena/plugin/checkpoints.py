"""A family's model files, the part of codecarena's public adapter API (version
`codecarena.plugin.API_VERSION`) that needs no torch: the pinned files of a configuration, read once
and verified on exactly the bytes handed back, and the cache of synthetic weights, generated once
across processes.

A pin is the registry's (`real`: the checkpoint of the family's registry entry) or the user's
(`user`: `codecarena registry pin`, registry/user_pins.py). Verification (size, then sha256 on the
bytes returned) is `codecarena.checkpoints.read_checkpoint`'s; a file swapped after the check is never
what a loader parses.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from codecarena.checkpoints import cache_dir, read_checkpoint

__all__ = ["generate_once", "pinned_files", "pinned_side_bytes", "synthetic_cache"]


def pinned_files(registry_id: str, kind: str, config: str) -> tuple[Path, dict[str, bytes], dict[str, str]]:
    """The verified bytes of every pinned file a configuration loads, by name, with the identity its
    payloads record: the registry's pin (`real`), or the user's (`user`: identity `pinned_by: user`)."""
    from codecarena.registry.entries import load_entry

    entry = load_entry(registry_id)
    if kind == "user":
        from codecarena.registry import user_pins

        pin = user_pins.find(entry.codec_family, config)
        if pin is None:
            raise ValueError(f"no user pin for {entry.codec_family}:{config} "
                             f"(codecarena registry pin {entry.codec_family}:{config} --file PATH)")
        checkpoint = pin.checkpoint()
        folder, files = read_checkpoint(checkpoint, models_dir=user_pins.pins_dir())
        return folder, files, pin.identity(registry_id)
    if entry.checkpoint is None:
        raise ValueError(f"registry entry {registry_id} pins no complete checkpoint "
                         f"({entry.status_reason}); use --weights synthetic")
    checkpoint = entry.checkpoint.for_config(config)
    folder, files = read_checkpoint(checkpoint)
    return folder, files, checkpoint.identity(registry_id)


def pinned_side_bytes(registry_id: str, config: str) -> dict[str, int]:
    """The pinned bytes of model files each side loads, {"encoder": n, "decoder": n}, as the registry
    entry's pins say (a file of side `both` counts on each); for the rows' model sizes."""
    from codecarena.registry.entries import load_entry

    entry = load_entry(registry_id)
    if entry.checkpoint is None:
        raise ValueError(f"registry entry {registry_id} pins no complete checkpoint ({entry.status_reason})")
    sides = {"encoder": 0, "decoder": 0}
    for f in entry.checkpoint.for_config(config).files:
        for side in sides:
            if f.side in (side, "both"):
                sides[side] += f.bytes
    return sides


def synthetic_cache(registry_id: str) -> Path:
    """Where a family's synthetic weights are cached (each file or folder named with its generator's
    version and its seed)."""
    return cache_dir() / "synthetic" / registry_id


@contextmanager
def generation_lock(target: Path) -> Iterator[None]:
    """Serialise the generation of one cached synthetic checkpoint across processes: workers that
    miss the cache at once (a process pool) must not each write it, or a worker could hash one file
    and load another."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def generate_once(lock_target: Path, ready: Path, make: Callable[[], None]) -> None:
    """Run `make` unless `ready` exists, at most once across processes (checked again under the lock)."""
    if ready.is_file():
        return
    with generation_lock(lock_target):
        if not ready.is_file():
            make()
