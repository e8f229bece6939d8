"""BigCodec (package bigcodec 0.0.3): 16 kHz, 80 Hz frames, one 8192-entry (13-bit) codebook = 1040 bps.

The model is the wheel's `CodecEncoder()` and `CodecDecoder()` with their defaults, which are the
upstream repository's (Aria-K-Alethia/BigCodec, `vq/codec_encoder.py` and `vq/codec_decoder.py`).
The released `bigcodec.pt` is what upstream's `inference.py` reads: a dict with the encoder's state
dict under "CodecEnc" and the decoder's (quantizer included) under "generator", written with the old
`torch.nn.utils.weight_norm` (`weight_g`, `weight_v`). The wheel uses the parametrised weight norm,
whose load hook maps those names, so a strict load of the released layout works unchanged.
Synthetic weights are written in that released layout and loaded by the same code.

Upstream pads every input by `200 - len % 200` samples, a whole extra frame when the length is
already a multiple of the 200-sample hop (the census's "+200 samples"); the adapter pads the same
way, so the codes are upstream's, and the pipeline restores the exact length within one hop.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from bigcodec.modules import CodecDecoder, CodecEncoder

from codecarena.plugin import Decoded, Encoded, Payload
from codecarena.plugin.torch import (
    TorchAdapter,
    Weights,
    rvq_codes,
    rvq_encoded,
    shapes_of,
    state_mismatch,
    training_audio,
)

REGISTRY_ID = "bigcodec"
RATE = 16000
HOP = 200
BITS = 13  # log2(8192)
# The two state dicts of upstream's checkpoint, by the names inference.py reads them.
SIDES = ("CodecEnc", "generator")
# Part of the synthetic checkpoint's name: bump it whenever synthetic_checkpoint_dict changes.
SYNTHETIC_VERSION = 1
_PARAMETRISED = {"parametrizations.weight.original0": "weight_g", "parametrizations.weight.original1": "weight_v"}


class BigCodecModel(torch.nn.Module):
    """Upstream's encoder and decoder side by side; `quantizer` names the decoder's for the doctor."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = CodecEncoder()
        self.decoder = CodecDecoder()

    @property
    def quantizer(self) -> torch.nn.Module:
        return self.decoder.quantizer


def released_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict under the released checkpoint's key names (old-style weight norm)."""
    renamed = {}
    for key, value in state.items():
        for new, old in _PARAMETRISED.items():
            key = key.replace(new, old)
        renamed[key] = value
    return renamed


def synthetic_checkpoint_dict(seed: int) -> dict[str, Any]:
    """Seeded random weights in the released layout. The codebook's rows are draws of the quantizer's
    8-dim projection of real speech (the smoke set), where the L2-normalised lookup happens: with
    plain random init nearly every frame picks one code."""
    torch.manual_seed(seed)
    model = BigCodecModel().eval()
    generator = torch.Generator().manual_seed(seed)
    speech = torch.from_numpy(training_audio(RATE).astype(np.float32))[None, None, :]
    with torch.no_grad():
        latents = model.encoder(speech)
        layer = model.quantizer.layers[0]
        projected = layer.in_proj(latents[0].T)  # frames x codebook_dim
        pick = torch.randint(0, projected.shape[0], (layer.codebook_size,), generator=generator)
        layer.codebook.weight.copy_(projected[pick])
    return {"CodecEnc": released_names(model.encoder.state_dict()),
            "generator": released_names(model.decoder.state_dict())}


def load_checkpoint(weights: Weights) -> BigCodecModel:
    """What upstream's inference.py does (`load_state_dict` of each side, strict), after checking every
    key and shape against the architecture so that a wrong file is one line naming it."""
    path, saved = weights.path, weights.state
    if not isinstance(saved, dict) or any(not isinstance(saved.get(side), dict) for side in SIDES):
        raise ValueError(f"{path}: not a BigCodec checkpoint (a dict with state dicts under {' and '.join(SIDES)})")
    model = BigCodecModel()
    for side, module in zip(SIDES, (model.encoder, model.decoder)):
        mismatch = state_mismatch(shapes_of(released_names(module.state_dict())), saved[side])
        if mismatch:
            raise ValueError(f"{path}: {side} does not match the architecture: {mismatch}")
        module.load_state_dict(saved[side], strict=True)
    return model.eval()


def upstream_padding(samples: int) -> int:
    return HOP - samples % HOP


class BigCodecAdapter(TorchAdapter):
    input_rate = RATE

    registry_id = REGISTRY_ID
    synthetic_name = f"bigcodec-v{SYNTHETIC_VERSION}"

    def synthetic_state(self, seed: int) -> dict[str, Any]:
        return synthetic_checkpoint_dict(seed)

    def load_model(self, weights: Weights) -> BigCodecModel:
        return load_checkpoint(weights)

    def after_load(self) -> dict[str, Any]:
        return {"frame_rate_hz": RATE / HOP, "quantizers": 1, "bits_per_code": BITS}

    def side_modules(self) -> tuple[tuple[torch.nn.Module, ...], tuple[torch.nn.Module, ...]]:
        # The decoder module holds the quantizer, which the encoder side needs for its lookup.
        return (self.model.encoder, self.model.quantizer), (self.model.decoder,)

    def encode(self, audio: np.ndarray) -> Encoded:
        x = self.to_device(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, :])
        x = torch.nn.functional.pad(x, (0, upstream_padding(x.shape[1])))
        with torch.no_grad():
            _, codes, _ = self.model.decoder(self.model.encoder(x[:, None, :]), vq=True)
        # (quantizers, batch, frames) -> (batch, quantizers, frames), the layout rvq_encoded packs.
        encoded = rvq_encoded(codes.transpose(0, 1), BITS)
        return Encoded(encoded.streams, {}, {**encoded.facts, "upstream_padded_length": int(x.shape[1])})

    def decode(self, payload: Payload) -> Decoded:
        codes = self.to_device(rvq_codes(payload))  # 1 x quantizers x frames
        with torch.no_grad():
            latents = self.model.decoder.vq2emb(codes.transpose(1, 2)).transpose(1, 2)
            audio = self.model.decoder(latents, vq=False)
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        # Upstream's padding: up to one whole hop, even when the input is a multiple of it.
        return math.ceil(HOP * arena_rate / RATE)


ADAPTER = BigCodecAdapter
