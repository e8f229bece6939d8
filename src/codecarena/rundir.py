"""The run directory: every path codecarena writes, deletes or reads inside a run is built here.

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
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from codecarena.files import LinkedFileError, open_unlinked

# Letters, digits, '.', '_' and '-'; not starting with a dot (no hidden files, no '.' or '..'), at
# most 128 characters so that id + suffix stays far below any file system's name limit.
SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
SAFE_ID_RULE = "letters, digits, '.', '_' and '-', not starting with a dot, at most 128 characters"

ROWS = "rows.jsonl"
RUN = "run.json"
SUMMARY = "summary.json"
LOCK = ".lock"


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


def check_id(text: str, where: str) -> str:
    """`text` if it is a safe id, else UnsafePathError naming `where` (the file it came from)."""
    reason = unsafe_id_reason(text)
    if reason:
        raise UnsafePathError(f"{where}: utterance id {reason}")
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
        return self.path("references", f"{check_id(utterance, str(self.root))}{suffix}")

    def payload(self, codec_slug: str, utterance: str) -> Path:
        return self.path("payloads", codec_slug, f"{check_id(utterance, str(self.root))}.ccap")

    def decoded(self, codec_slug: str, utterance: str) -> Path:
        return self.path("decoded", codec_slug, f"{check_id(utterance, str(self.root))}.wav")

    def work(self, codec_slug: str, utterance: str) -> Path:
        return self.path("work", codec_slug, check_id(utterance, str(self.root)))

    def job_folder(self, codec_slug: str, utterance: str, stage: str) -> Path:
        """A cold stage's private folder, the only place its worker writes (runtime/private.py)."""
        return self.path("work", codec_slug, check_id(utterance, str(self.root)), _safe_name(stage, self.root))

    def worker_folder(self, name: str) -> Path:
        """A persistent worker's private folder, beside its log."""
        return self.path("work", "persistent", _safe_name(name, self.root))

    def stability(self, codec_slug: str, utterance: str, part: str) -> Path:
        """A row's token-stability measurement (results/stability.py): its record or an extra encode's payload."""
        if part not in ("json", "reencode.ccap", "shift.ccap"):
            raise UnsafePathError(f"{self.root}: stability part {part!r} is not json, reencode.ccap or shift.ccap")
        return self.path("stability", codec_slug, f"{check_id(utterance, str(self.root))}.{part}")

    def reference_results(self) -> Path:
        """What metrics computed from a reference alone (metrics/reference_results.py)."""
        return self.path("reference_results")

    def persistent_logs(self) -> Path:
        return self.path("work", "persistent")
