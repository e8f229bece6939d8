"""IMA ADPCM as a codecarena plugin: 4 bits per sample at 16 kHz (64 kbps) or 8 kHz (32 kbps).

The example of docs/plugins.md ("Add your codec"): a complete codec written against the public API
(`codecarena.plugin`) with numpy only. IMA/DVI ADPCM codes each sample as a 4-bit correction to a
prediction whose step size adapts to the signal; the encoder runs the decoder's own state update, so
both sides track the same prediction. Every code is sent as a 4-bit `CodeStream`: nothing else crosses
from encoder to decoder, which starts, as the encoder did, from prediction 0 and step index 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from codecarena.plugin import Adapter, CodeStream, Decoded, Encoded, Payload, from_int16, to_int16

# The IMA ADPCM step sizes and step-index changes (IMA Digital Audio Focus and Technical Working
# Groups, "Recommended Practices for Enhancing Digital Audio Compatibility in Multimedia Systems", 1992).
STEPS = (7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60, 66, 73, 80, 88,
         97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371, 408, 449, 494, 544, 598, 658,
         724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066, 2272, 2499, 2749, 3024, 3327, 3660,
         4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845, 8630, 9493, 10442, 11487, 12635, 13899, 15289, 16818,
         18500, 20350, 22385, 24623, 27086, 29794, 32767)
INDEX_CHANGE = (-1, -1, -1, -1, 2, 4, 6, 8)
RATES = {"16k": 16000, "8k": 8000}


def _delta(code: int, step: int) -> int:
    """The prediction change a 4-bit code means at a step size (sign in bit 3)."""
    delta = step >> 3
    if code & 4:
        delta += step
    if code & 2:
        delta += step >> 1
    if code & 1:
        delta += step >> 2
    return -delta if code & 8 else delta


def _advance(predicted: int, index: int, code: int) -> tuple[int, int]:
    predicted = max(-32768, min(32767, predicted + _delta(code, STEPS[index])))
    return predicted, max(0, min(len(STEPS) - 1, index + INDEX_CHANGE[code & 7]))


class ImaAdpcm(Adapter):
    input_rate = 16000

    def load(self) -> dict[str, Any]:
        self.input_rate = RATES[self.spec.config]
        return {"parameters": 0, "encoder_model_bytes": 0, "decoder_model_bytes": 0, "bits_per_sample": 4}

    def encode(self, audio: np.ndarray) -> Encoded:
        codes = np.empty(len(audio), dtype=np.uint64)
        predicted, index = 0, 0
        for i, sample in enumerate(to_int16(audio).tolist()):
            step, diff, code = STEPS[index], sample - predicted, 0
            if diff < 0:
                code, diff = 8, -diff
            for bit, share in ((4, step), (2, step >> 1), (1, step >> 2)):
                if diff >= share:
                    code |= bit
                    diff -= share
            codes[i] = code
            predicted, index = _advance(predicted, index, code)
        return Encoded(streams=(CodeStream("codes", 4, (len(codes),), codes),), side_info={},
                       facts={"samples": len(codes)})

    def decode(self, payload: Payload) -> Decoded:
        stream = payload.code_stream("codes")
        if stream.bit_width != 4:
            raise ValueError(f"codes are {stream.bit_width} bits, IMA ADPCM sends 4")
        samples = np.empty(len(stream.values), dtype=np.int16)
        predicted, index = 0, 0
        for i, code in enumerate(stream.values.tolist()):
            predicted, index = _advance(predicted, index, int(code))
            samples[i] = predicted
        return Decoded(from_int16(samples), self.input_rate)

    def length_tolerance(self, arena_rate: int) -> int:
        # At 8 kHz the worker's resampling from and back to 16 kHz may round the length by a sample.
        return 0 if self.input_rate == arena_rate else math.ceil(arena_rate / self.input_rate)


ADAPTER = ImaAdpcm
