"""Bit-packed code sections, LEB128 packet lengths, and views of verified sections: in bounded
blocks, never an object per code or per packet."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from codecarena.payload.fields import (
    MAX_BIT_WIDTH, MAX_PACKET_BYTES, _MAX_VARINT_BYTES, PayloadError, _as_codes, _check_int, _q,
)
from codecarena.plural import counted


@dataclass(frozen=True)
class _Section:
    """Where a parsed stream's bytes lie in the (immutable) file they were validated in."""

    data: bytes
    start: int
    end: int
    count: int  # codes or packets

    def view(self) -> memoryview:
        return memoryview(self.data)[self.start : self.end]


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
            raise PayloadError(f"truncated: stream {_q(name)} packet {i} needs {counted(size, 'byte')}, {n - pos} left")
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
