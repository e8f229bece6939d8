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
An entry, its folder or its lock that is a symlink is refused, never followed: a run directory is
untrusted input, and a link could read or create a file outside it.

Every row records what it relied on (`reliances`): the identity hash and the sha256 of the value of
each entry its metrics used (the ASR records hold the reference transcript itself, `speaker_sim` the
sha256 of the embedding). The audit compares them with the stored entries, so an edited entry is
found without recomputing it, and a resume recomputes a row of each reference whose entries are
missing, which stores them again (`missing`).
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


@dataclass(frozen=True)
class Reliance:
    """An entry a row's metric records say they were scored with, and the sha256 of its value then."""
    kind: str
    reference_sha256: str
    identity_sha256: str
    value_sha256: str
    shown: str  # the value as a row shows it (a transcript), or its sha256 (an embedding)


def value_sha256(value: Any) -> str:
    return sha256_json(value)


def embedding_record(identity: dict[str, Any], value: list[float]) -> dict[str, str]:
    """What a `speaker_sim` record names of the reference embedding it was scored against."""
    return {"identity_sha256": sha256_json(identity), "sha256": value_sha256(value)}


def reliances(reference_sha256: str, metrics: dict[str, Any]) -> set[Reliance]:
    """The entries a row's metric records relied on: the reference transcript its ASR records hold
    (under the ASR settings' hash) and the embedding its speaker similarity names."""
    found = set()
    for record in metrics.values():
        details = record.get("details") if isinstance(record, dict) else None
        if not isinstance(details, dict):
            continue
        asr, heard = details.get("asr"), details.get("reference_hypothesis")
        if isinstance(asr, dict) and isinstance(heard, str):
            found.add(Reliance("asr_transcript", reference_sha256, str(asr.get("settings_sha256")),
                               value_sha256(heard), repr(heard)))
        embedding = details.get("reference_embedding")
        if isinstance(embedding, dict):
            digest = str(embedding.get("sha256"))
            found.add(Reliance("speaker_embedding", reference_sha256, str(embedding.get("identity_sha256")),
                               digest, f"sha256 {digest[:12]}"))
    return found


def entry_path(root: Path, reliance: Reliance) -> Path:
    return root / reliance.reference_sha256 / _file_name(reliance.kind, reliance.identity_sha256)


def missing(root: Path, wanted: set[Reliance]) -> set[Reliance]:
    """The relied-on entries that `root` does not hold (a deleted `reference_results/`, a lost file)."""
    return {r for r in wanted if not (_HEX64.fullmatch(r.reference_sha256) and _HEX64.fullmatch(r.identity_sha256)
                                      and entry_path(root, r).is_file())}


def _refuse_links(path: Path) -> None:
    for part in (path, path.parent):
        if part.is_symlink():
            raise ReferenceResultError(f"{part}: is a symbolic link; reference results are read and written only "
                                       "as the run's own files")


def parse_entry(path: Path) -> Entry:
    """The entry in `path`, strictly checked against its own fields and its place in the tree."""
    _refuse_links(path)
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
            raise ReferenceResultError(f"{folder}: is a symbolic link or resolves out of {self.root}; codecarena does not write "
                                       "through links (remove it)")
        _refuse_links(path)
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
    try:
        fd = open_unlinked(lock_path, append=True)
    except OSError as exc:
        raise ReferenceResultError(f"{lock_path}: cannot be opened as the run's own lock file ({exc})") from None
    with open(fd, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
