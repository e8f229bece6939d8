"""The part of codecarena's public adapter API (version `codecarena.plugin.API_VERSION`) for families
whose architecture is a transformers model (Mimi, WavTokenizer, X-Codec 2). Importing it imports torch
and transformers.

Weights load through the model class's `from_pretrained`, the real loader, for synthetic weights
too, given the family's configuration and the state dict parsed (safetensors: tensors only, no
pickle) from the bytes that were hashed: the file is read once, so a file replaced after hashing is
never what is loaded (given a folder, from_pretrained would open the file itself, and its
config.json). from_pretrained initialises a missing tensor at random and some models ignore unexpected
keys, so before it runs, the key set and shapes are checked against the architecture; its own
loading report must be empty as well.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from transformers.utils import logging as transformers_logging

from codecarena.plugin.checkpoints import generate_once, pinned_files, synthetic_cache
from codecarena.plugin.torch import Weights, state_mismatch, synthetic_identity

__all__ = ["load_pretrained", "pinned_safetensors", "safetensors_weights", "synthetic_folder", "synthetic_safetensors"]

WEIGHTS_FILE = "model.safetensors"
# The safetensors format's dtype names.
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool}

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



def quiet_transformers() -> None:
    """Progress bars and load reports would interleave with the worker's own error lines."""
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()


def load_pretrained(model_class: Any, config: Any, weights: Weights, expected: dict[str, tuple[int, ...]]) -> Any:
    """`model_class.from_pretrained` of a parsed state dict, after checking it against `expected` (the
    architecture's saved key -> shape map); anything transformers still reports is an error too."""
    quiet_transformers()
    mismatch = state_mismatch(expected, weights.state)
    if mismatch:
        raise ValueError(f"{weights.path}: checkpoint does not match the architecture: {mismatch}")
    model, info = model_class.from_pretrained(None, config=config, state_dict=weights.state, output_loading_info=True)
    problems = {k: sorted(v) for k, v in info.items() if v}
    if problems:
        raise ValueError(f"{weights.path}: transformers reports {problems}")
    return model.eval()


def synthetic_folder(registry_id: str, name: str, seed: int, build: Callable[[int], Any]) -> Path:
    """A folder laid out as from_pretrained reads it (config.json + model.safetensors), written once
    per seed by `save_pretrained` of `build(seed)`."""
    folder = synthetic_cache(registry_id) / f"{name}-seed{seed}"

    def make() -> None:
        quiet_transformers()
        tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        build(seed).save_pretrained(str(tmp))
        os.replace(tmp, folder)

    generate_once(folder, folder / WEIGHTS_FILE, make)
    return folder


def synthetic_safetensors(registry_id: str, folder: Path, seed: int) -> Weights:
    """The weights file of a synthetic folder (`synthetic_folder`), parsed from the bytes its identity hashes."""
    path = folder / WEIGHTS_FILE
    data = path.read_bytes()
    return safetensors_weights(path, data, synthetic_identity(registry_id, path, data, seed))


def pinned_safetensors(registry_id: str, kind: str, config: str) -> Weights:
    """The registry's (`real`) or the user's (`user`) pinned weights file, parsed from the bytes verified."""
    folder, files, identity = pinned_files(registry_id, kind, config)
    if WEIGHTS_FILE not in files:
        raise ValueError(f"{registry_id} ({kind} weights) pins no {WEIGHTS_FILE}")
    return safetensors_weights(folder / WEIGHTS_FILE, files.pop(WEIGHTS_FILE), identity)
