"""X-Codec 2.0 through transformers' Xcodec2Model: 16 kHz, 50 Hz frames, one 65,536-entry FSQ code
(16 bits) a frame = 800 bps.

The `xcodec2` package pins torch 2.5.0, so the code that runs is transformers 5.24.0's port
(`Xcodec2Model`, `Xcodec2FeatureExtractor`), built from `Xcodec2Config()` defaults, which its
docstring ties to the HKUSTAudio/xcodec2-hf checkpoint: a 16-layer w2v-BERT 2.0 semantic encoder,
an acoustic encoder with strides 2-2-4-4-5 (hop 320), a fused 2048-wide projection into an 8-level
x 4 FSQ (4^8 = 65,536 codes), and a 12-layer transformer decoder with an ISTFT head; 629 M
parameters. The configuration's sha256 is recorded with every row.

The feature extractor is upstream's input path: it appends one zero sample and pads to whole
320-sample hops, so a clip of n samples gives n // 320 + 1 frames (a whole extra frame at exact
multiples, as with BigCodec's padding). Every frame's code is sent: the decoder renders them all and
the pipeline trims to the recorded length. Weights load with `codecarena.plugin.transformers`' checks;
synthetic weights are transformers' own random initialisation, which already spreads the FSQ codes.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Xcodec2Config, Xcodec2FeatureExtractor, Xcodec2Model

from codecarena.plugin import Decoded, Encoded, Payload
from codecarena.plugin.torch import TorchAdapter, Weights, rvq_codes, rvq_encoded
from codecarena.plugin.transformers import (
    load_pretrained,
    pinned_safetensors,
    synthetic_folder,
    synthetic_safetensors,
)

REGISTRY_ID = "xcodec2"
RATE = 16000
HOP = 320
BITS = 16  # log2(4 ** 8)
# Part of the synthetic folder's name: bump it whenever synthetic_model changes.
SYNTHETIC_VERSION = 1
ENCODER_PARTS = ("semantic_encoder", "semantic_adapter", "acoustic_encoder", "fc_encoder", "quantizer")
DECODER_PARTS = ("quantizer", "acoustic_decoder")


def config() -> Xcodec2Config:
    return Xcodec2Config()


def config_sha256() -> str:
    """The configuration as transformers serialises it (its version line left out), hashed."""
    fields = {k: v for k, v in config().to_dict().items() if k != "transformers_version"}
    fields["semantic_model_config"] = {k: v for k, v in fields["semantic_model_config"].items()
                                       if k != "transformers_version"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def saved_shapes() -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = Xcodec2Model(config())
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def load_model(weights: Weights) -> Xcodec2Model:
    return load_pretrained(Xcodec2Model, config(), weights, saved_shapes())


def synthetic_model(seed: int) -> Xcodec2Model:
    torch.manual_seed(seed)
    return Xcodec2Model(config()).eval()


def synthetic_dir(seed: int) -> Path:
    return synthetic_folder(REGISTRY_ID, f"xcodec2-v{SYNTHETIC_VERSION}", seed, synthetic_model)


class Xcodec2Adapter(TorchAdapter):
    input_rate = RATE

    registry_id = REGISTRY_ID

    def synthetic_weights(self, seed: int) -> Weights:
        return synthetic_safetensors(REGISTRY_ID, synthetic_dir(seed), seed)

    def pinned_weights(self, kind: str) -> Weights:
        return pinned_safetensors(REGISTRY_ID, kind, self.spec.config)

    def load_model(self, weights: Weights) -> Xcodec2Model:
        return load_model(weights)

    def after_load(self) -> dict[str, Any]:
        self.features = Xcodec2FeatureExtractor(sampling_rate=RATE, hop_length=HOP)
        levels = [int(v) for v in self.model.config.quantization_levels]
        if math.prod(levels) != 2 ** BITS:
            raise ValueError(f"FSQ levels {levels} do not make {2 ** BITS} codes")
        return {"config_sha256": config_sha256(), "frame_rate_hz": RATE / HOP, "quantizers": 1,
                "bits_per_code": BITS, "fsq_levels": levels, "attention": str(self.model.config._attn_implementation)}

    def side_modules(self) -> tuple[tuple[torch.nn.Module, ...], tuple[torch.nn.Module, ...]]:
        # The quantizer's projections serve both sides: project_in encodes, project_out decodes.
        return (tuple(getattr(self.model, part) for part in ENCODER_PARTS),
                tuple(getattr(self.model, part) for part in DECODER_PARTS))

    def encode(self, audio: np.ndarray) -> Encoded:
        inputs = self.features(np.asarray(audio, dtype=np.float32), sampling_rate=RATE, return_tensors="pt")
        with torch.inference_mode():
            codes = self.model.encode(*(self.to_device(inputs[name]) for name in (
                "input_values", "input_features", "padding_mask", "input_features_mask"))).audio_codes
        encoded = rvq_encoded(codes, BITS)  # 1 x 1 x frames
        return Encoded(encoded.streams, {},
                       {**encoded.facts, "upstream_padded_length": int(inputs["input_values"].shape[-1])})

    def decode(self, payload: Payload) -> Decoded:
        codes = self.to_device(rvq_codes(payload))
        if codes.shape[1] != 1:
            raise ValueError(f"payload holds {codes.shape[1]} code streams, X-Codec 2 has one")
        with torch.inference_mode():
            audio = self.model.decode(audio_codes=codes).audio_values
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        # The appended sample and the padding to whole hops: up to one whole hop.
        return math.ceil(HOP * arena_rate / RATE)


ADAPTER = Xcodec2Adapter
