"""The registry auditor: every problem with a set of entries, one line each, naming the entry.

The parser (`entries.py`) checks structure and formats; this module judges what depends on status or
on more than one entry, and works on `Entry` objects however they were built. See docs/registry.md.
"""

from __future__ import annotations

import importlib.metadata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codecarena.registry.catalog import FAMILIES
from codecarena.registry.entries import (
    lock_file,
    EXACT_PIN,
    EXACT_RELEASE,
    HEX40,
    HEX64,
    LADDER,
    ROLES,
    STATUSES,
    CheckpointFile,
    Entry,
)

# Statuses that claim the runtime was built here: the ladder from `installed` upward.
_AT_LEAST_INSTALLED = LADDER[LADDER.index("installed"):]
# Statuses that claim the codec ran through codecarena: they need a catalog adapter.
_AT_LEAST_PROBED = LADDER[LADDER.index("probed"):]


def pin_gaps(entry: Entry) -> list[str]:
    """What keeps this entry's code and weights from being exactly pinned, whatever its status."""
    gaps = []
    if entry.kind == "codec" and not entry.has_source:
        gaps.append("no [source]")
    if entry.has_source:
        if not entry.source_repository:
            gaps.append("source repository not recorded")
        if entry.source_commit and not HEX40.fullmatch(entry.source_commit):
            gaps.append(f"source commit {entry.source_commit!r} is not a full 40-hex commit")
        if entry.source_release and not EXACT_RELEASE.fullmatch(entry.source_release):
            gaps.append(f"source release {entry.source_release!r} is not an exact version")
        if not entry.source_commit and not entry.source_release:
            gaps.append("source has no full commit or exact release (only commit_prefix/release_note)")
        if entry.source_commit_prefix or entry.source_release_note:
            gaps.append("source records commit_prefix/release_note, which only an unpinned entry may use")
    if entry.partial_checkpoint is not None:
        gaps.append("checkpoint is partial (partial = true)")
    if entry.checkpoint is not None:
        if not HEX40.fullmatch(entry.checkpoint.revision):
            gaps.append(f"checkpoint revision {entry.checkpoint.revision!r} is not a full 40-hex commit")
        if not entry.checkpoint.files:
            gaps.append("checkpoint lists no files")
        for f in entry.checkpoint.files:
            if not f.url.startswith("https://"):
                gaps.append(f"checkpoint file {f.name!r} has no https URL")
            elif not url_fixed(f, entry.checkpoint.revision):
                gaps.append(f"checkpoint file {f.name!r}: URL {f.url} is not at a fixed revision "
                            "(no 40-hex revision, release tag with its commit, or hash-named file in it)")
            if not HEX64.fullmatch(f.sha256):
                gaps.append(f"checkpoint file {f.name!r} has no full sha256")
    return gaps


def url_fixed(f: CheckpointFile, checkpoint_revision: str) -> bool:
    """Whether a file's URL can only ever serve one file: it names a full revision (the file's or the
    checkpoint's, e.g. Hugging Face's /resolve/<commit>/), a release tag whose commit is recorded, or
    a file name carrying the file's own hash prefix (an immutable, hash-named URL)."""
    revision = f.revision or checkpoint_revision
    parts = f.url.split("/")
    if HEX40.fullmatch(revision) and revision in parts:
        return True
    if f.tag and HEX40.fullmatch(f.revision) and f"/releases/download/{f.tag}/" in f.url:
        return True
    return f.sha256[:8] in parts[-1]


def pins_complete(entry: Entry) -> bool:
    return not pin_gaps(entry)


def _lock_lines(entry: Entry) -> list[str] | None:
    resource = lock_file(entry)
    if not resource.is_file():
        return None
    lines = (line.split("#", 1)[0].strip() for line in resource.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def _entry_problems(entry: Entry) -> list[str]:
    at = f"{entry.id}:"
    problems = []
    if entry.status not in STATUSES:
        problems.append(f"{at} unknown status {entry.status!r}")
    problems += [f"{at} unknown role {r!r}" for r in entry.roles if r not in ROLES]
    if entry.kind == "codec" and not entry.roles:
        problems.append(f"{at} a codec must have at least one role")
    gaps = pin_gaps(entry)
    if entry.status != "unpinned":
        problems += [f"{at} status {entry.status!r} but {gap}" for gap in gaps]
    elif not gaps:
        problems.append(f"{at} status 'unpinned' but every pin is complete: promote it to 'registered'")
    if entry.status in _AT_LEAST_PROBED and not entry.codec_family:
        problems.append(f"{at} status {entry.status!r} but no codec_family (no adapter can have run it)")
    if entry.runtime.environment == "isolated":
        lines = _lock_lines(entry) if entry.runtime.lock else None
        if lines is None:
            problems.append(f"{at} isolated runtime lock {entry.runtime.lock!r} missing")
        else:
            problems += [f"{at} lock line {line!r} is not an exact name==version pin"
                         for line in lines if not EXACT_PIN.fullmatch(line)]
            problems += [f"{at} runtime package {pin!r} is not in its lock"
                         for pin in entry.runtime.packages if pin not in lines]
    return problems


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_matches(installed: str, pinned: str) -> bool:
    # PEP 440: "==2.13.0" matches the local build "2.13.0+cpu".
    return installed == pinned or ("+" not in pinned and installed.split("+", 1)[0] == pinned)


def missing_packages(entry: Entry) -> list[tuple[str, str]]:
    """(pin, the version installed or "nothing") of each runtime package of an entry that runs in the
    harness's environment and is not installed at its pin."""
    missing = []
    for pin in entry.runtime.packages if entry.runtime.environment == "main" else ():
        name, version = pin.split("==", 1)
        installed = _installed_version(name.split("[", 1)[0])
        if installed is None or not _version_matches(installed, version):
            missing.append((pin, installed or "nothing"))
    return missing


def _local_problems(entry: Entry, models_dir: Path | None) -> list[str]:
    if entry.status not in _AT_LEAST_INSTALLED:
        return []
    at = f"{entry.id}: status {entry.status!r} but"
    problems = []
    if entry.runtime.environment == "main":
        problems += [f"{at} runtime package {pin} is not installed (found {found})"
                     for pin, found in missing_packages(entry)]
    else:
        try:
            from codecarena.runtime.venvs import env_dir  # type: ignore[import-not-found]
        except ImportError:
            problems.append(f"{at} isolated runtime absent (codecarena.runtime.venvs is not available)")
        else:
            venv = Path(env_dir(entry.id))
            if not (venv / "pyvenv.cfg").is_file():
                problems.append(f"{at} isolated runtime absent (no venv at {venv})")
    command = FAMILIES[entry.codec_family].command if entry.codec_family in FAMILIES else None
    if command is not None:
        from codecarena.registry.binaries import BinaryError, verify_command
        from codecarena.registry.entries import debian_versions

        try:
            verify_command(command, debian_versions(entry))
        except BinaryError as exc:
            problems.append(f"{at} {exc}")
    if entry.checkpoint is not None:
        from codecarena.checkpoints import CheckpointError, resolve

        try:
            resolve(entry.checkpoint, models_dir=models_dir, allow_download=False)
        except CheckpointError as exc:
            problems.append(f"{at} checkpoint absent or different: {exc}")
    return problems


def rule_problems(entries: Iterable[Entry], check_local: bool = False, models_dir: Path | None = None) -> list[str]:
    """Every problem found, one line each, naming the entry; empty when the registry is sound."""
    entries = tuple(entries)
    problems = [f"{registry_id}: duplicate id ({count} entries)"
                for registry_id, count in sorted(Counter(e.id for e in entries).items()) if count > 1]
    covered = {role for e in entries for role in e.roles}
    problems += [f"registry: no entry covers role {role!r}" for role in ROLES if role not in covered]
    if not any("frontier_teacher" in e.roles and "low_bit_teacher" not in e.roles for e in entries):
        problems.append("registry: every frontier_teacher is also a low_bit_teacher (need one that is not)")
    for entry in entries:
        problems += _entry_problems(entry)
        if check_local:
            problems += _local_problems(entry, models_dir)
    return problems


def _weights_row(entry: Entry) -> dict[str, Any]:
    checkpoint = entry.checkpoint
    if checkpoint is None:
        licence = entry.partial_checkpoint.license if entry.partial_checkpoint else ""
        return {"weights_license": licence, "non_commercial": False, "files": 0, "sizes_unpublished": []}
    return {"weights_license": checkpoint.license, "non_commercial": checkpoint.non_commercial,
            "files": len(checkpoint.files), "sizes_unpublished": [f.name for f in checkpoint.files if not f.bytes]}


def list_rows(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    """One row per entry for `codecarena registry list`."""
    return [{"id": e.id, "roles": list(e.roles), "status": e.status, "pins_complete": pins_complete(e),
             "codec_family": e.codec_family, "environment": e.runtime.environment, "why": why(e), **_weights_row(e)}
            for e in entries]


def why(entry: Entry) -> str:
    """The entry's status reason and what runs it here: its adapter, or what blocks one."""
    runs = (f"adapter {FAMILIES[entry.codec_family].module}" if entry.codec_family
            else f"no adapter: {entry.adapter_blocker}")
    return "; ".join(part for part in (entry.status_reason, runs) if part)
