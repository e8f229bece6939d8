"""The one validation every audio input goes through: `run --input` folders and corpora, the smoke set's
files, and the codec service's `/v1/encode` bodies.

A file is recognised by its content, not its name: libsndfile first (WAV, FLAC, Ogg, MP3, ...), then
FFmpeg through PyAV (m4a/AAC, Opus in Ogg/WebM, ...). A file neither reads is refused, and so is audio
that is recognised but damaged, because a benchmark must never score something other than what the
user thinks it scores (a folder reader lists and counts each refused file): a file cut short (a WAV
data chunk, an Ogg stream without its last page, an MP3 whose length tag promises more; the libraries
return the part present), NaN or infinite samples in a float file, float samples beyond full scale, a
header rate no speech recording has, a file too short to hold one codec frame. Every refusal is one
line that starts with the file (control characters escaped) and says what to do.

libsndfile decodes MP3 with libmpg123, which prints its warnings on the process's stderr: they are
kept off the console while libsndfile works, and what matters in them becomes our own message. An
MP3 libmpg123 complains about gets a second opinion from FFmpeg: libsndfile feeds libmpg123 in pieces,
and a frame whose bit reservoir spans two reads draws "part2_3_length too large" from a file that is
whole. FFmpeg then reads the file if it decodes it without a single warning, to the length the file
states, and the reference says so; a file both decoders find damaged is refused, naming both.

Long because it is the one validation of input audio: every way a file can decode and still not be
what was recorded (cut short, non-finite or beyond full scale, a guessed MP3 length, a decoder's
complaint and a second decoder's opinion) is checked here, beside the readers it guards.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from codecarena.text import printable
from codecarena.plural import counted, verb

# Below 8 kHz there is no telephone-band speech to code; above 384 kHz no recorder writes speech.
MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 384000
# Shorter than this holds less than five 20 ms codec frames: a row's numbers would mean nothing.
MIN_DURATION_S = 0.1
# What libsndfile calls each container, by the file name suffix codecarena accepts (NIST: TIMIT's .wav).
CONTAINERS = {".wav": ("WAV", "WAVEX", "RF64", "NIST"), ".flac": ("FLAC",)}
_STREAMED = 0xFFFFFFFF  # a RIFF size written by a recorder that did not know the length yet
# A downmix this far below what unrelated channels would give is channels cancelling each other (one
# of them recorded or wired inverted): their mean is near silence, not the recording.
DOWNMIX_CANCEL_DB = 20.0
_FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")
# Tags in an MP3's first frame that state the stream's length; without one, libsndfile's frame count
# is libmpg123's estimate from the file size.
_MP3_LENGTH_TAGS = (b"Xing", b"Info", b"VBRI")
_UNKNOWN_LENGTH = 2**63 - 1  # libsndfile's frame count for a stream that does not state its length
_BLOCK = 1 << 16  # frames checked at a time
_NO_LENGTH_TAG = "an MP3 without a length tag, whose length libsndfile would take from libmpg123's estimate"


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
    reader: str = "soundfile"  # "soundfile" (libsndfile) or "pyav" (FFmpeg): read_audio reads it so again
    reader_note: str = ""  # why FFmpeg read an MP3 rather than libsndfile, "" otherwise
    channel_rms: tuple[float, ...] = ()  # of each channel, full scale 1
    downmix_rms: float = 0.0  # of the mean of the channels

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
        why = f": {self.reader_note}" if self.reader_note else ""
        return (f"{self.container} {self.subtype} ({reader}{why}), {self.sample_rate} Hz, "
                f"{counted(self.channels, 'channel')}")


def cancelled_downmix(facts: AudioFacts) -> str | None:
    """Why the mean of a multichannel file's channels is no usable mono version of it (the channels
    cancel, as when one is inverted), else None."""
    if facts.channels < 2:
        return None
    energies = [rms * rms for rms in facts.channel_rms]
    unrelated = sum(energies) / len(energies) ** 2  # the downmix's energy if the channels were unrelated
    if unrelated == 0 or facts.downmix_rms ** 2 >= unrelated * 10 ** (-DOWNMIX_CANCEL_DB / 10):
        return None
    level = ("silent" if facts.downmix_rms == 0
             else f"{20 * math.log10(max(facts.channel_rms) / facts.downmix_rms):.0f} dB below its loudest channel")
    return (f"its downmix to mono (the mean of its {facts.channels} channels) is {level}: the channels cancel "
            "(one is inverted?); use --channels left, right or each")


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


def _ogg_cut(path: Path) -> str | None:
    """How an Ogg file is cut short, else None (also for a file that is not Ogg). Ogg states no total
    length, but every page states its own size and the last page of each stream carries the
    end-of-stream flag; the decoders return the whole pages present and say nothing."""
    open_streams: set[bytes] = set()
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            pos = 0
            while pos < size:
                fh.seek(pos)
                head = fh.read(27)
                if not b"OggS".startswith(head[:4]):
                    return None  # not Ogg, or damage that is the decoder's to judge
                if len(head) < 27:
                    return f"the Ogg page at byte {pos} is cut short in its header"
                segments = fh.read(head[26])
                end = pos + 27 + head[26] + sum(segments)
                if len(segments) < head[26] or end > size:
                    return f"the Ogg page at byte {pos} declares {end - pos} bytes but only {size - pos} are present"
                serial = head[14:18]
                if head[5] & 0x02:  # beginning of a stream
                    open_streams.add(serial)
                if head[5] & 0x04:  # its end
                    open_streams.discard(serial)
                pos = end
    except OSError:
        return None  # unreadable: libsndfile and FFmpeg say so
    if open_streams:
        return "its Ogg stream ends without its end-of-stream page (cut at a page boundary)"
    return None


def _mp3_states_length(path: Path) -> bool:
    """Whether an MP3's first frame (after any ID3v2 tag) is a tag that states the stream's length."""
    with open(path, "rb") as fh:
        head = fh.read(10)
        start = 0
        if len(head) == 10 and head[:3] == b"ID3":
            # The tag's size is four 7-bit bytes; a footer flag adds ten bytes.
            start = 10 + (head[6] << 21 | head[7] << 14 | head[8] << 7 | head[9]) + (10 if head[5] & 0x10 else 0)
        fh.seek(start)
        first = fh.read(192)  # the tags sit after the frame header and side information
    return any(tag in first for tag in _MP3_LENGTH_TAGS)


_NATIVE_STDERR = threading.Lock()


@contextmanager
def _native_stderr() -> Iterator[list[str]]:
    """Keeps what C libraries print on the process's stderr (file descriptor 2) off the console while
    libsndfile works; the lines are in the yielded list after the block. The descriptor is the
    process's, hence the lock: two threads (the service) capture one after the other."""
    said: list[str] = []
    with _NATIVE_STDERR, tempfile.TemporaryFile() as sink:
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all: nothing reaches a console
            saved = -1
        if saved < 0:
            yield said
            return
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said += sink.read().decode("utf-8", "replace").splitlines()


def _libmpg123(said: list[str], *words: str) -> list[str]:
    """The lines libmpg123 printed that hold one of `words`, without their source location."""
    return [line.partition("] ")[2] or line for line in said if any(word in line for word in words)]


def _estimated_mp3(path: Path, info: Any) -> bool:
    """An MP3 without a length tag: libsndfile takes libmpg123's estimate of its length from the file
    size and stops decoding there (a VBR file loses its end), so FFmpeg reads it whole."""
    return bool(info.format == "MP3" and not _mp3_states_length(path))


class _Tally:
    """What the samples of a file show, block by block."""

    def __init__(self, channels: int) -> None:
        self.frames = 0
        self.nonfinite = 0
        self.beyond_full_scale = 0
        self.peak = 0.0
        self.energy = np.zeros(channels)
        self.downmix_energy = 0.0

    def add(self, block: np.ndarray) -> None:
        finite = np.isfinite(block)
        samples = np.where(finite, block, 0.0).astype(np.float64)
        magnitude = np.abs(samples)
        self.frames += samples.shape[0]
        self.nonfinite += int(np.count_nonzero(~finite))
        self.beyond_full_scale += int(np.count_nonzero(magnitude > 1.0))
        self.peak = max(self.peak, float(magnitude.max(initial=0.0)))
        self.energy += np.square(samples).sum(axis=0)
        self.downmix_energy += float(np.square(samples.mean(axis=1)).sum())

    def levels(self) -> tuple[tuple[float, ...], float]:
        """(RMS of each channel, RMS of their mean)."""
        frames = max(self.frames, 1)
        return tuple(math.sqrt(e / frames) for e in self.energy), math.sqrt(self.downmix_energy / frames)


def check_audio_file(path: Path, shown: str | None = None) -> AudioFacts:
    """Facts of a readable, complete, finite audio file of a plausible rate and length, else
    AudioInputError. `shown` replaces the path in messages (the service never shows its temp paths)."""
    path = Path(path)
    name = printable(shown or str(path))
    if cut := _ogg_cut(path):
        raise AudioInputError(f"{name}: truncated: {cut}")
    with _native_stderr():
        try:
            info = sf.info(str(path))
            failure = ""
        except (sf.LibsndfileError, RuntimeError, OSError) as exc:
            failure = str(exc)
    if failure:
        if not path.is_file():
            raise AudioInputError(f"{name}: unreadable audio ({printable(failure)})") from None
        # libsndfile's message repeats the path: keep its reason.
        return _pyav_facts(path, name, printable(failure.rpartition(": ")[2].rstrip(".")))
    if _estimated_mp3(path, info):
        return _pyav_facts(path, name, "an MP3 without a length tag", _NO_LENGTH_TAG)
    _check_rate(name, info.samplerate)
    streamed = False
    chunk = _riff_data_chunk(path)
    if chunk is not None:
        declared, present = chunk
        streamed = declared == _STREAMED
        if not streamed and declared > present:
            raise AudioInputError(f"{name}: truncated: data chunk declares {declared} bytes but only "
                                  f"{present} are present")
    tally, stopped = _Tally(info.channels), ""
    with _native_stderr() as said:
        try:
            with sf.SoundFile(str(path)) as fh:
                # Not SoundFile.blocks: it yields whole blocks where the file holds less, padded with
                # whatever the buffer held, and counts the frames the header promised.
                while len(block := fh.read(_BLOCK, dtype="float32", always_2d=True)):
                    tally.add(block)
        except (sf.LibsndfileError, RuntimeError, OSError) as exc:
            stopped = printable(str(exc))
    errors = _libmpg123(said, "error")
    stated = info.frames if info.format == "MP3" and info.frames < _UNKNOWN_LENGTH else None
    if info.frames < _UNKNOWN_LENGTH and tally.frames < info.frames:
        told = f"its header says {counted(info.frames, 'frame')}, {tally.frames} could be decoded"
        dropped = errors or _libmpg123(said, "Illegal Audio-MPEG-Header", "Skipped")
        if stopped:
            raise AudioInputError(f"{name}: truncated or damaged: {told} ({stopped})")
        # libmpg123 tells a file shorter than its length tag says from data it had to skip inside it.
        if dropped and not _libmpg123(said, "stream size off"):
            return _second_opinion(path, name, stated, f"damaged: {told} (libmpg123: {printable(dropped[0])!r})",
                                   f"libmpg123 skipped data in it ({printable(dropped[0])!r})")
        raise AudioInputError(f"{name}: truncated: {told}")
    if stopped:
        raise AudioInputError(f"{name}: unreadable audio ({stopped})")
    if errors:
        found = f"{counted(len(errors), 'error')} ({printable(errors[0])!r})"
        return _second_opinion(path, name, stated, f"damaged: libmpg123 reports {found}",
                               f"libmpg123 reported {found}")
    if tally.frames != info.frames:
        raise AudioInputError(f"{name}: damaged: its header says {counted(info.frames, 'frame')}, "
                              f"{tally.frames} decoded")
    _check_samples(name, tally, info.samplerate, float_pcm=info.subtype in _FLOAT_SUBTYPES)
    channel_rms, downmix_rms = tally.levels()
    return AudioFacts(sample_rate=info.samplerate, num_samples=tally.frames, channels=info.channels,
                      container=info.format, subtype=info.subtype, streamed_header=streamed,
                      channel_rms=channel_rms, downmix_rms=downmix_rms)


def _check_rate(name: str, rate: int) -> None:
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioInputError(f"{name}: sample rate {rate} Hz is outside the {MIN_SAMPLE_RATE}-"
                              f"{MAX_SAMPLE_RATE} Hz codecarena accepts (a damaged header?)")


def _check_samples(name: str, tally: _Tally, rate: int, float_pcm: bool) -> None:
    if tally.nonfinite:
        raise AudioInputError(f"{name}: {counted(tally.nonfinite, 'sample')} {verb(tally.nonfinite, 'is', 'are')} "
                              "NaN or infinite; fix or re-export the file")
    minimum = math.ceil(MIN_DURATION_S * rate)
    if tally.frames < minimum:
        raise AudioInputError(f"{name}: {counted(tally.frames, 'sample')} at {rate} Hz is shorter than the "
                              f"{MIN_DURATION_S:g} s minimum")
    # Float PCM is the signal itself: clipping it to what a codec takes would score another signal.
    # (A lossy decoder's overshoot is not: its encoder's input was within full scale.)
    if float_pcm and tally.beyond_full_scale:
        raise AudioInputError(f"{name}: {counted(tally.beyond_full_scale, 'sample')} "
                              f"{verb(tally.beyond_full_scale, 'is', 'are')} beyond full scale (peak "
                              f"{tally.peak:.3g}, {20 * math.log10(tally.peak):+.1f} dBFS), which codecs would clip: "
                              "scale the file down and re-export it")


def _pyav_decode(path: Path, name: str, why_not_sndfile: str) -> tuple[np.ndarray, int, str, str]:
    """(samples as (frames, channels) float64, rate, container, codec) of the first audio stream
    FFmpeg finds; AudioInputError when there is none (naming why libsndfile did not read it, if given)."""
    import av

    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        reason = printable(getattr(exc, "strerror", None) or str(exc))
        sndfile = f"libsndfile: {why_not_sndfile!r}; " if why_not_sndfile else ""
        raise AudioInputError(f"{name}: unreadable audio ({sndfile}FFmpeg: {reason!r})") from None
    with container:
        if not container.streams.audio:
            raise AudioInputError(f"{name}: unreadable audio (FFmpeg reads it as {container.format.name} without an audio "
                                "stream)")
        stream = container.streams.audio[0]
        if stream.codec_context is None:  # e.g. an MP4 whose index is cut off
            raise AudioInputError(f"{name}: unreadable audio (FFmpeg reads it as {container.format.name} with an audio "
                                  "stream it has no decoder parameters for: truncated?)")
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
            raise AudioInputError(f"{name}: damaged {container.format.name} audio ({printable(str(exc))})") from None
        codec = stream.codec_context.name
        fmt = container.format.name
    samples = np.concatenate(blocks, axis=1).T if blocks else np.zeros((0, channels))
    return np.ascontiguousarray(samples, dtype=np.float64), rate, fmt, codec


def _pyav_facts(path: Path, name: str, why_not_sndfile: str, note: str = "") -> AudioFacts:
    return _decoded_facts(name, *_pyav_decode(path, name, why_not_sndfile), note)


def _decoded_facts(name: str, samples: np.ndarray, rate: int, fmt: str, codec: str, note: str) -> AudioFacts:
    tally = _Tally(samples.shape[1])
    for start in range(0, samples.shape[0], _BLOCK):  # in blocks: a long file's copies stay small
        tally.add(samples[start:start + _BLOCK])
    _check_samples(name, tally, rate, float_pcm=False)
    channel_rms, downmix_rms = tally.levels()
    return AudioFacts(sample_rate=rate, num_samples=samples.shape[0], channels=samples.shape[1], container=fmt,
                      subtype=codec, streamed_header=False, reader="pyav", channel_rms=channel_rms,
                      downmix_rms=downmix_rms, reader_note=note)


_FFMPEG_LOG = threading.Lock()


@contextmanager
def _ffmpeg_warnings() -> Iterator[list[str]]:
    """What FFmpeg logs at warning level or above in this thread while the block runs, in the yielded
    list after it. PyAV drops FFmpeg's log unless a level is set, and both the level and the
    skipping of a message repeated from an earlier file are process-wide: set here, restored after,
    under a lock."""
    import av.logging

    said: list[str] = []
    with _FFMPEG_LOG:
        level, skip = av.logging.get_level(), av.logging.get_skip_repeated()
        av.logging.set_level(av.logging.WARNING)
        av.logging.set_skip_repeated(False)
        try:
            with av.logging.Capture(local=True) as logs:
                yield said
        finally:
            av.logging.set_level(level)
            av.logging.set_skip_repeated(skip)
    said += [f"{source}: {message.strip()}" if source else message.strip()
             for severity, source, message in logs if severity <= av.logging.WARNING]


def _second_opinion(path: Path, name: str, stated_frames: int | None, complaint: str, found: str) -> AudioFacts:
    """An MP3 libmpg123 complained about, read by FFmpeg when FFmpeg decodes it without a single warning
    to the length the file states (`stated_frames`, None when it states none; `found` says why in the
    reference's description); else refused with `complaint` and FFmpeg's own finding."""
    with _ffmpeg_warnings() as warned:
        try:
            decoded, failure = _pyav_decode(path, name, ""), ""
        except AudioInputError as exc:
            decoded, failure = None, str(exc).removeprefix(f"{name}: ")
    problem = warned[0] if warned else failure
    if decoded is not None and not problem and stated_frames is not None and decoded[0].shape[0] != stated_frames:
        problem = f"it decodes {counted(decoded[0].shape[0], 'frame')}, the file states {stated_frames}"
    if decoded is None or problem:
        raise AudioInputError(f"{name}: {complaint}; FFmpeg finds it damaged too ({printable(problem)!r}); "
                              "re-export the file")
    return _decoded_facts(name, *decoded, f"{found} as libsndfile read it, FFmpeg decodes it without a warning")


def read_audio(path: Path, sample_rate: int, num_samples: int, reader: str) -> np.ndarray:
    """The samples of a file check_audio_file accepted, as (frames, channels) float64, read by the reader
    it chose (`AudioFacts.reader`); AudioInputError when it no longer has the rate and length it had."""
    if reader == "pyav":
        samples, rate, _, _ = _pyav_decode(Path(path), printable(str(path)), "")
    else:
        with _native_stderr():
            try:
                samples, rate = sf.read(str(path), dtype="float64", always_2d=True)
            except (sf.LibsndfileError, RuntimeError) as exc:
                raise AudioInputError(f"{printable(str(path))}: unreadable audio ({printable(str(exc))})") from None
    if (rate, samples.shape[0]) != (sample_rate, num_samples):
        raise AudioInputError(f"{printable(str(path))}: changed since it was checked ({samples.shape[0]} frames at "
                              f"{rate} Hz, was {num_samples} at {sample_rate} Hz)")
    return samples
