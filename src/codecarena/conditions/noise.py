"""The noises of `noise=...` conditions, as float64 signals of a given length (docs/conditions.md).

- white: each sample the sum of four 16-bit draws minus their mean (an Irwin-Hall sum: integer,
  approximately Gaussian, flat spectrum);
- pink: white through the three-pole, three-zero filter of J. O. Smith ("Spectral Audio Signal
  Processing", pink noise), within 0.3 dB of -3 dB per octave above 10 Hz at 16 kHz;
- brown: white through a leaky integrator (pole 0.999, corner about 2.5 Hz), -6 dB per octave;
- babble: other speakers' utterances of the evaluation set, each brought to the same active level and
  summed (`babble`); which speakers, which utterance of each and where it starts are drawn;
- a --noise-dir set: one of its recordings (drawn) from a drawn offset.

The filtered noises start after a 16384-sample warm-up, so no filter's start-up shows. The draws
(conditions/draws.py) are keyed by the noise, the seed and the utterance, never by the SNR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

from codecarena.conditions.draws import Draws
from codecarena.conditions.p56 import active_level

WARM_UP = 16384
_PINK_B = (0.049922035, -0.095993537, 0.050612699, -0.004408786)
_PINK_A = (1.0, -2.494956002, 2.017265875, -0.522189400)
_BROWN_POLE = 0.999
# Each talker of a babble is brought to this active level before they are summed.
TALKER_LEVEL_DBOV = -26.0


def noise_key(name: str, seed: int, utterance: str) -> str:
    return f"noise={name},seed={seed}\0{utterance}"


def white(draws: Draws, length: int) -> np.ndarray:
    """Irwin-Hall white noise: sums of four 16-bit draws, centred (integers as float64)."""
    words = draws.uint16(4 * length).reshape(length, 4)
    return (words.sum(axis=1) - 2 * 65535).astype(np.float64)


def generated(name: str, seed: int, utterance: str, length: int) -> np.ndarray:
    """A white, pink or brown noise of `length` samples for an utterance (unscaled)."""
    draws = Draws(noise_key(name, seed, utterance) + "\0samples")
    if name == "white":
        return white(draws, length)
    source = white(draws, WARM_UP + length)
    if name == "pink":
        return lfilter(_PINK_B, _PINK_A, source)[WARM_UP:]
    return lfilter([1.0], [1.0, -_BROWN_POLE], source)[WARM_UP:]


@dataclass(frozen=True)
class Source:
    """An utterance a babble may take a talker from."""
    utterance: str
    speaker: str


@dataclass(frozen=True)
class Talker:
    utterance: str
    speaker: str
    offset: int  # the sample of the utterance the babble starts with (it is read circularly)


class BabbleError(ValueError):
    """Too few other speakers for a babble (the message names the utterance and what there is)."""


def talkers(utterance: str, speaker: str, sources: Sequence[Source], count: int, seed: int,
            lengths: dict[str, int] | None = None) -> list[Talker]:
    """The babble's talkers for one utterance: `count` distinct speakers other than its own (and other
    than unknown ones), drawn without replacement from the sorted speakers, one drawn utterance of each,
    and a drawn offset into it (0 when `lengths` is not given). BabbleError when there are too few."""
    if not speaker:
        raise BabbleError(f"{utterance}: its speaker is unknown, so no babble can be sure to be of other speakers "
                          "(a manifest.json can name each utterance's speaker)")
    by_speaker: dict[str, list[str]] = {}
    for source in sources:
        if source.speaker and source.speaker != speaker:
            by_speaker.setdefault(source.speaker, []).append(source.utterance)
    others = sorted(by_speaker)
    if len(others) < count:
        raise BabbleError(f"{utterance}: a babble of {count} talkers needs {count} other speakers, the set has "
                          f"{len(others)} ({', '.join(others) or 'none'}); ask for fewer with talkers=N")
    draws = Draws(noise_key("babble", seed, utterance) + "\0talkers")
    chosen: list[Talker] = []
    for k in range(count):  # a partial Fisher-Yates shuffle on exact integers
        pick = k + draws.below(3 * k, len(others) - k)
        others[k], others[pick] = others[pick], others[k]
        utterances = sorted(by_speaker[others[k]])
        source = utterances[draws.below(3 * k + 1, len(utterances))]
        offset = draws.below(3 * k + 2, lengths[source]) if lengths is not None else 0
        chosen.append(Talker(source, others[k], offset))
    return chosen


def circular(samples: np.ndarray, offset: int, length: int) -> np.ndarray:
    """`length` samples of `samples` from `offset`, starting again at its beginning when it ends."""
    reps = -(-(offset + length) // samples.size)
    return np.tile(samples, reps)[offset:offset + length]


def babble(voices: Sequence[np.ndarray], offsets: Sequence[int], length: int,
           sample_rate: int) -> tuple[np.ndarray, list[float]]:
    """The talkers summed, each from its offset and at TALKER_LEVEL_DBOV active level; the mix and each
    talker's gain, in order."""
    mix = np.zeros(length, dtype=np.float64)
    gains = []
    for voice, offset in zip(voices, offsets):
        part = circular(voice, offset, length)
        gain = 10 ** ((TALKER_LEVEL_DBOV - active_level(part, sample_rate).level_db) / 20)
        mix += gain * part
        gains.append(gain)
    return mix, gains


def pick_file(names: Sequence[str], lengths: Sequence[int], seed: int, set_name: str, utterance: str,
              length: int) -> tuple[int, int]:
    """(index, offset) of the recording of a --noise-dir set an utterance gets, and where in it."""
    draws = Draws(noise_key(set_name, seed, utterance) + "\0file")
    index = draws.below(0, len(names))
    return index, draws.below(1, lengths[index] - length + 1)
