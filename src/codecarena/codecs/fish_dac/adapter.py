"""The Fish Audio codec (fish-speech 0.1.0's `modded_dac`): 44.1 kHz, 21.53 Hz frames, one 12-bit
semantic code plus up to 9 residual 10-bit codes a frame (2196.4 bps with all 9).

The model is what fish-speech's own loader (`fish_speech/models/dac/inference.py: load_model`) builds:
the wheel's Hydra config `configs/modded_dac_vq.yaml`, instantiated with `hydra.utils.instantiate`.
That file is pinned here by sha256, so a changed architecture is refused, not silently run. The
loader's other steps are kept (`torch.load(weights_only=True)`, the `state_dict` sub-dict if present,
only `generator.`-prefixed keys, stripped, when any key has that prefix), with two changes: the file
is parsed from the bytes that were hashed (read once), and the load is strict (upstream's
`strict=False` would run a model with missing weights at their random init). The OmegaConf `eval`
resolver that inference.py registers is not registered: the pinned config does not use it, and it
would evaluate Python from a config.

Encoder: 512-sample hop (rates 2-4-8-8, a 4-layer transformer at the last stage), then the quantizer
downsamples 4x (two ConvNeXt stages) and runs an 8-layer causal windowed transformer before a
4096-entry semantic codebook and a 9-codebook residual VQ (DAC's quantizer, 1024 entries each);
`encode` pads the input to a whole 2048-sample frame. The rate knob is the number of residual
codebooks sent (`n_quantizers`); the semantic code is always sent. The encoder transformer's rotary
table covers 16384 frames at 86.13 Hz: inputs up to 190 s.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fish_speech.models.dac import modded_dac
from hydra.utils import instantiate
from omegaconf import OmegaConf

from codecarena.plugin import CodeStream, Decoded, Encoded, Payload
from codecarena.plugin.torch import TorchAdapter, Weights, draw_codebooks, shapes_of, state_mismatch, training_audio

REGISTRY_ID = "fish_s2_codec"
CONFIG_NAME = "modded_dac_vq"
CONFIG_SHA256 = "1aee10621cbfc3774a06747de33365d8bb2d8db89e2cafc851bfcb87474284a2"  # fish-speech 0.1.0's file
RATE = 44100
FRAME = 2048  # hop 512 x the quantizer's 2 x 2 downsampling
SEMANTIC_BITS = 12  # log2(4096)
RESIDUAL_BITS = 10  # log2(1024)
RESIDUAL_CODEBOOKS = 9
# Synthetic codebooks are drawn from the first 30 s of the smoke set: enough frames (646 at
# 21.5 Hz) to vary the codes, and it bounds the generation time of this 391 M-parameter model.
TRAINING_SECONDS = 30
SYNTHETIC_VERSION = 1


def config_path() -> Path:
    return Path(modded_dac.__file__).parents[2] / "configs" / f"{CONFIG_NAME}.yaml"


def build_model() -> torch.nn.Module:
    """`instantiate` of the pinned config, as fish-speech's load_model does."""
    path = config_path()
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != CONFIG_SHA256:
        raise ValueError(f"{path}: not fish-speech 0.1.0's {CONFIG_NAME} config (sha256 differs); refusing to "
                         "build another architecture under this codec's name")
    return instantiate(OmegaConf.create(data.decode("utf-8"))).eval()


def synthetic_checkpoint_dict(seed: int) -> dict[str, Any]:
    """Seeded random weights saved as a training checkpoint (`state_dict` of `generator.`-prefixed
    keys), which takes the loader through both of its unwrapping steps. Codebooks are drawn from
    real speech at each quantizer's own input (semantic first, then the residual layers on what it
    leaves), as fish-speech's quantizer sees it."""
    torch.manual_seed(seed)
    model = build_model()
    generator = torch.Generator().manual_seed(seed)
    speech = torch.from_numpy(training_audio(RATE)[: TRAINING_SECONDS * RATE].astype(np.float32))
    speech = speech[: len(speech) // FRAME * FRAME][None, None, :]
    quantizer = model.quantizer
    with torch.no_grad():
        z = quantizer.pre_module(quantizer.downsample(model.encoder(speech)))
        draw_codebooks(quantizer.quantizer, draw_codebooks(quantizer.semantic_quantizer, z, generator), generator)
    return {"state_dict": {f"generator.{k}": v for k, v in model.state_dict().items()}}


def load_checkpoint(weights: Weights) -> torch.nn.Module:
    """fish-speech's load_model on a checkpoint parsed weights-only, made strict."""
    path, saved = weights.path, weights.state
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: not a Fish codec checkpoint (a dict of tensors)")
    state = saved.get("state_dict", saved) if isinstance(saved.get("state_dict"), dict) else saved
    if any("generator." in k for k in state):
        state = {k.replace("generator.", ""): v for k, v in state.items() if "generator." in k}
    model = build_model()
    mismatch = state_mismatch(shapes_of(model.state_dict()), state)
    if mismatch:
        raise ValueError(f"{path}: checkpoint does not match the {CONFIG_NAME} architecture: {mismatch}")
    model.load_state_dict(state, strict=True)
    return model.eval()


class FishDacAdapter(TorchAdapter):
    input_rate = RATE

    registry_id = REGISTRY_ID
    synthetic_name = f"fish_dac_44khz-v{SYNTHETIC_VERSION}"

    def configure(self, options: dict[str, Any]) -> None:
        self.quantizers = int(options["n_quantizers"])
        if not 1 <= self.quantizers <= RESIDUAL_CODEBOOKS:
            raise ValueError(f"n_quantizers must be 1..{RESIDUAL_CODEBOOKS}, got {self.quantizers}")

    def synthetic_state(self, seed: int) -> dict[str, Any]:
        return synthetic_checkpoint_dict(seed)

    def load_model(self, weights: Weights) -> torch.nn.Module:
        return load_checkpoint(weights)

    def after_load(self) -> dict[str, Any]:
        return {"frame_rate_hz": RATE / FRAME, "quantizers": self.quantizers,
                "bits_per_frame": SEMANTIC_BITS + RESIDUAL_BITS * self.quantizers, "config": CONFIG_NAME,
                "config_sha256": CONFIG_SHA256,
                "snake1d_modules": sum(type(m).__name__ == "Snake1d" for m in self.model.modules())}

    def encode(self, audio: np.ndarray) -> Encoded:
        x = self.to_device(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None, :])
        with torch.no_grad():
            codes, _ = self.model.encode(x, n_quantizers=self.quantizers)
        values = codes[0].cpu().numpy().astype(np.uint64)  # (1 + quantizers) x frames
        semantic, residual = values[:1], values[1:]
        return Encoded(streams=(CodeStream("semantic", SEMANTIC_BITS, semantic.shape, semantic.reshape(-1)),
                                CodeStream("residual", RESIDUAL_BITS, residual.shape, residual.reshape(-1))),
                       side_info={}, facts={"frames": int(values.shape[1]), "quantizers": int(residual.shape[0])})

    def decode(self, payload: Payload) -> Decoded:
        streams = [payload.code_stream(name) for name in ("semantic", "residual")]
        codes = np.concatenate([s.values.astype(np.int64).reshape(s.shape) for s in streams])
        indices = self.to_device(torch.from_numpy(codes)[None])
        with torch.no_grad():
            audio, _ = self.model.decode(indices, self.to_device(torch.tensor([indices.shape[-1]])))
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        # Up to one 2048-sample frame of padding, plus the resampling's rounding.
        return math.ceil(FRAME * arena_rate / RATE) + 16


ADAPTER = FishDacAdapter
