"""The arena's sample format, 16-bit PCM: the one quantiser to it (round to nearest, saturating) and its
inverse. Decoded audio is stored with it, references are copied with it, the audit re-derives with it,
and adapters use it (`codecarena.plugin.to_int16`, `from_int16`)."""

from __future__ import annotations

import numpy as np


def to_int16(audio: np.ndarray) -> np.ndarray:
    """Round-to-nearest PCM16 with saturation: the one quantiser used everywhere."""
    return np.clip(np.round(np.asarray(audio, dtype=np.float64) * 32768.0), -32768, 32767).astype(np.int16)


def from_int16(samples: np.ndarray) -> np.ndarray:
    return np.asarray(samples, dtype=np.int16).astype(np.float64) / 32768.0
