"""The one validation every audio input goes through: `run --input` folders and corpora, the smoke set's
files, and the codec service's `/v1/encode` bodies.

A benchmark must never score something other than what the user thinks it scores, so each check below
refuses a file that libsndfile would read "fine": a data chunk cut short (libsndfile returns the part
present), MP3/Ogg content under a .wav name, NaN or infinite samples in a float file, a header rate no
speech recording has, a file too short to hold one codec frame. Every refusal is one line that starts
with the file and says what to do.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

# Below 8 kHz there is no telephone-band speech to code; above 384 kHz no recorder writes speech.
MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 384000
# Shorter than this holds less than five 20 ms codec frames: a row's numbers would mean nothing.
MIN_DURATION_S = 0.1
# What libsndfile calls each container, by the file name suffix codecarena accepts (NIST: TIMIT's .wav).
CONTAINERS = {".wav": ("WAV", "WAVEX", "RF64", "NIST"), ".flac": ("FLAC",)}
_STREAMED = 0xFFFFFFFF  # a RIFF size written by a recorder that did not know the length yet


class AudioInputError(ValueError):
    """An audio input codecarena refuses; one line starting with the file."""


@dataclass(frozen=True)
class AudioFacts:
    sample_rate: int
    num_samples: int
    channels: int
    container: str  # libsndfile's format name, e.g. WAV, FLAC
    subtype: str  # e.g. PCM_16, FLOAT
    streamed_header: bool  # the RIFF data size was 0xFFFFFFFF: the length is what the file holds

    @property
    def duration_s(self) -> float:
        return self.num_samples / self.sample_rate


def _riff_data_chunk(path: Path) -> tuple[int, int] | None:
    """(declared size, bytes present) of a RIFF/WAVE file's data chunk; None when not RIFF or no data chunk."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        pos = 12
        while pos + 8 <= size:
            fh.seek(pos)
            chunk_id, chunk_size = struct.unpack("<4sI", fh.read(8))
            if chunk_id == b"data":
                return chunk_size, size - pos - 8
            pos += 8 + chunk_size + (chunk_size & 1)  # chunks are padded to even sizes
    return None


def check_audio_file(path: Path, shown: str | None = None) -> AudioFacts:
    """Facts of a readable, complete, finite audio file of a plausible rate and length, else
    AudioInputError. `shown` replaces the path in messages (the service never shows its temp paths)."""
    path = Path(path)
    name = shown or str(path)
    suffix = path.suffix.lower()
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioInputError(f"{name}: unreadable audio ({str(exc).splitlines()[0]})") from None
    accepted = CONTAINERS.get(suffix)
    if accepted is not None and info.format not in accepted:
        raise AudioInputError(f"{name}: its content is {info.format_info}, not the {suffix} its name says; "
                              f"convert it to wav or flac (e.g. with ffmpeg) and name it accordingly")
    if not MIN_SAMPLE_RATE <= info.samplerate <= MAX_SAMPLE_RATE:
        raise AudioInputError(f"{name}: sample rate {info.samplerate} Hz is outside the {MIN_SAMPLE_RATE}-"
                              f"{MAX_SAMPLE_RATE} Hz codecarena accepts (a damaged header?)")
    streamed = False
    chunk = _riff_data_chunk(path)
    if chunk is not None:
        declared, present = chunk
        streamed = declared == _STREAMED
        if not streamed and declared > present:
            raise AudioInputError(f"{name}: truncated: data chunk declares {declared} bytes but only "
                                  f"{present} are present")
    frames, nonfinite = 0, 0
    try:
        with sf.SoundFile(str(path)) as fh:
            for block in fh.blocks(blocksize=1 << 16, dtype="float32", always_2d=True):
                frames += block.shape[0]
                nonfinite += int(np.count_nonzero(~np.isfinite(block)))
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioInputError(f"{name}: unreadable audio ({str(exc).splitlines()[0]})") from None
    if frames != info.frames:
        raise AudioInputError(f"{name}: truncated: its header says {info.frames} frames, {frames} could be decoded")
    if nonfinite:
        raise AudioInputError(f"{name}: {nonfinite} samples are NaN or infinite; fix or re-export the file")
    minimum = math.ceil(MIN_DURATION_S * info.samplerate)
    if frames < minimum:
        raise AudioInputError(f"{name}: {frames} samples at {info.samplerate} Hz is shorter than the "
                              f"{MIN_DURATION_S:g} s minimum")
    return AudioFacts(sample_rate=info.samplerate, num_samples=frames, channels=info.channels,
                      container=info.format, subtype=info.subtype, streamed_header=streamed)
