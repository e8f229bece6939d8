"""Mimi (Kyutai) through transformers' MimiModel: 24 kHz, 12.5 Hz frames, 2048-entry (11-bit) codes.

The number of quantizers is the rate knob and part of the configuration name (`mimi:8` = 1100 bps,
`mimi:32` = 4400 bps; the released config's default is 32). The configuration is transformers'
`MimiConfig()` defaults, carried explicitly below: built from it, the model saves to a
`model.safetensors` of exactly 384,649,828 bytes, the size the census records for the released file.

Weights load through `MimiModel.from_pretrained`, the real loader, for synthetic weights too, given
the configuration below and the state dict parsed (safetensors: tensors only, no pickle) from the
bytes that were hashed: the file is read once, so a file replaced after hashing is never what is
loaded (given a folder, from_pretrained would open the file itself, and its config.json). That
loader silently ignores unexpected keys under `encoder.`/`decoder.` (its
`_keys_to_ignore_on_load_unexpected`), so before it runs, the key set and shapes are checked against
the architecture: any missing, unexpected or reshaped tensor is an error.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import MimiConfig, MimiModel
from transformers.utils import logging as transformers_logging

from codecarena.checkpoints import cache_dir
from codecarena.codecs.base import Decoded, Encoded, parse_weights
from codecarena.codecs.torch_adapter import TorchAdapter, rvq_codes, rvq_encoded
from codecarena.codecs.torch_weights import (
    Weights,
    generate_once,
    pinned_files,
    state_mismatch,
    synthetic_identity,
    training_audio,
)
from codecarena.payload import Payload

REGISTRY_ID = "mimi"
RATE = 24000
BITS = 11
WEIGHTS_FILE = "model.safetensors"
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
# The safetensors format's dtype names.
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool}
# save_pretrained writes the layout of the released file (transformers 4.x names); from_pretrained
# renames on load. The same renaming, in reverse, gives the key set a checkpoint must hold.
SAVED_NAMES = ((r"^encoder\.encoder_seanet\.", "encoder."), (r"^encoder\.encoder_transformer\.", "encoder_transformer."),
               (r"^encoder\.downsample\.", "downsample."), (r"^decoder\.decoder_seanet\.", "decoder."),
               (r"^decoder\.decoder_transformer\.", "decoder_transformer."), (r"^decoder\.upsample\.", "upsample."))


def quiet_transformers() -> None:
    """Progress bars and load reports would interleave with the worker's own error lines."""
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()


def build_model() -> MimiModel:
    return MimiModel(MimiConfig(**CONFIG)).eval()


def saved_name(key: str) -> str:
    for pattern, replacement in SAVED_NAMES:
        if re.match(pattern, key):
            return re.sub(pattern, replacement, key, count=1)
    return key


def safetensors_weights(path: Path, data: bytes, identity: dict[str, str]) -> Weights:
    """The tensors of a safetensors file as views of its bytes, not copies (safetensors.torch.load
    copies every tensor, and the file's bytes plus a copy would double the worker's peak memory).
    The format holds tensors only: a little-endian u64 header length, a JSON header {name: {dtype,
    shape, data_offsets}} and the data. Every entry is checked before any view is made; anything
    else is refused in one line naming the file."""

    def refuse(problem: str) -> ValueError:
        return ValueError(f"{path}: not a safetensors file ({problem}); refusing to load")

    size = int.from_bytes(data[:8], "little")
    if len(data) < 8 or size > len(data) - 8:
        raise refuse(f"header length {size} does not fit in {len(data)} bytes")
    try:
        header = json.loads(data[8:8 + size])
    except ValueError:
        raise refuse("the header is not JSON") from None
    if not isinstance(header, dict):
        raise refuse("the header is not a JSON object")
    header.pop("__metadata__", None)
    start, available = 8 + size, len(data) - 8 - size
    state: dict[str, torch.Tensor] = {}
    for name, entry in header.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str) \
                or entry["dtype"] not in SAFETENSORS_DTYPES or not _ints(entry.get("shape")) \
                or not _ints(entry.get("data_offsets")) or len(entry["data_offsets"]) != 2:
            raise refuse(f"tensor {name!r}: not a dtype, shape and data_offsets entry")
        dtype, shape, offsets = SAFETENSORS_DTYPES[entry["dtype"]], entry["shape"], entry["data_offsets"]
        count = math.prod(shape)
        if not 0 <= offsets[0] <= offsets[1] <= available or offsets[1] - offsets[0] != count * dtype.itemsize:
            raise refuse(f"tensor {name!r}: data_offsets {offsets} do not hold {shape} {entry['dtype']}")
        with warnings.catch_warnings():
            # bytes are read-only to Python; the views are only read (inference), never written.
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            view = torch.frombuffer(data, dtype=dtype, count=count, offset=start + offsets[0]) if count else \
                torch.empty(0, dtype=dtype)
        state[name] = view.reshape(shape)
    return Weights(path, state, identity)


def _ints(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def check_keys(weights: Weights) -> None:
    """Every tensor the architecture needs, none it does not, each of the right shape (the model is
    built on the meta device: shapes without memory)."""
    with torch.device("meta"):
        model = build_model()
    expected = {saved_name(k): tuple(v.shape) for k, v in model.state_dict().items()}
    mismatch = state_mismatch(expected, weights.state)
    if mismatch:
        raise ValueError(f"{weights.path}: checkpoint does not match the architecture: {mismatch}")


def load_model(weights: Weights) -> MimiModel:
    quiet_transformers()
    check_keys(weights)
    model, info = MimiModel.from_pretrained(None, config=MimiConfig(**CONFIG), state_dict=weights.state,
                                            output_loading_info=True)
    problems = {k: sorted(v) for k, v in info.items() if v}
    if problems:
        raise ValueError(f"{weights.path}: transformers reports {problems}")
    return model.eval()


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


def synthetic_dir(seed: int) -> Path:
    """A folder laid out as from_pretrained reads it (config.json + model.safetensors), once per seed."""
    folder = cache_dir() / "synthetic" / REGISTRY_ID / f"mimi-v{SYNTHETIC_VERSION}-seed{seed}"

    def make() -> None:
        quiet_transformers()
        torch.manual_seed(seed)
        model = build_model()
        draw_codebooks(model, seed)
        tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        model.save_pretrained(str(tmp))
        os.replace(tmp, folder)

    generate_once(folder, folder / WEIGHTS_FILE, make)
    return folder


def checkpoint_weights(weights: str, config: str) -> Weights:
    """The weights file parsed from the bytes its identity hashes: the synthetic file, or the
    registry's (or the user's) pinned one verified on those bytes."""
    kind, seed = parse_weights(weights)
    if kind == "synthetic":
        assert seed is not None
        path = synthetic_dir(seed) / WEIGHTS_FILE
        data = path.read_bytes()
        return safetensors_weights(path, data, synthetic_identity(REGISTRY_ID, path, data, seed))
    folder, files, identity = pinned_files(REGISTRY_ID, kind, config)
    if WEIGHTS_FILE not in files:
        raise ValueError(f"{REGISTRY_ID} ({kind} weights) pins no {WEIGHTS_FILE}")
    return safetensors_weights(folder / WEIGHTS_FILE, files.pop(WEIGHTS_FILE), identity)


class MimiAdapter(TorchAdapter):
    input_rate = RATE

    def load(self) -> dict[str, Any]:
        torch.set_num_threads(int(self.spec.options()["threads"]))
        kind, _ = parse_weights(self.weights)
        self.quantizers = int(self.spec.config)
        weights = checkpoint_weights(self.weights, self.spec.config)
        self.model = load_model(weights)
        config = self.model.config
        self.frame_size = int(RATE / config.frame_rate)
        return {"weights": kind, "checkpoint": weights.identity, "config": json.loads(json.dumps(CONFIG)),
                **self.side_facts(), "frame_rate_hz": float(config.frame_rate), "quantizers": self.quantizers,
                "bits_per_code": BITS, "torch": torch.__version__, "threads": torch.get_num_threads(),
                "attention": str(config._attn_implementation)}

    def encode(self, audio: np.ndarray) -> Encoded:
        x = torch.from_numpy(np.asarray(audio, dtype=np.float32))[None, None, :]
        with torch.inference_mode():
            codes = self.model.encode(x, num_quantizers=self.quantizers).audio_codes
        return rvq_encoded(codes, BITS)

    def decode(self, payload: Payload) -> Decoded:
        codes = rvq_codes(payload)
        if codes.shape[1] != self.quantizers:
            raise ValueError(f"payload holds {codes.shape[1]} quantizers, this decoder is mimi:{self.quantizers}")
        with torch.inference_mode():
            audio = self.model.decode(codes).audio_values
        return Decoded(audio[0, 0].numpy().astype(np.float64), RATE)

    def length_tolerance(self, arena_rate: int) -> int:
        # Mimi's causal convolutions pad the input up to whole 1920-sample frames.
        return math.ceil(self.frame_size * arena_rate / RATE) + 2


ADAPTER = MimiAdapter
