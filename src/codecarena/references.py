"""The run's own copy of each reference: the input file's bytes when the codecs can take them as they
are (mono wav or flac at the arena rate; named by content, so `take.wav.bak` is a `.wav`), else the
file decoded, its channel taken and resampled with soxr (VHQ), written as 16-bit PCM wav. Every step is
recorded; the plan pins the copy's sha256 (`planned_reference_sha256`), computed in memory exactly as
`prepare_reference` writes it, so a reference replaced afterwards cannot pass for the input's."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from codecarena.arena import ARENA_RATE
from codecarena.audio_input import read_audio
from codecarena.datasets import Utterance
from codecarena.diskspace import DiskFullError, free_bytes, is_disk_full
from codecarena.files import exclusive_temp, sha256_file
from codecarena.pcm16 import to_int16
from codecarena.rundir import RunDir


class ReferenceCopyError(RuntimeError):
    """The input file changed while the run copied it."""


@dataclass(frozen=True)
class Reference:
    utterance: Utterance
    path: Path  # the run's copy (references/<id>.<suffix>) of the 16 kHz mono audio the codecs see
    num_samples: int
    sha256: str
    resampled_from: int | None
    # How the reference was made from the input file, in order; () when it is the input's own bytes.
    conversions: tuple[str, ...] = ()


@functools.cache
def planned_reference_sha256(utt: Utterance) -> str:
    """The sha256 the run's copy of an utterance has: the input file's when it is copied as it is,
    else that of its conversion, made here in memory exactly as `prepare_reference` writes it (once
    per process). The plan pins it, so a reference replaced afterwards cannot pass for the input's."""
    if utt.sample_rate == ARENA_RATE and not utt.converted:
        return utt.sha256
    audio, rate, _ = reference_audio(utt)
    resampled = soxr.resample(audio, rate, ARENA_RATE, quality="VHQ") if rate != ARENA_RATE else audio
    wav = io.BytesIO()
    sf.write(wav, to_int16(resampled), ARENA_RATE, subtype="PCM_16", format="WAV")
    return hashlib.sha256(wav.getvalue()).hexdigest()


def prepare_reference(utt: Utterance, run: RunDir) -> Reference:
    """The run's own copy of the reference, so that the run re-derives from its own files: the input
    file's bytes when it is mono wav/flac at the arena rate, else the file decoded, its channel taken
    and resampled with soxr (VHQ), as 16-bit PCM wav, each step recorded. An existing copy with the
    right bytes is kept (resume)."""
    if utt.sample_rate == ARENA_RATE and not utt.converted:
        # Named by what the file holds, not by its name (`take.wav.bak`, `x.wave`, no suffix at all).
        path = _writable(run.reference(utt.id, ".flac" if sf.info(str(utt.path)).format == "FLAC" else ".wav"))
        if not (path.is_file() and sha256_file(path) == utt.sha256):
            _atomic_copy(utt.path, path)
            if sha256_file(path) != utt.sha256:
                raise ReferenceCopyError(f"{utt.path}: changed while it was copied into {path} (sha256 differs)")
        return Reference(utt, path, utt.num_samples, utt.sha256, None)
    audio, rate, conversions = reference_audio(utt)
    resampled = soxr.resample(audio, rate, ARENA_RATE, quality="VHQ") if rate != ARENA_RATE else audio
    path = _writable(run.reference(utt.id, ".wav"))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive_temp(path) as (fd, tmp), open(fd, "wb", closefd=False) as fh:
            sf.write(fh, to_int16(resampled), ARENA_RATE, subtype="PCM_16", format="WAV")
            fh.flush()
            os.replace(tmp, path)
    except (OSError, sf.LibsndfileError, RuntimeError) as exc:
        # libsndfile reports a full disk as its own error, without an errno.
        if is_disk_full(exc) or free_bytes(path.parent) < 2 * len(resampled) + 44:
            raise DiskFullError(path, 2 * len(resampled) + 44) from None
        raise
    return Reference(utt, path, len(resampled), sha256_file(path), rate if rate != ARENA_RATE else None,
                     conversions + ("written as 16-bit PCM wav",))


def _writable(path: Path) -> Path:
    """`path`, unless something that is not a file is there: codecarena did not put it there, so it
    is neither replaced nor deleted (it may hold someone's files)."""
    if path.exists() and not path.is_file():
        raise ReferenceCopyError(f"{path}: is not a file, where this run keeps its copy of a reference; move or "
                                 "remove it, then rerun the same command to resume")
    return path


def reference_audio(utt: Utterance) -> tuple[np.ndarray, int, tuple[str, ...]]:
    """The mono samples of an utterance's file at its own rate (decoded, its channel taken), the rate,
    and the steps, the arena-rate resampling included when it will follow."""
    # The file was checked when the set was loaded; read once, its rate and length checked again.
    samples = read_audio(utt.path, utt.sample_rate, utt.num_samples, utt.reader)
    steps = [f"decoded {utt.source_format}"] if utt.source_format else []
    if utt.channel == "mix":
        audio = samples.mean(axis=1)
        steps.append(f"downmixed {samples.shape[1]} channels to mono (their mean)")
    elif utt.channel:
        index = {"left": 0, "right": 1}.get(utt.channel)
        index = int(utt.channel[2:]) - 1 if index is None else index
        audio = samples[:, index]
        steps.append(f"took channel {index + 1} of {samples.shape[1]} ({utt.channel})")
    else:
        audio = samples[:, 0]
    if utt.sample_rate != ARENA_RATE:
        steps.append(f"resampled {utt.sample_rate} -> {ARENA_RATE} Hz (soxr VHQ)")
    return audio, utt.sample_rate, tuple(steps)


def _atomic_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive_temp(dst) as (fd, tmp), open(src, "rb") as source, open(fd, "wb", closefd=False) as out:
            shutil.copyfileobj(source, out, 1 << 20)
            out.flush()
            os.replace(tmp, dst)
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFullError(dst, src.stat().st_size) from None
        raise
