"""`codecarena registry list|audit`: the pinned codec registry."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    registry = subparsers.add_parser("registry", help="the pinned codec registry")
    reg_sub = registry.add_subparsers(dest="registry_command", required=True)
    reg_sub.add_parser("list", help="id, roles, status and whether the pins are complete")
    reg_audit = reg_sub.add_parser("audit", help="check the registry's rules; non-zero exit on any problem")
    reg_audit.add_argument("--check-local", action="store_true",
                           help="also verify runtimes and checkpoint files of every installed-or-higher claim")
    reg_audit.add_argument("--models-dir", type=Path, help="model mirror for --check-local (else $CODECARENA_MODELS, cache)")


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from codecarena.console import console
    from codecarena.registry.rules import rule_problems
    from codecarena.registry.rules import list_rows
    from codecarena.registry.entries import load_all

    entries = load_all()
    if args.registry_command == "list":
        table = Table(title=f"codec registry ({len(entries)} entries)")
        for column in ("id", "family", "roles", "status", "pins complete", "weights licence", "runtime"):
            table.add_column(column)
        for row in list_rows(entries):
            licence = row["weights_license"] or "-"
            if row["non_commercial"]:
                licence += " [NON-COMMERCIAL]"
            if row["sizes_unpublished"]:
                licence += f"; size unpublished, sha256 is the identity: {', '.join(row['sizes_unpublished'])}"
            table.add_row(row["id"], row["codec_family"] or "-", ", ".join(row["roles"]) or "-", row["status"],
                          "yes" if row["pins_complete"] else "no", licence, row["environment"])
        console.print(table)
        console.print("status: unpinned (pins incomplete: refused) < registered (pinned) < installed (runtime builds) "
                      "< probed < smoked < scored (real-weight runs here); see docs/registry.md")
        return 0
    problems = rule_problems(entries, check_local=args.check_local, models_dir=args.models_dir)
    for problem in problems:
        console.print(f"[red]{problem}[/red]", soft_wrap=True)
    console.print(f"registry audit {'failed: ' + str(len(problems)) + ' problem(s)' if problems else 'passed'} "
                  f"({len(entries)} entries{', local files checked' if args.check_local else ''})")
    return 1 if problems else 0
