"""The `codecarena` command: run, audit, codecs, metrics, score, stream, compare, report, leaderboard,
registry, env, fetch."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType

import codecarena

from codecarena.checkpoints import MODELS_ENV, NO_DOWNLOAD_ENV, CheckpointError
from codecarena.commands import COMMANDS
from codecarena.commands.common import CliError
from codecarena.datasets import DatasetError
from codecarena.diskspace import RUN_ADVICE, DiskFullError, is_disk_full
from codecarena.metrics.declarations import MetricError
from codecarena.payload import PayloadError
from codecarena.pipeline import RunError
from codecarena.registry.entries import RegistryError
from codecarena.results.store import StoreError
from codecarena.runtime.venvs import RuntimeMissing
from codecarena.selection import SelectionError
from codecarena.specs import SpecError

# Errors that mean "this cannot be done as asked": one line on stderr and exit status 2, no traceback.
USER_ERRORS = (CliError, SelectionError, MetricError, RegistryError, RuntimeMissing, CheckpointError, DatasetError,
               SpecError, RunError, StoreError, PayloadError, DiskFullError, ValueError)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codecarena", description=__doc__)
    parser.add_argument("--version", action="version", version=f"codecarena {codecarena.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def _export_model_settings(args: argparse.Namespace) -> None:
    """Workers resolve their own model files; they inherit these settings through the environment."""
    if getattr(args, "models_dir", None) is not None:
        if not args.models_dir.is_dir():
            raise CliError(f"--models-dir {args.models_dir}: not a directory")
        os.environ[MODELS_ENV] = str(args.models_dir.resolve())
    if getattr(args, "no_download", False):
        os.environ[NO_DOWNLOAD_ENV] = "1"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the run stops, keeps its finished rows and can be resumed."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.command_line = ["codecarena", *argv]
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _export_model_settings(args)
        code = COMMANDS[args.command].run(args)
    except USER_ERRORS as exc:
        print(f"codecarena: error: {exc}", file=sys.stderr)
        code = 2
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        # A failed copy names its source first: the destination (filename2) is what is full.
        full = Path(exc.filename2 or exc.filename or ".")
        advice = RUN_ADVICE if args.command == "run" else "free some space there and rerun the same command"
        print(f"codecarena: error: {DiskFullError(full, 0, advice)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt as exc:
        resumable = "; rerun the same command to resume" if args.command == "run" else ""
        print(f"codecarena: interrupted{resumable}", file=sys.stderr)
        code = 128 + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    sys.exit(code)
