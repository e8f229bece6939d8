"""Descript Audio Codec (descript-audio-codec 1.0.0) at 16, 24 and 44.1 kHz, 10-bit codebooks.

16khz: hop 320, 50 Hz, 12 codebooks (6 kbps); 24khz: hop 320, 75 Hz, 32 codebooks (24 kbps);
44khz: hop 512, 44100/512 = 86.13 Hz, 9 codebooks (7.75 kbps). The number of codebooks sent is the
rate knob (`n_quantizers`, default: all of the configuration's).

Weights are DAC's own checkpoint format, a `torch.save`d dict `{"state_dict": ..., "metadata":
{"kwargs": {...}}}` (synthetic weights are written in exactly that format), but the adapter never
calls DAC's loader: `DAC.load` (audiotools' `BaseModel.load`) first opens the file as a
`torch.package`, whose unpickling runs code from the file, and only when that fails reads it with
`torch.load`. A file can be both (one zip holding a valid weights dict and a package), so checking
it with a safe reader and then calling `DAC.load` would still run the package. The adapter does what
the weights branch of `DAC.load` does, on the bytes read once (and hashed) and with
`torch.load(weights_only=True)` only: the metadata must describe the configuration's architecture
below, every state-dict key and shape must match it (DAC's own default is `strict=False`), and the
state dict is loaded with `strict=True` into the model built from the configuration. A file that is
anything else is refused in one line; nothing falls back to a loader that can run pickled code.

The codes are DAC's raw RVQ indices (`DAC.encode` on the hop-padded input, `quantizer.from_codes` and
`DAC.decode` back), without the `.dac` file container's chunking and loudness side value. DAC returns
audio a few samples short of the padded length (N-8 for an input that is an exact multiple of the
hop); the pipeline restores the exact length within `length_tolerance`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from dac import DAC

from codecarena.plugin import Decoded, Encoded, Payload
from codecarena.plugin.torch import (
    TorchAdapter,
    Weights,
    draw_codebooks,
    rvq_codes,
    rvq_encoded,
    shapes_of,
    state_mismatch,
    training_audio,
)

REGISTRY_ID = "dac"
# Model hyper-parameters from the upstream repository's `conf/final/{16,24,44}khz.yml`
# (descriptinc/descript-audio-codec); the wheel does not ship its configurations.
# quantizer_dropout only acts in training mode (it is recorded because DAC.save records it).
CONFIG_16KHZ: dict[str, Any] = {
    "sample_rate": 16000,
    "encoder_dim": 64,
    "encoder_rates": [2, 4, 5, 8],
    "decoder_dim": 1536,
    "decoder_rates": [8, 5, 4, 2],
    "n_codebooks": 12,
    "codebook_size": 1024,
    "codebook_dim": 8,
    "quantizer_dropout": 0.5,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "16khz": CONFIG_16KHZ,
    "24khz": {**CONFIG_16KHZ, "sample_rate": 24000, "n_codebooks": 32},
    "44khz": {**CONFIG_16KHZ, "sample_rate": 44100, "encoder_rates": [2, 4, 8, 8], "decoder_rates": [8, 8, 4, 2],
              "n_codebooks": 9},
}
BITS = 10  # log2(codebook_size)
# Part of the synthetic checkpoint's name: bump it whenever synthetic_checkpoint_dict changes, so a
# cached file made by older code is never mistaken for the current generator's output.
SYNTHETIC_VERSION = 1


def hop(config: dict[str, Any]) -> int:
    return math.prod(config["encoder_rates"])


def build_model(config: dict[str, Any] = CONFIG_16KHZ) -> DAC:
    return DAC(**{k: (list(v) if isinstance(v, list) else v) for k, v in config.items()}).eval()


def synthetic_checkpoint_dict(seed: int, config: dict[str, Any] = CONFIG_16KHZ) -> dict[str, Any]:
    """Seeded random weights in the format `DAC.load` reads. Each codebook is a draw of its own
    quantizer's projected latents (the 8-dim `in_proj` output, where DAC's L2-normalised lookup
    happens) of real speech (the smoke set), layer by layer on the residual: with plain random
    init the codes are far less varied, and packing or replay tests would prove less."""
    torch.manual_seed(seed)
    model = build_model(config)
    rate = config["sample_rate"]
    generator = torch.Generator().manual_seed(seed)
    speech = torch.from_numpy(training_audio(rate).astype(np.float32))[None, None, :]
    with torch.no_grad():
        draw_codebooks(model.quantizer, model.encoder(model.preprocess(speech, rate)), generator)
    return {"state_dict": model.state_dict(), "metadata": {"kwargs": dict(config)}}


def load_checkpoint(weights: Weights, config: dict[str, Any] = CONFIG_16KHZ) -> DAC:
    """The weights branch of `DAC.load` on a checkpoint parsed weights-only, made strict: the metadata
    must describe the configuration's architecture (`quantizer_dropout` acts only in training) and
    every key and shape must match; any difference is a one-line error naming the file."""
    path, saved = weights.path, weights.state
    if not isinstance(saved, dict) or not isinstance(saved.get("state_dict"), dict) \
            or not isinstance(saved.get("metadata"), dict) or not isinstance(saved["metadata"].get("kwargs"), dict):
        raise ValueError(f"{path}: not a DAC checkpoint (a dict with state_dict and metadata.kwargs)")  # noqa: TRY004 (a bad file, reported as ValueError like every load failure)
    # Every argument DAC takes (DAC.load drops the rest). latent_dim None, or absent, is DAC's default:
    # derived from the encoder, the value DAC.save records.
    expected = {**config, "latent_dim": config["encoder_dim"] * 2 ** len(config["encoder_rates"])}
    kwargs = dict(saved["metadata"]["kwargs"])
    if kwargs.get("latent_dim") is None:
        kwargs["latent_dim"] = expected["latent_dim"]
    wrong = sorted(k for k in expected if k != "quantizer_dropout" and kwargs.get(k) != expected[k])
    if wrong:
        raise ValueError(f"{path}: checkpoint metadata is not the {config['sample_rate'] / 1000:g} kHz configuration: "
                         + ", ".join(f"{k}={kwargs.get(k)!r} (expected {expected[k]!r})" for k in wrong))
    model = build_model(config)
    mismatch = state_mismatch(shapes_of(model.state_dict()), saved["state_dict"])
    if mismatch:
        raise ValueError(f"{path}: checkpoint does not match the architecture: {mismatch}")
    model.load_state_dict(saved["state_dict"], strict=True)
    return model.eval()


class DacAdapter(TorchAdapter):
    registry_id = REGISTRY_ID

    def __init__(self, spec: Any, weights: str = "real") -> None:
        super().__init__(spec, weights)
        self.config = CONFIGS[spec.config]
        self.input_rate = self.config["sample_rate"]
        self.hop = hop(self.config)
        self.synthetic_name = f"dac_{spec.config}-v{SYNTHETIC_VERSION}"

    def configure(self, options: dict[str, Any]) -> None:
        self.quantizers = int(options["n_quantizers"])
        if not 1 <= self.quantizers <= self.config["n_codebooks"]:
            raise ValueError(f"n_quantizers must be 1..{self.config['n_codebooks']} for {self.spec.config}, "
                             f"got {self.quantizers}")

    def synthetic_state(self, seed: int) -> dict[str, Any]:
        return synthetic_checkpoint_dict(seed, self.config)

    def load_model(self, weights: Weights) -> DAC:
        return load_checkpoint(weights, self.config)

    def after_load(self) -> dict[str, Any]:
        return {"frame_rate_hz": self.input_rate / self.hop, "quantizers": self.quantizers, "bits_per_code": BITS}

    def encode(self, audio: np.ndarray) -> Encoded:
        x = self.to_device(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None, :])
        with torch.no_grad():
            _, codes, _, _, _ = self.model.encode(self.model.preprocess(x, self.input_rate), self.quantizers)
        return rvq_encoded(codes, BITS)

    def decode(self, payload: Payload) -> Decoded:
        codes = self.to_device(rvq_codes(payload))
        with torch.no_grad():
            z, _, _ = self.model.quantizer.from_codes(codes)
            audio = self.model.decode(z)
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), self.input_rate)

    def length_tolerance(self, arena_rate: int) -> int:
        # Up to one hop of padding (the last partial frame) plus DAC's few missing samples.
        return math.ceil(self.hop * arena_rate / self.input_rate) + 16


ADAPTER = DacAdapter
