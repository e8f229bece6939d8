"""The run directory: every path codecarena writes, deletes or reads inside a run is built here (a row's
files, each stage's job file, log, report and private folder, the workers' and the scoring process's
logs, a listening test's files), except inside `reference_results/`, whose store keeps its own layout (metrics/reference_results.py).

Utterance ids and codec slugs become file names, and ids come from user files (manifest.json, a Kaldi
wav.scp, file names). An id that is an absolute path or climbs with `..` would otherwise make a run
overwrite and delete files outside its directory. So ids must match `SAFE_ID`, and every path is
checked, after resolving symlinks, to stay inside the run directory before it is handed out. Rows store
only run-relative paths, which `resolve()` turns back into paths under the same check.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from codecarena.files import LinkedFileError, open_unlinked, sha256_file

# Letters, digits, '.', '_' and '-'; not starting with a dot (no hidden files, no '.' or '..'), at
# most 128 characters so that id + suffix stays far below any file system's name limit.
SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
SAFE_ID_RULE = "letters, digits, '.', '_' and '-', not starting with a dot, at most 128 characters"

ROWS = "rows.jsonl"
RUN = "run.json"
SUMMARY = "summary.json"
LOCK = ".lock"
LISTENING = "listening"
# What a listening test's folder holds besides anchors/ and listeners/ (docs/listening.md).
LISTENING_FILES = ("test.json", "results.json")


@dataclass(frozen=True)
class StageFiles:
    """Where one stage's files go: the job file its worker reads, the worker's log, the report the
    harness places, and the private folder the worker writes into (runtime/private.py)."""
    job: Path
    log: Path
    report: Path
    folder: Path

    @classmethod
    def scratch(cls, folder: Path, name: str) -> StageFiles:
        """A stage's files in a scratch folder outside any run (the audit's fresh decode, `stream`)."""
        return cls(folder / f"{name}.job.json", folder / f"{name}.log", folder / f"{name}.report.json", folder / name)


@dataclass(frozen=True)
class WorkerFiles:
    """A persistent worker's log and private folder."""
    log: Path
    folder: Path

    @classmethod
    def scratch(cls, folder: Path, name: str) -> WorkerFiles:
        """A persistent worker's files in a scratch folder outside any run."""
        return cls(folder / f"{name}.log", folder / name)


@dataclass(frozen=True)
class RowFiles:
    """Every file one row (a codec configuration x an utterance) writes in its run."""
    work: Path  # work/<codec>/<utt>/: the stages' job files, logs, reports and private folders
    payload: Path  # payloads/<codec>/<utt>.ccap
    decoded: Path  # decoded/<codec>/<utt>.wav
    replay: Path  # work/<codec>/<utt>/replay.wav, removed once compared
    impaired: Path  # channel/<codec>/<utt>.ccap: the payload as a channel delivers it
    trace: Path  # channel/<codec>/<utt>.trace.json
    condition_input: Path  # conditions/<codec>/<utt>.wav: the conditioned input the encoder gets
    condition_trace: Path  # conditions/<codec>/<utt>.trace.json


class RunLockError(ValueError):
    """A run directory codecarena may not write into now: another run holds it, or it holds links."""


class UnsafePathError(ValueError):
    """An id or a stored path that would leave the run directory; the message names both."""


def unsafe_id_reason(text: object) -> str:
    """Why `text` cannot be an utterance id ('' when it can)."""
    if not isinstance(text, str) or not SAFE_ID.fullmatch(text):
        return f"{text!r} is not a safe id ({SAFE_ID_RULE})"
    return ""


def _safe_name(text: str, root: Path) -> str:
    if not SAFE_ID.fullmatch(text):
        raise UnsafePathError(f"{root}: {text!r} is not a safe folder name ({SAFE_ID_RULE})")
    return text


def check_id(text: str, where: str, what: str = "utterance id") -> str:
    """`text` if it is a safe id, else UnsafePathError naming `where` (the file it came from) and `what`."""
    reason = unsafe_id_reason(text)
    if reason:
        raise UnsafePathError(f"{where}: {what} {reason}")
    return text


class RunDir:
    """A run directory and the one place that builds paths in it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def path(self, *parts: str) -> Path:
        """root/parts..., proven to stay inside root (symlinks resolved) or UnsafePathError."""
        for part in parts:
            if part in ("", ".", "..") or "/" in part or "\\" in part or "\0" in part:
                raise UnsafePathError(f"{self.root}: path component {part!r} would leave the run directory")
        return self._inside(self.root.joinpath(*parts), "/".join(parts))

    def _inside(self, path: Path, shown: str) -> Path:
        resolved = path.resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise UnsafePathError(f"{self.root}: {shown!r} resolves to {resolved}, outside the run directory")
        return path

    def resolve(self, relative: str) -> Path:
        """A path a row stored (run-relative, '/'-separated) back to a checked path in this run."""
        if not isinstance(relative, str) or not relative:
            raise UnsafePathError(f"{self.root}: stored path {relative!r} is empty")
        pure = PurePosixPath(relative)
        if pure.is_absolute() or Path(relative).is_absolute() or ".." in pure.parts or "\\" in relative:
            raise UnsafePathError(f"{self.root}: stored path {relative!r} is not inside the run directory")
        return self._inside(self.root.joinpath(*pure.parts), relative)

    def hold(self, files: Iterable[tuple[Any, Any]]) -> bool:
        """Whether every (stored path, sha256) names a file inside the run that still has that hash:
        what a resume asks of the files a row names before it keeps the row."""
        for relative, digest in files:
            try:
                path = self.resolve(relative)
            except UnsafePathError:
                return False
            if not path.is_file() or sha256_file(path) != digest:
                return False
        return True

    def relative(self, path: Path) -> str:
        """The run-relative form a row stores; a path outside the run is refused, never stored."""
        resolved = Path(path).resolve()
        try:
            return resolved.relative_to(self.root).as_posix()
        except ValueError:
            raise UnsafePathError(f"{self.root}: {path} is outside the run directory") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the run's lock for writing into it: refused (RunLockError, one line) while another
        codecarena process holds it, or when the run holds a link anywhere (`refuse_links`). The lock file
        is opened without following a link and never truncated."""
        try:
            fd = open_unlinked(self.lock, truncate=False)
        except (LinkedFileError, UnsafePathError) as exc:
            raise RunLockError(str(exc)) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunLockError(f"{self.root}: another codecarena run is using this directory") from None
            try:
                self.refuse_links()
            except UnsafePathError as exc:
                raise RunLockError(str(exc)) from None
            yield
        finally:
            os.close(fd)

    def refuse_links(self) -> None:
        """UnsafePathError naming the first symlink, hard-linked file or special file anywhere in the
        run (and how many there are). A run directory restored from an archive or copied with links
        could otherwise point any name codecarena writes at a file outside the run; refusing them
        all is simpler to trust than proving every write safe (which files.py does as well)."""
        found: list[str] = []
        for folder, dirs, files in os.walk(self.root):
            for name in dirs + files:
                path = Path(folder, name)
                info = path.lstat()
                shown = path.relative_to(self.root).as_posix()
                if stat.S_ISLNK(info.st_mode):
                    found.append(f"{shown!r} is a symbolic link to {os.readlink(path)!r}")
                elif stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                    found.append(f"{shown!r} has {info.st_nlink} hard links")
                elif not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                    found.append(f"{shown!r} is not a regular file or folder")
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise UnsafePathError(f"{self.root}: {found[0]}{more}; codecarena does not write into a run "
                                  "directory holding links: remove them, or copy the run without links "
                                  "(cp -rL)")

    # The layout (docs/results.md lists it).
    @property
    def rows(self) -> Path:
        return self.path(ROWS)

    @property
    def run_json(self) -> Path:
        return self.path(RUN)

    @property
    def summary(self) -> Path:
        return self.path(SUMMARY)

    @property
    def lock(self) -> Path:
        return self.path(LOCK)

    def reference(self, utterance: str, suffix: str) -> Path:
        if suffix not in (".wav", ".flac"):
            raise UnsafePathError(f"{self.root}: reference suffix {suffix!r} is not .wav or .flac")
        return self.path("references", f"{self._id(utterance)}{suffix}")

    def _id(self, utterance: str) -> str:
        return check_id(utterance, str(self.root))

    def payload(self, codec_slug: str, utterance: str) -> Path:
        return self.path("payloads", codec_slug, f"{self._id(utterance)}.ccap")

    def decoded(self, codec_slug: str, utterance: str) -> Path:
        return self.path("decoded", codec_slug, f"{self._id(utterance)}.wav")

    def work(self, codec_slug: str, utterance: str) -> Path:
        return self.path("work", codec_slug, self._id(utterance))

    def row(self, codec_slug: str, utterance: str) -> RowFiles:
        """Every file of the row of `codec_slug` x `utterance`."""
        utt = self._id(utterance)
        return RowFiles(work=self.work(codec_slug, utt), payload=self.payload(codec_slug, utt),
                        decoded=self.decoded(codec_slug, utt), replay=self.path("work", codec_slug, utt, "replay.wav"),
                        impaired=self.path("channel", codec_slug, f"{utt}.ccap"),
                        trace=self.path("channel", codec_slug, f"{utt}.trace.json"),
                        condition_input=self.path("conditions", codec_slug, f"{utt}.wav"),
                        condition_trace=self.path("conditions", codec_slug, f"{utt}.trace.json"))

    def hop(self, codec_slug: str, utterance: str, hop: int) -> tuple[Path, Path]:
        """The payload and decoded audio of hop `hop` (1, 2, ...) of a tandem or generations condition:
        `conditions/<codec>/<utt>.hop<k>.ccap` and `.hop<k>.wav` (the last hop decodes into the row's
        conditioned input instead)."""
        utt = self._id(utterance)
        if int(hop) < 1:
            raise UnsafePathError(f"{self.root}: hop {hop!r} is not a positive number")
        return (self.path("conditions", codec_slug, f"{utt}.hop{int(hop)}.ccap"),
                self.path("conditions", codec_slug, f"{utt}.hop{int(hop)}.wav"))

    def set_file(self, kind: str, set_name: str, file_name: str) -> Path:
        """The run's copy of a file of a --noise-dir or --rir-dir set: `conditions/sets/<kind>/<set>/<file>`."""
        if kind not in ("noise", "rir"):
            raise UnsafePathError(f"{self.root}: set kind {kind!r} is not noise or rir")
        return self.path("conditions", "sets", kind, _safe_name(set_name, self.root), _safe_name(file_name, self.root))

    def stage(self, codec_slug: str, utterance: str, stage: str) -> StageFiles:
        """The files of a row's stage (encode, decode, replay, or an extra encode of the ledger's stability
        measurement): `<stage>.job.json`, `<stage>.log`, `<stage>.report.json` and the private folder
        `<stage>/`, the only place its worker writes (runtime/private.py), all in the row's work folder."""
        utt, name = self._id(utterance), _safe_name(stage, self.root)
        return StageFiles(job=self.path("work", codec_slug, utt, f"{name}.job.json"),
                          log=self.path("work", codec_slug, utt, f"{name}.log"),
                          report=self.path("work", codec_slug, utt, f"{name}.report.json"),
                          folder=self.path("work", codec_slug, utt, name))

    def shifted_input(self, codec_slug: str, utterance: str) -> Path:
        """The delayed reference the stability measurement encodes (results/stability.py), removed after it."""
        return self.path("work", codec_slug, self._id(utterance), "stability-shift-input.wav")

    def worker(self, name: str) -> WorkerFiles:
        """A persistent worker's log (`work/persistent/<name>.log`) and private folder beside it."""
        safe = _safe_name(name, self.root)
        return WorkerFiles(log=self.path("work", "persistent", f"{safe}.log"),
                           folder=self.path("work", "persistent", safe))

    def scoring_log(self, pid: int) -> Path:
        """The log of the scoring process an executor process with this pid keeps."""
        return self.path("work", "scoring", f"scoring-{int(pid)}.log")

    def stability(self, codec_slug: str, utterance: str, part: str) -> Path:
        """A row's token-stability measurement (results/stability.py): its record or an extra encode's payload."""
        if part not in ("json", "reencode.ccap", "shift.ccap"):
            raise UnsafePathError(f"{self.root}: stability part {part!r} is not json, reencode.ccap or shift.ccap")
        return self.path("stability", codec_slug, f"{self._id(utterance)}.{part}")

    def reference_results(self) -> Path:
        """What metrics computed from a reference alone (metrics/reference_results.py, a store with its own
        layout and format inside this folder)."""
        return self.path("reference_results")

    # Listening tests (docs/listening.md): listening/<test>/test.json, results.json, anchors/, listeners/.
    def listening(self) -> Path:
        return self.path(LISTENING)

    def listening_file(self, test: str, part: str) -> Path:
        if part not in LISTENING_FILES:
            raise UnsafePathError(f"{self.root}: listening file {part!r} is not one of {', '.join(LISTENING_FILES)}")
        return self.path(LISTENING, check_id(test, str(self.root), "test name"), part)

    def anchor(self, test: str, utterance: str, cutoff_hz: int) -> Path:
        """A low-pass anchor a listening test made from an utterance's reference."""
        if not isinstance(cutoff_hz, int) or not 0 < cutoff_hz < 1_000_000:
            raise UnsafePathError(f"{self.root}: anchor cut-off {cutoff_hz!r} is not a frequency in Hz")
        return self.path(LISTENING, check_id(test, str(self.root), "test name"), "anchors",
                         f"{check_id(utterance, str(self.root))}.lp{cutoff_hz}.wav")

    def listener_ratings(self, test: str, listener: str) -> Path:
        """One listener's append-only rating file in a listening test."""
        return self.path(LISTENING, check_id(test, str(self.root), "test name"), "listeners",
                         f"{check_id(listener, str(self.root), 'listener id')}.jsonl")
