"""LC3's own packet loss concealment: liblc3's decoder called through ctypes, frame by frame, as
`dlc3` (liblc3-tools 1.0.1, tools/dlc3.c) calls it, except that a frame the channel lost is decoded
with no data (`lc3_decode(decoder, NULL, 0, ...)`), which runs liblc3's PLC. `dlc3` itself never
does: it writes silence for a frame it cannot read. With nothing lost this gives dlc3's samples bit
for bit (tests/test_channel_telephony.py).

dlc3's loop, reproduced: the decoder runs over `num_samples + delay` samples (the header's sample
count plus liblc3's algorithmic delay), one frame at a time; the first frame's output drops the delay
and the last one is cut to the sample count.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.plugin.channel import Received, lc3_header

#: enum lc3_pcm_format: LC3_PCM_FORMAT_S16 (lc3.h).
_S16 = 0


def _library(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    for name in ("lc3_frame_samples", "lc3_delay_samples", "lc3_decoder_size"):
        getattr(lib, name).argtypes = [ctypes.c_int, ctypes.c_int]
        getattr(lib, name).restype = ctypes.c_int
    lib.lc3_setup_decoder.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.lc3_setup_decoder.restype = ctypes.c_void_p
    lib.lc3_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                               ctypes.c_int]
    lib.lc3_decode.restype = ctypes.c_int
    return lib


def decode(path: Path, setup: bytes, frames: tuple[bytes, ...], got: Received) -> tuple[np.ndarray, dict[str, Any]]:
    """The decoded int16 samples of an LC3 file's frames, lost ones concealed by liblc3; and the facts."""
    header = lc3_header(setup)
    if header["channels"] != 1:
        raise ValueError(f"the LC3 file has {header['channels']} channels; the arena decodes mono")
    lib = _library(path)
    frame_us, rate, total = header["frame_us"], header["sample_rate"], header["num_samples"]
    frame_samples = lib.lc3_frame_samples(frame_us, rate)
    delay = lib.lc3_delay_samples(frame_us, rate)
    if frame_samples <= 0 or delay < 0:
        raise ValueError(f"liblc3 refuses frames of {frame_us} us at {rate} Hz")
    memory = ctypes.create_string_buffer(lib.lc3_decoder_size(frame_us, rate))
    decoder = lib.lc3_setup_decoder(frame_us, rate, rate, memory)
    pcm = np.zeros(frame_samples, dtype=np.int16)
    out: list[np.ndarray] = []
    concealed = beyond = 0
    encode_samples = total + delay
    index = 0
    while index * frame_samples < encode_samples:
        if index >= len(frames):  # dlc3 writes silence past the file's last frame
            pcm[:] = 0
            beyond += 1
        elif index in got.erased:
            if lib.lc3_decode(decoder, None, 0, _S16, pcm.ctypes.data, 1) != 1:
                raise ValueError(f"liblc3 did not run its concealment for lost frame {index}")
            concealed += 1
        elif lib.lc3_decode(decoder, frames[index], len(frames[index]), _S16, pcm.ctypes.data, 1) < 0:
            raise ValueError(f"liblc3 refused frame {index} ({len(frames[index])} bytes)")
        offset = delay if index == 0 else 0
        count = min(frame_samples - offset, encode_samples - index * frame_samples)
        out.append(pcm[offset:offset + count].copy())
        index += 1
    facts = {"by": "codec", "concealment": "liblc3's packet loss concealment (lc3_decode with no data) for each "
             "lost frame", "library": path.name, "lost_frames": len(got.erased), "concealed_frames": concealed,
             "frames_past_the_file": beyond}
    return (np.concatenate(out) if out else np.zeros(0, dtype=np.int16)), facts
