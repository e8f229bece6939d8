"""Weights for the PyTorch families: strict loading of a checkpoint file, and synthetic checkpoints.

Synthetic weights are seeded random weights *saved to a checkpoint file in the format the real
loader reads* and loaded back through that same loader, so packing, replay and determinism code runs
offline. The file is generated deterministically from (family, config, seed), cached, and identified
by its sha256, which the payload records; a decoder whose file differs refuses the payload.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from codecarena.checkpoints import cache_dir, resolve
from codecarena.datasets import sha256_file


def load_strict(model: torch.nn.Module, path: Path) -> None:
    """torch.load with weights_only (no pickled code runs), then a strict load: any missing or
    unexpected key is an error naming the keys."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a state dict")
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(f"{path}: checkpoint does not match the architecture: missing keys {missing[:5]}"
                         f"{'...' if len(missing) > 5 else ''}, unexpected keys {unexpected[:5]}"
                         f"{'...' if len(unexpected) > 5 else ''}")
    model.load_state_dict(state, strict=True)


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


def save_deterministic(obj: Any, path: Path) -> None:
    """torch.save through a file object, atomically. Given a path, torch names the archive's root
    folder after the file, so a temporary name (with a pid) would make every save a different file;
    through a file object the root is always "archive" and equal weights give equal bytes."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(obj, fh)
    os.replace(tmp, path)


def synthetic_checkpoint(registry_id: str, name: str, seed: int, build: Callable[[], dict[str, Any]]) -> Path:
    """The cached synthetic checkpoint file, generated with `build()` (seeded by the caller) if absent."""
    path = cache_dir() / "synthetic" / registry_id / f"{name}-seed{seed}.pt"
    generate_once(path, path, lambda: save_deterministic(build(), path))
    return path


def checkpoint_file(registry_id: str, weights: str, name: str,
                    build: Callable[[int], dict[str, Any]]) -> tuple[Path, dict[str, str]]:
    """The checkpoint file a torch family loads, and the identity its payloads record: the cached
    synthetic file for `synthetic:SEED`, else the registry's pinned, verified checkpoint (refused
    while the registry pins none completely)."""
    from codecarena.codecs.base import parse_weights
    from codecarena.registry.entries import load_entry

    kind, seed = parse_weights(weights)
    if kind == "synthetic":
        assert seed is not None
        path = synthetic_checkpoint(registry_id, name, seed, lambda: build(seed))
        return path, synthetic_identity(registry_id, path, seed)
    entry = load_entry(registry_id)
    if entry.checkpoint is None:
        raise ValueError(f"registry entry {registry_id} pins no complete checkpoint "
                         f"({entry.status_reason}); use --weights synthetic")
    folder = resolve(entry.checkpoint)
    return folder / entry.checkpoint.files[0].name, entry.checkpoint.identity(registry_id)


def synthetic_identity(registry_id: str, path: Path, seed: int) -> dict[str, str]:
    return {"registry": registry_id, "weights": "synthetic", "seed": str(seed), "file": path.name,
            "sha256": sha256_file(path)}


def parameter_stats(*modules: torch.nn.Module) -> dict[str, int]:
    params = [p for m in modules for p in m.parameters()]
    buffers = [b for m in modules for b in m.buffers()]
    return {"parameters": sum(p.numel() for p in params),
            "tensor_bytes": sum(t.numel() * t.element_size() for t in params + buffers)}


def training_audio(rate: int) -> np.ndarray:
    """The smoke set at `rate`, concatenated: what synthetic codebooks are drawn from, so that codes
    vary on speech. A verified, pinned set makes the synthetic checkpoint the same file on every
    machine."""
    import soundfile as sf
    import soxr

    from codecarena.datasets import DatasetError, load_smoke

    try:
        evalset = load_smoke(allow_download=False)
    except DatasetError as exc:
        raise ValueError(f"synthetic weights draw their codebooks from the smoke set: {exc}") from None
    return np.concatenate([soxr.resample(sf.read(u.path, dtype="float64")[0], u.sample_rate, rate, quality="HQ")
                           for u in evalset.utterances])
