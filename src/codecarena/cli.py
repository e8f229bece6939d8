"""The `codecarena` command: run, audit, codecs, codec, metrics, registry, env, fetch, stream, compare,
determinism, serve, service-check, report, leaderboard, ledger, listen, score."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import codecarena
from codecarena.commands import COMMANDS
from codecarena.commands.common import CliError
from codecarena.diskspace import RUN_ADVICE, DiskFullError, is_disk_full

# Errors that mean "this cannot be done as asked": one line on stderr and exit status 2, no traceback.
# Named, not imported: most live in modules that import numpy or scipy, which `--help` must not wait
# for, and an error class whose module no command imported cannot have been raised.
USER_ERRORS = (("codecarena.commands.common", "CliError"), ("codecarena.selection", "SelectionError"),
               ("codecarena.metrics.declarations", "MetricError"), ("codecarena.registry.strict", "RegistryError"),
               ("codecarena.runtime.venvs", "RuntimeMissing"), ("codecarena.checkpoints", "CheckpointError"),
               ("codecarena.datasets", "DatasetError"), ("codecarena.specs", "SpecError"),
               ("codecarena.pipeline.plan", "RunError"), ("codecarena.results.store", "StoreError"),
               ("codecarena.payload.fields", "PayloadError"), ("codecarena.diskspace", "DiskFullError"),
               ("builtins", "ValueError"))


def is_user_error(exc: BaseException) -> bool:
    return any(module in sys.modules and isinstance(exc, getattr(sys.modules[module], name))
               for module, name in USER_ERRORS)


class _Parser(argparse.ArgumentParser):
    """Every parser of the command line: an option must be spelled whole (with abbreviations,
    `--channel x` would be taken as `--channels x`). Subcommands' parsers are of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})


class _Version(argparse.Action):
    """`--version`: the version, and the git commit (and whether the checkout is dirty) when run from a
    checkout. Worked out only when asked: two git calls would slow every other command's start."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version (with the git commit when run from a checkout) and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from codecarena.revision import version_line

        print(version_line())
        parser.exit()


def _description() -> str:
    """What `codecarena --help` opens with: every command there is, named from the command registry."""
    return (f"{codecarena.__doc__} Commands: {', '.join(COMMANDS)}; `codecarena COMMAND --help` says more of "
            "each.")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="codecarena", description=_description())
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def _export_model_settings(args: argparse.Namespace) -> None:
    """Workers resolve their own model files; they inherit these settings through the environment."""
    from codecarena.checkpoints import MODELS_ENV, NO_DOWNLOAD_ENV

    if getattr(args, "models_dir", None) is not None:
        if not args.models_dir.is_dir():
            raise CliError(f"--models-dir {args.models_dir}: not a directory")
        os.environ[MODELS_ENV] = str(args.models_dir.resolve())
    if getattr(args, "no_download", False):
        os.environ[NO_DOWNLOAD_ENV] = "1"


def _error_line(exc: Exception, command: str) -> str | None:
    """The one line an error that is the user's to fix is reported with; None for any other error,
    whose traceback is wanted."""
    if is_user_error(exc):
        return str(exc)
    if not (isinstance(exc, OSError) and is_disk_full(exc)):
        return None
    # A failed copy names its source first: the destination (filename2) is what is full.
    full = Path(exc.filename2 or exc.filename or ".")
    advice = RUN_ADVICE if command == "run" else "free some space there and rerun the same command"
    return str(DiskFullError(full, 0, advice))


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
    except Exception as exc:
        line = _error_line(exc, args.command)
        if line is None:
            raise
        print(f"codecarena: error: {line}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt as exc:
        resumable = "; rerun the same command to resume" if args.command == "run" else ""
        print(f"codecarena: interrupted{resumable}", file=sys.stderr)
        code = 128 + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    sys.exit(code)
