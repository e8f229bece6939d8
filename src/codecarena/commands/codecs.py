"""`codecarena codecs`: the codec specs codecarena accepts, and whether each family runs here now."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codecarena.readiness import Readiness


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    subparsers.add_parser("codecs", help="list the codec specs codecarena accepts, and whether each family runs "
                                         "here now (else the commands that would make it run)")


def here(state: Readiness) -> list[str]:
    """What `codecs` says of a family's readiness: a `here:` line, and what to run when it does not run."""
    if state.runs and not state.problems:
        return ["here: runs now" + (" (real weights)" if state.runs == "real" else "")]
    then = ", then ".join(state.commands)
    if state.runs == "synthetic":
        return [f"here: runs now with --weights synthetic only; real weights: {'; '.join(state.problems)}",
                *([f"to run its real weights: {then}"] if state.commands else [])]
    lines = [f"here: does not run yet: {'; '.join(state.problems)}"]
    if state.synthetic_only:
        lines.append(f"to run it: {then + ', then ' if then else ''}codecarena run --weights synthetic ... (its "
                     "real weights cannot run until the registry pins them)")
    elif state.commands:
        lines.append(f"to run it: {then}")
    return lines


def run(args: argparse.Namespace) -> int:
    from rich.text import Text

    from codecarena.console import console
    from codecarena.registry.catalog import FAMILIES, USER_PROBLEMS
    from codecarena.readiness import readiness

    ready: dict[str, list[str]] = {"runs": [], "synthetic": [], "not yet": []}
    for family in FAMILIES.values():
        origin = "  (user codec: codecarena codec show " + family.name + ")" if family.origin == "user" else ""
        console.print(Text.assemble((family.name, "bold"), f"  {family.description}{origin}"))
        configs = ", ".join(family.configs)
        extra = " (or any bitrate: 7500, 10k, ...)" if family.config_is_bitrate else ""
        console.print(f"  configs: {configs}{extra}; default {family.default_config}")
        for option in family.options:
            choices = f" [{'|'.join(str(c) for c in option.choices)}]" if option.choices else ""
            bounds = (f" [{option.minimum:g}..{option.maximum:g}]"
                      if option.minimum is not None and option.maximum is not None else "")
            console.print(f"  {option.name}={option.default}{choices}{bounds}  {option.help}")
        example = f"{family.name}:{family.default_config}"
        if family.options:
            example += f",{family.options[0].name}={family.options[0].default}"
        console.print(f"  e.g. {example}")
        state = readiness(family)
        for line in here(state):
            console.print(f"  {line}", style=None if state.runs and not state.problems else "yellow")
        ready["runs" if state.runs and not state.problems else "synthetic" if state.runs else "not yet"].append(
            family.name)
    for name, reason in USER_PROBLEMS.items():
        console.print(Text.assemble((name, "bold"), f"  user codec that cannot be read: {reason}"))
    console.print(f"runs here now: {', '.join(ready['runs']) or 'none'}; with --weights synthetic only: "
                  f"{', '.join(ready['synthetic']) or 'none'}; not yet: {', '.join(ready['not yet']) or 'none'} "
                  "(each family's 'to run it' line says how)")
    return 0
