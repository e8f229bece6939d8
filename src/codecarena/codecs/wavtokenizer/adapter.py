"""WavTokenizer large (speech, 75 tokens/s) through transformers' WavTokenizerModel: 24 kHz, hop 320,
one 4096-entry (12-bit) codebook = 900 bps.

No PyPI package carries the authors' code (jishengpeng/WavTokenizer); transformers 5.24.0 ports its
inference path (SEANet encoder with a 2-layer LSTM, one Euclidean codebook, a Vocos backbone with
attention and an ISTFT head). The configuration is `WavTokenizerConfig` with the encoder ratios of
the 75-token models (8-5-4-2, hop 320); every other default is what transformers' conversion script
infers from the released checkpoints' tensor shapes.

The released file is a Lightning checkpoint: `{"state_dict": ...}` under the authors' module names,
with training-only branches (discriminators, losses, the SEANet decoder that the Vocos backbone
replaces) and the old `weight_g`/`weight_v` weight norm. The loader reads it weights-only, drops
exactly those branches, renames the rest to transformers' names (the renaming transformers' own
conversion script does, rewritten here for its current module layout) and loads through
`codecarena.plugin.transformers` (key and shape check, then `from_pretrained`). Synthetic weights are written
in the released layout and take the same path; their codebook rows are draws of the encoder's
latents of the smoke set, because the codebook starts at zero (one repeated code otherwise).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from transformers import WavTokenizerConfig, WavTokenizerModel

from codecarena.plugin import Decoded, Encoded, Payload
from codecarena.plugin.torch import TorchAdapter, Weights, rvq_codes, rvq_encoded, training_audio
from codecarena.plugin.transformers import load_pretrained

REGISTRY_ID = "wavtokenizer_large_speech_75"
RATE = 24000
RATIOS = (8, 5, 4, 2)
HOP = math.prod(RATIOS)
BITS = 12  # log2(4096)
# Part of the synthetic checkpoint's name: bump it whenever synthetic_checkpoint_dict changes.
SYNTHETIC_VERSION = 1
# Branches of the released checkpoint that inference does not use.
TRAINING_ONLY = ("multiperioddisc.", "multiresddisc.", "dac.", "dacdiscriminator.", "melspec_loss.",
                 "feature_extractor.encodec.decoder.")
# A buffer the released file holds and transformers re-creates (the Hann window of the ISTFT head).
RECREATED = "head.istft.window"
# Released name prefix -> transformers name prefix.
PREFIXES = (("feature_extractor.encodec.encoder.model.", "encoder_model.encoder.layers."),
            ("feature_extractor.encodec.quantizer.vq.layers.0._codebook.", "encoder_model.quantizer.codebook."),
            ("head.out.", "head.linear."))
# The encoder's convolutions: released SConv1d nests them as `.conv.conv` with the old weight norm.
SUFFIXES = ((".conv.conv.weight_g", ".conv.parametrizations.weight.original0"),
            (".conv.conv.weight_v", ".conv.parametrizations.weight.original1"),
            (".conv.conv.bias", ".conv.bias"))


def config() -> WavTokenizerConfig:
    return WavTokenizerConfig(upsampling_ratios=list(RATIOS))


def transformers_name(key: str) -> str | None:
    """A released key under transformers' name; None for what inference does not load."""
    if key == RECREATED or key.startswith(TRAINING_ONLY):
        return None
    for released, ported in PREFIXES:
        if key.startswith(released):
            key = ported + key[len(released):]
    if key.startswith("encoder_model.encoder."):
        for released, ported in SUFFIXES:
            if key.endswith(released):
                key = key[:-len(released)] + ported
    return key


def released_name(key: str) -> str:
    """The inverse of transformers_name, for writing synthetic weights in the released layout."""
    if key.startswith("encoder_model.encoder."):
        for released, ported in SUFFIXES:
            if key.endswith(ported):
                key = key[:-len(ported)] + released
    for released, ported in PREFIXES:
        if key.startswith(ported):
            key = released + key[len(ported):]
    return key


def saved_shapes() -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = WavTokenizerModel(config())
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def load_checkpoint(weights: Weights) -> WavTokenizerModel:
    """The released Lightning layout: its state dict, training-only branches dropped, renamed."""
    saved = weights.state
    if not isinstance(saved, dict) or not isinstance(saved.get("state_dict"), dict):
        raise ValueError(f"{weights.path}: not a WavTokenizer checkpoint (a Lightning checkpoint with a state_dict)")
    state = {}
    for key, value in saved["state_dict"].items():
        name = transformers_name(key) if isinstance(key, str) else key
        if name is not None:
            state[name] = value
    return load_pretrained(WavTokenizerModel, config(), Weights(weights.path, state, weights.identity),
                           saved_shapes())


def synthetic_checkpoint_dict(seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = WavTokenizerModel(config()).eval()
    generator = torch.Generator().manual_seed(seed)
    speech = torch.from_numpy(training_audio(RATE).astype(np.float32))[None, None, :]
    codebook = model.encoder_model.quantizer.codebook
    with torch.no_grad():
        frames = model.encoder_model.encoder(speech)[0].T  # frames x 512
        pick = torch.randint(0, frames.shape[0], (codebook.codebook_size,), generator=generator)
        codebook.embed.copy_(frames[pick])
        codebook.embed_avg.copy_(frames[pick])
    state = {released_name(k): v for k, v in model.state_dict().items()}
    state[RECREATED] = torch.hann_window(4 * HOP)
    return {"state_dict": state}


class WavTokenizerAdapter(TorchAdapter):
    input_rate = RATE

    registry_id = REGISTRY_ID
    synthetic_name = f"wavtokenizer_large_speech_75-v{SYNTHETIC_VERSION}"

    def synthetic_state(self, seed: int) -> dict[str, Any]:
        return synthetic_checkpoint_dict(seed)

    def load_model(self, weights: Weights) -> WavTokenizerModel:
        return load_checkpoint(weights)

    def after_load(self) -> dict[str, Any]:
        return {"frame_rate_hz": RATE / HOP, "quantizers": 1, "bits_per_code": BITS,
                "upsampling_ratios": list(RATIOS)}

    def side_modules(self) -> tuple[tuple[torch.nn.Module, ...], tuple[torch.nn.Module, ...]]:
        # encoder_model holds the codebook, which the decoder side looks its codes up in.
        return ((self.model.encoder_model,),
                (self.model.encoder_model.quantizer, self.model.backbone, self.model.head))

    def encode(self, audio: np.ndarray) -> Encoded:
        x = self.to_device(torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None, :])
        with torch.inference_mode():
            codes = self.model.encode(x).audio_codes  # 1 x 1 x ceil(n / hop)
        return rvq_encoded(codes, BITS)

    def decode(self, payload: Payload) -> Decoded:
        codes = self.to_device(rvq_codes(payload))
        if codes.shape[1] != 1:
            raise ValueError(f"payload holds {codes.shape[1]} code streams, WavTokenizer has one")
        with torch.inference_mode():
            audio = self.model.decode(codes).audio_values
        return Decoded(audio[0, 0].cpu().numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        # The encoder pads to whole hops; resampling to and from 24 kHz adds a sample either way.
        return math.ceil(HOP * arena_rate / RATE) + 2


ADAPTER = WavTokenizerAdapter
