"""Reference-side results, computed once per reference per run and kept in the run directory.

Every codec configuration of a run is scored against the same reference audio, so what a metric
computes from the reference alone (its ASR transcript, its speaker embedding) is computed once and
reused by every row, by every scoring process of a pool, and by a resumed run. An entry is keyed by
the sha256 of the reference file's bytes and the sha256 of the metric's identity (model files,
settings, library versions: whatever decides the value), so a changed model never reuses a stale
value. Layout: ``<run>/reference_results/<reference sha256>/<kind>-<identity sha256>.json``.

Computing takes an exclusive lock on the entry (a ``.lock`` file beside it), so two scoring processes
reaching the same reference at once compute it once; the entry is written to a temporary file and
renamed into place, so a reader never sees half of one. An entry that does not parse is an error
naming the file, never silently recomputed: `codecarena audit` checks every entry against the rows.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecarena.files import open_unlinked, parse_json, sha256_json, write_json

FORMAT = "codecarena-reference-result"
VERSION = 1
KINDS = ("asr_transcript", "speaker_embedding")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELDS = ("format", "version", "reference_sha256", "kind", "identity", "identity_sha256", "value")


class ReferenceResultError(ValueError):
    """A reference-result file that does not parse or does not match its name."""


@dataclass(frozen=True)
class Entry:
    reference_sha256: str
    kind: str
    identity: dict[str, Any]
    identity_sha256: str
    value: Any


def parse_entry(path: Path) -> Entry:
    """The entry in `path`, strictly checked against its own fields and its place in the tree."""
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReferenceResultError(f"{path}: not a readable JSON file ({type(exc).__name__})") from None
    if not isinstance(data, dict) or sorted(data) != sorted(_FIELDS):
        raise ReferenceResultError(f"{path}: expected exactly the fields {', '.join(_FIELDS)}")
    if data["format"] != FORMAT or data["version"] != VERSION:
        raise ReferenceResultError(f"{path}: format {data['format']!r} version {data['version']!r}, "
                                   f"expected {FORMAT!r} version {VERSION}")
    entry = Entry(data["reference_sha256"], data["kind"], data["identity"], data["identity_sha256"], data["value"])
    if not isinstance(entry.reference_sha256, str) or not _HEX64.fullmatch(entry.reference_sha256):
        raise ReferenceResultError(f"{path}: reference_sha256 is not a sha256")
    if entry.kind not in KINDS:
        raise ReferenceResultError(f"{path}: unknown kind {entry.kind!r} (known: {', '.join(KINDS)})")
    if not isinstance(entry.identity, dict) or sha256_json(entry.identity) != entry.identity_sha256:
        raise ReferenceResultError(f"{path}: identity_sha256 does not match its identity")
    if path.name != _file_name(entry.kind, entry.identity_sha256) or path.parent.name != entry.reference_sha256:
        raise ReferenceResultError(f"{path}: the file's name or folder does not match its content")
    _check_value(path, entry.kind, entry.value)
    return entry


def _check_value(path: Path, kind: str, value: Any) -> None:
    if kind == "asr_transcript" and not isinstance(value, str):
        raise ReferenceResultError(f"{path}: an asr_transcript value must be a string")
    if kind == "speaker_embedding" and not (
            isinstance(value, list) and value and all(isinstance(v, float) for v in value)):
        raise ReferenceResultError(f"{path}: a speaker_embedding value must be a non-empty list of floats")


def _file_name(kind: str, identity_hash: str) -> str:
    return f"{kind}-{identity_hash}.json"


def entries(root: Path) -> Iterator[Path]:
    """Every entry file under `root` (none when it does not exist)."""
    if root.is_dir():
        yield from sorted(root.glob("*/*.json"))


class ReferenceResults:
    """Reference-side values by (kind, reference sha256, identity): in memory, and in `root` when
    given (a run directory's `reference_results/`; None keeps them in memory only)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._memory: dict[tuple[str, str, str], Any] = {}

    def get(self, kind: str, reference_sha256: str, identity: dict[str, Any], compute: Callable[[], Any]) -> Any:
        """The stored value, or `compute()`'s, stored first. Exceptions of `compute` propagate and
        store nothing."""
        if kind not in KINDS:
            raise ValueError(f"unknown reference-result kind {kind!r}")
        identity_hash = sha256_json(identity)
        key = (kind, reference_sha256, identity_hash)
        if key not in self._memory:
            self._memory[key] = self._from_disk(kind, reference_sha256, identity, identity_hash, compute)
        return self._memory[key]

    def _from_disk(self, kind: str, reference_sha256: str, identity: dict[str, Any], identity_hash: str,
                   compute: Callable[[], Any]) -> Any:
        if self.root is None:
            return compute()
        if not _HEX64.fullmatch(reference_sha256):
            raise ValueError(f"reference sha256 {reference_sha256!r} is not a sha256")
        folder = self.root / reference_sha256
        path = folder / _file_name(kind, identity_hash)
        folder.mkdir(parents=True, exist_ok=True)
        # A planted link at the entry's folder would put the entry, its lock and its temporary file
        # outside the run.
        if folder.is_symlink() or folder.resolve().parent != self.root.resolve():
            raise ReferenceResultError(f"{folder}: is a link out of {self.root}; codecarena does not write "
                                       "through links (remove it)")
        with _locked(path.with_name(f".{path.name}.lock")):
            if path.exists():
                return parse_entry(path).value
            value = compute()
            data = {"format": FORMAT, "version": VERSION, "reference_sha256": reference_sha256, "kind": kind,
                    "identity": identity, "identity_sha256": identity_hash, "value": value}
            write_json(path, data)
            return value


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(open_unlinked(lock_path, append=True), "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
