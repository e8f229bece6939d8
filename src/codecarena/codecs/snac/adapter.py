"""SNAC 24 kHz (package snac 1.2.1): three temporal scales of 4096-entry (12-bit) codes.

The model configuration is not in the wheel; it is the released checkpoint's `config.json`
(hubertsiuzdak/snac_24khz), carried here as data. It is reproduced identically by several
independent public ports (MLX, Swift and GGUF converters that refuse any other 24 kHz shape), and
the pinned real checkpoint's config.json must equal it.
Checkpoints are in the layout SNAC's own loader, `SNAC.from_pretrained(local_dir)`, reads (config.json +
pytorch_model.bin), but that loader opens the file by path after codecarena has hashed it. The
adapter does what it does (`SNAC(**config)`, a state-dict load, eval) on the bytes it hashed (read
once), with `torch.load(weights_only=True)` and a strict key check, building the model from the
configuration below rather than from the folder's config.json.

SNAC's decoder adds `torch.randn` noise (its NoiseBlock): the worker seeds torch right before each
decode with the recorded `noise_seed`, which is what makes fresh-process replay identical.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from snac import SNAC

from codecarena.plugin import CodeStream, Decoded, Encoded, Payload
from codecarena.plugin.checkpoints import generate_once, pinned_files, synthetic_cache
from codecarena.plugin.torch import (
    TorchAdapter,
    Weights,
    read_synthetic,
    save_deterministic,
    training_audio,
    weights_only_load,
)

REGISTRY_ID = "snac"
CONFIG_24KHZ = {
    "sampling_rate": 24000, "encoder_dim": 48, "encoder_rates": [2, 4, 8, 8], "decoder_dim": 1024,
    "decoder_rates": [8, 8, 4, 2], "attn_window_size": None, "codebook_size": 4096, "codebook_dim": 8,
    "vq_strides": [4, 2, 1], "noise": True, "depthwise": True,
}
RATE = 24000
BITS = 12
SYNTHETIC_VERSION = 1


def synthetic_dir(seed: int) -> Path:
    """A folder laid out as SNAC.from_pretrained reads it, generated once per seed."""
    folder = synthetic_cache(REGISTRY_ID) / f"snac_24khz-v{SYNTHETIC_VERSION}-seed{seed}"

    def make() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(seed)
        model = SNAC(**CONFIG_24KHZ).eval()
        draw_codebooks(model, seed)
        (folder / "config.json").write_text(json.dumps(CONFIG_24KHZ, sort_keys=True), encoding="utf-8")
        save_deterministic(model.state_dict(), folder / "pytorch_model.bin")

    generate_once(folder, folder / "pytorch_model.bin", make)
    return folder


def draw_codebooks(model: SNAC, seed: int) -> None:
    """Codebook rows drawn from each scale's projected latents of real speech (the lookup compares
    L2-normalised vectors, and the random projection's bias points every frame one way: plain
    random init gives a handful of codes)."""
    generator = torch.Generator().manual_seed(seed)
    speech = torch.from_numpy(training_audio(RATE).astype(np.float32))[None, None, :]
    with torch.no_grad():
        residual = model.encoder(model.preprocess(speech))
        for quantizer in model.quantizer.quantizers:
            pooled = residual
            if quantizer.stride > 1:
                pooled = torch.nn.functional.avg_pool1d(residual, quantizer.stride, quantizer.stride)
            projected = quantizer.in_proj(pooled)[0].T  # frames x codebook_dim
            pick = torch.randint(0, projected.shape[0], (quantizer.codebook_size,), generator=generator)
            quantizer.codebook.weight.copy_(projected[pick])
            quantized, _ = quantizer(residual)
            residual = residual - quantized


class SnacAdapter(TorchAdapter):
    input_rate = RATE

    registry_id = REGISTRY_ID

    def configure(self, options: dict[str, Any]) -> None:
        self.noise_seed = int(options["noise_seed"])

    def synthetic_weights(self, seed: int) -> Weights:
        return read_synthetic(REGISTRY_ID, synthetic_dir(seed) / "pytorch_model.bin", seed)

    def pinned_weights(self, kind: str) -> Weights:
        """The registry's (`real`) or the user's (`user`) pinned checkpoint, config.json and
        pytorch_model.bin, verified on the bytes parsed; its config must be the 24 kHz architecture this
        adapter builds."""
        folder, files, identity = pinned_files(REGISTRY_ID, kind, "24khz")
        if set(files) != {"config.json", "pytorch_model.bin"}:
            raise ValueError(f"{REGISTRY_ID} ({kind} weights) must pin config.json and pytorch_model.bin, "
                             f"pins {sorted(files)}")
        try:
            config = json.loads(files["config.json"])
        except ValueError:
            config = None
        if config != CONFIG_24KHZ:
            raise ValueError(f"{folder / 'config.json'}: not the 24 kHz SNAC configuration this adapter builds "
                             f"({CONFIG_24KHZ}); refusing to load")
        path = folder / "pytorch_model.bin"
        return Weights(path, weights_only_load(path, files["pytorch_model.bin"]), identity)

    def build_model(self) -> SNAC:
        return SNAC(**CONFIG_24KHZ)

    def after_load(self) -> dict[str, Any]:
        self.hop = int(self.model.hop_length)  # a numpy integer in snac 1.2.1
        self.pad_to = self.hop * int(self.model.vq_strides[0])
        return {"config": CONFIG_24KHZ, "hop_length": self.hop,
                "scales_hz": [RATE / self.hop / int(s) for s in self.model.vq_strides],
                "bits_per_code": BITS, "noise_seed": self.noise_seed}

    def encode(self, audio: np.ndarray) -> Encoded:
        x = self.to_device(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None, :])
        with torch.inference_mode():
            codes = self.model.encode(x)
        streams = tuple(CodeStream(f"scale{i}", BITS, (int(c.shape[1]),), c[0].cpu().numpy().astype(np.uint64))
                        for i, c in enumerate(codes))
        return Encoded(streams=streams, side_info={},
                       facts={"codes_per_scale": [int(c.shape[1]) for c in codes]})

    def decode(self, payload: Payload) -> Decoded:
        codes = []
        for i in range(len(self.model.vq_strides)):
            stream = payload.code_stream(f"scale{i}")
            codes.append(self.to_device(torch.from_numpy(stream.values.astype(np.int64))[None]))
        # The NoiseBlock draws from torch's global generator: seed it for every decode.
        torch.manual_seed(self.noise_seed)
        with torch.inference_mode():
            audio = self.model.decode(codes)
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        # SNAC pads its input to a multiple of hop x the coarsest stride before encoding.
        return math.ceil(self.pad_to * arena_rate / RATE) + 2


ADAPTER = SnacAdapter
