"""16-bit PCM at 16 kHz: the identity codec whose numbers prove the accounting and metrics."""

from __future__ import annotations

from typing import Any

import numpy as np

from codecarena.plugin import Adapter, CodeStream, Decoded, Encoded, Payload, from_int16, to_int16


class PcmAdapter(Adapter):
    input_rate = 16000

    def load(self) -> dict[str, Any]:
        return {"parameters": 0, "parameter_bytes": 0}

    def encode(self, audio: np.ndarray) -> Encoded:
        # Two's-complement bit patterns as unsigned codes: the payload stores unsigned integers.
        codes = to_int16(audio).view(np.uint16).astype(np.uint64)
        return Encoded(streams=(CodeStream("pcm", 16, (len(codes),), codes),), side_info={})

    def decode(self, payload: Payload) -> Decoded:
        stream = payload.code_stream("pcm")
        samples = stream.values.astype(np.uint16).view(np.int16)
        return Decoded(from_int16(samples), self.input_rate)


ADAPTER = PcmAdapter
