"""dpkg-query's answers, cached by the state of dpkg's database.

A command-line family's binaries are checked against their Debian packages by every command that says
whether the family runs (`codecs`, `run`, each worker): about 30 dpkg-query processes for the five
built-in ones, most of the CPU `codecarena codecs` spent. dpkg answers only from its database, so an
answer stays true while the database does: the key is the arguments plus the size and modification
time of dpkg's status file and of its info folder (which every install, removal and upgrade rewrites).
The answers are kept in this process and in `$XDG_CACHE_HOME/codecarena/dpkg-query.json` (version 1);
a cache file that is unreadable, of another version or of another database state is ignored and
replaced. The files the answers are about are still read each time (their sha256 and md5 are taken by
the caller), so a binary changed in place is still caught.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from codecarena.files import cache_home, read_json, write_json

VERSION = 1
DPKG = "/var/lib/dpkg"
_answers: dict[str, str] = {}
_loaded_for: list[Any] = []


def _state() -> str:
    """What dpkg's answers depend on (a string: nanosecond times are beyond JSON's exact integers);
    "" without a dpkg database (nothing is cached then)."""
    try:
        status, info = os.stat(f"{DPKG}/status"), os.stat(f"{DPKG}/info")
    except OSError:
        return ""
    return f"{status.st_size} {status.st_mtime_ns} {info.st_mtime_ns}"


def _cache_file() -> Any:
    return cache_home() / "dpkg-query.json"


def _load(state: str) -> None:
    if _loaded_for == [state]:
        return
    _answers.clear()
    _loaded_for[:] = [state]
    try:
        data = read_json(_cache_file())
    except (OSError, ValueError):
        return
    if isinstance(data, dict) and data.get("version") == VERSION and data.get("state") == state \
            and isinstance(data.get("answers"), dict):
        _answers.update({k: v for k, v in data["answers"].items() if isinstance(v, str)})


def _save(state: str) -> None:
    try:
        _cache_file().parent.mkdir(parents=True, exist_ok=True)
        write_json(_cache_file(), {"version": VERSION, "state": state, "answers": _answers}, durable=False)
    except OSError:
        pass  # a cache that cannot be written only costs the queries again


def query(*args: str) -> str:
    """dpkg-query's standard output for `args` ("" when it fails or there is no dpkg-query)."""
    state = _state()
    key = "\n".join(args)
    if state:
        _load(state)
        if key in _answers:
            return _answers[key]
    try:
        done = subprocess.run(["dpkg-query", *args], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    out = done.stdout if done.returncode == 0 else ""
    if state and state == _state():  # not cached across a database change during the query
        _answers[key] = out
        _save(state)
    return out
