"""Speex's own packet loss concealment: libspeex's decoder called through ctypes, packet by packet,
as `speexdec` (speex 1.2.1, its speexdec.c) calls it, except that a packet the channel lost is
decoded with no bits (`speex_decode_int(state, NULL, out)`), which runs libspeex's PLC. speexdec
can conceal only the packets its own `--packet-loss` drops at random, never the ones a channel lost.
With nothing lost this gives speexdec's samples bit for bit (tests/test_channel_telephony.py).

speexdec's decoder and output, reproduced: the mode from the Ogg Speex header, the perceptual
enhancer on (its default), the header's rate; each packet's frames_per_packet frames decoded in turn;
the first packet's output loses the page's skip_samples plus the decoder's look-ahead, and the last
packet of the end-of-stream page is cut to what its granule position counts (framing.Split.timing).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.plugin.channel import Received, speex_header

# speex.h's decoder requests.
_SET_ENH, _GET_FRAME_SIZE, _SET_SAMPLING_RATE, _GET_LOOKAHEAD = 0, 3, 24, 39


class _Bits(ctypes.Structure):
    # speex_bits.h's SpeexBits.
    _fields_ = [("chars", ctypes.c_char_p), ("nbBits", ctypes.c_int), ("charPtr", ctypes.c_int),
                ("bitPtr", ctypes.c_int), ("owner", ctypes.c_int), ("overflow", ctypes.c_int),
                ("buf_size", ctypes.c_int), ("reserved1", ctypes.c_int), ("reserved2", ctypes.c_void_p)]


def _library(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.speex_lib_get_mode.argtypes = [ctypes.c_int]
    lib.speex_lib_get_mode.restype = ctypes.c_void_p
    lib.speex_decoder_init.argtypes = [ctypes.c_void_p]
    lib.speex_decoder_init.restype = ctypes.c_void_p
    lib.speex_decoder_ctl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.speex_decoder_destroy.argtypes = [ctypes.c_void_p]
    lib.speex_bits_init.argtypes = [ctypes.POINTER(_Bits)]
    lib.speex_bits_destroy.argtypes = [ctypes.POINTER(_Bits)]
    lib.speex_bits_read_from.argtypes = [ctypes.POINTER(_Bits), ctypes.c_char_p, ctypes.c_int]
    lib.speex_bits_remaining.argtypes = [ctypes.POINTER(_Bits)]
    lib.speex_decode_int.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Bits), ctypes.c_void_p]
    lib.speex_decode_int.restype = ctypes.c_int
    return lib


def _ctl(lib: ctypes.CDLL, state: int, request: int, value: int = 0) -> int:
    cell = ctypes.c_int(value)
    lib.speex_decoder_ctl(state, request, ctypes.byref(cell))
    return cell.value


def decode(path: Path, setup: bytes, frames: tuple[bytes, ...], timing: list[list[int]],
           got: Received) -> tuple[np.ndarray, dict[str, Any]]:
    """The decoded int16 samples of an Ogg Speex file's audio packets, lost ones concealed by libspeex;
    and the facts."""
    header = speex_header(setup)
    if header["channels"] != 1:
        raise ValueError(f"the Speex stream has {header['channels']} channels; the arena decodes mono")
    if len(timing) != len(frames):
        raise ValueError(f"{len(frames)} Speex packets but the timing of {len(timing)}")
    lib = _library(path)
    state = lib.speex_decoder_init(lib.speex_lib_get_mode(header["mode"]))
    bits = _Bits()
    lib.speex_bits_init(ctypes.byref(bits))
    try:
        _ctl(lib, state, _SET_ENH, 1)
        frame_size = _ctl(lib, state, _GET_FRAME_SIZE)
        _ctl(lib, state, _SET_SAMPLING_RATE, header["sample_rate"])
        lookahead = _ctl(lib, state, _GET_LOOKAHEAD)
        per_packet = header["frames_per_packet"]
        pcm = np.zeros(frame_size, dtype=np.int16)
        out: list[np.ndarray] = []
        concealed = broken = 0
        for index, (packet, (number, on_page, skip)) in enumerate(zip(frames, timing)):
            lost = index in got.erased
            if not lost:
                lib.speex_bits_read_from(ctypes.byref(bits), packet, len(packet))
            for j in range(per_packet):
                status = lib.speex_decode_int(state, None if lost else ctypes.byref(bits), pcm.ctypes.data)
                concealed += lost
                if status == -1 or status == -2 or (not lost and lib.speex_bits_remaining(ctypes.byref(bits)) < 0):
                    broken += 1  # speexdec stops decoding the packet here, as this does
                    break
                offset, size = 0, frame_size
                if number == 1 and j == 0 and skip > 0:
                    size -= skip + lookahead
                    offset = skip + lookahead
                if number == on_page and skip < 0:
                    size = min(max(per_packet * frame_size + skip + lookahead - j * frame_size, 0), frame_size)
                if size > 0:
                    out.append(pcm[offset:offset + size].copy())
    finally:
        lib.speex_bits_destroy(ctypes.byref(bits))
        lib.speex_decoder_destroy(state)
    facts = {"by": "codec", "concealment": "libspeex's packet loss concealment (speex_decode_int with no bits) for "
             "each frame of a lost packet", "library": path.name, "lost_packets": len(got.erased),
             "concealed_frames": concealed, "packets_cut_short": broken}
    return (np.concatenate(out) if out else np.zeros(0, dtype=np.int16)), facts
