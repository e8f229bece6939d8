"""Folders of recordings a condition draws from: noises (`--noise-dir`, `noise=SET`) and measured room
impulse responses (`--rir-dir`, `rir=SET`), each file pinned by its sha256 in the plan.

A set is every regular, non-hidden file of one folder (not its subfolders), in name order; each must be
audio libsndfile reads, mono, at the arena rate, not silent, and a noise at least as long as the longest
utterance of the run (so every draw fits without looping), a response at most MAX_RIR_S. Any file
that is not is refused in one line before any row. The run copies the files its rows use into
`conditions/sets/<kind>/<set>/` (RunDir.set_file) and reads only those copies, so the audit re-derives
every conditioned input from the run directory alone.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from codecarena.arena import ARENA_RATE
from codecarena.conditions.spec import set_name_problem
from codecarena.files import sha256_file
from codecarena.rundir import unsafe_id_reason
from codecarena.text import printable

KINDS = ("noise", "rir")
OPTION = {"noise": "--noise-dir", "rir": "--rir-dir"}
MAX_RIR_S = 10
MIN_RIR_SAMPLES = 32


class SetError(ValueError):
    """A folder that cannot be a set, or a file of it that cannot be used (one line naming it)."""


@dataclass(frozen=True)
class SetFile:
    name: str
    sha256: str
    samples: int


@dataclass(frozen=True)
class FileSet:
    kind: str  # "noise" or "rir"
    name: str
    files: tuple[SetFile, ...]  # in name order

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "name": self.name, "files": [[f.name, f.sha256, f.samples] for f in self.files]}


def named_folder(kind: str, text: str) -> tuple[str, Path]:
    """`[NAME=]DIR` -> (set name, folder): the name is the folder's own unless given."""
    name, sep, folder = text.partition("=")
    path = Path(folder if sep else text)
    name = name if sep else path.resolve().name
    problem = set_name_problem(name)
    if problem:
        raise SetError(f"{OPTION[kind]} {printable(text)}: {problem} (name it: {OPTION[kind]} NAME=DIR)")
    return name, path


def load(kind: str, text: str, min_samples: int) -> tuple[FileSet, Path]:
    """The set a `--noise-dir`/`--rir-dir` option names, checked file by file; SetError in one line."""
    name, folder = named_folder(kind, text)
    shown = f"{OPTION[kind]} {printable(str(folder))}"
    if not folder.is_dir():
        raise SetError(f"{shown}: not a folder")
    paths = sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.is_file() and not p.is_symlink())
    if not paths:
        raise SetError(f"{shown}: holds no files")
    files = []
    for path in paths:
        files.append(_check(kind, path, min_samples, shown))
    return FileSet(kind, name, tuple(files)), folder


def _check(kind: str, path: Path, min_samples: int, shown: str) -> SetFile:
    where = f"{shown}: {printable(path.name)}"
    reason = unsafe_id_reason(path.name)
    if reason:
        raise SetError(f"{where}: the file name is not usable in a run ({reason}); rename it")
    digest = sha256_file(path)
    samples = read(path, digest, where)
    if samples.size < min_samples:
        need = (f"at least as long as the longest utterance ({min_samples} samples)" if kind == "noise"
                else f"at least {MIN_RIR_SAMPLES} samples")
        raise SetError(f"{where}: {samples.size} samples, too short: a {kind} file must be {need}")
    if kind == "rir" and samples.size > MAX_RIR_S * ARENA_RATE:
        raise SetError(f"{where}: {samples.size / ARENA_RATE:.1f} s, longer than the {MAX_RIR_S} s an impulse "
                       "response may be")
    if not np.any(samples):
        raise SetError(f"{where}: silent (every sample is 0)")
    return SetFile(path.name, digest, int(samples.size))


def read(path: Path, sha256: str, where: str = "") -> np.ndarray:
    """A set file's samples (float64, full scale 1.0), read from the very bytes that hash to `sha256`;
    SetError when they do not, or the file is no mono audio at the arena rate."""
    where = where or printable(str(path))
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SetError(f"{where}: unreadable ({exc.strerror})") from None
    import hashlib

    if hashlib.sha256(data).hexdigest() != sha256:
        raise SetError(f"{where}: its sha256 is not the one the plan pins (changed since the run started?)")
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float64", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise SetError(f"{where}: not audio libsndfile reads ({printable(str(exc))})") from None
    if rate != ARENA_RATE:
        raise SetError(f"{where}: {rate} Hz; a set file must be at {ARENA_RATE} Hz (resample it first, e.g. "
                       f"sox IN -r {ARENA_RATE} OUT)")
    if samples.shape[1] != 1:
        raise SetError(f"{where}: {samples.shape[1]} channels; a set file must be mono")
    if not np.all(np.isfinite(samples)):
        raise SetError(f"{where}: holds samples that are not finite")
    return samples[:, 0]
