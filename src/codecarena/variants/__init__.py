"""Named numerical variants: explicit, recorded changes to a loaded model's numerical path.

A variant is one module in this package exposing `apply(model) -> int` (how many modules it
replaced). This file imports no torch, so the harness can list variants and hash their source
without a codec runtime; the variant module itself is imported only inside a worker.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

VARIANTS: dict[str, str] = {
    "eager_snake_v1": "every Snake1d in the loaded model replaced by an eager module evaluating the same "
                      "expression with the same alpha Parameter (docs/determinism.md)",
}


class VariantError(ValueError):
    """An unknown variant, or one that does not apply to the loaded model."""


def check_name(name: str) -> str:
    if name and name not in VARIANTS:
        raise VariantError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
    return name


def source_path(name: str) -> Path:
    return Path(__file__).with_name(f"{check_name(name)}.py")


def source_sha256(name: str) -> str:
    return hashlib.sha256(source_path(name).read_bytes()).hexdigest()


def provenance(name: str) -> dict[str, Any]:
    """What a result or a service declares about its variant ("" = upstream numerics)."""
    if not name:
        return {"name": "", "source": "", "source_sha256": ""}
    return {"name": name, "source": f"codecarena/variants/{name}.py", "source_sha256": source_sha256(name)}


def apply(name: str, model: Any) -> int:
    """Apply the named variant to a loaded torch model; returns how many modules it replaced."""
    module = importlib.import_module(f"codecarena.variants.{check_name(name)}")
    return int(module.apply(model))
