"""The payload data model: code streams, packet streams and the payload they make up."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codecarena.payload.fields import (
    JSON, MAX_BIT_WIDTH, MAX_PACKET_BYTES, PayloadError, _as_codes, _check_int, _check_meta, _check_shape,
    _check_text, _q, _type_name,
)
from codecarena.payload.packing import _Section, _split_packets, _unpack_blocks


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
