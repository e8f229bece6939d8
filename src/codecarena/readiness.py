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
import shlex
from dataclasses import dataclass

from codecarena.checkpoints import MODELS_ENV, missing_files
from codecarena.registry import user_units
from codecarena.registry.binaries import BinaryError, verify_command
from codecarena.registry.catalog import Family
from codecarena.registry.entries import debian_versions, entry_for_family
from codecarena.registry_rules import missing_packages, pin_gaps
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
    try:
        unit = user_units.load(family.name)
    except user_units.UserUnitError as exc:  # its record cannot be read
        return Readiness("", (str(exc),), (broken_todo(family.name),))
    state = user_state(unit, family)
    runs = "none" if family.supported_weights == "none" else "real"
    return Readiness("" if state.problems else runs, state.problems, (state.todo,) if state.todo else ())


@dataclass(frozen=True)
class UserState:
    """Where a user codec stands against what `codec add` pinned. `word` says it in one word (one of
    USER_WORDS), `problems` why it does not run, one line each, and `todo` the command that makes it
    run ("" when it does)."""

    word: str
    problems: tuple[str, ...]
    todo: str


#: The words `codec list` says a user codec's state in: it runs now; its source (or a program of a
#: command-line codec) is not the pinned one; its source is gone; its own runtime is not built; a kept
#: checkpoint is missing or not its pinned size; its record or declaration cannot be read.
USER_WORDS = ("ready", "changed", "gone", "unbuilt", "incomplete", "broken")


def add_again(unit: user_units.UserUnit) -> str:
    """The `codec add` that pins `unit` again as it was added: its source where it is, the checkpoints
    from where they were added; FILE where codecarena kept no path (a requirements file, a
    command-line codec's declaration)."""
    if unit.source is None:
        return f"codecarena codec add {unit.name} --declaration FILE"
    words = ["codecarena", "codec", "add", unit.name, "--module", unit.source.path]
    for f in unit.checkpoints:
        words += ["--checkpoint", f.origin]
    return shlex.join(words) + (" --requirements FILE" if unit.requirements else "")


def broken_todo(name: str) -> str:
    return f"codecarena codec add {name} --module PATH (or codecarena codec remove {name})"


def user_state(unit: user_units.UserUnit, family: Family | None) -> UserState:
    """`unit` against its pins now (`family`: its declaration as the catalog parsed it, None when it
    could not); the word is the first problem's."""
    if family is None:
        return UserState("broken", (f"user codec {unit.name}: its declaration cannot be read",),
                         broken_todo(unit.name))
    if unit.source is not None:
        try:
            changed = unit.source.current_sha256() != unit.source.sha256
        except user_units.UserUnitError as exc:  # the source is gone: nothing else can be checked against it
            return UserState("gone", (str(exc),), f"codecarena codec add {unit.name} --module NEW_PATH (or "
                                                  f"codecarena codec remove {unit.name})")
    found: list[tuple[str, str]] = []
    if unit.source is not None and changed:
        found.append(("changed", f"its source {unit.source.path} changed since it was added"))
    found += [("changed", problem) for problem in _binary_problems(family, {})]
    if unit.requirements and not is_built(unit.registry_id):
        found.append(("unbuilt", "its own runtime is not built"))
    found += [("incomplete", f"its checkpoint {path} is missing or not the pinned size") for f in unit.checkpoints
              if not (path := unit.checkpoint_path(f.name)).is_file() or path.stat().st_size != f.bytes]
    if not found:
        return UserState("ready", (), "")
    return UserState(found[0][0], tuple(problem for _, problem in found), add_again(unit))
