"""`codecarena fetch`: download (or import) and verify a family's pinned checkpoint files into the cache."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecarena.commands.common import CliError
from codecarena.selection import registry_entry


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    fetch = subparsers.add_parser("fetch", help="download and verify a family's pinned checkpoint files into the cache")
    fetch.add_argument("family", help="registry id or codec family, optionally with :CONFIG (only that "
                                      "configuration's files, e.g. dac:24khz)")
    fetch.add_argument("--mirror", type=Path, help="read from this local mirror instead (else $CODECARENA_MODELS)")
    fetch.add_argument("--from", dest="source", type=Path, metavar="FILE_OR_DIR",
                       help="import files downloaded elsewhere (an air-gapped machine): each must match a pinned "
                            "file's size and sha256, whatever its name")


def run(args: argparse.Namespace) -> int:
    from codecarena import checkpoints
    from codecarena.console import console

    entry = registry_entry(args.family)
    if entry.checkpoint is None:
        reason = f" ({entry.status_reason})" if entry.status_reason else ""
        console.print(f"{entry.id}: no pinned checkpoint files{reason}")
        return 0
    _, _, config = args.family.partition(":")
    checkpoint = entry.checkpoint.for_config(config) if config else entry.checkpoint
    if not checkpoint.files:
        raise CliError(f"{args.family}: no pinned file for configuration {config!r}")
    if args.source is not None:
        sources = sorted(p for p in args.source.iterdir() if p.is_file()) if args.source.is_dir() else [args.source]
        for source in sources:
            pin, dest = checkpoints.import_file(checkpoint, source)
            console.print(f"{source} -> {dest}: {dest.stat().st_size} bytes, sha256 {pin.sha256} verified",
                          soft_wrap=True)
        return 0
    folder = checkpoints.resolve(checkpoint, models_dir=args.mirror, progress=True)
    for pin in checkpoint.files:
        size = pin.bytes or (folder / pin.name).stat().st_size
        unpublished = "" if pin.bytes else " (size never published: recorded now)"
        console.print(f"{folder / pin.name}: {size} bytes{unpublished}, sha256 {pin.sha256} verified", soft_wrap=True)
    return 0
