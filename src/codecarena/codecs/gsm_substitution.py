"""GSM 06.11's substitution and muting of lost frames, done by the arena on the frames themselves
before `toast` decodes them, since libgsm has no concealment of its own (GSM 06.11 leaves it to the
receiver; this is the classic repair of its example solution, as UCL's RAT and others do it):

- the first lost frame of a run is the last received frame again, exactly;
- each further lost frame repeats the one before it with every sub-block's amplitude index `xmaxc`
  lowered by 4 (about 3 dB, `xmaxc` being logarithmic), at least 0;
- from the 17th lost frame in a run (320 ms) the output is muted: silence in place of what the
  decoder makes of the repeated frame, which it still gets so that its state keeps running;
- a frame lost before any was received is a silent frame as well.

A toast frame is 33 bytes: the 0xD signature (4 bits), the eight LARs (36 bits), then four
sub-blocks of 56 bits each (Nc 7, bc 2, Mc 2, xmaxc 6, thirteen 3-bit pulses), so sub-block k's
`xmaxc` is bits 51 + 56k to 56 + 56k of the frame, the most significant bit first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from codecarena.plugin.channel import Received

FRAME_BYTES, FRAME_SAMPLES = 33, 160
STEP = 4  # xmaxc a further lost frame loses
MUTE_AFTER = 16  # lost frames in a run (320 ms) before silence
_SILENT_FRAME = bytes([0xD0]) + bytes(FRAME_BYTES - 1)


def _lower(frame: bytes) -> bytes:
    value = int.from_bytes(frame, "big")
    width = 8 * FRAME_BYTES
    for k in range(4):
        shift = width - (51 + 56 * k) - 6
        xmaxc = (value >> shift) & 0x3F
        value = value & ~(0x3F << shift) | (max(xmaxc - STEP, 0) << shift)
    return value.to_bytes(FRAME_BYTES, "big")


def substitute(frames: tuple[bytes, ...], got: Received) -> tuple[bytes, list[int], dict[str, Any]]:
    """The .gsm file toast decodes, the frames whose output is muted, and the facts."""
    out: list[bytes] = []
    muted: list[int] = []
    last: bytes | None = None
    run = repeated = lowered = 0
    for index, frame in enumerate(frames):
        if index not in got.erased:
            out.append(frame)
            last, run = frame, 0
            continue
        run += 1
        if last is None:
            out.append(_SILENT_FRAME)
            muted.append(index)
            continue
        last = last if run == 1 else _lower(last)
        repeated += run == 1
        lowered += run > 1
        out.append(last)
        if run > MUTE_AFTER:
            muted.append(index)
    facts = {"by": "arena", "concealment": "GSM 06.11 substitution and muting, the arena's: the first lost frame "
             "repeats the last received one, each further one lowers every xmaxc by 4 (about 3 dB), silence "
             "from 320 ms of loss on", "lost_frames": len(got.erased), "repeated_frames": repeated,
             "attenuated_frames": lowered, "muted_frames": len(muted)}
    return b"".join(out), muted, facts


def mute(samples: np.ndarray, muted: list[int]) -> np.ndarray:
    out = samples.copy()
    for index in muted:
        out[index * FRAME_SAMPLES:(index + 1) * FRAME_SAMPLES] = 0
    return out
