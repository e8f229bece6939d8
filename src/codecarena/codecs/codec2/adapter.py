"""Codec 2 (libcodec2 1.2, bundled in the pycodec2 wheel) at 8 kHz.

pycodec2 encodes and decodes exactly one frame per call (more input is ignored, more output is
garbage), so the adapter loops frame by frame. Its decoder keeps hidden random state: a second
decode in the same process differs, which is why the pipeline decodes in fresh processes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pycodec2

from codecarena.plugin import Adapter, CodeStream, Decoded, Encoded, Payload, from_int16, to_int16
from codecarena.plugin.channel import arena_frames, received

# pycodec2 names 700C by its number.
_MODES: dict[str, int] = {"3200": 3200, "2400": 2400, "1600": 1600, "1400": 1400,
                          "1300": 1300, "1200": 1200, "700C": 700}


class Codec2Adapter(Adapter):
    input_rate = 8000

    def load(self) -> dict[str, Any]:
        probe = pycodec2.Codec2(_MODES[self.spec.config])
        self.samples_per_frame = probe.samples_per_frame()
        self.bits_per_frame = probe.bits_per_frame()
        return {
            "parameters": 0,
            "parameter_bytes": 0,
            "samples_per_frame": self.samples_per_frame,
            "bits_per_frame": self.bits_per_frame,
            "frame_rate_hz": self.input_rate / self.samples_per_frame,
        }

    def _codec(self) -> Any:
        return pycodec2.Codec2(_MODES[self.spec.config])

    def encode(self, audio: np.ndarray) -> Encoded:
        codec = self._codec()
        spf, bits = self.samples_per_frame, self.bits_per_frame
        samples = to_int16(audio)
        frames = math.ceil(len(samples) / spf)
        # The last partial frame is zero-padded; the decode worker trims back to the recorded length.
        padded = np.zeros(frames * spf, dtype=np.int16)
        padded[: len(samples)] = samples
        pad_bits = 8 * math.ceil(bits / 8) - bits
        values = np.empty(frames, dtype=np.uint64)
        for i in range(frames):
            packed = codec.encode(padded[i * spf:(i + 1) * spf])
            values[i] = int.from_bytes(packed, "big") >> pad_bits
        return Encoded(
            streams=(CodeStream("frames", bits, (frames,), values),),
            side_info={},
            facts={"frames": frames, "bits_per_frame": bits},
        )

    def decode(self, payload: Payload) -> Decoded:
        stream = payload.code_stream("frames")
        if stream.bit_width != self.bits_per_frame:
            raise ValueError(f"frames are {stream.bit_width} bits, codec2:{self.spec.config} uses {self.bits_per_frame}")
        codec = self._codec()
        nbytes = math.ceil(self.bits_per_frame / 8)
        pad_bits = 8 * nbytes - self.bits_per_frame
        frames = [(int(v) << pad_bits).to_bytes(nbytes, "big") for v in stream.values]
        got = received(payload, len(frames))
        facts: dict[str, Any] = {}
        if got is None:
            out = [codec.decode(frame) for frame in frames]
        else:  # libcodec2's frame API has no concealment: the arena's policy fills each lost frame
            out, facts = arena_frames(frames, got, codec.decode, self.samples_per_frame)
        samples = np.concatenate(out) if out else np.zeros(0, dtype=np.int16)
        return Decoded(from_int16(samples), self.input_rate, facts)

    def length_tolerance(self, arena_rate: int) -> int:
        return math.ceil(self.samples_per_frame * arena_rate / self.input_rate) + 2


ADAPTER = Codec2Adapter
