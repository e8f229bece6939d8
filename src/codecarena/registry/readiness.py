"""Whether a codec family runs here now, and the commands that would make it run (`codecarena codecs`).

A quick, read-only look at what a run checks before its first row (`selection.py`), without its side
effects (nothing is downloaded, a runtime's copy of the harness is not refreshed) and without hashing
model files (a run verifies each one's sha256 when it loads it): the family's runtime (the harness's
packages at the entry's pins, or its isolated runtime built), its registry pins complete (else its
real weights are refused), its model files in the mirror or the cache at their pinned sizes, a
command-line family's binaries at their pinned Debian versions, and a user codec's source, runtime
and checkpoints as `codec add` pinned them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from codecarena.checkpoints import MODELS_ENV, missing_files
from codecarena.codecs.binaries import BinaryError, verify_command
from codecarena.registry import user_units
from codecarena.registry.catalog import Family
from codecarena.registry.entries import debian_versions, entry_for_family
from codecarena.registry.rules import missing_packages, pin_gaps
from codecarena.runtime.venvs import is_built

# What installs the Debian packages (and the harness's own packages) at their pins.
INSTALL = "bash scripts/install.sh"


@dataclass(frozen=True)
class Readiness:
    # What runs here now: "none" (a codec without weights), "real" (its real or its own weights),
    # "synthetic" (only seeded weights: its real ones are missing or refused), or "" (nothing yet).
    runs: str
    problems: tuple[str, ...]  # what stops it, or stops its real weights; one line each
    commands: tuple[str, ...]  # run in this order, they make it run (with real weights where it can)
    synthetic_only: bool = False  # its real weights are refused here whatever is run (registry pins incomplete)


def readiness(family: Family) -> Readiness:
    return _user(family) if family.origin == "user" else _builtin(family)


def _builtin(family: Family) -> Readiness:
    entry = entry_for_family(family.name)
    problems: list[str] = []
    commands: list[str] = []
    if entry.runtime.environment == "isolated":
        if not is_built(entry.id):
            problems.append("its isolated runtime is not built")
            commands.append(f"codecarena env create {family.name}")
    elif missing := missing_packages(entry):
        problems.append("packages not installed at their pins: "
                        + ", ".join(f"{pin} (found {found})" for pin, found in missing))
        commands.append(INSTALL)
    binaries = _binary_problems(family, debian_versions(entry))
    problems += binaries
    if binaries and INSTALL not in commands:
        commands.append(INSTALL)
    architecture_runs = not problems
    if family.supported_weights == "none":
        return Readiness("none" if architecture_runs else "", tuple(problems), tuple(commands))
    synthetic = family.supported_weights == "real_or_synthetic"
    if pin_gaps(entry) or entry.status == "unpinned":
        problems.append(f"registry entry {entry.id} does not pin its weights completely (status {entry.status}): "
                        "real weights are refused")
        return Readiness("synthetic" if architecture_runs and synthetic else "", tuple(problems), tuple(commands),
                         synthetic_only=synthetic)
    if entry.checkpoint is not None:
        folder, missing_names = missing_files(entry.checkpoint)
        if missing_names:
            problems.append(f"model files not in {folder}: {', '.join(missing_names)}")
            # A mirror is authoritative (a run never falls back to the cache), and fetch fills the cache.
            if os.environ.get(MODELS_ENV):
                commands.append(f"unset {MODELS_ENV} (or copy the files into that mirror)")
            commands.append(f"codecarena fetch {family.name}")
            return Readiness("synthetic" if architecture_runs and synthetic else "", tuple(problems),
                             tuple(commands))
    return Readiness("real" if architecture_runs else "", tuple(problems), tuple(commands))


def _binary_problems(family: Family, pins: dict[str, str]) -> list[str]:
    """Why a command-line family's binaries are not the pinned ones (`pins`: Debian package -> version)."""
    if family.command is None:
        return []
    try:
        verify_command(family.command, pins)
    except BinaryError as exc:
        return [str(exc)]
    return []


def _user(family: Family) -> Readiness:
    again = f"codecarena codec add {family.name} ..."
    try:
        unit = user_units.load(family.name)
        changed = unit.source is not None and unit.source.current_sha256() != unit.source.sha256
    except user_units.UserUnitError as exc:  # its record cannot be read, or its source is gone
        return Readiness("", (str(exc),), (again,))
    problems = []
    if changed and unit.source is not None:
        problems.append(f"its source {unit.source.path} changed since it was added")
    if unit.requirements and not is_built(unit.registry_id):
        problems.append("its own runtime is not built")
    for f in unit.checkpoints:
        path = unit.checkpoint_path(f.name)
        if not path.is_file() or path.stat().st_size != f.bytes:
            problems.append(f"its checkpoint {path} is missing or not the pinned size")
    problems += _binary_problems(family, {})
    runs = "none" if family.supported_weights == "none" else "real"
    return Readiness("" if problems else runs, tuple(problems), (again,) if problems else ())
