"""codecarena's public adapter API, version `API_VERSION`: what a codec family implements, whether it is
one of codecarena's built-in units or your own (`codecarena codec add`, docs/plugins.md).

A family is declared as data (`codec.toml`: configs, options, defaults, which weights it takes; parsed
by `parse_declaration`) and implemented by an `Adapter` subclass, exported by its module as
`ADAPTER`. A worker process creates one adapter per codec configuration and calls:

- `load()` once: load libraries and model files; return model facts for the row (`parameters`,
  `encoder_model_bytes`, `decoder_model_bytes`, `checkpoint` identity, versions, ...).
- `encode(audio)`: float64 mono audio in [-1, 1] at `input_rate` (the worker resamples the arena's
  16 kHz reference with soxr) -> `Encoded`: the code streams (`CodeStream`: integers of a declared bit
  width, packed exactly; `PacketStream`: opaque byte packets) and the side info the decoder needs.
  Nothing else reaches the decoder: it runs in a fresh process and gets only the payload file.
- `decode(payload)` -> `Decoded` audio at any rate; the worker resamples it to 16 kHz and restores the
  original length, failing the row when the length is off by more than `length_tolerance()`.
- `torch_model()`, optionally: the loaded torch model, for named variants and the determinism doctor
  (`codecarena.plugin.torch.TorchAdapter` provides it and the per-side model facts).

Only what `__all__` names is public; everything else in codecarena may change without notice.
The version changes when this contract does. The API owns these types: the worker, the harness's
loading path and every adapter import them from here. Its other public modules, each with its own
`__all__`: `codecarena.plugin.torch` (torch families), `codecarena.plugin.transformers` (families
whose model is a transformers model), `codecarena.plugin.checkpoints` (a family's pinned model files)
and `codecarena.plugin.channel` (decoding what a channel impaired). A built-in adapter imports
nothing of codecarena but these and its own unit (tests/test_layering.py holds it to that).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.payload import CodeStream, PacketStream, Payload, Stream
from codecarena.pcm16 import from_int16, to_int16
from codecarena.registry.catalog import API_VERSION, Family, Option, parse_declaration
from codecarena.specs import CodecSpec
from codecarena.weights import parse_weights

__all__ = [
    "API_VERSION",
    "Adapter",
    "CodeStream",
    "CodecSpec",
    "Decoded",
    "Encoded",
    "Family",
    "Option",
    "PacketStream",
    "Payload",
    "from_int16",
    "parse_declaration",
    "parse_weights",
    "to_int16",
]


# The contract: only `Encoded` crosses from encoder to decoder, and it crosses as a payload file; the
# decoder sees the streams and side info written by the encoder and nothing else (no source audio, no objects).
@dataclass(frozen=True)
class Encoded:
    streams: tuple[Stream, ...]
    side_info: dict[str, Any]
    # Facts observed while encoding that a researcher wants in the row (e.g. Opus coded bandwidth);
    # they are derivable from the streams, so they are reported, not sent.
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decoded:
    audio: np.ndarray  # real floating-point mono samples in [-1, 1], at `sample_rate` (the worker refuses other dtypes)
    sample_rate: int
    # What the decoder did that a row should say, e.g. how it concealed a payload's lost packets.
    facts: dict[str, Any] = field(default_factory=dict)


class Adapter(ABC):
    """One codec configuration. Heavy libraries are imported by the adapter's module, which only a
    worker imports."""

    #: Rate the encoder consumes; the worker resamples the reference to it with soxr.
    input_rate: int

    def __init__(self, spec: CodecSpec, weights: str = "real") -> None:
        self.spec = spec
        # "real", or "synthetic:SEED" for seeded random weights written to a checkpoint file and
        # loaded back through the real loading path (families that support it).
        self.weights = weights
        #: A user codec's checkpoint files by name, each verified against its pin; set by the worker
        #: before `load()` (a built-in unit finds its own files).
        self.checkpoints: dict[str, Path] = {}

    @abstractmethod
    def load(self) -> dict[str, Any]:
        """Load libraries/models; return model facts (parameter counts, bytes, versions)."""

    @abstractmethod
    def encode(self, audio: np.ndarray) -> Encoded:
        """Encode float64 mono audio at `input_rate` with a fresh encoder state."""

    @abstractmethod
    def decode(self, payload: Payload) -> Decoded:
        """Decode the streams of a payload written by `encode`."""

    #: For torch families: the qualified name of the module whose output is the encoder's continuous
    #: latent (what the determinism doctor hashes before quantisation).
    latent_module: str = ""

    def torch_model(self) -> Any:
        """The loaded torch model (variants and the determinism doctor work on it); None for
        families that are not torch models."""
        return None

    def length_tolerance(self, arena_rate: int) -> int:
        """How many samples (at the arena rate) the decoded length may differ from the original
        before the row fails; codecs that work in whole frames pad the last one."""
        return 0
