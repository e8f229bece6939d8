"""The torch part of codecarena's public adapter API (version `codecarena.plugin.API_VERSION`;
docs/plugins.md, "Torch families"). Importing it imports torch; `codecarena.plugin` does not.

`TorchAdapter.load()` is a template that does once what every torch family's load does: the torch
thread count from the family's `threads` option, the weights choice (seeded synthetic weights
written to a checkpoint file and read back, or the registry's or the user's pinned file, verified on
the bytes parsed), the model built and loaded strictly, eval mode, and the facts every torch row
records. A family overrides small hooks: `build_model` (or `load_model`, when its loader builds the
model itself), `synthetic_state`, `configure` and `after_load`, and the weights hooks when its
checkpoint is not one `torch.save`d file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from codecarena.codecs.base import Adapter, Encoded, parse_weights
from codecarena.codecs.torch_weights import (
    Weights,
    load_strict,
    parameter_stats,
    pinned_file_weights,
    synthetic_file_weights,
    training_audio,
    weights_only_load,
)
from codecarena.payload import CodeStream, Payload

__all__ = [
    "TorchAdapter",
    "Weights",
    "load_strict",
    "rvq_codes",
    "rvq_encoded",
    "training_audio",
    "weights_only_load",
]


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
