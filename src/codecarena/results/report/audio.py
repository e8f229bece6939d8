"""Audio in the report: spectrograms as small palette PNGs, and every file embedded losslessly.

Audio is embedded as FLAC (written with soundfile/libsndfile, bit-exact with the 16-bit PCM WAV on
disk, about half its size) unless the file's sample format has no FLAC equivalent or FLAC comes out
larger, in which case the file's own bytes are embedded. Lossy compression (Opus, MP3) would add its
own artifacts to the codec output under test and is never used.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from codecarena.results.report.markup import data_uri

SPEC_ROWS = 96  # spectrogram height in pixels (0..8 kHz)
SPEC_MAX_COLS = 320  # spectrogram width in pixels at most
SPEC_RANGE_DB = 80.0


def read_audio(path: Path) -> tuple[np.ndarray, int]:
    """The samples as float64, channels averaged to mono, and the sample rate."""
    import soundfile as sf

    data, rate = sf.read(str(path), dtype="float64", always_2d=True)
    return data.mean(axis=1), rate


def spectrogram_db(audio: np.ndarray, rate: int) -> np.ndarray:
    """Log-magnitude STFT in dB (rows: 0 .. 8 kHz at 16 kHz, columns: time), pooled to a small image."""
    n_fft, hop = 512, max(1, rate // 100)
    if audio.size < n_fft:
        audio = np.pad(audio, (0, n_fft - audio.size))
    frames = 1 + (audio.size - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    window = np.hanning(n_fft)
    mag = np.abs(np.fft.rfft(audio[idx] * window, axis=1)).T  # (257, frames)
    db = 20.0 * np.log10(mag + 1e-9)
    db = db[: (db.shape[0] - 1) // SPEC_ROWS * SPEC_ROWS] if db.shape[0] > SPEC_ROWS else db
    if db.shape[0] >= SPEC_ROWS:
        db = db.reshape(SPEC_ROWS, -1, db.shape[1]).max(axis=1)
    step = max(1, math.ceil(db.shape[1] / SPEC_MAX_COLS))
    cols = math.ceil(db.shape[1] / step)
    padded = np.pad(db, ((0, 0), (0, cols * step - db.shape[1])), mode="edge")
    return padded.reshape(db.shape[0], cols, step).max(axis=2)


_PALETTE: list[int] | None = None


def _palette() -> list[int]:
    global _PALETTE
    if _PALETTE is None:
        from matplotlib import colormaps

        rgba = colormaps["magma"](np.linspace(0.0, 1.0, 256))
        _PALETTE = [int(round(c * 255)) for color in rgba for c in color[:3]]
    return _PALETTE


def spectrogram_png(db: np.ndarray, top_db: float) -> bytes:
    """8-bit palette PNG (magma), low frequencies at the bottom, scaled to [top - 80 dB, top]."""
    from PIL import Image

    scaled = np.clip((db - (top_db - SPEC_RANGE_DB)) / SPEC_RANGE_DB, 0.0, 1.0)
    pixels = np.ascontiguousarray(np.flipud(np.round(scaled * 255)).astype(np.uint8))
    image = Image.frombytes("P", (pixels.shape[1], pixels.shape[0]), pixels.tobytes())
    image.putpalette(_palette())
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


@dataclass
class AudioStats:
    mode: str
    files: int = 0
    flac: int = 0
    original: int = 0
    bytes_embedded: int = 0
    bytes_on_disk: int = 0
    notes: list[str] = field(default_factory=list)


def embed_audio(path: Path, mode: str, stats: AudioStats) -> str:
    """A data: URI of the audio file, lossless (see the module docstring for the FLAC/WAV choice)."""
    import soundfile as sf

    raw = path.read_bytes()
    info = sf.info(str(path))
    mime = {"WAV": "audio/wav", "FLAC": "audio/flac", "OGG": "audio/ogg"}.get(info.format, "audio/wav")
    stats.files += 1
    stats.bytes_on_disk += len(raw)
    best, best_mime = raw, mime
    flac_subtypes = {"PCM_16": "int16", "PCM_24": "int32", "PCM_S8": "int16"}
    if mode == "flac" and info.format != "FLAC" and info.subtype in flac_subtypes and "FLAC" in sf.available_formats():
        data, rate = sf.read(str(path), dtype=flac_subtypes[info.subtype], always_2d=True)
        buf = io.BytesIO()
        sf.write(buf, data, rate, format="FLAC", subtype=info.subtype)
        if len(buf.getvalue()) < len(raw):
            best, best_mime = buf.getvalue(), "audio/flac"
    if best_mime == "audio/flac" and info.format != "FLAC":
        stats.flac += 1
    else:
        stats.original += 1
    stats.bytes_embedded += len(best)
    return data_uri(best, best_mime)
