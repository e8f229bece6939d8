"""Mimi (Kyutai) through transformers' MimiModel: 24 kHz, 12.5 Hz frames, 2048-entry (11-bit) codes.

The number of quantizers is the rate knob and part of the configuration name (`mimi:8` = 1100 bps,
`mimi:32` = 4400 bps; the released config's default is 32). The configuration is transformers'
`MimiConfig()` defaults, carried explicitly below: built from it, the model saves to a
`model.safetensors` of exactly 384,649,828 bytes, the size the census records for the released file.

Weights load through `MimiModel.from_pretrained`, the real loader, with the checks of
`codecarena.plugin.transformers`: its `_keys_to_ignore_on_load_unexpected` would silently ignore unexpected keys
under `encoder.`/`decoder.`, so the key set and shapes are checked against the architecture first.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import MimiConfig, MimiModel

from codecarena.plugin import Decoded, Encoded, Payload
from codecarena.plugin.torch import TorchAdapter, Weights, rvq_codes, rvq_encoded, training_audio
from codecarena.plugin.transformers import (
    load_pretrained,
    pinned_safetensors,
    synthetic_folder,
    synthetic_safetensors,
)

REGISTRY_ID = "mimi"
RATE = 24000
BITS = 11
CONFIG: dict[str, Any] = {
    "sampling_rate": 24000, "audio_channels": 1, "hidden_size": 512, "num_filters": 64,
    "num_residual_layers": 1, "upsampling_ratios": [8, 6, 5, 4], "kernel_size": 7, "last_kernel_size": 3,
    "residual_kernel_size": 3, "dilation_growth_rate": 2, "use_causal_conv": True, "pad_mode": "constant",
    "compress": 2, "trim_right_ratio": 1.0, "codebook_size": 2048, "codebook_dim": 256, "num_quantizers": 32,
    "use_conv_shortcut": False, "vector_quantization_hidden_dimension": 256, "num_semantic_quantizers": 1,
    "upsample_groups": 512, "num_hidden_layers": 8, "intermediate_size": 2048, "num_attention_heads": 8,
    "num_key_value_heads": 8, "head_dim": 64, "hidden_act": "gelu", "max_position_embeddings": 8000,
    "initializer_range": 0.02, "norm_eps": 1e-5, "use_cache": False, "use_streaming": False,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "sliding_window": 250,
    "attention_dropout": 0.0, "layer_scale_initial_scale": 0.01, "attention_bias": False,
}
SYNTHETIC_VERSION = 1
# save_pretrained writes the layout of the released file (transformers 4.x names); from_pretrained
# renames on load. The same renaming, in reverse, gives the key set a checkpoint must hold.
SAVED_NAMES = ((r"^encoder\.encoder_seanet\.", "encoder."), (r"^encoder\.encoder_transformer\.", "encoder_transformer."),
               (r"^encoder\.downsample\.", "downsample."), (r"^decoder\.decoder_seanet\.", "decoder."),
               (r"^decoder\.decoder_transformer\.", "decoder_transformer."), (r"^decoder\.upsample\.", "upsample."))


def build_model() -> MimiModel:
    return MimiModel(MimiConfig(**CONFIG)).eval()


def saved_name(key: str) -> str:
    for pattern, replacement in SAVED_NAMES:
        if re.match(pattern, key):
            return re.sub(pattern, replacement, key, count=1)
    return key


def saved_shapes() -> dict[str, tuple[int, ...]]:
    """The key -> shape map a checkpoint must hold (the model is built on the meta device: shapes
    without memory)."""
    with torch.device("meta"):
        model = build_model()
    return {saved_name(k): tuple(v.shape) for k, v in model.state_dict().items()}


def load_model(weights: Weights) -> MimiModel:
    return load_pretrained(MimiModel, MimiConfig(**CONFIG), weights, saved_shapes())


def draw_codebooks(model: MimiModel, seed: int) -> None:
    """Codebook rows drawn from each quantizer's projected latents of real speech, residual by
    residual: Mimi's codebooks start at zero, so with plain random init every frame is code 0.
    The smoke set has fewer 12.5 Hz frames than a codebook has rows, so exact copies would leave a
    zero residual (and one code) for every later layer; jitter of half the frames' spread keeps
    each layer's residual alive."""
    generator = torch.Generator().manual_seed(seed)
    speech = torch.from_numpy(training_audio(RATE).astype(np.float32))[None, None, :]
    with torch.no_grad():
        latents = model.encoder(speech).latents
        for rvq in (model.quantizer.semantic_residual_vector_quantizer,
                    model.quantizer.acoustic_residual_vector_quantizer):
            residual = rvq.input_proj(latents)
            for layer in rvq.layers:
                frames = residual[0].T
                size = layer.codebook.codebook_size
                pick = torch.randint(0, frames.shape[0], (size,), generator=generator)
                jitter = torch.randn(size, frames.shape[1], generator=generator) * frames.std(dim=0) / 2
                layer.codebook.embed_sum.copy_(frames[pick] + jitter)
                layer.codebook.cluster_usage.fill_(1.0)
                layer.codebook._embed = None  # the cached embed was computed from the zero init
                residual = residual - layer.decode(layer.encode(residual))


def synthetic_model(seed: int) -> MimiModel:
    torch.manual_seed(seed)
    model = build_model()
    draw_codebooks(model, seed)
    return model


def synthetic_dir(seed: int) -> Path:
    return synthetic_folder(REGISTRY_ID, f"mimi-v{SYNTHETIC_VERSION}", seed, synthetic_model)


class MimiAdapter(TorchAdapter):
    input_rate = RATE

    registry_id = REGISTRY_ID

    def configure(self, options: dict[str, Any]) -> None:
        self.quantizers = int(self.spec.config)

    def synthetic_weights(self, seed: int) -> Weights:
        return synthetic_safetensors(REGISTRY_ID, synthetic_dir(seed), seed)

    def pinned_weights(self, kind: str) -> Weights:
        return pinned_safetensors(REGISTRY_ID, kind, self.spec.config)

    def load_model(self, weights: Weights) -> MimiModel:
        return load_model(weights)

    def after_load(self) -> dict[str, Any]:
        config = self.model.config
        self.frame_size = int(RATE / config.frame_rate)
        return {"config": json.loads(json.dumps(CONFIG)), "frame_rate_hz": float(config.frame_rate),
                "quantizers": self.quantizers, "bits_per_code": BITS,
                "attention": str(config._attn_implementation)}

    def encode(self, audio: np.ndarray) -> Encoded:
        x = self.to_device(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None, :])
        with torch.inference_mode():
            codes = self.model.encode(x, num_quantizers=self.quantizers).audio_codes
        return rvq_encoded(codes, BITS)

    def decode(self, payload: Payload) -> Decoded:
        codes = self.to_device(rvq_codes(payload))
        if codes.shape[1] != self.quantizers:
            raise ValueError(f"payload holds {codes.shape[1]} quantizers, this decoder is mimi:{self.quantizers}")
        with torch.inference_mode():
            audio = self.model.decode(codes).audio_values
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        # Mimi's causal convolutions pad the input up to whole 1920-sample frames.
        return math.ceil(self.frame_size * arena_rate / RATE) + 2


ADAPTER = MimiAdapter
