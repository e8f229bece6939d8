"""`codecarena fetch`: download (or import) and verify a family's pinned checkpoint files into the cache."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from codecarena.commands.common import CliError

if TYPE_CHECKING:
    from codecarena.registry.entries import Checkpoint


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    fetch = subparsers.add_parser("fetch", help="download and verify a family's pinned checkpoint files into the cache")
    fetch.add_argument("family", help="registry id or codec family, optionally with :CONFIG (only that "
                                      "configuration's files, e.g. dac:24khz)")
    fetch.add_argument("--mirror", type=Path, help="read from this local mirror instead (else $CODECARENA_MODELS)")
    fetch.add_argument("--from", dest="source", type=Path, metavar="FILE_OR_DIR",
                       help="import files downloaded elsewhere (an air-gapped machine), whatever their names: a "
                            "file must match a pinned file's size and sha256; in a folder, the files that match "
                            "are imported and the others (a LICENSE, a README) skipped with a note")


def run(args: argparse.Namespace) -> int:
    from codecarena import checkpoints
    from codecarena.console import console
    from codecarena.registry.catalog import FAMILIES
    from codecarena.selection import registry_entry

    entry = registry_entry(args.family)
    if entry.checkpoint is None:
        reason = f" ({entry.status_reason})" if entry.status_reason else ""
        if args.source is not None:
            family = FAMILIES.get(entry.codec_family)
            if family is not None and family.supported_weights == "none":
                raise CliError(f"fetch {args.family} --from {args.source}: {entry.codec_family} needs no model "
                               f"files; nothing to import")
            raise CliError(f"fetch {args.family} --from {args.source}: {entry.id} has no pinned checkpoint files"
                           f"{reason}; nothing can be verified, so nothing is imported")
        console.print(f"{entry.id}: no pinned checkpoint files{reason}")
        return 0
    _, _, config = args.family.partition(":")
    checkpoint = entry.checkpoint.for_config(config) if config else entry.checkpoint
    if not checkpoint.files:
        raise CliError(f"{args.family}: no pinned file for configuration {config!r}")
    if args.source is not None:
        return _import(checkpoint, args.source, args.family)
    folder = checkpoints.resolve(checkpoint, models_dir=args.mirror, progress=True)
    for pin in checkpoint.files:
        size = pin.bytes or (folder / pin.name).stat().st_size
        unpublished = "" if pin.bytes else " (size never published: recorded now)"
        console.print(f"{folder / pin.name}: {size} bytes{unpublished}, sha256 {pin.sha256} verified", soft_wrap=True)
    return 0


def _import(checkpoint: Checkpoint, source: Path, family: str) -> int:
    """Import `source`, a file (which must be a pinned one) or a folder (a downloaded snapshot: its
    files that are pinned ones are imported, the others, a LICENSE or a README, skipped with a note)."""
    from codecarena import checkpoints
    from codecarena.console import console

    if not source.is_dir():
        pin, dest = checkpoints.import_file(checkpoint, source)
        console.print(f"{source} -> {dest}: {dest.stat().st_size} bytes, sha256 {pin.sha256} verified",
                      soft_wrap=True, markup=False)
        return 0
    imported: set[str] = set()
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        try:
            pin, dest = checkpoints.import_file(checkpoint, path)
        except checkpoints.NoPinMatches as exc:
            console.print(f"skipped {exc}", soft_wrap=True, markup=False)
            continue
        imported.add(pin.name)
        console.print(f"{path} -> {dest}: {dest.stat().st_size} bytes, sha256 {pin.sha256} verified",
                      soft_wrap=True, markup=False)
    pinned = [f.name for f in checkpoint.files]
    if not imported:
        raise CliError(f"{source}: none of its files is a pinned file of {family} ({', '.join(pinned)}); "
                       f"nothing imported")
    missing = [name for name in pinned if name not in imported]
    if missing:
        console.print(f"not in {source}, so not imported: {', '.join(missing)} (fetch them, or import them with "
                      f"--from)", soft_wrap=True, markup=False)
    return 0
