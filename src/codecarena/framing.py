"""How a command-line tool frames its bitstream: which of the file's bits are the codec's own and which
are the container's (headers, length fields, signatures, Ogg pages).

A parser checks the file's structure (a file the tool would not have written is refused with one
line) and counts; it never changes a byte: the payload carries the file as the encoder wrote it, and
every bit of it is counted. `framing_bits` is the part that is not the codec's own, reported beside
the total so that overhead is shown, not hidden: `8 * len(file) == codec_bits + framing_bits`.

`split` cuts a file into what the receiver of a packet stream gets (docs/channel.md): the setup it
knows before the first frame (the stream's header), the codec's frames one by one without their
container (length fields, Ogg pages), and, for Ogg, the pages' timing by which the tool's decoder
cuts its output.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
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


@dataclass(frozen=True)
class Split:
    """A bitstream file as a receiver of its frames gets it."""
    setup: bytes  # what the receiver knows before the first frame: the stream's header ("" when none)
    frames: tuple[bytes, ...]  # the codec's frames (an Ogg Speex packet: frames_per_packet Speex frames)
    frame_s: Fraction | None  # one frame's duration as the file declares it; None where it declares none
    skip_bits: int = 0  # leading bits of every frame that are the container's (GSM's signature)
    # Ogg only: for each frame, what speexdec cuts its output by (OggTiming.of).
    timing: tuple[tuple[int, int, int], ...] = ()


def parse(name: str, data: bytes) -> Framing:
    """The framing `name` (one of codecarena.registry.catalog.FRAMINGS) of one bitstream file."""
    if not data:
        raise FramingError("the bitstream is empty")
    return PARSERS[name](data)


def split(name: str, data: bytes, raw_frame_bytes: int = 0) -> Split:
    """The frames of one bitstream file; a raw stream has no frames of its own and is cut every
    `raw_frame_bytes` (the last piece may be shorter)."""
    if not data:
        raise FramingError("the bitstream is empty")
    if name == "raw":
        if raw_frame_bytes < 1:
            raise FramingError("a raw stream is cut into frames of a whole number of bytes")
        return Split(b"", tuple(data[i:i + raw_frame_bytes] for i in range(0, len(data), raw_frame_bytes)), None)
    return SPLITTERS[name](data)


def _raw(data: bytes) -> Framing:
    # G.722 and G.726 as FFmpeg's raw muxers write them: codes back to back, no header, no frames.
    return Framing("raw", 8 * len(data), 0, None)


GSM_FRAME_BYTES = 33
GSM_FRAME_BITS = 260


def _gsm_toast(data: bytes) -> Framing:
    """toast's .gsm file: 33 bytes a frame, the 260 bits of a GSM 06.10 frame behind a 4-bit signature
    (0xD) that fills the frame to whole bytes."""
    frames = len(_gsm_frames(data))
    return Framing("gsm_toast", GSM_FRAME_BITS * frames, 4 * frames, frames)


def _gsm_frames(data: bytes) -> tuple[bytes, ...]:
    if len(data) % GSM_FRAME_BYTES:
        raise FramingError(f"{counted(len(data), 'byte')} is not a whole number of {GSM_FRAME_BYTES}-byte GSM frames")
    frames = tuple(data[i:i + GSM_FRAME_BYTES] for i in range(0, len(data), GSM_FRAME_BYTES))
    for i, frame in enumerate(frames):
        if frame[0] >> 4 != 0xD:
            raise FramingError(f"GSM frame {i} does not start with the 0xD signature")
    return frames


def _gsm_split(data: bytes) -> Split:
    return Split(b"", _gsm_frames(data), Fraction(20, 1000), skip_bits=4)


LC3_FILE_ID = 0xCC1C
_LC3_HEADER = struct.Struct("<9H")


def _lc3_frames(data: bytes) -> tuple[int, tuple[bytes, ...]]:
    """The LC3 file's header size and its frames, checked."""
    if len(data) < _LC3_HEADER.size:
        raise FramingError(f"{counted(len(data), 'byte')} is shorter than the {_LC3_HEADER.size}-byte LC3 file header")
    file_id, header_size = _LC3_HEADER.unpack_from(data)[:2]
    if file_id != LC3_FILE_ID:
        raise FramingError(f"file id 0x{file_id:04X} is not LC3's 0x{LC3_FILE_ID:04X}")
    if header_size < _LC3_HEADER.size or header_size > len(data):
        raise FramingError(f"LC3 header size {header_size} is not within 18..{len(data)} bytes")
    offset, frames = header_size, []
    while offset < len(data):
        if offset + 2 > len(data):
            raise FramingError(f"LC3 frame {len(frames)}: its length field is cut off")
        (size,) = struct.unpack_from("<H", data, offset)
        if size == 0 or offset + 2 + size > len(data):
            raise FramingError(f"LC3 frame {len(frames)}: {counted(size, 'byte')}, {len(data) - offset - 2} left")
        frames.append(data[offset + 2:offset + 2 + size])
        offset += 2 + size
    if not frames:
        raise FramingError("the LC3 file holds no frame")
    return header_size, tuple(frames)


def lc3_header(setup: bytes) -> dict[str, int]:
    """What an LC3 file header declares: sample_rate, bitrate_bps, channels, frame_us, num_samples."""
    if len(setup) < _LC3_HEADER.size:
        raise FramingError(f"an LC3 file header is at least {_LC3_HEADER.size} bytes, not {len(setup)}")
    _, _, rate, bitrate, channels, frame_10us, _, low, high = _LC3_HEADER.unpack_from(setup)
    return {"sample_rate": 100 * rate, "bitrate_bps": 100 * bitrate, "channels": channels,
            "frame_us": 10 * frame_10us, "num_samples": low | high << 16}


def _lc3_file(data: bytes) -> Framing:
    """liblc3's file format (elc3/dlc3): a little-endian header (file id 0xCC1C, its own size, rate in
    100 Hz, bitrate in 100 bps, channels, frame duration in 10 us, a reserved word, the sample count
    as two words), then each frame behind a 16-bit byte count."""
    header_size, frames = _lc3_frames(data)
    codec_bytes = sum(len(f) for f in frames)
    return Framing("lc3_file", 8 * codec_bytes, 8 * (len(data) - codec_bytes), len(frames),
                   lc3_header(data[:header_size]))


def _lc3_split(data: bytes) -> Split:
    header_size, frames = _lc3_frames(data)
    return Split(data[:header_size], frames, Fraction(lc3_header(data[:header_size])["frame_us"], 1_000_000))


_OGG_PAGE = struct.Struct("<4sBBqIIIB")
_SPEEX_HEADER = struct.Struct("<8s20s13i")  # speex_string, speex_version, then 13 int32 fields (speex_header.h)


@dataclass(frozen=True)
class OggPage:
    granule: int
    completed: int  # the packets that end on this page (libogg's ogg_page_packets)
    eos: bool


def _ogg_pages(data: bytes) -> tuple[list[bytes], list[int], list[OggPage]]:
    """The packets of one logical Ogg stream, joined across pages by their lacing values; the page each
    ends on; and the pages."""
    packets: list[bytes] = []
    ends: list[int] = []
    pages: list[OggPage] = []
    partial = b""
    offset, serial = 0, None
    while offset < len(data):
        if offset + _OGG_PAGE.size > len(data):
            raise FramingError(f"Ogg page at byte {offset}: header cut off")
        capture, version, flags, granule, page_serial, _seq, _crc, count = _OGG_PAGE.unpack_from(data, offset)
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
                ends.append(len(pages))
                partial = b""
        pages.append(OggPage(granule, sum(v < 255 for v in lacing), bool(flags & 4)))
        offset = body
    if partial:
        raise FramingError("the last Ogg packet is not terminated")
    return packets, ends, pages


def speex_header(packet: bytes) -> dict[str, Any]:
    """The fields of an Ogg Speex header packet (speex_header.h) this arena reads."""
    if len(packet) < _SPEEX_HEADER.size or not packet.startswith(b"Speex   "):
        raise FramingError("the first Ogg packet is not a Speex header")
    fields = _SPEEX_HEADER.unpack_from(packet)
    rate, mode, _, channels, bitrate, frame_size, vbr, per_packet, extra = fields[4:13]
    if per_packet < 1 or extra < 0:
        raise FramingError(f"the Speex header declares {counted(per_packet, 'frame')} a packet and "
                           f"{counted(extra, 'extra header')}")
    return {"sample_rate": rate, "mode": mode, "channels": channels, "bitrate_bps": bitrate,
            "frame_size": frame_size, "vbr": bool(vbr), "frames_per_packet": per_packet,
            "header_packets": 2 + extra, "speex_version": fields[1].rstrip(b"\0").decode("ascii", "replace")}


def _ogg_speex(data: bytes) -> Framing:
    """speexenc's Ogg Speex file: the Speex header packet and the comment packet (plus any extra
    headers the header announces), then one packet per frames_per_packet frames. Everything but the
    audio packets is framing: the pages' headers and lacing, and the header packets."""
    packets = _ogg_pages(data)[0]
    header = speex_header(packets[0] if packets else b"")
    audio = packets[header["header_packets"]:]
    if not audio:
        raise FramingError(f"the Ogg Speex file holds {counted(len(packets), 'packet')}, no audio after its headers")
    codec_bytes = sum(len(p) for p in audio)
    return Framing("ogg_speex", 8 * codec_bytes, 8 * (len(data) - codec_bytes),
                   len(audio) * header["frames_per_packet"], header)


def _ogg_speex_split(data: bytes) -> Split:
    """The audio packets, the header packet as the setup, and for each audio packet the three numbers
    speexdec 1.2.1 cuts its output by (speexdec.c's main loop): its place among the audio packets that
    end on its page (from 1), how many packets end on that page, and the page's skip_samples (the
    samples the page's granule position says to drop: from the first packet of a page with more
    coded than its granule counts, or, negated, from the end of the last page)."""
    packets, ends, pages = _ogg_pages(data)
    header = speex_header(packets[0] if packets else b"")
    first_audio = header["header_packets"]
    if len(packets) <= first_audio:
        raise FramingError(f"the Ogg Speex file holds {counted(len(packets), 'packet')}, no audio after its headers")
    per_page = header["frame_size"] * header["frames_per_packet"]
    timing = []
    last_granule, skip, number = 0, 0, 0
    page_of_first_audio = ends[first_audio]
    for index, page in enumerate(pages):
        # speexdec knows the frame size from the header packet once the page after the header's is read.
        if page.granule > 0 and index > ends[0]:
            skip = page.completed * per_page - (page.granule - last_granule)
            skip = -skip if page.eos else skip
        else:
            skip = 0
        last_granule, number = page.granule, 0
        for packet in range(first_audio, len(packets)):
            if ends[packet] == index:
                number += 1
                timing.append((number, page.completed, skip))
        if page.eos and index >= page_of_first_audio:
            break
    audio = packets[first_audio:first_audio + len(timing)]
    return Split(packets[0], tuple(audio), Fraction(per_page, header["sample_rate"]), timing=tuple(timing))


PARSERS: dict[str, Callable[[bytes], Framing]] = {
    "raw": _raw, "gsm_toast": _gsm_toast, "lc3_file": _lc3_file, "ogg_speex": _ogg_speex,
}
SPLITTERS: dict[str, Callable[[bytes], Split]] = {
    "gsm_toast": _gsm_split, "lc3_file": _lc3_split, "ogg_speex": _ogg_speex_split,
}
