"""EnCodec 24 kHz (package encodec 0.1.1): 75 Hz frames, 10-bit codebooks, 1.5-24 kbps.

The model is built exactly as `EncodecModel.encodec_model_24khz` builds it; weights are loaded with
`torch.load(weights_only=True)` and a strict state-dict load, for the real checkpoint (the original
`encodec_24khz-d7cc33bc.th`, a plain state dict, which the registry pins) and for synthetic weights
alike, from the bytes that were hashed (the file is read once). EnCodec's own loader is bypassed
because it reads the file itself; the registry's size and sha256 check replaces its prefix check.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from encodec import EncodecModel

from codecarena.plugin import Decoded, Encoded, Payload
from codecarena.plugin.torch import TorchAdapter, rvq_codes, rvq_encoded, training_audio

REGISTRY_ID = "encodec"
RATE = 24000
HOP = 320  # 24000 / 75
BITS = 10
BANDWIDTHS = {"1.5k": 1.5, "3k": 3.0, "6k": 6.0, "12k": 12.0, "24k": 24.0}
# Part of the synthetic checkpoint's name: bump it whenever synthetic_checkpoint_dict changes, so a
# cached file made by older code is never mistaken for the current generator's output.
SYNTHETIC_VERSION = 1


def build_model() -> EncodecModel:
    model = EncodecModel._get_model([1.5, 3.0, 6, 12.0, 24.0], RATE, 1, causal=True, model_norm="weight_norm",
                                    audio_normalize=False, name="encodec_24khz")
    return model.eval()


def synthetic_checkpoint_dict(seed: int) -> dict[str, Any]:
    """Seeded random weights whose codebooks are k-means-style draws of the encoder's own latents of
    real speech (the smoke set), layer by layer on the residual: with plain random init every frame
    picks the same code, and packing or replay tests would prove nothing."""
    torch.manual_seed(seed)
    model = build_model()
    generator = torch.Generator().manual_seed(seed)
    speech = torch.from_numpy(training_audio(RATE).astype(np.float32))[None, None, :]
    with torch.no_grad():
        residual = model.encoder(speech)[0].T  # frames x dim
        for layer in model.quantizer.vq.layers:
            book = layer._codebook
            pick = torch.randint(0, residual.shape[0], (book.embed.shape[0],), generator=generator)
            book.embed.copy_(residual[pick])
            book.embed_avg.copy_(residual[pick])
            book.cluster_size.fill_(1.0)
            book.inited.fill_(1.0)
            residual = residual - layer.decode(layer.encode(residual.T[None]))[0].T
    return model.state_dict()


class EncodecAdapter(TorchAdapter):
    input_rate = RATE

    registry_id = REGISTRY_ID
    synthetic_name = f"encodec_24khz-v{SYNTHETIC_VERSION}"

    def synthetic_state(self, seed: int) -> dict[str, Any]:
        return synthetic_checkpoint_dict(seed)

    def build_model(self) -> EncodecModel:
        return build_model()

    def after_load(self) -> dict[str, Any]:
        self.model.set_target_bandwidth(BANDWIDTHS[self.spec.config])
        self.quantizers = self.model.quantizer.get_num_quantizers_for_bandwidth(
            self.model.frame_rate, BANDWIDTHS[self.spec.config])
        return {"frame_rate_hz": self.model.frame_rate, "quantizers": self.quantizers, "bits_per_code": BITS}

    def encode(self, audio: np.ndarray) -> Encoded:
        x = self.to_device(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None, :])
        with torch.no_grad():
            (codes, scale), = self.model.encode(x)
        if scale is not None:
            raise ValueError("EnCodec 24 kHz returned a scale: audio_normalize must be off")
        return rvq_encoded(codes, BITS)

    def decode(self, payload: Payload) -> Decoded:
        codes = self.to_device(rvq_codes(payload))
        with torch.no_grad():
            audio = self.model.decode([(codes, None)])
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        return math.ceil(HOP * arena_rate / RATE) + 2


ADAPTER = EncodecAdapter
