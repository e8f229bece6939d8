"""One module per `codecarena` command, in the order `codecarena --help` lists them.

Each module has `add_parser(subparsers)`, which adds its subcommand, and `run(args) -> int`, which
returns the exit status. `cli.main` also sets `args.command_line` (argv as typed) for the commands that
record it. A command parses and checks its options, calls the library and prints; what several
commands select is checked in `codecarena.selection`.
"""

from __future__ import annotations

import argparse
from typing import Protocol

from codecarena.commands import (
    audit,
    codec,
    codecs,
    compare,
    determinism,
    env,
    fetch,
    leaderboard,
    ledger,
    listen,
    metrics,
    registry,
    report,
    run,
    score,
    serve,
    service_check,
    stream,
)


class Command(Protocol):
    def add_parser(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


COMMANDS: dict[str, Command] = {
    "run": run,
    "audit": audit,
    "codecs": codecs,
    "codec": codec,
    "metrics": metrics,
    "registry": registry,
    "env": env,
    "fetch": fetch,
    "stream": stream,
    "compare": compare,
    "determinism": determinism,
    "serve": serve,
    "service-check": service_check,
    "report": report,
    "leaderboard": leaderboard,
    "ledger": ledger,
    "listen": listen,
    "score": score,
}
