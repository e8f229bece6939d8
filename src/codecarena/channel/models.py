"""The channel models' draws: which packets or frames are lost and which bits are flipped.

Every draw is a 64-bit integer from SHA-256 in counter mode, keyed by the channel's model and seed and
the utterance, and an event happens when its draw is below floor(P * 2^64) for the exact decimal
probability P: no floating point and no library's generator, so a trace re-derives bit for bit on any
machine and with any numpy. Unit i of an utterance always gets the same draw whatever the codec, so
codecs with the same packet duration meet the same losses (Opus with and without FEC are paired), and a
higher rate loses a superset of what a lower rate loses.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction

from codecarena.channel.spec import Channel

_SCALE = 1 << 64
DRAWS_VERSION = 1


class Draws:
    """The i-th 64-bit draw of a stream named by `key`: SHA-256(key, i // 4) cut into four big-endian words."""

    def __init__(self, key: str) -> None:
        self._key = hashlib.sha256(f"codecarena channel draws v{DRAWS_VERSION}\0{key}".encode()).digest()
        self._block = -1
        self._words: tuple[int, ...] = ()

    def __getitem__(self, index: int) -> int:
        block, word = divmod(index, 4)
        if block != self._block:
            digest = hashlib.sha256(self._key + block.to_bytes(8, "big")).digest()
            self._words = tuple(int.from_bytes(digest[i:i + 8], "big") for i in range(0, 32, 8))
            self._block = block
        return self._words[word]


def threshold(probability: Fraction) -> int:
    """Draws below this happen with exactly floor(P * 2^64) / 2^64 probability."""
    return int(probability * _SCALE)


def _draws(channel: Channel, utterance: str, what: str) -> Draws:
    return Draws(f"{channel.draw_key}\0{utterance}\0{what}")


def lost_units(channel: Channel, units: int, utterance: str) -> list[int]:
    """Indices of the packets (or frames) of an utterance that `channel` loses; none for a bit-error channel."""
    if channel.model == "ber":
        return []
    draws = _draws(channel, utterance, "loss")
    if channel.model == "loss":
        below = threshold(Fraction(channel.rate))
        return [i for i in range(units) if draws[i] < below]
    # Gilbert: lost in the bad state, received in the good one. The first state is drawn from the
    # chain's stationary distribution (bad with probability R), then each unit's draw decides the
    # transition out of its state.
    p, r = channel.transitions()
    to_lost, to_received, start_lost = threshold(p), threshold(r), threshold(Fraction(channel.rate))
    lost, state_lost = [], draws[0] < start_lost
    for i in range(units):
        if state_lost:
            lost.append(i)
        draw = draws[i + 1]
        state_lost = not draw < to_received if state_lost else draw < to_lost
    return lost


def flipped_bits(channel: Channel, unit_bits: list[int], utterance: str) -> list[list[int]]:
    """[unit, bit] of every bit a bit-error channel flips, units in order, bits from the most significant
    (of a packet's first byte, or of a code); none for a loss channel."""
    if channel.model != "ber":
        return []
    draws = _draws(channel, utterance, "bits")
    below = threshold(Fraction(channel.rate))
    flips, offset = [], 0
    for unit, bits in enumerate(unit_bits):
        flips.extend([unit, bit] for bit in range(bits) if draws[offset + bit] < below)
        offset += bits
    return flips
