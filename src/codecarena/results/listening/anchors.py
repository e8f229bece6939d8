"""BS.1534-3's low-pass anchors, made from a run's own reference with a filter stated exactly.

The Recommendation asks for the reference low-passed at 3.5 kHz (the low anchor) and at 7 kHz (the
mid anchor) and does not fix the filter. codecarena's: a linear-phase FIR from
`scipy.signal.firwin` with a Kaiser window, sized by `scipy.signal.kaiserord` for 80 dB of stop-band
attenuation over a 200 Hz transition centred on the cut-off (the cut-off is the -6 dB point), odd in
length and symmetric, so that applying it (numpy.convolve, the full convolution cut to the input's
span around the filter's centre) delays nothing: an anchor stays sample-aligned with the reference
and every other stimulus, which switching on one playhead needs. The result is rounded to the
nearest 16-bit value and clipped, and written as 16-bit PCM WAV at the reference's rate. The recipe,
the taps' sha256 and the library versions go into test.json; the audit makes the anchors again and
compares their samples.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from codecarena.files import exclusive_temp
from codecarena.results.listening.definition import ListeningError

CUTOFFS_HZ = (3500, 7000)
STOPBAND_DB = 80.0
TRANSITION_HZ = 200.0


def taps(cutoff_hz: int, rate: int) -> np.ndarray:
    """The anchor filter's taps at `rate` (odd length, symmetric)."""
    from scipy import signal

    if not 0 < cutoff_hz < rate / 2 - TRANSITION_HZ / 2:
        raise ListeningError(f"an anchor at {cutoff_hz} Hz needs a sample rate above {2 * cutoff_hz + TRANSITION_HZ:g} "
                             f"Hz; the reference is at {rate} Hz")
    numtaps, beta = signal.kaiserord(STOPBAND_DB, TRANSITION_HZ / (rate / 2))
    numtaps |= 1  # odd: a whole-sample centre, so no delay
    return np.asarray(signal.firwin(numtaps, cutoff_hz, window=("kaiser", beta), fs=rate), dtype=np.float64)


def low_pass(pcm: np.ndarray, rate: int, cutoff_hz: int) -> np.ndarray:
    """16-bit samples low-passed at `cutoff_hz` with the anchor filter, rounded and clipped to 16 bits."""
    h = taps(cutoff_hz, rate)
    full = np.convolve(pcm.astype(np.float64) / 32768.0, h, mode="full")
    half = (len(h) - 1) // 2
    out = np.round(full[half:half + len(pcm)] * 32768.0)
    return np.clip(out, -32768, 32767).astype(np.int16)


def read_mono16(path: Path) -> tuple[np.ndarray, int]:
    try:
        pcm, rate = sf.read(str(path), dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise ListeningError(f"{path}: not readable audio ({exc})") from None
    if pcm.shape[1] != 1:
        raise ListeningError(f"{path}: {pcm.shape[1]} channels; a listening test plays the arena's mono audio")
    return pcm[:, 0], int(rate)


def anchor_wav(reference: Path, cutoff_hz: int) -> tuple[bytes, float]:
    """The anchor of `reference` at `cutoff_hz` as the bytes of its WAV file, and its level (level_db)."""
    pcm, rate = read_mono16(reference)
    low = low_pass(pcm, rate, cutoff_hz)
    buffer = io.BytesIO()
    sf.write(buffer, low, rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue(), level_db(low)


def write_file(dest: Path, data: bytes) -> None:
    """`data` at `dest`, atomically (a reader sees no file or the whole of it)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_temp(dest) as (fd, tmp):
        with open(fd, "wb", closefd=False) as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(dest)


def recipe(rate: int) -> dict[str, Any]:
    """What test.json records of how the anchors were made."""
    import scipy

    return {"method": "linear-phase FIR: scipy.signal.firwin, Kaiser window sized by scipy.signal.kaiserord; "
                      "numpy.convolve, full convolution cut to the input around the filter's centre (no delay); "
                      "rounded to the nearest 16-bit value and clipped; 16-bit PCM WAV",
            "stopband_db": STOPBAND_DB, "transition_hz": TRANSITION_HZ, "cutoff": "the -6 dB point",
            "sample_rate": rate, "scipy": scipy.__version__, "numpy": np.__version__,
            "taps": {str(c): {"numtaps": len(h), "sha256": hashlib.sha256(h.tobytes()).hexdigest()}
                     for c in CUTOFFS_HZ for h in [taps(c, rate)]}}


def rederive_problem(reference: Path, anchor: Path, cutoff_hz: int) -> str:
    """How `anchor` differs from the anchor made again from `reference` ("" when its samples are those)."""
    ref, rate = read_mono16(reference)
    got, got_rate = read_mono16(anchor)
    want = low_pass(ref, rate, cutoff_hz)
    if got_rate != rate or len(got) != len(want):
        return f"{anchor.name}: {len(got)} samples at {got_rate} Hz, the recipe gives {len(want)} at {rate} Hz"
    off = int(np.max(np.abs(got.astype(np.int32) - want.astype(np.int32)))) if len(want) else 0
    return "" if off == 0 else f"{anchor.name}: differs from the anchor made again by up to {off} in 16-bit samples"


def level_db(pcm: np.ndarray) -> float:
    """RMS level of 16-bit samples, dB relative to a full-scale square wave (silence: -200)."""
    rms = float(np.sqrt(np.mean((pcm.astype(np.float64) / 32768.0) ** 2))) if len(pcm) else 0.0
    return round(20 * float(np.log10(rms)), 3) if rms > 1e-10 else -200.0
