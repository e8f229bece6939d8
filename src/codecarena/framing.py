"""How a command-line tool frames its bitstream: which of the file's bits are the codec's own and which
are the container's (headers, length fields, signatures, Ogg pages).

A parser checks the file's structure (a file the tool would not have written is refused with one
line) and counts; it never changes a byte: the payload carries the file as the encoder wrote it, and
every bit of it is counted. `framing_bits` is the part that is not the codec's own, reported beside
the total so that overhead is shown, not hidden: `8 * len(file) == codec_bits + framing_bits`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codecarena.plural import counted


class FramingError(ValueError):
    """A bitstream whose structure is not the declared framing's (one line)."""


@dataclass(frozen=True)
class Framing:
    name: str
    codec_bits: int
    framing_bits: int
    frames: int | None  # codec frames in the file; None where the format has none (raw sample codes)
    details: dict[str, Any] = field(default_factory=dict)  # what the container declares (rate, bitrate, ...)


def parse(name: str, data: bytes) -> Framing:
    """The framing `name` (one of codecarena.registry.catalog.FRAMINGS) of one bitstream file."""
    if not data:
        raise FramingError("the bitstream is empty")
    return PARSERS[name](data)


def _raw(data: bytes) -> Framing:
    # G.722 and G.726 as FFmpeg's raw muxers write them: codes back to back, no header, no frames.
    return Framing("raw", 8 * len(data), 0, None)


GSM_FRAME_BYTES = 33
GSM_FRAME_BITS = 260


def _gsm_toast(data: bytes) -> Framing:
    """toast's .gsm file: 33 bytes a frame, the 260 bits of a GSM 06.10 frame behind a 4-bit signature
    (0xD) that fills the frame to whole bytes."""
    if len(data) % GSM_FRAME_BYTES:
        raise FramingError(f"{counted(len(data), 'byte')} is not a whole number of {GSM_FRAME_BYTES}-byte GSM frames")
    frames = len(data) // GSM_FRAME_BYTES
    for i in range(frames):
        if data[i * GSM_FRAME_BYTES] >> 4 != 0xD:
            raise FramingError(f"GSM frame {i} does not start with the 0xD signature")
    return Framing("gsm_toast", GSM_FRAME_BITS * frames, 4 * frames, frames)


LC3_FILE_ID = 0xCC1C
_LC3_HEADER = struct.Struct("<9H")


def _lc3_file(data: bytes) -> Framing:
    """liblc3's file format (elc3/dlc3): a little-endian header (file id 0xCC1C, its own size, rate in
    100 Hz, bitrate in 100 bps, channels, frame duration in 10 us, a reserved word, the sample count
    as two words), then each frame behind a 16-bit byte count."""
    if len(data) < _LC3_HEADER.size:
        raise FramingError(f"{counted(len(data), 'byte')} is shorter than the {_LC3_HEADER.size}-byte LC3 file header")
    file_id, header_size, rate, bitrate, channels, frame_10us, _, low, high = _LC3_HEADER.unpack_from(data)
    if file_id != LC3_FILE_ID:
        raise FramingError(f"file id 0x{file_id:04X} is not LC3's 0x{LC3_FILE_ID:04X}")
    if header_size < _LC3_HEADER.size or header_size > len(data):
        raise FramingError(f"LC3 header size {header_size} is not within 18..{len(data)} bytes")
    offset, frames, codec_bytes = header_size, 0, 0
    while offset < len(data):
        if offset + 2 > len(data):
            raise FramingError(f"LC3 frame {frames}: its length field is cut off")
        (size,) = struct.unpack_from("<H", data, offset)
        if size == 0 or offset + 2 + size > len(data):
            raise FramingError(f"LC3 frame {frames}: {counted(size, 'byte')}, {len(data) - offset - 2} left")
        offset += 2 + size
        frames += 1
        codec_bytes += size
    if not frames:
        raise FramingError("the LC3 file holds no frame")
    return Framing("lc3_file", 8 * codec_bytes, 8 * (len(data) - codec_bytes), frames,
                   {"sample_rate": 100 * rate, "bitrate_bps": 100 * bitrate, "channels": channels,
                    "frame_us": 10 * frame_10us, "num_samples": low | high << 16})


_OGG_PAGE = struct.Struct("<4sBBqIIIB")
_SPEEX_HEADER = struct.Struct("<8s20s13i")  # speex_string, speex_version, then 13 int32 fields (speex_header.h)


def _ogg_packets(data: bytes) -> list[bytes]:
    """The packets of one logical Ogg stream, joined across pages by their lacing values."""
    packets: list[bytes] = []
    partial = b""
    offset, serial = 0, None
    while offset < len(data):
        if offset + _OGG_PAGE.size > len(data):
            raise FramingError(f"Ogg page at byte {offset}: header cut off")
        capture, version, _flags, _granule, page_serial, _seq, _crc, count = _OGG_PAGE.unpack_from(data, offset)
        if capture != b"OggS" or version != 0:
            raise FramingError(f"byte {offset} does not start an Ogg page")
        if serial is not None and page_serial != serial:
            raise FramingError("the Ogg file holds more than one logical stream")
        serial = page_serial
        lacing_at = offset + _OGG_PAGE.size
        lacing = data[lacing_at:lacing_at + count]
        body = lacing_at + count
        if len(lacing) != count or body + sum(lacing) > len(data):
            raise FramingError(f"Ogg page at byte {offset} runs past the end of the file")
        for value in lacing:
            partial += data[body:body + value]
            body += value
            if value < 255:
                packets.append(partial)
                partial = b""
        offset = body
    if partial:
        raise FramingError("the last Ogg packet is not terminated")
    return packets


def _ogg_speex(data: bytes) -> Framing:
    """speexenc's Ogg Speex file: the Speex header packet and the comment packet (plus any extra
    headers the header announces), then one packet per frames_per_packet frames. Everything but the
    audio packets is framing: the pages' headers and lacing, and the header packets."""
    packets = _ogg_packets(data)
    if not packets or len(packets[0]) < _SPEEX_HEADER.size or not packets[0].startswith(b"Speex   "):
        raise FramingError("the first Ogg packet is not a Speex header")
    fields = _SPEEX_HEADER.unpack_from(packets[0])
    version = fields[1].rstrip(b"\0").decode("ascii", "replace")
    rate, mode, _, channels, bitrate, frame_size, vbr, per_packet, extra = fields[4:13]
    if per_packet < 1 or extra < 0:
        raise FramingError(f"the Speex header declares {counted(per_packet, 'frame')} a packet and "
                           f"{counted(extra, 'extra header')}")
    audio = packets[2 + extra:]
    if not audio:
        raise FramingError(f"the Ogg Speex file holds {counted(len(packets), 'packet')}, no audio after its headers")
    codec_bytes = sum(len(p) for p in audio)
    return Framing("ogg_speex", 8 * codec_bytes, 8 * (len(data) - codec_bytes), len(audio) * per_packet,
                   {"sample_rate": rate, "mode": mode, "channels": channels, "bitrate_bps": bitrate,
                    "frame_size": frame_size, "vbr": bool(vbr), "frames_per_packet": per_packet,
                    "header_packets": 2 + extra, "speex_version": version})


PARSERS: dict[str, Callable[[bytes], Framing]] = {
    "raw": _raw, "gsm_toast": _gsm_toast, "lc3_file": _lc3_file, "ogg_speex": _ogg_speex,
}
