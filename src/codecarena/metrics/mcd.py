"""Mel-cepstral distortion (MCD, dB) between the reference and the decoded audio.

The formula is Kubichek's (1993) in the form of Kominek, Schultz and Black (2008), which TTS and codec
papers quote:

    MCD = (10 / ln 10) * sqrt(2 * sum_{d=1..24} (c_d - c'_d)^2), averaged over frames,

where c and c' are the mel-cepstra of one frame of reference and decoded audio and c_0 (the frame's
energy) is left out, so a level change alone does not count. The cepstra come from SPTK through
pysptk 1.0.1: `sp2mc` of the frame's power spectrum (512-point Hann window, 5 ms hop) with order 24 and
the all-pass constant `mcepalpha(rate)` (0.41 at 16 kHz). The pair is the delay-aligned overlap that
STOI and SI-SDR use, so frames are compared one to one: no DTW, which would forgive a codec's timing
errors. A bin's power is floored at 16-bit quantisation noise. Only speech frames count: those whose reference energy is within `SPEECH_RANGE_DB` of the
reference's loudest frame; in near-silence the log spectrum of a few quantisation steps would decide
the value. MCD values from other tools differ with their cepstra, order and frame selection (the
details record ours); compare MCD only within codecarena.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from codecarena.metrics.records import Records, result
from codecarena.plural import counted

OUTPUTS = ("mcd",)
ORDER = 24
N_FFT = 512
HOP_S = 0.005
SPEECH_RANGE_DB = 40.0
MIN_SPEECH_FRAMES = 10
_DB = 10.0 / math.log(10.0) * math.sqrt(2.0)
# The power of 16-bit quantisation noise in one bin of the Hann-windowed frame: a band a decoder leaves
# empty counts as what a 16-bit file of it would hold, whether the decoder wrote exact zeros or not.
_POWER_FLOOR = float(np.sum(np.hanning(N_FFT) ** 2)) * 2.0 ** -30 / 12.0


class MelCepstralDistortion:
    def __init__(self) -> None:
        with warnings.catch_warnings():
            # pysptk imports the deprecated pkg_resources; harmless noise.
            warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
            import pysptk

        self._sp2mc = pysptk.sp2mc
        self._alpha = pysptk.util.mcepalpha

    def _power(self, audio: np.ndarray, hop: int) -> np.ndarray:
        frames = np.lib.stride_tricks.sliding_window_view(audio, N_FFT)[::hop]
        return np.abs(np.fft.rfft(frames * np.hanning(N_FFT), axis=-1)) ** 2 + _POWER_FLOOR

    def scores(self, reference: np.ndarray, decoded: np.ndarray, sample_rate: int, **alignment: object) -> Records:
        hop = round(HOP_S * sample_rate)
        if len(reference) < N_FFT:
            raise ValueError(f"the aligned overlap has {counted(len(reference), 'sample')}, fewer than one "
                             f"{N_FFT}-sample frame")
        ref_power = self._power(np.asarray(reference, dtype=np.float64), hop)
        dec_power = self._power(np.asarray(decoded, dtype=np.float64), hop)
        energy_db = 10.0 * np.log10(ref_power.sum(axis=-1))
        speech = energy_db >= energy_db.max() - SPEECH_RANGE_DB
        if int(speech.sum()) < MIN_SPEECH_FRAMES:
            raise ValueError(f"only {counted(int(speech.sum()), 'speech frame')} in the reference, fewer than "
                         f"{MIN_SPEECH_FRAMES}")
        alpha = float(self._alpha(sample_rate))
        ref_mc = self._sp2mc(ref_power[speech], ORDER, alpha)[:, 1:]
        dec_mc = self._sp2mc(dec_power[speech], ORDER, alpha)[:, 1:]
        per_frame = _DB * np.sqrt(np.sum((ref_mc - dec_mc) ** 2, axis=-1))
        return {"mcd": result(float(np.mean(per_frame)), order=ORDER, alpha=round(alpha, 4), n_fft=N_FFT, hop=hop,
                              speech_frames=int(speech.sum()), frames=len(speech), **alignment)}
