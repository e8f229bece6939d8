"""The draws of the condition models: SHA-256 in counter mode, as the channel models draw (docs/channel.md).

A stream is named by a key (the model, its seed and what is drawn; the utterance where the draw is per
utterance). Block i of the stream is SHA-256(SHA-256("codecarena condition draws v1" NUL key) || i as 8
bytes big-endian); its 32 bytes are four big-endian 64-bit words, or sixteen big-endian 16-bit ones. No
floating point and no library generator decide a draw, so every noise sample, talker, offset and room
re-derives bit for bit on any machine. The key never holds the SNR, RT60 or level, so the configurations
of one curve meet the same noise, talkers and room: only the swept value differs (common random numbers).
"""

from __future__ import annotations

import hashlib

import numpy as np

DRAWS_VERSION = 1
_UNIT = 2.0 ** -53


class Draws:
    """The stream of draws named by `key`."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._key = hashlib.sha256(f"codecarena condition draws v{DRAWS_VERSION}\0{key}".encode()).digest()

    def block(self, index: int) -> bytes:
        return hashlib.sha256(self._key + index.to_bytes(8, "big")).digest()

    def word(self, index: int) -> int:
        """The index-th 64-bit word."""
        block, word = divmod(index, 4)
        return int.from_bytes(self.block(block)[8 * word:8 * word + 8], "big")

    def below(self, index: int, count: int) -> int:
        """The index-th word mapped to 0 .. count-1 as floor(word * count / 2^64): exact integers."""
        return (self.word(index) * count) >> 64

    def uniform(self, index: int) -> float:
        """The index-th word's top 53 bits as a float in [0, 1): exactly representable."""
        return (self.word(index) >> 11) * _UNIT

    def uint16(self, count: int) -> np.ndarray:
        """The first `count` 16-bit words of the stream, as int64."""
        blocks = -(-count // 16)
        data = b"".join(self.block(i) for i in range(blocks))
        return np.frombuffer(data, dtype=">u2")[:count].astype(np.int64)
