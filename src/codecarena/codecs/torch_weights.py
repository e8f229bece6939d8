"""Weights for the PyTorch families: strict loading of a checkpoint file, and synthetic checkpoints.

Synthetic weights are seeded random weights *saved to a checkpoint file in the format the real
loader reads* and loaded back through that same loader, so packing, replay and determinism code runs
offline. The file is generated deterministically from (family, config, seed), cached, and identified
by its sha256, which the payload records; a decoder whose file differs refuses the payload.

Every checkpoint file is read once into memory: its sha256 (the pin check, or the synthetic
identity) and the parser use exactly those bytes, which are dropped once parsed (peak memory: the
bytes plus the parsed tensors, then the tensors plus the model). The only parser is torch.load with
weights_only=True; a file it refuses is refused, and no loader falls back to one that can run
pickled code.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from codecarena.checkpoints import cache_dir, read_checkpoint

# torch's refusal wraps its one-line reason in paragraphs of advice (one of which is to retry with
# weights_only=False); these lines are dropped from the reason codecarena reports.
_ADVICE = ("Weights only load failed", "In PyTorch 2.6", "(1) In PyTorch", "(2) Alternatively",
           "Re-running `torch.load`", "Check the documentation of torch.load")
_ISSUE = "Please file an issue with the following so that we can make `weights_only=True` compatible with your use case: "


@dataclass(frozen=True)
class Weights:
    """A checkpoint parsed from the bytes its identity's sha256 was computed from (the file was read
    once; the bytes are not kept). `path` only names the file in messages."""

    path: Path
    state: Any
    identity: dict[str, str]


def weights_only_load(path: Path, data: bytes) -> Any:
    """torch.load with weights_only=True on a file's bytes: tensors, dicts, lists and primitives
    only, no pickled code runs. Anything else is refused in one line naming the file."""
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (untrusted bytes: the unpickler fails on junk with KeyError, EOFError, ...)
        lines = [line.strip() for line in str(exc).splitlines()]
        reason = " ".join(line.removeprefix(_ISSUE) for line in lines if line and not line.startswith(_ADVICE))
        raise ValueError(f"{path}: not a plain weights file (torch.load with weights_only=True refused it: "
                         f"{type(exc).__name__}{': ' + reason[:200] if reason else ''}); refusing to load") from None


def state_mismatch(expected: dict[str, tuple[int, ...]], state: dict[str, Any]) -> str:
    """How a state dict differs from the architecture's key -> shape map, as one clause naming up to
    five keys of each kind (missing, unexpected, wrong shape or not a tensor); "" when it matches."""
    missing, unexpected = sorted(expected.keys() - state.keys()), sorted(state.keys() - expected.keys())
    reshaped = sorted(k for k in expected.keys() & state.keys()
                      if not isinstance(state[k], torch.Tensor) or tuple(state[k].shape) != expected[k])
    return ", ".join(f"{what} {keys[:5]}{'...' if len(keys) > 5 else ''}" for what, keys in
                     (("missing keys", missing), ("unexpected keys", unexpected), ("wrong shapes", reshaped)) if keys)


def shapes_of(state: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state.items()}


def load_strict(model: torch.nn.Module, weights: Weights) -> None:
    """A strict load of a parsed state dict: any missing, unexpected or reshaped key is an error naming
    the keys."""
    path, state = weights.path, weights.state
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a state dict")
    mismatch = state_mismatch(shapes_of(model.state_dict()), state)
    if mismatch:
        raise ValueError(f"{path}: checkpoint does not match the architecture: {mismatch}")
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


def synthetic_file_weights(registry_id: str, name: str, seed: int, build: Callable[[int], Any]) -> Weights:
    """The cached synthetic checkpoint `<name>-seed<seed>.pt` (`build(seed)` saved once, seeded by
    `build`), parsed weights-only, with the identity its payloads record."""
    path = synthetic_checkpoint(registry_id, name, seed, lambda: build(seed))
    return read_synthetic(registry_id, path, seed)


def pinned_file_weights(registry_id: str, kind: str, config: str) -> Weights:
    """The registry's (`real`) or the user's (`user`) pinned file of codec configuration `config` (one
    file), parsed weights-only from the bytes verified (refused while the registry pins none completely)."""
    folder, files, identity = pinned_files(registry_id, kind, config)
    if len(files) != 1:
        raise ValueError(f"{registry_id} ({kind} weights) pins {len(files)} files for configuration {config!r}; "
                         "expected one weights file")
    (file_name, data), = files.items()
    path = folder / file_name
    return Weights(path, weights_only_load(path, data), identity)


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


def read_synthetic(registry_id: str, path: Path, seed: int) -> Weights:
    """A cached synthetic checkpoint file, read once: parsed weights-only, identified by those bytes."""
    data = path.read_bytes()
    return Weights(path, weights_only_load(path, data), synthetic_identity(registry_id, path, data, seed))


def synthetic_identity(registry_id: str, path: Path, data: bytes, seed: int) -> dict[str, str]:
    """What a payload records of a synthetic checkpoint; `data` is the file's bytes as loaded."""
    return {"registry": registry_id, "weights": "synthetic", "seed": str(seed), "file": path.name,
            "sha256": hashlib.sha256(data).hexdigest()}


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
