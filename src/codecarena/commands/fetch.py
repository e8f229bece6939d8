"""`codecarena fetch`: download and verify a family's pinned checkpoint files into the cache."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecarena.selection import registry_entry


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    fetch = subparsers.add_parser("fetch", help="download and verify a family's pinned checkpoint files into the cache")
    fetch.add_argument("family", help="registry id or codec family, optionally with :CONFIG")
    fetch.add_argument("--mirror", type=Path, help="read from this local mirror instead (else $CODECARENA_MODELS)")


def run(args: argparse.Namespace) -> int:
    from codecarena import checkpoints
    from codecarena.console import console

    entry = registry_entry(args.family)
    if entry.checkpoint is None:
        console.print(f"{entry.id}: no checkpoint files (DSP codec or control)")
        return 0
    folder = checkpoints.resolve(entry.checkpoint, models_dir=args.mirror, progress=True)
    for pin in entry.checkpoint.files:
        console.print(f"{folder / pin.name}: {pin.bytes} bytes, sha256 {pin.sha256} verified", soft_wrap=True)
    return 0
