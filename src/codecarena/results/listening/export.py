"""Crowdsourcing without a server of ours: the static bundle, and the import of what it gives back.

`listen --export DIR` writes a folder any static web host can serve: the page (index.html, listen.js,
listen.css), manifest.json (the test as the page needs it, every stimulus by sha256) and the stimuli
as audio/<sha256>.wav, each copied and checked against its hash, and SHA256SUMS over every file. A
listener's answers stay in the browser and are downloaded as a file at the end.

`listen --import FILE` adds such a file to the listener's rating file in the run. Every answer goes
through the server's check (answers.py) in order, against what the listener already has, and the
file's lines are appended together or not at all: one answer refused (another test, a stimulus hash
that is not the test's, a rating outside 0-100, an answer already there) refuses the file, with the
line and the reason, and nothing is written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

from codecarena.files import copy_verified, parse_json, sha256_file
from codecarena.results.listening.answers import AnswerError, check_answer
from codecarena.results.listening.definition import ListeningError, ListeningTest, stimulus_paths, stimulus_problems
from codecarena.results.listening.manifest import PAGE_FILES, client_manifest, page_file
from codecarena.results.listening.store import RatingLine, append_lines
from codecarena.rundir import RunDir, unsafe_id_reason

MAX_IMPORT_BYTES = 4 << 20  # a listener's answers: a few KiB per trial


def export_bundle(home: RunDir, test: ListeningTest, dest: Path) -> list[Path]:
    """The static bundle of `test` in `dest` (a folder that is missing or empty); the files written."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ListeningError(f"--export {dest}: exists and is not an empty folder (nothing is overwritten)")
    paths = stimulus_paths(home, test)
    problems = stimulus_problems(paths)
    if problems:
        raise ListeningError(f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    (dest / "audio").mkdir(parents=True, exist_ok=True)
    written = []
    for name in PAGE_FILES:
        (dest / name).write_bytes(page_file(name))
        written.append(dest / name)
    (dest / "manifest.json").write_text(json.dumps(client_manifest(test, "static"), indent=1, sort_keys=True) + "\n",
                                        encoding="utf-8")
    written.append(dest / "manifest.json")
    for sha, source in paths.items():
        target = dest / "audio" / f"{sha}.wav"
        if not copy_verified(source, target, sha):
            raise ListeningError(f"{source}: changed while it was copied (no longer hashes to {sha[:12]})")
        written.append(target)
    sums = "".join(f"{sha256_file(p)}  {p.relative_to(dest).as_posix()}\n" for p in sorted(written))
    (dest / "SHA256SUMS").write_text(sums, encoding="utf-8")
    return [*written, dest / "SHA256SUMS"]


def _answers(path: Path) -> tuple[list[dict[str, Any]], str]:
    """The answers of a downloaded ratings file, and the file's sha256."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ListeningError(f"--import {path}: {exc.strerror}") from None
    if size > MAX_IMPORT_BYTES:
        raise ListeningError(f"--import {path}: {size} bytes, more than a ratings file holds ({MAX_IMPORT_BYTES})")
    data = path.read_bytes()
    answers = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            answer = parse_json(raw)
        except ValueError as exc:
            raise ListeningError(f"--import {path}: line {number} is not JSON ({exc}); nothing was imported") from None
        if not isinstance(answer, dict):
            raise ListeningError(f"--import {path}: line {number} is not an answer; nothing was imported")
        answers.append(answer)
    if not answers:
        raise ListeningError(f"--import {path}: holds no answer")
    return answers, hashlib.sha256(data).hexdigest()


def import_ratings(home: RunDir, tests: list[ListeningTest], path: Path) -> tuple[ListeningTest, str, int]:
    """Append the answers of the downloaded file `path` to its listener's file in the test they are for;
    (the test, the listener, the number of answers)."""
    answers, digest = _answers(path)
    wanted = {a.get("test_sha256") for a in answers}
    listeners = {a.get("listener") for a in answers}
    if len(wanted) != 1 or len(listeners) != 1:
        raise ListeningError(f"--import {path}: its answers name {len(wanted)} tests and {len(listeners)} listeners; a "
                             "ratings file holds one listener's answers to one test")
    sha, listener = wanted.pop(), listeners.pop()
    test = next((t for t in tests if t.test_sha256 == sha), None)
    if test is None:
        raise ListeningError(f"--import {path}: its answers are for test {str(sha)[:12]!r}, which {home.root} does not "
                             f"hold (tests: {', '.join(f'{t.name} {t.test_sha256[:12]}' for t in tests) or 'none'})")
    if not isinstance(listener, str) or unsafe_id_reason(listener):
        raise ListeningError(f"--import {path}: listener id {unsafe_id_reason(listener)}")
    received = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")

    def checked(history: list[RatingLine]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        seen = list(history)
        for number, answer in enumerate(answers, start=1):
            try:
                fields = check_answer(test, answer, seen, received, f"import {digest}")
            except AnswerError as exc:
                raise ListeningError(f"--import {path}: answer {number}: {exc}; nothing was imported") from None
            out.append(fields)
            seen.append(RatingLine(**fields, previous_sha256="", line_sha256=""))
        return out

    append_lines(home.listener_ratings(test.name, listener), checked)
    return test, listener, len(answers)
