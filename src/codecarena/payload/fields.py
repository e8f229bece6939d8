"""Limits of the format, the one error type, and the validators shared by the dataclasses and the
header parser."""

from __future__ import annotations

import hashlib
import math
import numbers
import struct
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, Union

import numpy as np


FORMAT_VERSION = 1
MAGIC = b"CCAP"

_PREFIX = struct.Struct(">4sHI")  # magic, format version, header length
_DIGEST_SIZE = hashlib.sha256().digest_size

MAX_BIT_WIDTH = 64
MAX_NDIM = 64  # numpy's own limit; also keeps prod(shape) cheap on hostile headers
MAX_PACKET_BYTES = 2**32 - 1
# Packet lengths are unsigned LEB128 varints: one byte for packets under 128 bytes, which is every
# speech-codec packet we know, so the framing costs 400 bps at 50 packets/s instead of 1600 with u32.
_MAX_VARINT_BYTES = 5
MAX_HEADER_BYTES = 2**32 - 1
# Nesting limit for config/side_info. Fixed rather than "whatever the JSON
# library manages" so that every reader accepts exactly the same files.
MAX_JSON_DEPTH = 32
# JSON integers outside int64 and uint64 do not survive most other languages'
# JSON libraries; anything bigger belongs in a string.
JSON_INT_MIN = -(2**63)
JSON_INT_MAX = 2**64 - 1
# Enough characters for any integer in range, so that a hostile header cannot
# make int() chew through a megabyte of digits.
_MAX_INT_CHARS = len(str(JSON_INT_MIN))

JSON: TypeAlias = Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]]

_HEADER_KEYS = frozenset(
    {
        "codec",
        "family",
        "config",
        "variant",
        "checkpoint",
        "sample_rate",
        "num_samples",
        "channels",
        "codec_sample_rate",
        "side_info",
        "streams",
    }
)
_CODES_KEYS = frozenset({"name", "kind", "bit_width", "shape"})
_PACKETS_KEYS = frozenset({"name", "kind", "count"})


class PayloadError(ValueError):
    """Every rejection of a payload or of a value meant for one; one-line message."""


# --- field validation, shared by the dataclasses and the header parser --------


def _q(text: str) -> str:
    """repr() of a name for a message, shortened: names may come from a hostile file."""
    if not isinstance(text, str):
        return repr(text)[:80]
    return repr(text) if len(text) <= 80 else repr(text[:60]) + "..."


def _type_name(value: object) -> str:
    # JSON vocabulary when the value came from JSON, Python's otherwise.
    names = {type(None): "null", bool: "boolean", dict: "object", list: "array"}
    return names.get(type(value), type(value).__name__)


def _check_text(value: object, what: str, *, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise PayloadError(f"{what} must be a string, got {_type_name(value)}")
    if not value and not allow_empty:
        raise PayloadError(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Python (and Python's json) tolerate lone surrogates; other readers don't.
        raise PayloadError(f"{what} contains an unpaired surrogate") from None
    return str(value)


def _check_int(value: object, what: str, lo: int, hi: int = JSON_INT_MAX) -> int:
    # bool is an int subclass, but True as a sample rate is always a bug.
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise PayloadError(f"{what} must be an integer, got {_type_name(value)}")
    value = int(value)
    if not lo <= value <= hi:
        bound = f">= {lo}" if value < lo and hi == JSON_INT_MAX else f"in {lo}..{hi}"
        raise PayloadError(f"{what} must be {bound}, got {value}")
    return value


def _check_json(value: object, what: str, depth: int = 1) -> JSON:
    """Validated deep copy of a JSON value (tuples become lists, numpy scalars Python ones)."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, numbers.Integral):
        return _check_int(value, what, JSON_INT_MIN)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            raise PayloadError(f"{what}: NaN and infinity are not allowed, got {f}")
        return f
    if isinstance(value, str):
        return _check_text(value, what)
    if isinstance(value, (list, tuple, Mapping)):
        if depth > MAX_JSON_DEPTH:
            raise PayloadError(f"{what}: nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, Mapping):
            out: dict[str, JSON] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise PayloadError(f"{what}: object key {key!r} is not a string")
                _check_text(key, f"{what}: key {_q(key)}")
                out[key] = _check_json(item, f"{what}[{_q(key)}]", depth + 1)
            return out
        return [_check_json(item, f"{what}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise PayloadError(f"{what}: {_type_name(value)} is not a JSON value")


def _check_object(value: object, what: str) -> dict[str, JSON]:
    if not isinstance(value, Mapping):
        raise PayloadError(f"{what} must be an object/mapping, got {_type_name(value)}")
    out = _check_json(value, what)
    assert isinstance(out, dict)
    return out


def _check_str_map(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise PayloadError(f"{what} must be an object/mapping, got {_type_name(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise PayloadError(f"{what}: key {key!r} is not a string")
        _check_text(key, f"{what}: key {_q(key)}")
        out[key] = _check_text(item, f"{what}[{_q(key)}]")
    return out


def _check_shape(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):
        raise PayloadError(f"{what} must be a tuple of integers, got {_type_name(value)}")
    if not 1 <= len(value) <= MAX_NDIM:
        raise PayloadError(f"{what} must have 1..{MAX_NDIM} dimensions, got {len(value)}")
    return tuple(_check_int(d, f"{what}[{i}]", 0) for i, d in enumerate(value))


def _check_meta(get: Callable[[str], Any], where: str) -> dict[str, Any]:
    """Validated copies of every Payload field except streams."""
    return {
        "codec": _check_text(get("codec"), f"{where}codec", allow_empty=False),
        "family": _check_text(get("family"), f"{where}family", allow_empty=False),
        "config": _check_object(get("config"), f"{where}config"),
        "variant": _check_text(get("variant"), f"{where}variant"),
        "checkpoint": _check_str_map(get("checkpoint"), f"{where}checkpoint"),
        "sample_rate": _check_int(get("sample_rate"), f"{where}sample_rate", 1),
        "num_samples": _check_int(get("num_samples"), f"{where}num_samples", 0),
        "channels": _check_int(get("channels"), f"{where}channels", 1),
        "codec_sample_rate": _check_int(get("codec_sample_rate"), f"{where}codec_sample_rate", 1),
        "side_info": _check_object(get("side_info"), f"{where}side_info"),
    }


def _as_codes(values: object, bit_width: int, what: str) -> np.ndarray:
    """Read-only 1-D uint64 copy of values (C order), each checked to fit in bit_width."""
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as e:
        raise PayloadError(f"{what}: values are not an integer array ({e})") from None
    if arr.size == 0:
        # np.asarray([]) is float64; an empty stream has no values to mistype.
        codes = np.zeros(0, dtype=np.uint64)
    else:
        if arr.dtype.kind not in "iu":
            raise PayloadError(f"{what}: values must be integers, got dtype {arr.dtype}")
        if arr.dtype.kind == "i" and int(arr.min()) < 0:
            raise PayloadError(f"{what}: values must be >= 0, got {int(arr.min())}")
        codes = np.array(arr.reshape(-1), dtype=np.uint64)
        if bit_width < 64 and (codes >> np.uint64(bit_width)).any():
            raise PayloadError(
                f"{what}: value {int(codes.max())} does not fit in {bit_width} bits"
                f" (must be < 2**{bit_width})"
            )
    codes.flags.writeable = False
    return codes
