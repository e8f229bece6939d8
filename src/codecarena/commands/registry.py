"""`codecarena registry list|audit|pin`: the pinned codec registry, and the user's own pins beside it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from codecarena.commands.common import CliError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from codecarena.registry.entries import Entry


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    registry = subparsers.add_parser("registry", help="the pinned codec registry")
    reg_sub = registry.add_subparsers(dest="registry_command", required=True)
    reg_sub.add_parser("list", help="id, roles, status, whether the pins are complete, weights licence")
    reg_audit = reg_sub.add_parser("audit", help="check the registry's rules; non-zero exit on any problem")
    reg_audit.add_argument("--check-local", action="store_true",
                           help="also verify runtimes and checkpoint files of every installed-or-higher claim")
    reg_audit.add_argument("--models-dir", type=Path, help="model mirror for --check-local (else $CODECARENA_MODELS, cache)")
    pin = reg_sub.add_parser("pin", help="pin a checkpoint the registry does not pin, on this machine only "
                                         "(run it with --weights user)")
    pin.add_argument("family", help="codec family, optionally with :CONFIG (without: every configuration)")
    pin.add_argument("--file", dest="files", type=Path, action="append", default=[], required=True,
                     help="a checkpoint file (repeat for a checkpoint of several files)")
    pin.add_argument("--url", default="", help="where the file came from (recorded as its origin)")


def run(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.registry.entries import load_all

    if args.registry_command == "pin":
        return _pin(args)
    entries = load_all()
    if args.registry_command == "list":
        console.print(_table(entries))
        console.print("status: unpinned (pins incomplete: refused) < registered (pinned) < installed (runtime builds) "
                      "< probed < smoked < scored (real-weight runs here); see docs/registry.md")
        return 0
    from codecarena.registry.rules import rule_problems

    problems = rule_problems(entries, check_local=args.check_local, models_dir=args.models_dir)
    for problem in problems:
        console.print(problem, style="red", soft_wrap=True)
    console.print(f"registry audit {'failed: ' + str(len(problems)) + ' problem(s)' if problems else 'passed'} "
                  f"({len(entries)} entries{', local files checked' if args.check_local else ''})")
    user_problems = _user_pins(console)
    return 1 if problems or user_problems else 0


def _table(entries: tuple[Entry, ...]) -> Table:
    from rich.table import Table

    from codecarena.registry.rules import list_rows

    table = Table(title=f"codec registry ({len(entries)} entries)")
    for column in ("id", "family", "roles", "status", "pins complete", "weights licence", "runtime"):
        table.add_column(column)
    table.add_column("why", ratio=1, min_width=30)
    for row in list_rows(entries):
        licence = row["weights_license"] or "-"
        if row["non_commercial"]:
            licence += " [NON-COMMERCIAL]"
        if row["sizes_unpublished"]:
            licence += f"; size unpublished, sha256 is the identity: {', '.join(row['sizes_unpublished'])}"
        table.add_row(row["id"], row["codec_family"] or "-", ", ".join(row["roles"]) or "-", row["status"],
                      "yes" if row["pins_complete"] else "no", licence, row["environment"], row["why"])
    return table


def _user_pins(console: Console) -> list[str]:
    """User pins, listed apart from the registry's, each kept file verified; the problems found."""
    from rich.text import Text

    from codecarena.checkpoints import CheckpointError, resolve
    from codecarena.registry.user_pins import load, pins_dir

    pins = load()
    problems = []
    for pin in pins:
        try:
            resolve(pin.checkpoint(), models_dir=pins_dir(), allow_download=False)
            state = Text("files verified")
        except CheckpointError as exc:
            state = Text(str(exc), style="red")
            problems.append(str(exc))
        files = ", ".join(f"{f.name} {f.sha256[:12]} ({f.bytes} bytes, from {f.origin})" for f in pin.files)
        console.print(Text.assemble(f"user pin (not a registry pin) {pin.family}:{pin.config}: {files}; "
                                    f"pinned {pin.pinned_at}; ", state), soft_wrap=True)
    if pins:
        console.print(f"{len(pins)} user pin(s) in {pins_dir()}, run with --weights user")
    return problems


def _pin(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.diskspace import DiskFullError, is_disk_full
    from codecarena.registry.catalog import FAMILIES
    from codecarena.registry.user_pins import pin, pins_dir

    family, _, config = args.family.partition(":")
    if family not in FAMILIES or FAMILIES[family].supported_weights != "real_or_synthetic":
        neural = ", ".join(f for f, fam in FAMILIES.items() if fam.supported_weights == "real_or_synthetic")
        raise CliError(f"registry pin {args.family}: user pins are for the neural families with an adapter ({neural})")
    if config and config not in FAMILIES[family].configs:
        raise CliError(f"registry pin {args.family}: {family} has no configuration {config!r} "
                       f"({', '.join(FAMILIES[family].configs)})")
    try:
        made = pin(family, config, list(args.files), args.url)
    except (OSError, DiskFullError) as exc:
        if isinstance(exc, OSError) and not is_disk_full(exc):
            raise
        # What is full is where the pin is kept (an ENOSPC from a copy names its source file).
        needed = sum(path.stat().st_size for path in args.files if path.is_file())
        raise DiskFullError(pins_dir(), needed, "the pin was not recorded: free some space there and rerun the same "
                                                "`codecarena registry pin` command") from None
    for f in made.files:
        console.print(f"pinned by user: {family}:{made.config} {f.name} {f.bytes} bytes sha256 {f.sha256} "
                      f"(from {f.origin})", soft_wrap=True)
    console.print(f"run it with: codecarena run --codec {family}:{config or FAMILIES[family].configs[0]} --weights user")
    return 0
