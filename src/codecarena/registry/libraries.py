"""The shared libraries a program of a user's command-line codec loads, pinned like the program itself.

A program is often little more than its libraries: ffmpeg's codecs live in libavcodec. `codec add` asks
the dynamic loader which libraries each program loads (`ldd`, in the environment the codec's commands run
with, so with the same search path) and pins every file it names by path, size and sha256 (of the file,
links followed), as the built-in units pin theirs by Debian package version. `check` holds a program to
those pins before a run and an audit, in every worker and in `codec list`: a pinned file that changed is
refused in one line naming the library and both hashes, and so is a program that now loads a library
that was not pinned, or no longer one that was. What a program opens itself while it runs (dlopen,
plugins) is not named by the loader and is not pinned; a script or a static program loads none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from codecarena.files import sha256_file

# `ldd` prints `name => /path (0x...)`, `/path (0x...)` (the loader), `name => not found`, or a
# name without a path (the kernel's vDSO, which is no file).
_FOUND = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)\s*$")
_MISSING = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")
_NOT_DYNAMIC = ("not a dynamic executable", "statically linked")


class LibraryError(ValueError):
    """A library that cannot be pinned or differs from its pin (one line: which library and how)."""


@dataclass(frozen=True)
class Library:
    binary: str  # the program (its {name} in the declaration) that loads it
    path: str  # as the loader resolves it
    sha256: str  # of the file, links followed
    bytes: int


def loaded_by(path: str) -> tuple[str, ...]:
    """The files the dynamic loader maps for the program at `path`, in its order; none for a script or a
    static program."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise LibraryError("ldd (Debian's libc-bin) is not installed: the libraries a program loads cannot be named")
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}
    try:
        done = subprocess.run([ldd, path], capture_output=True, text=True, env=env, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LibraryError(f"{path}: ldd failed ({exc})") from None
    text = done.stdout + done.stderr
    if any(phrase in text for phrase in _NOT_DYNAMIC):
        return ()
    missing = [m.group(1) for line in text.splitlines() if (m := _MISSING.match(line))]
    if missing:
        raise LibraryError(f"{path}: needs {missing[0]}, which the dynamic loader does not find")
    if done.returncode != 0:
        raise LibraryError(f"{path}: ldd exited with status {done.returncode}: {' '.join(text.split())[-300:]}")
    return tuple(dict.fromkeys(m.group(1) for line in text.splitlines() if (m := _FOUND.match(line))))


def pin(binary: str, path: str) -> tuple[Library, ...]:
    """Every library the program `binary` at `path` loads, as it is now."""
    found = []
    for library in loaded_by(path):
        try:
            found.append(Library(binary, library, sha256_file(Path(library)), os.stat(library).st_size))
        except OSError as exc:
            raise LibraryError(f"{library} (loaded by {binary}): {exc.strerror or exc}") from None
    return tuple(found)


def check(binary: str, path: str, pins: Iterable[Library]) -> None:
    """The program `binary` at `path` loads exactly its pinned libraries, each unchanged; LibraryError
    (one line) otherwise. The pinned files are checked first: a changed file is named with both hashes."""
    pinned = [p for p in pins if p.binary == binary]
    problems = changed(pinned)
    if problems:
        raise LibraryError(problems[0])
    loads = loaded_by(path)
    added = [name for name in loads if name not in {p.path for p in pinned}]
    if added:
        raise LibraryError(f"binary {binary} ({path}) now loads {added[0]}, which was not pinned")
    gone = [p.path for p in pinned if p.path not in loads]
    if gone:
        raise LibraryError(f"binary {binary} ({path}) no longer loads {gone[0]}, which was pinned")


def changed(pins: Iterable[Library]) -> list[str]:
    """One line for each pinned library whose file is gone or is not the pinned one."""
    problems = []
    for library in pins:
        where = f"library {library.path} (loaded by {library.binary})"
        try:
            size, now = os.stat(library.path).st_size, sha256_file(Path(library.path))
        except OSError as exc:
            problems.append(f"{where}: {exc.strerror or exc}; it was pinned at sha256 {library.sha256}")
            continue
        if size != library.bytes or now != library.sha256:
            problems.append(f"{where}: sha256 {now} ({size} bytes) differs from its pin {library.sha256} "
                            f"({library.bytes} bytes)")
    return problems
