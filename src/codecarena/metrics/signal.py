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
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import scipy.signal

from codecarena.metrics.registry import PESQ_MAX_AUDIO_S

ARENA_RATE = 16000
MAX_DELAY_S = 0.25  # alignment search bound, +-250 ms

METRICS = ("pesq_wb", "pesq_nb", "stoi", "estoi", "si_sdr", "lsd", "mel_distance")
ALIGNED_METRICS = frozenset({"stoi", "estoi", "si_sdr", "lsd", "mel_distance"})

# find_delay: lags whose normalized correlation is within this of the maximum count as tied
# (FFT round-off is ~1e-15 on this scale), so ties break by the documented rule, not by noise.
_TIE_TOLERANCE = 1e-10

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


def _as_signal(x: Any, name: str) -> np.ndarray:
    """The array as float64 1-D, or ValueError saying what is wrong with it."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D mono signal, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name} must hold floating-point samples in [-1, 1], got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{name} has {bad} non-finite sample(s) (NaN or inf)")
    return arr


def _check_pair(reference: Any, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
    r = _as_signal(reference, "reference")
    d = _as_signal(decoded, "decoded")
    if r.shape != d.shape:
        raise ValueError(f"reference and decoded differ in length: {r.size} vs {d.size} samples")
    return r, d


def _constant(x: np.ndarray) -> bool:
    """Every sample equal (x - x.mean() may still hold round-off, so energy alone cannot tell)."""
    return bool(np.all(x == x[0]))


def _require_nonzero(x: np.ndarray, name: str, metric: str) -> None:
    if not np.any(x):
        raise ValueError(f"{metric} is undefined for silent input: the {name} signal is all zeros")


# ------------------------------------------------------------------------------------ alignment


@dataclass(frozen=True)
class Alignment:
    delay_samples: int  # positive: the decoded signal lags the reference (decoded[n + d] ~ reference[n])
    correlation: float  # normalized cross-correlation at that lag, in [-1, 1]
    overlap_samples: int


def _overlap(len_r: int, len_d: int, lag: int) -> tuple[int, int, int]:
    """(start in reference, start in decoded, length) of the overlap at `lag`."""
    r0 = max(0, -lag)
    d0 = r0 + lag
    return r0, d0, max(0, min(len_r - r0, len_d - d0))


def find_delay(reference: np.ndarray, decoded: np.ndarray, max_delay: int) -> Alignment:
    """The lag of `decoded` relative to `reference`, searched in [-max_delay, max_delay].

    Both signals have their own mean removed; c[k] = sum_n r[n] d[n + k] is computed for every lag
    with an FFT (scipy.signal.correlate, method="fft") and the lag with the largest signed c[k]
    wins (an inverted decoded signal is not matched). Lags whose c[k], divided by the whole-signal
    energies sqrt(|r|^2 |d|^2), is within 1e-10 of the best are tied; ties go to the smallest |lag|,
    then to the negative one. Lags are also limited to those with a non-empty overlap.

    The reported correlation is c[k] / sqrt(|r_o|^2 |d_o|^2) with r_o, d_o the overlapping parts
    (of the mean-removed signals) at the chosen lag: the cosine similarity of what the aligned
    metrics will see, in [-1, 1]; 0.0 when either overlapping part has zero energy.

    The signals may differ in length. Raises ValueError when either signal is constant (no energy
    after removing its mean: alignment is undefined) or max_delay is negative.
    """
    r = _as_signal(reference, "reference")
    d = _as_signal(decoded, "decoded")
    max_delay = int(max_delay)
    if max_delay < 0:
        raise ValueError(f"max_delay must be >= 0, got {max_delay}")
    r0 = r - r.mean()
    d0 = d - d.mean()
    er = float(np.dot(r0, r0))
    ed = float(np.dot(d0, d0))
    if _constant(r) or er == 0.0:
        raise ValueError("cannot align: the reference signal is constant (all zeros or DC only)")
    if _constant(d) or ed == 0.0:
        raise ValueError("cannot align: the decoded signal is constant (all zeros or DC only)")

    corr = scipy.signal.correlate(d0, r0, mode="full", method="fft")  # corr[k] = sum_n d0[n + k] r0[n]
    lags = scipy.signal.correlation_lags(d0.size, r0.size, mode="full")
    lo = max(-max_delay, -(r0.size - 1))
    hi = min(max_delay, d0.size - 1)
    keep = (lags >= lo) & (lags <= hi)
    lags, corr = lags[keep], corr[keep]
    normalized = corr / math.sqrt(er * ed)
    best = float(normalized.max())
    tied = lags[normalized >= best - _TIE_TOLERANCE]
    lag = int(min(tied.tolist(), key=lambda k: (abs(k), k)))

    rs, ds, n = _overlap(r0.size, d0.size, lag)
    ro, do = r0[rs:rs + n], d0[ds:ds + n]
    denom = math.sqrt(float(np.dot(ro, ro)) * float(np.dot(do, do)))
    correlation = float(np.clip(np.dot(ro, do) / denom, -1.0, 1.0)) if denom > 0.0 else 0.0
    return Alignment(delay_samples=lag, correlation=correlation, overlap_samples=n)


def aligned(reference: np.ndarray, decoded: np.ndarray, alignment: Alignment) -> tuple[np.ndarray, np.ndarray]:
    """The overlapping parts of the two signals at `alignment.delay_samples`, equal in length:
    reference[n] is paired with decoded[n + delay]."""
    r = _as_signal(reference, "reference")
    d = _as_signal(decoded, "decoded")
    rs, ds, n = _overlap(r.size, d.size, int(alignment.delay_samples))
    if n == 0:
        raise ValueError(f"no overlap at a delay of {alignment.delay_samples} samples "
                         f"({r.size} and {d.size} samples)")
    if n != alignment.overlap_samples:
        raise ValueError(f"alignment says {alignment.overlap_samples} overlapping samples, but these "
                         f"signals overlap by {n} at a delay of {alignment.delay_samples}")
    return r[rs:rs + n], d[ds:ds + n]


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
    r = r - r.mean()
    d = d - d.mean()
    rr = float(np.dot(r, r))
    dd = float(np.dot(d, d))
    if _constant(r) or rr == 0.0:
        raise ValueError("SI-SDR is undefined: the reference signal is constant (all zeros or DC only)")
    if _constant(d) or dd == 0.0:
        raise ValueError("SI-SDR is undefined: the decoded signal is constant (all zeros or DC only)")
    alpha = float(np.dot(d, r)) / rr
    target = alpha * r
    error = d - target
    eps = SI_SDR_EPS_REL * dd
    return float(10.0 * math.log10((float(np.dot(target, target)) + eps) / (float(np.dot(error, error)) + eps)))


# ---------------------------------------------------------------------------------------- LSD


def _power_spectrogram(x: np.ndarray) -> np.ndarray:
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


_PESQ_DETAILS = {
    "pesq_wb": {"aligned": False, "sample_rate": ARENA_RATE, "mode": "wb"},
    "pesq_nb": {"aligned": False, "sample_rate": 8000, "mode": "nb", "resampler": "soxr HQ 16000 -> 8000"},
}


def _record(value: float | None = None, error: str | None = None, **details: Any) -> dict[str, Any]:
    return {"value": value, "status": "ok" if error is None else "failed", "error": error, "details": details}


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"


def _compute(name: str, r: np.ndarray, d: np.ndarray) -> float:
    if name == "pesq_wb":
        return pesq_wb(r, d)
    if name == "pesq_nb":
        return pesq_nb(r, d)
    if name == "stoi":
        return stoi(r, d)
    if name == "estoi":
        return stoi(r, d, extended=True)
    if name == "si_sdr":
        return si_sdr(r, d)
    if name == "lsd":
        return log_spectral_distance(r, d)
    return mel_distance(r, d)


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
                       at_search_bound=abs(alignment.delay_samples) == max_delay)
        return pair, details, None

    def score(self, name: str) -> dict[str, Any]:
        """The record of one signal metric (see score_signal)."""
        if name not in METRICS:
            raise ValueError(f"unknown signal metric {name} (known: {', '.join(METRICS)})")
        if isinstance(self._checked, str):
            return _record(error=self._checked)
        pair: tuple[np.ndarray, np.ndarray] | None = self._checked
        details = dict(_PESQ_DETAILS.get(name, {}))
        if name in ALIGNED_METRICS:
            pair, align_details, align_error = self._alignment
            details = dict(align_details)
            if align_error is not None:
                return _record(error=align_error, **details)
        assert pair is not None
        try:
            value = float(_compute(name, *pair))
            if not math.isfinite(value):
                raise ValueError(f"non-finite value {value}")
        except Exception as exc:  # one metric's failure is recorded, never fatal
            return _record(error=_reason(exc), **details)
        return _record(value, **details)


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
        raise ValueError(f"unknown signal metric(s) {', '.join(unknown)} (known: {', '.join(METRICS)})")
    pair = SignalPair(reference, decoded)
    return {name: pair.score(name) for name in METRICS if name in metrics}
