"""A stage's private folder: its worker writes its output and report there and nowhere else.

Every stage, of every family, writes into a folder of its own job (a cold stage's `RunDir.stage(...).folder`,
a persistent worker's `RunDir.worker(...).folder`), never into the run's shared folders. The harness empties
the folder before the job (keeping the folder itself: a sandboxed persistent worker's Landlock rule
holds that very folder), hands the worker the job with its paths inside it (`into`), and afterwards
copies what the job made to where the run keeps it (`place`): a new file under a random exclusive
name renamed over the destination, read without following a link. The copy is a new inode, so a
descriptor the codec kept open on its output cannot change the placed file later, and a link it left
in its folder is refused rather than followed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from pathlib import Path

from codecarena.files import exclusive_temp
from codecarena.runtime.protocol import Job, StageReport, read_report

#: The report's name in a private folder.
REPORT = "report.json"
#: A sandboxed worker's temporary folder (its TMPDIR), inside its private folder.
TMP = "tmp"


class PlaceError(OSError):
    """What a job left in its folder cannot be placed: missing, a link, not a regular file."""


def prepare(folder: Path) -> None:
    """The folder, empty (created if missing), with an empty TMP folder in it."""
    folder.mkdir(parents=True, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise PlaceError(f"{folder}: a stage's private folder is not a folder")
    _empty(folder)
    (folder / TMP).mkdir()


def discard(folder: Path) -> None:
    """Remove the folder and what a job left in it (its outputs were placed elsewhere)."""
    if folder.is_dir() and not folder.is_symlink():
        _empty(folder)
        folder.rmdir()


def _empty(folder: Path) -> None:
    # A sandboxed codec may make folders it cannot be cleaned out of (mkdir mode 0): open them first.
    for root, dirs, _ in os.walk(folder):
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def into(job: Job, folder: Path) -> Job:
    """The job as its worker gets it: its output (same name) and report inside `folder`."""
    output = str(folder / Path(job.output).name) if job.output else ""
    return dataclasses.replace(job, output=output, report=str(folder / REPORT))


def place(source: Path, dest: Path) -> None:
    """Copy `source` (a regular file, not a link) to `dest` as a new file renamed into place."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PlaceError(f"{source}: the stage wrote no {source.name}") from None
    except OSError as exc:
        raise PlaceError(f"{source}: cannot be read without following a link ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PlaceError(f"{source}: not a regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_temp(dest) as (out, tmp), open(fd, "rb", closefd=False) as src, \
                open(out, "wb", closefd=False) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.replace(tmp, dest)
    finally:
        os.close(fd)


def collect(inner: Job, job: Job) -> StageReport:
    """The report of a job its worker ran as `inner` (in its private folder), read once it is placed
    where `job` names it, and the job's output placed too when the report says the stage succeeded."""
    place(Path(inner.report), Path(job.report))
    report = read_report(Path(job.report))
    if report.ok and job.output:
        place(Path(inner.output), Path(job.output))
    return report
