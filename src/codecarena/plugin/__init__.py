"""codecarena's public adapter API, version `API_VERSION`: what a codec family implements, whether it is
one of codecarena's built-in units or your own (`codecarena codec add`, docs/plugins.md).

A family is declared as data (`codec.toml`: configs, options, defaults, which weights it takes; parsed
by `parse_declaration`) and implemented by an `Adapter` subclass, exported by its module as
`ADAPTER`. A worker process creates one adapter per codec configuration and calls:

- `load()` once: load libraries and model files; return model facts for the row (`parameters`,
  `encoder_model_bytes`, `decoder_model_bytes`, `checkpoint` identity, versions, ...).
- `encode(audio)`: float64 mono audio in [-1, 1] at `input_rate` (the worker resamples the arena's
  16 kHz reference with soxr) -> `Encoded`: the code streams (`CodeStream`: integers of a declared bit
  width, packed exactly; `PacketStream`: opaque byte packets) and the side info the decoder needs.
  Nothing else reaches the decoder: it runs in a fresh process and gets only the payload file.
- `decode(payload)` -> `Decoded` audio at any rate; the worker resamples it to 16 kHz and restores the
  original length, failing the row when the length is off by more than `length_tolerance()`.
- `torch_model()`, optionally: the loaded torch model, for named variants and the determinism doctor
  (`codecarena.plugin.torch.TorchAdapter` provides it and the per-side model facts).

Only what `__all__` names is public; everything else in codecarena may change without notice.
The version changes when this contract does.
"""

from __future__ import annotations

from codecarena.codecs.base import Adapter, Decoded, Encoded, from_int16, parse_weights, to_int16
from codecarena.payload import CodeStream, PacketStream, Payload
from codecarena.registry.catalog import API_VERSION, Family, Option, parse_declaration
from codecarena.specs import CodecSpec

__all__ = [
    "API_VERSION",
    "Adapter",
    "CodeStream",
    "CodecSpec",
    "Decoded",
    "Encoded",
    "Family",
    "Option",
    "PacketStream",
    "Payload",
    "from_int16",
    "parse_declaration",
    "parse_weights",
    "to_int16",
]
