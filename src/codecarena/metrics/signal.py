"""Intrusive signal metrics between a reference and a decoded signal.

Both signals are float64 mono in [-1, 1] at ``ARENA_RATE`` (16 kHz) and of equal length: the
pipeline restores the exact length but does NOT compensate the codec's delay. Metrics that have no
delay search of their own (STOI, ESTOI, SI-SDR, LSD, mel distance) are therefore computed on the
overlap of the two signals after one bounded cross-correlation alignment (``find_delay``); a
40 ms shift alone takes STOI of an otherwise perfect copy from 1.0 to about 0.38, and DAC's
8-sample early output costs 13-19 dB of unaligned SI-SDR. PESQ searches for delay itself and is
computed on the original, unaligned pair.

Failure policy: a metric that cannot be computed raises ``ValueError`` with the reason (PESQ on a
silent signal or on audio over ``PESQ_MAX_AUDIO_S``, STOI on too little speech, ...);
``score_signal`` records it as value None with "<ExceptionType>: <message>". No metric ever returns
a substitute number (pystoi's 1e-5 for too-short input is turned into an error).

Long because each of the seven signal metrics keeps its definition, constants and failure policy
together, and `SignalPair` aligns a pair once for all of them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

import numpy as np

from codecarena.alignment import aligned, as_signal, centred, find_delay
from codecarena.arena import ARENA_RATE
from codecarena.metrics.max_audio import PESQ_MAX_AUDIO_S
from codecarena.plural import counted

MAX_DELAY_S = 0.25  # alignment search bound, +-250 ms
# A delay found this close to the bound makes an aligned value suspect: the correlation was still
# rising toward the bound (a true delay of 260 ms is found at 248.75 ms, not at the bound itself).
BOUND_MARGIN_S = 0.005

# The PESQ validity check (docs/metrics.md): a file of at least PESQ_SEGMENT_MIN_S is also scored in
# two segments cut at a pause; a whole-file score more than PESQ_SUSPECT_MARGIN MOS below every
# segment's is suspect. Reported (issue 19): Lyra at 6 and 9.2 kbps on a 13 s Mandarin utterance
# scored about 1.1 whole and 2.4-2.7 per half (PESQ's alignment failed on the whole file). Measured
# here on 13.7 and 15.3 s concatenations of smoke-set clips through Lyra 3.2/6/9.2 kbps and Opus 6k:
# whole-file and half scores within 0.12 of each other; on the default smoke run no whole-file score
# is more than 0.045 below its lower segment.
PESQ_METRICS = ("pesq_wb", "pesq_nb")
PESQ_SEGMENT_MIN_S = 4.0
PESQ_SUSPECT_MARGIN = 0.5

# SI-SDR: eps = SI_SDR_EPS_REL * |d|^2 (d the zero-mean decoded signal) is added to both the target
# and the error energy. Since |d|^2 = |t|^2 + |e|^2, the result stays exactly scale-invariant and
# is bounded by +-10*log10(1 + 1/SI_SDR_EPS_REL) = +-120.0 dB; identical signals give 120.0 dB.
SI_SDR_EPS_REL = 1e-12
SI_SDR_CEILING_DB = 10.0 * math.log10(1.0 + 1.0 / SI_SDR_EPS_REL)

# Log-spectral distance settings (32 ms periodic Hann window, 8 ms hop at 16 kHz).
LSD_N_FFT = 512
LSD_HOP = 128
LSD_EPS = 1e-10

# Mel distance settings.
MEL_N_FFT = 1024
MEL_HOP = 256
MEL_N_MELS = 80
MEL_FMAX = 8000.0
MEL_FLOOR = 1e-5

# pystoi needs 30 non-silent frames (256 samples, hop 128 at 10 kHz: ~0.4 s of speech).
_PYSTOI_SHORT = "Not enough STFT frames"
_ESTOI_SEED = 0


# --------------------------------------------------------------------------------------- inputs


def _check_pair(reference: Any, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
    r = as_signal(reference, "reference")
    d = as_signal(decoded, "decoded")
    if r.shape != d.shape:
        raise ValueError(f"reference and decoded differ in length: {r.size} vs {d.size} samples")
    return r, d


def _require_nonzero(x: np.ndarray, name: str, metric: str) -> None:
    if not np.any(x):
        raise ValueError(f"{metric} is undefined for silent input: the {name} signal is all zeros")


# --------------------------------------------------------------------------------------- PESQ


def _require_pesq_length(x: np.ndarray) -> None:
    seconds = x.size / ARENA_RATE
    if seconds > PESQ_MAX_AUDIO_S:
        raise ValueError(f"PESQ is refused above {PESQ_MAX_AUDIO_S:g} s (this audio is {seconds:.2f} s): pesq 0.0.4 "
                         f"overflows its 50-entry speech-segment tables on longer audio (undefined scores or a crash)")


def _pesq(fs: int, ref: np.ndarray, deg: np.ndarray, mode: str) -> float:
    import pesq as pesq_lib

    try:
        value = pesq_lib.pesq(fs, ref, deg, mode)
    except pesq_lib.PesqError as exc:
        msg = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"pesq ({mode}) failed: {type(exc).__name__}: {msg}") from exc
    except ValueError as exc:  # e.g. "cannot convert float NaN to integer" from inside the C code
        raise ValueError(f"pesq ({mode}) failed: {exc}") from exc
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"pesq ({mode}) returned a non-finite score {value}")
    return value


def pesq_wb(reference: np.ndarray, decoded: np.ndarray) -> float:
    """ITU-T P.862.2 wide-band PESQ (MOS-LQO) at 16 kHz on the original, unaligned signals (PESQ has
    its own delay search). ValueError on silent input, on audio over PESQ_MAX_AUDIO_S (pesq is not
    called) or any error pesq reports (e.g. BufferTooShortError under 0.25 s, NoUtterancesError)."""
    r, d = _check_pair(reference, decoded)
    _require_pesq_length(r)
    _require_nonzero(r, "reference", "PESQ")
    _require_nonzero(d, "decoded", "PESQ")
    return _pesq(ARENA_RATE, r, d, "wb")


def pesq_nb(reference: np.ndarray, decoded: np.ndarray) -> float:
    """ITU-T P.862 narrow-band PESQ: both signals resampled 16 -> 8 kHz with
    soxr.resample(x, 16000, 8000, quality="HQ"), then pesq(8000, ..., "nb"), unaligned. The same
    length limit as pesq_wb."""
    import soxr

    r, d = _check_pair(reference, decoded)
    _require_pesq_length(r)
    _require_nonzero(r, "reference", "PESQ")
    _require_nonzero(d, "decoded", "PESQ")
    r8 = soxr.resample(r, ARENA_RATE, 8000, quality="HQ")
    d8 = soxr.resample(d, ARENA_RATE, 8000, quality="HQ")
    return _pesq(8000, r8, d8, "nb")


# --------------------------------------------------------------------------------------- STOI


def stoi(reference: np.ndarray, decoded: np.ndarray, extended: bool = False) -> float:
    """STOI (or ESTOI with extended=True) from pystoi on the given signals as they are: it does no
    alignment, so pass the aligned overlap. ValueError when pystoi finds fewer than 30 non-silent
    frames (it would return 1e-5) or the reference is all zeros. Repeatable: numpy's global RNG,
    which ESTOI draws eps-sized noise from, is seeded for the call and then restored."""
    from pystoi import stoi as pystoi_stoi

    r, d = _check_pair(reference, decoded)
    _require_nonzero(r, "reference", "ESTOI" if extended else "STOI")
    # pystoi's ESTOI adds eps-sized noise from numpy's global RNG (row_col_normalize), which makes
    # the last digits vary from call to call; a fixed seed makes it repeatable, and the caller's
    # global RNG state is restored afterwards (not thread-safe, like pystoi itself).
    rng_state = np.random.get_state()
    try:
        np.random.seed(_ESTOI_SEED)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = float(pystoi_stoi(r, d, ARENA_RATE, extended=extended))
    finally:
        np.random.set_state(rng_state)
    for w in caught:
        if _PYSTOI_SHORT in str(w.message):
            raise ValueError("pystoi found fewer than 30 non-silent STFT frames (about 0.4 s of speech "
                             "within 40 dB of the loudest frame); it would return 1e-5")
    if not math.isfinite(value):
        raise ValueError(f"pystoi returned a non-finite score {value}")
    return value


# ------------------------------------------------------------------------------------- SI-SDR


def si_sdr(reference: np.ndarray, decoded: np.ndarray) -> float:
    """Scale-invariant SDR in dB (Le Roux et al., "SDR - half-baked or well done?", 2019).

    r and d are made zero-mean; alpha = <d, r> / <r, r>; target t = alpha r; error e = d - t;
    SI-SDR = 10 log10((|t|^2 + eps) / (|e|^2 + eps)) with eps = 1e-12 |d|^2.

    The eps rule: since |d|^2 = |t|^2 + |e|^2, scaling either signal leaves the value unchanged and
    it is bounded by +-10 log10(1 + 1e12) = +-120.0 dB, so identical (or exactly scaled) signals give
    a finite 120.0 dB instead of +inf, whatever their level; the term moves a 60 dB result by about
    4e-6 dB. ValueError when the reference or the decoded signal is constant (all zeros / DC only).
    Pass the aligned overlap: SI-SDR does no alignment.
    """
    r, d = _check_pair(reference, decoded)
    r, rr = centred(r, "reference", "SI-SDR is undefined")
    d, dd = centred(d, "decoded", "SI-SDR is undefined")
    alpha = float(np.dot(d, r)) / rr
    target = alpha * r
    error = d - target
    eps = SI_SDR_EPS_REL * dd
    return float(10.0 * math.log10((float(np.dot(target, target)) + eps) / (float(np.dot(error, error)) + eps)))


# ---------------------------------------------------------------------------------------- LSD


def _power_spectrogram(x: np.ndarray) -> np.ndarray:
    import scipy.signal  # here, not at the top: every command that lists metrics imports this module

    window = scipy.signal.get_window("hann", LSD_N_FFT)  # periodic Hann
    frames = np.lib.stride_tricks.sliding_window_view(x, LSD_N_FFT)[::LSD_HOP]
    return np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2


def log_spectral_distance(reference: np.ndarray, decoded: np.ndarray) -> float:
    """Log-spectral distance in dB.

    STFT with a 512-sample periodic Hann window and a 128-sample hop (32 ms / 8 ms at 16 kHz), frames
    lying wholly inside the signal (no padding; the tail shorter than a hop is not covered), no
    window normalization; power spectra P = |X|^2 on the 257 bins 0..8 kHz. Per frame
    sqrt(mean_f (10 log10(P_r + 1e-10) - 10 log10(P_d + 1e-10))^2), then the mean over frames
    (frames where both signals are silent count as 0 dB). Symmetric; 0 for identical signals; a
    decoded signal at twice the level gives 20 log10(2) = 6.02 dB wherever P >> 1e-10. Pass the
    aligned overlap. ValueError when the signals are shorter than one window.
    """
    r, d = _check_pair(reference, decoded)
    if r.size < LSD_N_FFT:
        raise ValueError(f"LSD needs at least {LSD_N_FFT} samples, got {r.size}")
    lr = 10.0 * np.log10(_power_spectrogram(r) + LSD_EPS)
    ld = 10.0 * np.log10(_power_spectrogram(d) + LSD_EPS)
    return float(np.mean(np.sqrt(np.mean((lr - ld) ** 2, axis=-1))))


# ------------------------------------------------------------------------------- mel distance


def _log_mel(x: np.ndarray) -> np.ndarray:
    import librosa

    mel = librosa.feature.melspectrogram(y=x, sr=ARENA_RATE, n_fft=MEL_N_FFT, hop_length=MEL_HOP,
                                         n_mels=MEL_N_MELS, fmax=MEL_FMAX, power=2.0)
    return np.log10(np.maximum(mel, MEL_FLOOR))


def mel_distance(reference: np.ndarray, decoded: np.ndarray) -> float:
    """Mean absolute difference of log10 mel spectrograms.

    librosa.feature.melspectrogram with its defaults otherwise (periodic Hann, center=True with
    zero padding, Slaney mel scale and norm, fmin 0): n_fft 1024, hop 256, 80 mels, fmax 8000,
    power 2; then log10(max(M, 1e-5)); the mean of |difference| over all mels and frames (in log10
    units, i.e. bels: 0.1 = 1 dB). 0 for identical signals; twice the level gives log10(4) = 0.602
    wherever M > 1e-5. Pass the aligned overlap. ValueError when shorter than n_fft.
    """
    r, d = _check_pair(reference, decoded)
    if r.size < MEL_N_FFT:
        raise ValueError(f"mel distance needs at least {MEL_N_FFT} samples, got {r.size}")
    return float(np.mean(np.abs(_log_mel(r) - _log_mel(d))))


# --------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class _Method:
    compute: Callable[[np.ndarray, np.ndarray], float]
    # The details of a metric computed on the unaligned pair (PESQ searches the delay itself);
    # None: computed on the aligned overlap, with the alignment as its details.
    unaligned: dict[str, Any] | None = None


_METHODS = {
    "pesq_wb": _Method(pesq_wb, {"aligned": False, "sample_rate": ARENA_RATE, "mode": "wb"}),
    "pesq_nb": _Method(pesq_nb, {"aligned": False, "sample_rate": 8000, "mode": "nb",
                                 "resampler": "soxr HQ 16000 -> 8000"}),
    "stoi": _Method(stoi),
    "estoi": _Method(partial(stoi, extended=True)),
    "si_sdr": _Method(si_sdr),
    "lsd": _Method(log_spectral_distance),
    "mel_distance": _Method(mel_distance),
}
METRICS = tuple(_METHODS)


@dataclass(frozen=True)
class SignalScores:
    """The signal metrics of one pair as plain values: a float, or None with the reason in `errors`."""

    pesq_wb: float | None = None
    pesq_nb: float | None = None
    stoi: float | None = None
    estoi: float | None = None
    si_sdr: float | None = None
    lsd: float | None = None
    mel_distance: float | None = None
    delay_samples: int | None = None
    correlation: float | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_results(cls, results: dict[str, dict[str, Any]]) -> "SignalScores":
        """Flatten what score_signal returns (metrics it did not compute stay None, no error)."""
        values = {name: rec["value"] for name, rec in results.items() if name in METRICS}
        errors = {name: rec["error"] for name, rec in results.items() if rec.get("error")}
        delay = correlation = None
        for name in METRICS:
            details = results.get(name, {}).get("details", {})
            if "delay_samples" in details:
                delay, correlation = details["delay_samples"], details["correlation"]
                break
        return cls(**values, delay_samples=delay, correlation=correlation, errors=errors)


def _record(value: float | None = None, error: str | None = None, suspect: bool = False,
            **details: Any) -> dict[str, Any]:
    """A failed record when `error` is set without a value; a suspect one when `suspect`."""
    status = "suspect" if suspect else ("ok" if error is None else "failed")
    return {"value": value, "status": status, "error": error, "details": details}


def pesq_split(reference: np.ndarray) -> int:
    """Where the PESQ validity check cuts a file in two: the middle of the quietest 20 ms frame of
    the reference's middle third, so that the cut falls in a pause rather than through a word."""
    frame = ARENA_RATE // 50
    lo, hi = reference.size // 3, 2 * reference.size // 3
    starts = np.arange(lo, max(lo + 1, hi - frame), frame)
    energies = [float(np.sum(reference[s:s + frame] ** 2)) for s in starts]
    return int(starts[int(np.argmin(energies))]) + frame // 2


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"


class SignalPair:
    """One (reference, decoded) pair, scored one signal metric at a time: checked once, and aligned
    once, when the first aligned metric is asked for. Lets a caller announce each metric before it
    is computed (metrics/guarded.py) and still share the alignment."""

    def __init__(self, reference: np.ndarray, decoded: np.ndarray) -> None:
        self.reference, self.decoded = reference, decoded

    @cached_property
    def _checked(self) -> tuple[np.ndarray, np.ndarray] | str:
        """The validated pair, or the reason it is invalid."""
        try:
            return _check_pair(self.reference, self.decoded)
        except Exception as exc:
            return _reason(exc)

    @cached_property
    def _alignment(self) -> tuple[tuple[np.ndarray, np.ndarray] | None, dict[str, Any], str | None]:
        """(aligned overlap or None, alignment details, reason it failed or None)."""
        assert not isinstance(self._checked, str)
        r, d = self._checked
        max_delay = int(MAX_DELAY_S * ARENA_RATE)
        details: dict[str, Any] = {"max_delay_samples": max_delay}
        try:
            alignment = find_delay(r, d, max_delay)
            pair = aligned(r, d, alignment)
        except Exception as exc:
            return None, details, _reason(exc)
        details.update(delay_samples=alignment.delay_samples, correlation=alignment.correlation,
                       overlap_samples=alignment.overlap_samples,
                       at_search_bound=abs(alignment.delay_samples) == max_delay,
                       near_search_bound=abs(alignment.delay_samples) >= max_delay - int(BOUND_MARGIN_S * ARENA_RATE))
        return pair, details, None

    def aligned(self) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """The delay-aligned overlap every aligned metric uses, with the alignment's details;
        ValueError with the reason when the pair is invalid or cannot be aligned."""
        if isinstance(self._checked, str):
            raise ValueError(self._checked)
        pair, details, error = self._alignment
        if error is not None or pair is None:
            raise ValueError(error)
        return pair[0], pair[1], dict(details)

    def score(self, name: str) -> dict[str, Any]:
        """The record of one signal metric (see score_signal)."""
        if name not in METRICS:
            raise ValueError(f"unknown signal metric {name} (known: {', '.join(METRICS)})")
        if isinstance(self._checked, str):
            return _record(error=self._checked)
        method = _METHODS[name]
        pair: tuple[np.ndarray, np.ndarray] | None = self._checked
        if method.unaligned is not None:
            details = dict(method.unaligned)
        else:
            pair, align_details, align_error = self._alignment
            details = dict(align_details)
            if align_error is not None:
                return _record(error=align_error, **details)
        assert pair is not None
        try:
            value = float(method.compute(*pair))
            if not math.isfinite(value):
                raise ValueError(f"non-finite value {value}")
        except Exception as exc:  # one metric's failure is recorded, never fatal
            return _record(error=_reason(exc), **details)
        if name in PESQ_METRICS and pair[0].size >= PESQ_SEGMENT_MIN_S * ARENA_RATE:
            details["segments"] = segments = _segment_scores(method, *pair)
            scores = [s["value"] for s in segments if "value" in s]
            if len(scores) == len(segments) and value < min(scores) - PESQ_SUSPECT_MARGIN:
                shown = ", ".join(f"{v:.2f}" for v in scores)
                return _record(value, f"whole-file {name} {value:.2f} is more than {PESQ_SUSPECT_MARGIN:g} below "
                                      f"every segment of the same file ({shown}): PESQ's alignment of the whole "
                                      "file is not to be trusted", suspect=True, **details)
        reason = near_bound_reason(details)
        if reason is not None:
            return _record(value, reason, suspect=True, **details)
        return _record(value, **details)


def near_bound_reason(alignment: dict[str, Any]) -> str | None:
    """Why a value computed on this alignment is suspect, or None when the delay is well inside the search."""
    if not alignment.get("near_search_bound"):
        return None
    return (f"the delay found ({counted(alignment['delay_samples'], 'sample')}) is within "
            f"{BOUND_MARGIN_S * 1000:g} ms of the search bound (+-{MAX_DELAY_S * 1000:g} ms): the true delay may lie "
            "beyond it, and the alignment this value rests on with it")


def _segment_scores(method: _Method, reference: np.ndarray, decoded: np.ndarray) -> list[dict[str, Any]]:
    """The metric on each of the two segments of the file (split at a pause of the reference)."""
    cut = pesq_split(reference)
    segments: list[dict[str, Any]] = []
    for start, end in ((0, cut), (cut, reference.size)):
        segment: dict[str, Any] = {"start_s": start / ARENA_RATE, "end_s": end / ARENA_RATE}
        try:
            segment["value"] = float(method.compute(reference[start:end], decoded[start:end]))
        except Exception as exc:  # a segment pesq refuses leaves the whole-file value unchallenged
            segment["error"] = _reason(exc)
        segments.append(segment)
    return segments


def score_signal(reference: np.ndarray, decoded: np.ndarray, metrics: set[str]) -> dict[str, dict]:
    """Score one pair with the named metrics ("pesq_wb", "pesq_nb", "stoi", "estoi", "si_sdr",
    "lsd", "mel_distance").

    Returns {name: {"value": float | None, "status": "ok" | "failed", "error": str | None,
    "details": {...}}} in the order of METRICS. The pair is aligned once (find_delay, +-MAX_DELAY_S)
    when any of stoi/estoi/si_sdr/lsd/mel_distance is requested, and those are computed on the
    aligned overlap; their details hold delay_samples, correlation, overlap_samples,
    max_delay_samples and at_search_bound (the best lag is the bound itself: the true delay may lie
    beyond it). PESQ uses the unaligned pair. A metric that raises gets value None and error
    "<ExceptionType>: <one-line message>"; it never stops the others. Invalid input (not 1-D,
    not float, non-finite, unequal lengths) fails every requested metric with that reason, as
    does a failed alignment for the aligned metrics. Unknown names raise ValueError.
    """
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise ValueError(f"unknown signal {'metric' if len(unknown) == 1 else 'metrics'} {', '.join(unknown)} "
                         f"(known: {', '.join(METRICS)})")
    pair = SignalPair(reference, decoded)
    return {name: pair.score(name) for name in METRICS if name in metrics}
