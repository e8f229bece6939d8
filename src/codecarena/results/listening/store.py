"""A listener's rating file, `listening/<test>/listeners/<listener>.jsonl`: append-only, one line per
answer, each line sealed with its own sha256 and the previous line's.

Every line holds the test's sha256, the listener, the trial and its position in the listener's order,
the order the conditions were shown in, the sha256 of every stimulus heard, the ratings (MUSHRA) or the
choice (A/B), how often and how long each stimulus was played, the page's and the server's clocks,
and where it came from (the server, or an imported file). `previous_sha256` chains the lines, so a
line removed or edited anywhere but at the end breaks the file, which the audit reports.

An append takes an exclusive lock on the file, reads what is there, lets the caller check the new
lines against it, writes them in one write() and fsyncs before returning: an answer acknowledged to
a listener is on disk, and two answers arriving at once are checked one after the other. A torn final
line (a process killed mid-write, never acknowledged) is cut off before the next append and dropped
by the reader.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codecarena.diskspace import DiskFullError, is_disk_full
from codecarena.files import open_unlinked, parse_json, sha256_json
from codecarena.results.listening.definition import ListeningError
from codecarena.results.schema import SchemaError, from_dict

LINE_VERSION = 1
LINE_KINDS = ("training", "mushra", "ab")


@dataclass(frozen=True)
class RatingLine:
    version: int
    kind: str  # training, mushra or ab
    test_sha256: str
    listener: str
    seed: int  # the listener's seed (design.listener_seed)
    trial: str  # the trial id (the training trial's for a training line)
    position: int | None  # where the trial stands in the listener's order (None for training)
    order: list[str]  # condition ids in the order shown
    stimuli: dict[str, str]  # condition id -> sha256 of what was played for it
    ratings: dict[str, int]  # MUSHRA: condition id -> 0..100; {} otherwise
    choice: str | None  # A/B: the condition id preferred, or "none"; None otherwise
    plays: dict[str, int]  # condition id -> times started
    heard_s: dict[str, float]  # condition id -> seconds it was the one playing
    reference_plays: int  # times the open reference was started
    started_at: str  # the page's clock when the trial was shown
    submitted_at: str  # the page's clock when it was submitted
    received_at: str  # this machine's clock when the line was accepted
    via: str  # "server", or "import <sha256 of the imported file>"
    previous_sha256: str  # the line before's line_sha256 ("" for the first)
    line_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def seal(fields: dict[str, Any], previous: str) -> dict[str, Any]:
    """The line `fields` (every field but the two hashes) chained to `previous` and with its digest."""
    line = {**fields, "previous_sha256": previous}
    return {**line, "line_sha256": sha256_json(line)}


def parse_line(data: Any, where: str) -> RatingLine:
    try:
        line = from_dict(RatingLine, data, "line")
    except SchemaError as exc:
        raise ListeningError(f"{where}: not a rating line ({exc})") from None
    if line.version != LINE_VERSION or line.kind not in LINE_KINDS:
        raise ListeningError(f"{where}: version {line.version} / kind {line.kind!r} is not a rating line this "
                             f"codecarena reads (version {LINE_VERSION}, {', '.join(LINE_KINDS)})")
    digest = sha256_json({k: v for k, v in data.items() if k != "line_sha256"})
    if digest != line.line_sha256:
        raise ListeningError(f"{where}: line_sha256 is not the sha256 of the line (edited after it was written?)")
    return line


def read_lines(path: Path) -> tuple[list[RatingLine], bool]:
    """The lines of a rating file, checked and chained, and whether a torn final line was dropped;
    ListeningError naming the file and line otherwise. A missing file has no lines."""
    if not path.exists():
        return [], False
    data = path.read_bytes()
    torn = bool(data) and not data.endswith(b"\n")
    lines: list[RatingLine] = []
    for number, raw in enumerate(data.split(b"\n")[:-1], start=1):
        where = f"{path}: line {number}"
        try:
            parsed = parse_json(raw)
        except ValueError as exc:
            raise ListeningError(f"{where}: not JSON ({exc})") from None
        line = parse_line(parsed, where)
        previous = lines[-1].line_sha256 if lines else ""
        if line.previous_sha256 != previous:
            raise ListeningError(f"{where}: previous_sha256 does not name the line before it (a line was removed, "
                                 "reordered or edited)")
        lines.append(line)
    return lines, torn


def append_lines(path: Path, make: Callable[[list[RatingLine]], list[dict[str, Any]]]) -> list[RatingLine]:
    """Append what `make(lines already there)` returns (line fields without the hashes; it raises to
    refuse), sealed and chained, in one write, fsynced; returns the new lines. Holds the file's lock
    throughout, so that concurrent appends are checked against each other's lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    fd = open_unlinked(path, append=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            new, text = _checked(path, fd, make)
        except BaseException:
            if created and os.fstat(fd).st_size == 0:
                path.unlink(missing_ok=True)  # refused before anything was written: leave no empty file
            raise
        before = os.fstat(fd).st_size
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, before)
            if is_disk_full(exc):
                raise DiskFullError(path, len(text)) from None
            raise
    finally:
        os.close(fd)
    if created:
        _sync_folder(path.parent)
    return new


def _checked(path: Path, fd: int, make: Callable[[list[RatingLine]], list[dict[str, Any]]]) -> tuple[list[RatingLine],
                                                                                                      bytes]:
    """The lines `make` gives for the file as it is (a torn tail cut first), sealed, and their bytes."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        # Never acknowledged: the writer died before its fsync returned.
        os.ftruncate(fd, data.rfind(b"\n") + 1)
    existing, _ = read_lines(path)
    new: list[RatingLine] = []
    sealed: list[dict[str, Any]] = []
    previous = existing[-1].line_sha256 if existing else ""
    for fields in make(existing):
        sealed.append(seal(fields, previous))
        new.append(parse_line(sealed[-1], str(path)))
        previous = new[-1].line_sha256
    return new, "".join(json.dumps(line, sort_keys=True, allow_nan=False) + "\n" for line in sealed).encode()


def _sync_folder(folder: Path) -> None:
    """fsync a folder, so that a file just created in it survives a crash of the machine."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
