"""The torch part of codecarena's public adapter API (version `codecarena.plugin.API_VERSION`;
docs/plugins.md, "Torch families"). Importing it imports torch; `codecarena.plugin` does not.

`TorchAdapter.load()` is a template that does once what every torch family's load does: the torch
thread count from the family's `threads` option, the weights choice (seeded synthetic weights
written to a checkpoint file and read back, or the registry's or the user's pinned file, verified on
the bytes parsed), the model built and loaded strictly, eval mode, and the facts every torch row
records. A family overrides small hooks: `build_model` (or `load_model`, when its loader builds the
model itself), `synthetic_state`, `configure` and `after_load`, and the weights hooks when its
checkpoint is not one `torch.save`d file.

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

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from codecarena.plugin import Adapter, CodeStream, Encoded, Payload, parse_weights
from codecarena.plugin.checkpoints import generate_once, pinned_files, synthetic_cache

__all__ = [
    "TorchAdapter",
    "Weights",
    "draw_codebooks",
    "load_strict",
    "read_synthetic",
    "rvq_codes",
    "rvq_encoded",
    "save_deterministic",
    "shapes_of",
    "state_mismatch",
    "training_audio",
    "weights_only_load",
]

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
    path = synthetic_cache(registry_id) / f"{name}-seed{seed}.pt"
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


class TorchAdapter(Adapter):
    """A torch family's adapter. Its codec.toml declares an int option `threads`."""

    latent_module = "encoder"
    model: torch.nn.Module
    #: The registry entry whose pins real weights come from; synthetic checkpoints are cached under it.
    registry_id: str
    #: The synthetic checkpoint's file name (without `-seed<N>.pt`), with a generator version: bump it
    #: whenever `synthetic_state` changes, so a file made by older code is never taken for the new one's.
    synthetic_name: str
    #: Where the model runs (`run --device`): the worker calls `use_device` before `load`, which moves
    #: the model there; encode and decode move their inputs with `to_device` and results back to the CPU.
    device: torch.device = torch.device("cpu")

    def use_device(self, device: str) -> None:
        self.device = torch.device(device)

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device)

    def load(self) -> dict[str, Any]:
        options = self.spec.options()
        if "threads" not in options:
            raise ValueError(f"{self.spec.family}: a torch family declares an int option `threads` in its codec.toml")
        torch.set_num_threads(int(options["threads"]))
        self.configure(options)
        kind, seed = parse_weights(self.weights)
        # Parsed before the model is built: the file's bytes are dropped first, which keeps the peak
        # memory at two copies of the weights (parsed tensors and model).
        weights = self.pinned_weights(kind) if seed is None else self.synthetic_weights(seed)
        # Loaded on the CPU (weights are parsed there), then moved: one path for every device.
        self.model = self.load_model(weights).eval().to(self.device)
        # The common facts come last: a family's facts never replace the checkpoint identity, which
        # the payload records.
        return {**self.after_load(), "weights": kind, "checkpoint": weights.identity, **self.side_facts(),
                "torch": torch.__version__, "threads": torch.get_num_threads()}

    def configure(self, options: dict[str, Any]) -> None:
        """Read (and check) the family's own options before any weights load."""

    def synthetic_weights(self, seed: int) -> Weights:
        """Seeded synthetic weights, read back from their checkpoint file. By default
        `synthetic_state(seed)` `torch.save`d once as `<synthetic_name>-seed<seed>.pt` in the cache,
        then parsed like a real file (`torch.load(weights_only=True)` on the bytes hashed)."""
        return synthetic_file_weights(self.registry_id, self.synthetic_name, seed, self.synthetic_state)

    def synthetic_state(self, seed: int) -> Any:
        """What the synthetic checkpoint file holds, in the real checkpoint's format (seed torch first)."""
        raise NotImplementedError(f"{type(self).__name__} makes no synthetic weights")

    def pinned_weights(self, kind: str) -> Weights:
        """The pinned checkpoint (`real`: the registry's; `user`: the user's) of this configuration,
        verified on the bytes parsed. By default one file, parsed with `torch.load(weights_only=True)`."""
        return pinned_file_weights(self.registry_id, kind, self.spec.config)

    def build_model(self) -> torch.nn.Module:
        """The architecture, with any weights: `load_model` loads the checkpoint into it."""
        raise NotImplementedError(f"{type(self).__name__} overrides neither build_model nor load_model")

    def load_model(self, weights: Weights) -> torch.nn.Module:
        """The model holding `weights`. By default `build_model()` and a strict load of the state dict
        (every missing, unexpected or reshaped key is an error); override it when the checkpoint is
        not a plain state dict or the loader builds the model itself."""
        model = self.build_model()
        load_strict(model, weights)
        return model

    def after_load(self) -> dict[str, Any]:
        """Set up what encode and decode need from the loaded `self.model`; returns the family's own
        facts for the row (frame rate, quantizers, bits per code, ...)."""
        return {}

    def torch_model(self) -> torch.nn.Module:
        return self.model

    def side_modules(self) -> tuple[tuple[torch.nn.Module, ...], tuple[torch.nn.Module, ...]]:
        """The modules each side must ship: encoder or decoder, plus the quantizer."""
        return (self.model.encoder, self.model.quantizer), (self.model.decoder, self.model.quantizer)

    def side_facts(self) -> dict[str, int]:
        """Parameters and tensor bytes of each side's modules."""
        encoder_modules, decoder_modules = self.side_modules()
        encoder, decoder = parameter_stats(*encoder_modules), parameter_stats(*decoder_modules)
        return {"encoder_parameters": encoder["parameters"], "encoder_model_bytes": encoder["tensor_bytes"],
                "decoder_parameters": decoder["parameters"], "decoder_model_bytes": decoder["tensor_bytes"]}


def rvq_encoded(codes: torch.Tensor, bits: int) -> Encoded:
    """Codes of shape (1, quantizers, frames), on any device, as one stream packed at the codebook's bit width."""
    values = codes[0].cpu().numpy().astype(np.uint64)  # quantizers x frames
    return Encoded(streams=(CodeStream("codes", bits, tuple(values.shape), values.reshape(-1)),),
                   side_info={}, facts={"frames": int(values.shape[1]), "quantizers": int(values.shape[0])})


def rvq_codes(payload: Payload) -> torch.Tensor:
    """The payload's code stream back as a (1, quantizers, frames) int64 tensor, on the CPU."""
    stream = payload.code_stream("codes")
    return torch.from_numpy(stream.values.astype(np.int64).reshape(stream.shape))[None]


def draw_codebooks(quantizer: Any, residual: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Synthetic codebooks for a residual VQ built like DAC's `ResidualVectorQuantize` (DAC's, and the
    Fish codec's, which reuses it): each layer's codebook filled, layer by layer on the residual, with
    rows drawn from that layer's projected latents (its `in_proj` output, frames x codebook_dim, where
    the L2-normalised lookup happens); returns what is left of the residual."""
    for layer in quantizer.quantizers:
        projected = layer.in_proj(residual)[0].T
        pick = torch.randint(0, projected.shape[0], (layer.codebook_size,), generator=generator)
        layer.codebook.weight.copy_(projected[pick])
        z_q, _, _, _, _ = layer(residual)
        residual = residual - z_q
    return residual
