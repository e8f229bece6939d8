"""What `codecarena codec list` and `codec show NAME` print: each user codec's pins and where it stands
against them now (readiness.py `user_state`), in words; `codec show NAME --json` prints the
record itself (registry/user_units.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from codecarena.commands.common import CliError
from codecarena.plural import counted

if TYPE_CHECKING:
    from codecarena.registry.catalog import Family
    from codecarena.readiness import UserState
    from codecarena.registry.user_units import UserUnit


def _state(unit: UserUnit) -> tuple[UserState, Family | None]:
    from codecarena.registry.catalog import FAMILIES
    from codecarena.readiness import user_state

    family = FAMILIES.get(unit.name)
    family = family if family is not None and family.origin == "user" else None
    return user_state(unit, family), family


def _git(unit: UserUnit) -> str:
    source = unit.source
    if source is None or not source.git_commit:
        return "-"
    return f"{source.git_commit[:12]}{' dirty' if source.git_dirty else ''}"


def list_codecs() -> int:
    """One row per user codec: its pins and, in one word, its state now; then, for each codec that does
    not run, why and the command that makes it run, each on one line (a table cell would wrap it)."""
    from rich.table import Table

    from codecarena.console import console
    from codecarena.registry import user_units
    from codecarena.readiness import broken_todo

    units, problems = user_units.load_all()
    if not units and not problems:
        console.print("no user codecs (add one with codecarena codec add)")
        return 0
    table = Table(title=f"user codecs ({user_units.units_dir()})")
    for column in ("name", "now", "source", "sha256", "git", "checkpoints", "runtime", "added"):
        table.add_column(column, overflow="fold")
    todo = []
    for unit in units:
        state, _ = _state(unit)
        source = unit.source
        table.add_row(unit.name, state.word, source.path if source else "(command line)",
                      source.sha256[:12] if source else "-", _git(unit), str(len(unit.checkpoints)),
                      "own" if unit.requirements else "codecarena", unit.added_at,
                      style=None if state.word == "ready" else "yellow")
        if state.todo:
            todo.append(f"{unit.name} {state.word}: {'; '.join(state.problems)}; to do: {state.todo}")
    for name, reason in problems.items():
        table.add_row(name, "broken", f"cannot be read: {reason}", "-", "-", "-", "-", "-", style="yellow")
        todo.append(f"{name} broken: its record cannot be read; to do: {broken_todo(name)}")
    console.print(table)
    for line in todo:
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    return 0


def show_codec(name: str, as_json: bool) -> int:
    from codecarena.console import console
    from codecarena.registry import user_units

    try:
        unit = user_units.load(name)
    except user_units.UserUnitError as exc:
        raise CliError(str(exc)) from None
    if as_json:  # plain, never wrapped or coloured: for programs to read
        print(json.dumps(user_units.record(unit), indent=2))
        return 0
    for line in summary(unit):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    return 0


def summary(unit: UserUnit) -> list[str]:
    """`codec show NAME`: the codec's pins, its declaration and whether it runs now, in words."""
    from codecarena.runtime.venvs import env_dir, is_built

    state, family = _state(unit)
    source = unit.source
    lines = [f"user codec {unit.name}, added {unit.added_at}"]
    if source is None:
        lines.append("kind: command-line codec (its declaration is its source)")
        lines += [f"  program {program}: sha256 {sha}" for program, sha in unit.binaries]
        if unit.libraries is None:
            lines.append("  shared libraries: not pinned (added by an older codecarena; add it again)")
        for program, _ in unit.binaries if unit.libraries is not None else ():
            loaded = [lib for lib in unit.libraries or () if lib.binary == program]
            lines.append(f"  {program} loads {counted(len(loaded), 'shared library', 'shared libraries')}, each "
                         "pinned:" if loaded else f"  {program} loads no shared library")
            lines += [f"    {lib.path}: {lib.bytes} bytes, sha256 {lib.sha256}" for lib in loaded]
    else:
        lines.append(f"kind: Python {'module file' if source.kind == 'file' else 'package folder'}")
        git = (f"git commit {source.git_commit}{' with local changes (dirty)' if source.git_dirty else ''}"
               if source.git_commit else "not in a git repository")
        lines += [f"source: {source.path}", f"  sha256 {source.sha256} ({git}, when added)"]
    identity = unit.identity()
    lines.append(f"declaration: sha256 {identity['declaration_sha256']}")
    if family is not None:
        lines += _declared(family)
    if unit.checkpoints:
        lines.append("checkpoints (a copy of each is kept):")
        lines += [f"  {f.name}: {f.bytes} bytes, sha256 {f.sha256}, added from {f.origin}, kept at "
                  f"{unit.checkpoint_path(f.name)}" for f in unit.checkpoints]
    else:
        lines.append("checkpoints: none")
    if unit.requirements:
        built = "built" if is_built(unit.registry_id) else "not built"
        lines.append(f"runtime: its own, {built}, in {env_dir(unit.registry_id)}; its requirements:")
        lines += [f"  {line}" for line in unit.requirements.splitlines() if line.strip() and not line.startswith("#")]
    else:
        lines.append("runtime: codecarena's environment")
    if state.word == "ready":
        lines.append(f"now: ready, it runs (codecarena run --codec {unit.name}:"
                     f"{family.default_config if family else '...'})")
    else:
        lines += [f"now: {state.word}, it does not run: {'; '.join(state.problems)}", f"to do: {state.todo}"]
    return lines


def _declared(family: Family) -> list[str]:
    configs = ", ".join(family.configs) + (" (or any bitrate)" if family.config_is_bitrate else "")
    lines = [f"  {family.description}", f"  configs: {configs}; default {family.default_config}; weights: "
                                         f"{family.supported_weights}"]
    for option in family.options:
        lines.append(f"  option {option.name}={option.default}: {option.help}")
    for claim in family.claims:
        lines.append(f"  claims {claim.bps:g} bps for {', '.join(claim.configs)} ({claim.source}: {claim.reference})")
    if family.channel is not None:
        lines.append(f"  crosses a channel (concealment by the {family.channel.concealment}): "
                     f"{family.channel.description}")
    return lines
