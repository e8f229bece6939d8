"""`codecarena registry list|show|audit|pin`: the pinned codec registry, and the user's own pins beside it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from codecarena.commands.common import CliError

if TYPE_CHECKING:
    from rich.console import Console

    from codecarena.registry.entries import Entry

# Short names of the roles in the one-line-per-entry listing (registry show prints them whole).
ROLE_ABBREVIATIONS = {"communication_anchor": "anchor", "deployment_teacher": "deploy",
                      "frontier_teacher": "frontier", "low_bit_teacher": "low-bit"}
# A longer licence text is left to registry show: a listing cell is never cut.
LICENCE_CELL = 16


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    registry = subparsers.add_parser("registry", help="the pinned codec registry")
    reg_sub = registry.add_subparsers(dest="registry_command", required=True)
    reg_sub.add_parser("list", help="one line per entry: id, family, status, pins complete, runtime, roles, weights "
                                    "licence")
    show = reg_sub.add_parser("show", help="one entry whole: why its status, its pins, runtime, weights and notes")
    show.add_argument("id", help="registry id or codec family")
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
        for line in listing(entries):
            console.print(line, soft_wrap=True)
        console.print("status: unpinned (pins incomplete: refused) < registered (pinned) < installed (runtime builds) "
                      "< probed < smoked < scored (real-weight runs here); roles: anchor = communication_anchor, "
                      "deploy = deployment_teacher, frontier = frontier_teacher, low-bit = low_bit_teacher; "
                      "the reasons, pins and licences of one entry: codecarena registry show ID")
        return 0
    if args.registry_command == "show":
        from codecarena.selection import registry_entry

        for line in shown(registry_entry(args.id)):
            console.print(line)
        return 0
    from codecarena.plural import counted
    from codecarena.registry_rules import rule_problems

    problems = rule_problems(entries, check_local=args.check_local, models_dir=args.models_dir)
    for problem in problems:
        console.print(problem, style="red", soft_wrap=True)
    console.print(f"registry audit {'failed: ' + counted(len(problems), 'problem') if problems else 'passed'} "
                  f"({len(entries)} entries{', local files checked' if args.check_local else ''})")
    user_problems = _user_pins(console)
    return 1 if problems or user_problems else 0


def listing(entries: tuple[Entry, ...]) -> list[str]:
    """One line per entry, its cells in aligned columns and never cut (an id is what `show` takes)."""
    from codecarena.registry_rules import list_rows

    header = ("id", "family", "status", "pins", "runtime", "roles", "weights")
    rows = [header]
    for row in list_rows(entries):
        licence = row["weights_license"] or "-"
        if len(licence) > LICENCE_CELL:
            licence = "see show"
        if row["non_commercial"] and "NC" not in licence:
            licence += " [NC]"
        rows.append((row["id"], row["codec_family"] or "-", row["status"], "yes" if row["pins_complete"] else "no",
                     row["environment"], ",".join(ROLE_ABBREVIATIONS.get(r, r) for r in row["roles"]) or "-", licence))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return [f"codec registry: {len(entries)} entries", *lines]


def shown(entry: Entry) -> list[str]:
    """An entry in words: what `list` leaves out."""
    from codecarena.registry_rules import pin_gaps, why

    gaps = pin_gaps(entry)
    source = entry.source_commit or entry.source_release or entry.source_commit_prefix or "-"
    lines = [f"{entry.id}: {entry.display_name} (family {entry.codec_family or 'none'}, {entry.kind})",
             f"  roles: {', '.join(entry.roles) or '-'}",
             f"  status: {entry.status}; {why(entry)}",
             f"  pins complete: {'yes' if not gaps else 'no: ' + '; '.join(gaps)}",
             f"  source: {entry.source_repository or '-'} at {source}"
             + (f" ({entry.source_release_note})" if entry.source_release_note else "")
             + (f", bundled by {entry.source_bundled_by}" if entry.source_bundled_by else "")
             + (f"; Debian packages {', '.join(entry.source_debian_packages)}" if entry.source_debian_packages else ""),
             f"  runtime: {entry.runtime.environment}, Python {entry.runtime.python}"
             + (f", lock {entry.runtime.lock}" if entry.runtime.lock else "")
             + (f"; packages {', '.join(entry.runtime.packages)}" if entry.runtime.packages else ""),
             f"  licence of the code: {entry.license}"]
    checkpoint = entry.checkpoint
    if checkpoint is not None:
        lines.append(f"  weights: {checkpoint.license}{' [NON-COMMERCIAL]' if checkpoint.non_commercial else ''}; "
                     f"revision {checkpoint.revision}{'; gated' if checkpoint.gated else ''}")
        lines += [f"    {f.name}: "
                  + (f"{f.bytes} bytes" if f.bytes else "size never published (the sha256 is its identity)")
                  + f", sha256 {f.sha256}, {f.side}"
                  + (f", configurations {', '.join(f.configs)}" if f.configs else "") + f"; {f.url}"
                  for f in checkpoint.files]
    elif entry.partial_checkpoint is not None:
        lines.append(f"  weights, known in part: {entry.partial_checkpoint.known}"
                     + (f" ({entry.partial_checkpoint.license})" if entry.partial_checkpoint.license else ""))
    if entry.notes:
        lines.append(f"  notes: {entry.notes}")
    return lines


def _user_pins(console: Console) -> list[str]:
    """User pins, listed apart from the registry's, each kept file verified; the problems found."""
    from rich.text import Text

    from codecarena.checkpoints import CheckpointError, resolve
    from codecarena.plural import counted
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
        console.print(f"{counted(len(pins), 'user pin')} in {pins_dir()}, run with --weights user")
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
