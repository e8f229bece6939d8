"""The contract every codec adapter fulfils inside a worker process.

Only `Encoded` crosses from encoder to decoder, and it crosses as a payload file: the decoder sees
the streams and side info written by the encoder and nothing else (no source audio, no objects).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.payload import Payload, Stream
from codecarena.specs import CodecSpec


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


def to_int16(audio: np.ndarray) -> np.ndarray:
    """Round-to-nearest PCM16 with saturation: the one quantiser used everywhere."""
    return np.clip(np.round(np.asarray(audio, dtype=np.float64) * 32768.0), -32768, 32767).astype(np.int16)


def from_int16(samples: np.ndarray) -> np.ndarray:
    return np.asarray(samples, dtype=np.int16).astype(np.float64) / 32768.0


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
