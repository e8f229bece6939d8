"""libopus's own decoder API through ctypes, for payloads that crossed a channel.

PyAV decodes whole packets only: it cannot ask libopus to conceal a missing packet or to recover one
from the next packet's in-band FEC. This module loads the very libopus PyAV bundles (so the library
that encoded is the one that decodes) and calls `opus_decode_float` with no data (packet loss
concealment) or with `decode_fec = 1`. On a payload with no loss its samples equal PyAV's decode bit for
bit (tests/test_channel.py).

Which concealment the library has is found out, not assumed: DRED answers `opus_dred_alloc` with
OPUS_UNIMPLEMENTED when it was not built in, and deep PLC (and OSCE) exist only if the decoder at
complexity 10, where libopus >= 1.5 runs them, conceals a loss with other samples than at complexity 0.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from pathlib import Path
from typing import Any

import av
import numpy as np

RATE = 48000
MAX_FRAME = 5760  # 120 ms at 48 kHz, the longest Opus frame
_OPUS_SET_COMPLEXITY = 4010
_OPUS_UNIMPLEMENTED = -5


@functools.cache
def library() -> ctypes.CDLL:
    found = sorted((Path(av.__file__).parent.parent / "av.libs").glob("libopus*.so*"))
    if not found:
        raise RuntimeError("PyAV's bundled libopus was not found under av.libs")
    lib = ctypes.CDLL(str(found[0]))
    lib.opus_get_version_string.restype = ctypes.c_char_p
    lib.opus_decoder_create.restype = ctypes.c_void_p
    lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
    lib.opus_decode_float.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                      ctypes.POINTER(ctypes.c_float), ctypes.c_int, ctypes.c_int]
    lib.opus_decoder_ctl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.opus_packet_get_nb_samples.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32]
    return lib


def version() -> str:
    return str(library().opus_get_version_string().decode())


class Decoder:
    """One libopus decoder at 48 kHz mono."""

    def __init__(self, complexity: int) -> None:
        lib = library()
        error = ctypes.c_int()
        self._state = lib.opus_decoder_create(RATE, 1, ctypes.byref(error))
        if not self._state or error.value != 0:
            raise RuntimeError(f"opus_decoder_create failed with {error.value}")
        status = lib.opus_decoder_ctl(self._state, _OPUS_SET_COMPLEXITY, complexity)
        if status != 0:
            raise RuntimeError(f"OPUS_SET_COMPLEXITY({complexity}) failed with {status}")
        self._out = (ctypes.c_float * MAX_FRAME)()

    def __del__(self) -> None:
        if getattr(self, "_state", None):
            library().opus_decoder_destroy(self._state)

    def decode(self, packet: bytes | None, frame: int, fec: bool = False) -> np.ndarray | None:
        """A packet's samples; with None, `frame` samples of concealment; with `fec`, the packet before
        `packet` recovered from its FEC data. None when libopus rejects the packet."""
        count = library().opus_decode_float(self._state, packet, len(packet) if packet else 0, self._out,
                                            frame if packet is None or fec else MAX_FRAME, int(fec))
        if count < 0:
            return None
        return np.frombuffer(self._out, dtype=np.float32, count=count).astype(np.float64)


def has_dred() -> bool:
    lib = library()
    lib.opus_dred_alloc.restype = ctypes.c_void_p
    lib.opus_dred_alloc.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.opus_dred_free.argtypes = [ctypes.c_void_p]
    error = ctypes.c_int()
    dred = lib.opus_dred_alloc(ctypes.byref(error))
    if dred:
        lib.opus_dred_free(dred)
    return error.value != _OPUS_UNIMPLEMENTED


def has_lbrr(packet: bytes) -> bool | None:
    """Whether a packet carries in-band FEC data (libopus >= 1.5), None if the library cannot say."""
    lib = library()
    if not hasattr(lib, "opus_packet_has_lbrr"):
        return None
    lib.opus_packet_has_lbrr.argtypes = [ctypes.c_char_p, ctypes.c_int32]
    answer = lib.opus_packet_has_lbrr(packet, len(packet))
    return None if answer < 0 else bool(answer)


def deep_concealment(packets: list[bytes], frame: int) -> bool:
    """Whether this libopus conceals differently at complexity 10 than at 0 (deep PLC or OSCE built in),
    tried on up to the first ten received packets of a payload followed by one lost frame."""
    outputs = []
    for complexity in (0, 10):
        decoder = Decoder(complexity)
        pieces = [decoder.decode(p, frame) for p in packets[:10] if p]
        pieces.append(decoder.decode(None, frame))
        outputs.append(np.concatenate([p for p in pieces if p is not None]))
    return not np.array_equal(outputs[0], outputs[1])


def pre_skip(opus_head: bytes) -> int:
    """The OpusHead's pre-skip (RFC 7845 section 5.1); its output gain must be 0, as FFmpeg writes it."""
    if len(opus_head) < 19 or opus_head[:8] != b"OpusHead":
        raise ValueError("side info opus_head is not an OpusHead")
    skip, _rate, gain = struct.unpack_from("<HIh", opus_head, 10)
    if gain != 0:
        raise ValueError(f"OpusHead output gain {gain} is not 0")
    return int(skip)


def decode_received(packets: tuple[bytes, ...], erased: frozenset[int], opus_head: bytes, frame: int,
                    fec: bool) -> tuple[np.ndarray, dict[str, Any]]:
    """Decode packets some of which were lost, each loss concealed by libopus: recovered from the next
    packet's FEC data when the encoder used FEC and that packet arrived, else by its PLC. Returns 48 kHz
    samples without the pre-skip, and the facts of what ran."""
    deep = deep_concealment([p for i, p in enumerate(packets) if i not in erased], frame)
    decoder = Decoder(complexity=10)
    pieces, counts = [], {"fec_recovered": 0, "fec_missing": 0, "plc": 0, "rejected": 0}
    for index, packet in enumerate(packets):
        if index in erased:
            following = index + 1 < len(packets) and index + 1 not in erased
            if fec and following:
                piece = decoder.decode(packets[index + 1], frame, fec=True)
                lbrr = has_lbrr(packets[index + 1])
                counts["fec_recovered" if lbrr is not False else "fec_missing"] += 1
            else:
                piece = decoder.decode(None, frame)
                counts["plc"] += 1
        else:
            # A packet whose flipped bits libopus refuses, or whose TOC now claims another duration than
            # the stream's frames, is concealed like a loss: a receiver plays one frame per packet.
            same = library().opus_packet_get_nb_samples(packet, len(packet), RATE) == frame
            piece = decoder.decode(packet, frame) if same else None
            if piece is None:
                counts["rejected"] += 1
                piece = decoder.decode(None, frame)
        if piece is None:
            raise ValueError(f"libopus could not conceal packet {index}")
        pieces.append(piece)
    audio = np.concatenate(pieces) if pieces else np.zeros(0)
    plc = "deep PLC" if deep else "classic PLC"
    return audio[pre_skip(opus_head):], {
        "by": "codec", "decoder": f"{version()} via ctypes (PyAV's bundled library), 48 kHz, complexity 10",
        "concealment": f"libopus {plc}" + ("; in-band FEC from the next packet" if fec else ""),
        "deep_plc_or_osce": deep, "dred_built": has_dred(), "lost_packets": len(erased),
        "fec_recovered_packets": counts["fec_recovered"],
        "fec_next_packet_without_lbrr": counts["fec_missing"], "plc_packets": counts["plc"],
        "rejected_packets": counts["rejected"],
    }
