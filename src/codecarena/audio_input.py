"""The one validation every audio input goes through: `run --input` folders and corpora, the smoke set's
files, and the codec service's `/v1/encode` bodies.

A file is recognised by its content, not its name: libsndfile first (WAV, FLAC, Ogg, MP3, ...), then
FFmpeg through PyAV (m4a/AAC, Opus in Ogg/WebM, ...). A file neither reads is refused, and so is audio
that is recognised but damaged, because a benchmark must never score something other than what the
user thinks it scores (a folder reader lists and counts each refused file): a data chunk cut short
(libsndfile returns the part present), NaN or infinite samples in a float file, a header rate no
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
    container: str  # libsndfile's format name (WAV, FLAC, OGG, MP3) or FFmpeg's (e.g. "mov,mp4,m4a,3gp,3g2,mj2")
    subtype: str  # e.g. PCM_16, FLOAT, or FFmpeg's codec name (aac)
    streamed_header: bool  # the RIFF data size was 0xFFFFFFFF: the length is what the file holds
    reader: str = "soundfile"  # "soundfile" (libsndfile) or "pyav" (FFmpeg)

    @property
    def duration_s(self) -> float:
        return self.num_samples / self.sample_rate

    @property
    def lossless_pcm(self) -> bool:
        """WAV-family or FLAC content: its samples can be copied as they are."""
        return self.reader == "soundfile" and self.container in {c for cs in CONTAINERS.values() for c in cs}

    def described(self) -> str:
        """What the file holds, in words: `MP3 (libsndfile), 44100 Hz, 2 channels`."""
        reader = "libsndfile" if self.reader == "soundfile" else "FFmpeg via PyAV"
        return f"{self.container} {self.subtype} ({reader}), {self.sample_rate} Hz, {self.channels} channel" + \
            ("s" if self.channels != 1 else "")


def mislabelled(path: Path, facts: AudioFacts) -> str | None:
    """The note for content that is not what a .wav or .flac name says, else None."""
    accepted = CONTAINERS.get(Path(path).suffix.lower())
    if accepted is None or facts.container in accepted:
        return None
    return f"its content is {facts.container}, not the {Path(path).suffix.lower()} its name says"


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
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        if not path.is_file():
            raise AudioInputError(f"{name}: unreadable audio ({str(exc).splitlines()[0]})") from None
        # libsndfile's message repeats the path: keep its reason.
        return _pyav_facts(path, name, str(exc).splitlines()[0].rpartition(": ")[2].rstrip("."))
    _check_rate(name, info.samplerate)
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
    _check_samples(name, nonfinite, frames, info.samplerate)
    return AudioFacts(sample_rate=info.samplerate, num_samples=frames, channels=info.channels,
                      container=info.format, subtype=info.subtype, streamed_header=streamed)


def _check_rate(name: str, rate: int) -> None:
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioInputError(f"{name}: sample rate {rate} Hz is outside the {MIN_SAMPLE_RATE}-"
                              f"{MAX_SAMPLE_RATE} Hz codecarena accepts (a damaged header?)")


def _check_samples(name: str, nonfinite: int, frames: int, rate: int) -> None:
    if nonfinite:
        raise AudioInputError(f"{name}: {nonfinite} samples are NaN or infinite; fix or re-export the file")
    minimum = math.ceil(MIN_DURATION_S * rate)
    if frames < minimum:
        raise AudioInputError(f"{name}: {frames} samples at {rate} Hz is shorter than the {MIN_DURATION_S:g} s minimum")


def _pyav_decode(path: Path, name: str, why_not_sndfile: str) -> tuple[np.ndarray, int, str, str]:
    """(samples as (frames, channels) float64, rate, container, codec) of the first audio stream
    FFmpeg finds; AudioInputError when there is none."""
    import av

    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise AudioInputError(f"{name}: unreadable audio (libsndfile: {why_not_sndfile!r}; FFmpeg: {reason!r})") from None
    with container:
        if not container.streams.audio:
            raise AudioInputError(f"{name}: unreadable audio (FFmpeg reads it as {container.format.name} without an audio "
                                "stream)")
        stream = container.streams.audio[0]
        rate, channels = stream.rate, stream.channels
        _check_rate(name, rate)
        # Planar float64 at the stream's own rate and layout: a decode, not a conversion.
        resampler = av.AudioResampler(format="dblp", layout=stream.layout, rate=rate)
        blocks = []
        try:
            for frame in container.decode(stream):
                blocks += [r.to_ndarray() for r in resampler.resample(frame)]
            blocks += [r.to_ndarray() for r in resampler.resample(None)]
        except av.error.FFmpegError as exc:
            raise AudioInputError(f"{name}: damaged {container.format.name} audio ({str(exc).splitlines()[0]})") from None
        codec = stream.codec_context.name
        fmt = container.format.name
    samples = np.concatenate(blocks, axis=1).T if blocks else np.zeros((0, channels))
    return np.ascontiguousarray(samples, dtype=np.float64), rate, fmt, codec


def _pyav_facts(path: Path, name: str, why_not_sndfile: str) -> AudioFacts:
    samples, rate, fmt, codec = _pyav_decode(path, name, why_not_sndfile)
    _check_samples(name, int(np.count_nonzero(~np.isfinite(samples))), samples.shape[0], rate)
    return AudioFacts(sample_rate=rate, num_samples=samples.shape[0], channels=samples.shape[1], container=fmt,
                      subtype=codec, streamed_header=False, reader="pyav")


def read_audio(path: Path, sample_rate: int, num_samples: int) -> np.ndarray:
    """The samples of a file check_audio_file accepted, as (frames, channels) float64, read the same
    way (libsndfile, else FFmpeg); AudioInputError when it no longer has the rate and length it had."""
    try:
        samples, rate = sf.read(str(path), dtype="float64", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as exc:
        samples, rate, _, _ = _pyav_decode(Path(path), str(path), str(exc).splitlines()[0])
    if (rate, samples.shape[0]) != (sample_rate, num_samples):
        raise AudioInputError(f"{path}: changed since it was checked ({samples.shape[0]} frames at {rate} Hz, was "
                              f"{num_samples} at {sample_rate} Hz)")
    return samples
