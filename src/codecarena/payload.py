"""On-disk payload container, format version 1.

An encoder writes one payload file per utterance and a fresh decoder process
gets nothing but that file, so the file must carry everything the decoder
needs, and a damaged or foreign file must be rejected with a message that says
what is wrong with it. The byte layout is specified in docs/payload-format.md;
change the two together.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
import os
import secrets
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias, Union

import numpy as np

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "JSON",
    "CodeStream",
    "PacketStream",
    "Payload",
    "PayloadError",
    "Stream",
    "decode_payload",
    "encode_payload",
    "pack_codes",
    "read_payload",
    "unpack_codes",
    "write_payload",
]

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


# --- data model ---------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    """Where a parsed stream's bytes lie in the (immutable) file they were validated in."""

    data: bytes
    start: int
    end: int
    count: int  # codes or packets

    def view(self) -> memoryview:
        return memoryview(self.data)[self.start : self.end]


def _without_init(cls: type[Any], **attrs: object) -> Any:
    obj = object.__new__(cls)
    for key, value in attrs.items():
        object.__setattr__(obj, key, value)
    return obj


@dataclass(frozen=True)
class CodeStream:
    """Integer codes of a fixed bit width, e.g. RVQ indices; stored bit-packed.

    A stream parsed from a file keeps the file's validated section and unpacks
    `values` from it on first access, so parsing costs no memory per code.
    """

    name: str
    bit_width: int
    shape: tuple[int, ...]
    values: np.ndarray
    _section: _Section | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def _parsed(cls, name: str, bit_width: int, shape: tuple[int, ...], section: _Section) -> CodeStream:
        """Only for a section whose length and padding decode_payload has checked."""
        stream: CodeStream = _without_init(cls, name=name, bit_width=bit_width, shape=shape, _section=section)
        return stream

    def __getattr__(self, attr: str) -> Any:
        # Reached only when ordinary lookup fails: `values` of a parsed stream nobody has read yet.
        if attr != "values" or self._section is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        values = _unpack_blocks(self._section.view(), self.bit_width, self._section.count)
        values.flags.writeable = False
        object.__setattr__(self, "values", values)
        return values

    def __post_init__(self) -> None:
        name = _check_text(self.name, "stream name", allow_empty=False)
        what = f"stream {_q(name)}"
        bit_width = _check_int(self.bit_width, f"{what}: bit_width", 1, MAX_BIT_WIDTH)
        shape = _check_shape(self.shape, f"{what}: shape")
        try:
            raw_shape = np.shape(self.values)
        except (TypeError, ValueError) as e:
            raise PayloadError(f"{what}: values are not an integer array ({e})") from None
        if len(raw_shape) != 1 and tuple(raw_shape) != shape:
            raise PayloadError(
                f"{what}: values must be 1-D or have the logical shape {shape}, got shape {raw_shape}"
            )
        values = _as_codes(self.values, bit_width, what)
        if values.size != math.prod(shape):
            raise PayloadError(
                f"{what}: shape {shape} holds {math.prod(shape)} codes, values has {values.size}"
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "bit_width", bit_width)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "values", values)

    # The generated __eq__ would compare arrays element-wise and then fail on bool().
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CodeStream):
            return NotImplemented
        return (
            (self.name, self.bit_width, self.shape) == (other.name, other.bit_width, other.shape)
            and np.array_equal(self.values, other.values)
        )

    def __hash__(self) -> int:
        return hash((self.name, self.bit_width, self.shape, self.values.tobytes()))


@dataclass(frozen=True)
class PacketStream:
    """Opaque variable-length packets, e.g. Opus frames, stored as they are.

    A stream parsed from a file keeps the file's validated section and splits
    it into `packets` on first access, so parsing costs no memory per packet.
    """

    name: str
    packets: tuple[bytes, ...]
    _section: _Section | None = field(default=None, init=False, repr=False, compare=False)
    _content_bytes: int = field(default=0, init=False, repr=False, compare=False)

    @classmethod
    def _parsed(cls, name: str, section: _Section, content_bytes: int) -> PacketStream:
        """Only for a section whose packet lengths decode_payload has walked and checked."""
        stream: PacketStream = _without_init(cls, name=name, _section=section, _content_bytes=content_bytes)
        return stream

    def __getattr__(self, attr: str) -> Any:
        # Reached only when ordinary lookup fails: `packets` of a parsed stream nobody has read yet.
        if attr != "packets" or self._section is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        packets = tuple(_split_packets(self._section))
        object.__setattr__(self, "packets", packets)
        return packets

    def _packet_count(self) -> int:
        return len(self.packets) if self._section is None else self._section.count

    def __post_init__(self) -> None:
        name = _check_text(self.name, "stream name", allow_empty=False)
        what = f"stream {_q(name)}"
        # A bare bytes object is iterable (as ints); almost certainly a mistake.
        if isinstance(self.packets, (bytes, bytearray, memoryview, str)):
            raise PayloadError(f"{what}: packets must be a sequence of bytes, not one {_type_name(self.packets)}")
        try:
            items = tuple(self.packets)
        except TypeError:
            raise PayloadError(f"{what}: packets must be a sequence of bytes, got {_type_name(self.packets)}") from None
        packets = []
        for i, packet in enumerate(items):
            if isinstance(packet, (bytearray, memoryview)):
                packet = bytes(packet)
            if not isinstance(packet, bytes):
                raise PayloadError(f"{what}: packet {i} must be bytes, got {_type_name(packet)}")
            if len(packet) > MAX_PACKET_BYTES:
                raise PayloadError(f"{what}: packet {i} is {len(packet)} bytes, more than {MAX_PACKET_BYTES}")
            packets.append(packet)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "packets", tuple(packets))
        object.__setattr__(self, "_content_bytes", sum(map(len, packets)))


Stream = CodeStream | PacketStream


@dataclass(frozen=True)
class Payload:
    """Everything a fresh decoder process gets for one utterance.

    config, checkpoint and side_info are validated deep copies; treat them as
    read-only (they stay plain dicts so that json.dumps works on them).
    """

    codec: str
    family: str
    config: Mapping[str, JSON]
    variant: str
    checkpoint: Mapping[str, str]
    sample_rate: int
    num_samples: int
    channels: int
    codec_sample_rate: int
    streams: tuple[Stream, ...]
    side_info: Mapping[str, JSON]

    def __post_init__(self) -> None:
        for key, value in _check_meta(lambda k: getattr(self, k), "").items():
            object.__setattr__(self, key, value)
        if not isinstance(self.streams, (tuple, list)):
            raise PayloadError(f"streams must be a tuple of streams, got {_type_name(self.streams)}")
        streams = tuple(self.streams)
        seen: set[str] = set()
        for i, stream in enumerate(streams):
            if not isinstance(stream, (CodeStream, PacketStream)):
                raise PayloadError(f"streams[{i}] must be a CodeStream or PacketStream, got {_type_name(stream)}")
            if stream.name in seen:
                raise PayloadError(f"duplicate stream name {_q(stream.name)}")
            seen.add(stream.name)
        object.__setattr__(self, "streams", streams)

    def representation_bits(self) -> int:
        """Bits of codec output: codes at their bit width, packets at 8 bits per byte.

        Container overhead (header, packet lengths, padding, checksum) is not
        counted: it is the same whatever the codec does.
        """
        bits = 0
        for stream in self.streams:
            # From the shape and the packet sizes: a parsed stream's values or packets are not materialised.
            if isinstance(stream, CodeStream):
                bits += math.prod(stream.shape) * stream.bit_width
            else:
                bits += 8 * stream._content_bytes
        return bits

    def stream(self, name: str) -> Stream:
        for stream in self.streams:
            if stream.name == name:
                return stream
        have = ", ".join(_q(s.name) for s in self.streams[:10]) or "none"
        raise PayloadError(f"no stream named {_q(name)} (streams: {have})")

    def code_stream(self, name: str) -> CodeStream:
        """The code stream `name`; a packet stream of that name is a malformed payload, not a bug."""
        stream = self.stream(name)
        if not isinstance(stream, CodeStream):
            raise PayloadError(f"stream {_q(name)} holds packets, this codec expects codes")
        return stream

    def packet_stream(self, name: str) -> PacketStream:
        """The packet stream `name`; a code stream of that name is a malformed payload, not a bug."""
        stream = self.stream(name)
        if not isinstance(stream, PacketStream):
            raise PayloadError(f"stream {_q(name)} holds codes, this codec expects packets")
        return stream


# --- bit packing --------------------------------------------------------------

# Codes are converted this many at a time, with one row of 64 bits (bytes) per code as the
# intermediate: about 8 MiB of temporaries whatever the stream's length, where converting a whole
# stream at once took some 80 bytes per code (650 times the section at 1 bit per code). A multiple
# of 8, so that every block starts and ends on a byte boundary of the packed section.
_BLOCK_CODES = 1 << 16


def pack_codes(values: np.ndarray, bit_width: int) -> bytes:
    """Codes as bit_width-bit big-endian fields, back to back, last byte zero-padded."""
    bit_width = _check_int(bit_width, "bit_width", 1, MAX_BIT_WIDTH)
    codes = _as_codes(values, bit_width, "pack_codes")
    blocks = []
    for first in range(0, codes.size, _BLOCK_CODES):
        block = codes[first : first + _BLOCK_CODES]
        # One row of 64 bits per code, most significant first; keep the low bit_width columns.
        bits = np.unpackbits(block.astype(">u8").view(np.uint8).reshape(-1, 8), axis=1)
        blocks.append(np.packbits(bits[:, 64 - bit_width :]).tobytes())
    return b"".join(blocks)


def _check_code_section(data: bytes | memoryview, bit_width: int, count: int) -> None:
    """The length must be exact and the padding bits zero: that makes the encoding of a stream unique."""
    nbits = count * bit_width
    need = (nbits + 7) // 8
    if len(data) != need:
        raise PayloadError(
            f"packed codes: {count} codes of {bit_width} bits need {need} bytes, got {len(data)}"
        )
    pad = 8 * need - nbits
    if pad and data[-1] & ((1 << pad) - 1):
        raise PayloadError("packed codes: padding bits after the last code are not zero")


def _unpack_blocks(data: bytes | memoryview, bit_width: int, count: int) -> np.ndarray:
    raw = np.frombuffer(data, dtype=np.uint8)
    out = np.empty(count, dtype=np.uint64)
    for first in range(0, count, _BLOCK_CODES):
        n = min(_BLOCK_CODES, count - first)
        start = first * bit_width // 8
        bits = np.unpackbits(raw[start : start + (n * bit_width + 7) // 8], count=n * bit_width)
        rows = np.zeros((n, 64), dtype=np.uint8)
        rows[:, 64 - bit_width :] = bits.reshape(n, bit_width)
        out[first : first + n] = np.packbits(rows, axis=1).view(">u8").reshape(-1)
    return out


def unpack_codes(data: bytes | memoryview, bit_width: int, count: int) -> np.ndarray:
    """Inverse of pack_codes; the length must be exact and the padding bits zero."""
    bit_width = _check_int(bit_width, "bit_width", 1, MAX_BIT_WIDTH)
    count = _check_int(count, "count", 0)
    _check_code_section(data, bit_width, count)
    return _unpack_blocks(data, bit_width, count)


# --- encoding -----------------------------------------------------------------


def _canonical_json(obj: object) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _stream_header(stream: Stream) -> dict[str, JSON]:
    if isinstance(stream, CodeStream):
        return {"name": stream.name, "kind": "codes", "bit_width": stream.bit_width, "shape": list(stream.shape)}
    return {"name": stream.name, "kind": "packets", "count": stream._packet_count()}


def encode_payload(p: Payload) -> bytes:
    if not isinstance(p, Payload):
        raise TypeError(f"encode_payload needs a Payload, got {type(p).__name__}")
    header = {key: getattr(p, key) for key in _HEADER_KEYS - {"streams"}}
    header["streams"] = [_stream_header(s) for s in p.streams]
    header_bytes = _canonical_json(header)
    if len(header_bytes) > MAX_HEADER_BYTES:
        raise PayloadError(f"header is {len(header_bytes)} bytes, more than {MAX_HEADER_BYTES}")
    parts: list[bytes | memoryview] = [_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header_bytes)), header_bytes]
    for stream in p.streams:
        if stream._section is not None:
            # A parsed stream's section is already in its one valid encoding.
            parts.append(stream._section.view())
        elif isinstance(stream, CodeStream):
            parts.append(pack_codes(stream.values, stream.bit_width))
        else:
            for packet in stream.packets:
                parts.append(_varint(len(packet)))
                parts.append(packet)
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


# --- decoding -----------------------------------------------------------------


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would silently keep the last one.
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise PayloadError(f"header JSON has duplicate key {_q(key)}")
        obj[key] = value
    return obj


def _reject_constant(token: str) -> Any:
    raise PayloadError(f"header JSON contains {token}, which is not allowed")


def _parse_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise PayloadError(f"header JSON number {token[:40]} is out of range")
    return value


def _parse_int(token: str) -> int:
    if len(token) > _MAX_INT_CHARS:
        raise PayloadError(f"header JSON integer with {len(token)} characters is out of range")
    return int(token)


def _check_stream_specs(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise PayloadError(f"header: streams must be an array, got {_type_name(value)}")
    specs = []
    seen: set[str] = set()
    for i, spec in enumerate(value):
        what = f"header: streams[{i}]"
        if not isinstance(spec, dict):
            raise PayloadError(f"{what} must be an object, got {_type_name(spec)}")
        if "kind" not in spec:
            raise PayloadError(f"{what}: missing key 'kind'")
        kind = spec["kind"]
        if kind == "codes":
            _check_keys(spec, _CODES_KEYS, what)
        elif kind == "packets":
            _check_keys(spec, _PACKETS_KEYS, what)
        else:
            raise PayloadError(f"{what}: kind must be 'codes' or 'packets', got {kind!r}"[:200])
        name = _check_text(spec["name"], f"{what}.name", allow_empty=False)
        if name in seen:
            raise PayloadError(f"header: duplicate stream name {_q(name)}")
        seen.add(name)
        if kind == "codes":
            bit_width = _check_int(spec["bit_width"], f"{what}.bit_width", 1, MAX_BIT_WIDTH)
            shape = _check_shape(spec["shape"], f"{what}.shape")
            specs.append({"name": name, "kind": kind, "bit_width": bit_width, "shape": shape})
        else:
            count = _check_int(spec["count"], f"{what}.count", 0)
            specs.append({"name": name, "kind": kind, "count": count})
    return specs


def _check_keys(obj: dict[str, Any], expected: frozenset[str], what: str) -> None:
    missing = sorted(expected - obj.keys())
    if missing:
        raise PayloadError(f"{what}: missing key {_q(missing[0])}")
    extra = sorted(obj.keys() - expected)
    if extra:
        raise PayloadError(f"{what}: unexpected key {_q(extra[0])}")


def _parse_header(raw: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PayloadError(f"header is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        obj = json.loads(
            text,
            object_pairs_hook=_reject_duplicate_keys,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
        )
    except PayloadError:
        raise
    except RecursionError:
        raise PayloadError("header is not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise PayloadError(f"header is not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise PayloadError(f"header must be a JSON object, got {_type_name(obj)}")
    _check_keys(obj, _HEADER_KEYS, "header")
    meta = _check_meta(obj.__getitem__, "header: ")
    specs = _check_stream_specs(obj["streams"])
    # Checked last so that a hand-edited header gets the schema message first.
    if _canonical_json(obj) != raw:
        raise PayloadError(
            "header JSON is not canonical (needs sorted keys, no whitespace, ASCII only"
            " with \\u escapes, shortest number forms)"
        )
    return meta, specs


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Strict LEB128: minimal encoding only (one byte form per value), at most 2**32 - 1."""
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise PayloadError(f"truncated: {what} needs more bytes, {len(data) - pos} left")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if i and byte == 0:
                raise PayloadError(f"corrupted: {what} is not a minimal varint")
            if value > MAX_PACKET_BYTES:
                raise PayloadError(f"corrupted: {what} {value} is more than {MAX_PACKET_BYTES}")
            return value, pos + i + 1
    raise PayloadError(f"corrupted: {what} varint is longer than {_MAX_VARINT_BYTES} bytes")


def _walk_packets(data: bytes, pos: int, count: int, name: str) -> tuple[int, int]:
    """End of `count` packet records starting at pos, and their packet bytes; allocates nothing per packet."""
    n = len(data)
    content = 0
    for i in range(count):
        # One-byte lengths (every packet under 128 bytes) inline: this loop runs once per packet.
        size = data[pos] if pos < n else 0x80
        if size < 0x80:
            pos += 1
        else:
            size, pos = _read_varint(data, pos, f"stream {_q(name)} packet {i} length")
        if size > n - pos:
            raise PayloadError(f"truncated: stream {_q(name)} packet {i} needs {size} bytes, {n - pos} left")
        pos += size
        content += size
    return pos, content


def _split_packets(section: _Section) -> Iterator[bytes]:
    data, pos = section.data, section.start
    for i in range(section.count):
        size = data[pos]
        if size < 0x80:
            pos += 1
        else:
            size, pos = _read_varint(data, pos, f"packet {i} length")
        yield data[pos : pos + size]
        pos += size


def _amount(n: int) -> str:
    # A hostile shape can declare a 1234-digit byte count; the message stays one short line.
    return str(n) if n < 10**40 else f"at least 2**{n.bit_length() - 1}"


def _locate_sections(data: bytes, pos: int, specs: list[dict[str, Any]]) -> tuple[list[tuple[_Section, int]], int]:
    """Every stream's section, with its packet bytes for a packet stream; sizes are checked before
    anything is read, and nothing is allocated per code or per packet."""
    sections: list[tuple[_Section, int]] = []
    for spec in specs:
        name = spec["name"]
        left = len(data) - pos
        if spec["kind"] == "codes":
            # Exact, and cheap even for a hostile shape: at most MAX_NDIM factors, each below 2**64.
            count = math.prod(spec["shape"])
            need = (count * spec["bit_width"] + 7) // 8
            if need > left:
                raise PayloadError(f"truncated: stream {_q(name)} needs {_amount(need)} bytes, {left} left")
            sections.append((_Section(data, pos, pos + need, count), 0))
            pos += need
            continue
        count = spec["count"]
        # Every packet costs at least its one-byte length; this bounds the walk.
        if count > left:
            raise PayloadError(
                f"truncated: stream {_q(name)} needs at least {count} bytes for {count} packets, {left} left"
            )
        end, content = _walk_packets(data, pos, count, name)
        sections.append((_Section(data, pos, end, count), content))
        pos = end
    return sections, pos


def _tail_digest_ok(data: bytes) -> bool:
    """Whether the last 32 bytes are the SHA-256 of everything before them."""
    if len(data) < _PREFIX.size + _DIGEST_SIZE:
        return False
    return hashlib.sha256(memoryview(data)[:-_DIGEST_SIZE]).digest() == data[-_DIGEST_SIZE:]


def decode_payload(data: bytes) -> Payload:
    """Parse and verify a payload; any problem raises PayloadError, nothing else.

    Order of checks (docs/payload-format.md, section 6): fixed prefix,
    header, section sizes, checksum, then the section contents.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode_payload needs bytes, got {type(data).__name__}")
    # Parsed streams go on reading `data` after the checks, so it must be immutable; bytes
    # (what files and request bodies arrive as) is used as it is, anything else copied once.
    if not isinstance(data, bytes):
        data = bytes(data)
    n = len(data)
    if n == 0:
        raise PayloadError("empty file")
    # Magic before length, so that a short foreign file is called foreign.
    if not (data[:4] == MAGIC if n >= 4 else MAGIC.startswith(data)):
        raise PayloadError(f"not a codecarena payload (magic {data[:4]!r}, expected {MAGIC!r})")
    if n < _PREFIX.size:
        raise PayloadError(f"too short: {n} bytes, the fixed prefix alone is {_PREFIX.size}")
    _, version, header_len = _PREFIX.unpack_from(data)
    # Version before the checksum: a later version may checksum differently.
    if version != FORMAT_VERSION:
        raise PayloadError(
            f"unsupported format version {version} (this reader supports version {FORMAT_VERSION})"
        )
    header_end = _PREFIX.size + header_len
    if header_end > n:
        raise PayloadError(f"truncated: header needs {header_len} bytes, {n - _PREFIX.size} left")
    try:
        meta, specs = _parse_header(data[_PREFIX.size : header_end])
    except PayloadError as e:
        # The checksum's position depends on the header, but a file written in
        # one piece still ends with it; if that fails too, the header problem
        # is most likely damage, so say so first. (No room for a checksum at
        # all: nothing to compare, so just the header problem.)
        if n < header_end + _DIGEST_SIZE or _tail_digest_ok(data):
            raise
        raise PayloadError(f"corrupted: sha256 mismatch ({e})") from None
    # Sizes before checksum, so that a short file says "truncated".
    sections, end = _locate_sections(data, header_end, specs)
    left = n - end
    if left < _DIGEST_SIZE:
        raise PayloadError(f"truncated: checksum needs {_DIGEST_SIZE} bytes, {left} left")
    if hashlib.sha256(memoryview(data)[:end]).digest() != data[end : end + _DIGEST_SIZE]:
        raise PayloadError("corrupted: sha256 mismatch")
    if left > _DIGEST_SIZE:
        raise PayloadError(f"trailing bytes: {left - _DIGEST_SIZE} bytes after the checksum")
    # From here on the bytes are exactly what a writer produced, so any
    # complaint is about that writer, not about damage.
    # Every check is done here; values and packets are only materialised when a decoder reads them.
    streams: list[Stream] = []
    for spec, (section, content_bytes) in zip(specs, sections):
        if spec["kind"] == "codes":
            try:
                _check_code_section(section.view(), spec["bit_width"], section.count)
            except PayloadError as e:
                raise PayloadError(f"stream {_q(spec['name'])}: {e}") from None
            streams.append(CodeStream._parsed(spec["name"], spec["bit_width"], spec["shape"], section))
        else:
            streams.append(PacketStream._parsed(spec["name"], section, content_bytes))
    return Payload(streams=tuple(streams), **meta)


# --- files --------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not possible everywhere (e.g. Windows).
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_payload(path: Path, p: Payload, durable: bool = True) -> int:
    """Write atomically: readers see the old file or the whole new one, never a prefix.

    `durable` also fsyncs file and directory. The pipeline's workers pass False: a run keeps a row
    only while its files still match the row's sha256, so a payload lost in a crash is recomputed,
    and three fsyncs per row would dominate the cost of a fast codec in warm mode.
    Returns the number of bytes written. I/O failures raise OSError.
    """
    path = Path(path)
    data = encode_payload(p)  # before touching the disk, so a bad payload leaves nothing behind
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)
    return len(data)


def read_payload(path: Path) -> Payload:
    """decode_payload on a file; every error message starts with the path."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise PayloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PayloadError(f"{path}: is a directory, not a payload file") from None
    except OSError as e:
        raise PayloadError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return decode_payload(data)
    except PayloadError as e:
        raise PayloadError(f"{path}: {e}") from e
