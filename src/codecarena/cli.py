"""The `codecarena` command: run, audit, codecs."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from codecarena.codecs.catalog import FAMILIES
from codecarena.datasets import DatasetError, load_input_dir, load_smoke
from codecarena.payload import PayloadError
from codecarena.pipeline import RunError, RunOptions, execute, plan_of
from codecarena.results.store import StoreError
from codecarena.runtime.guard import default_memory_limit, parse_size
from codecarena.specs import SpecError, parse_spec

DEFAULT_CODECS = ("opus:6k", "opus:12k", "codec2:3200", "codec2:700C", "pcm:16")


class CliError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codecarena", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="encode, decode and replay every codec x utterance into a run directory")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--set", default="smoke", choices=["smoke"], help="built-in evaluation set")
    source.add_argument("--input", type=Path, help="evaluate a folder of wav/flac files instead")
    run.add_argument("--data-dir", type=Path, help="local mirror of the smoke set (else $CODECARENA_DATA, cache, download)")
    run.add_argument("--no-download", action="store_true", help="never download the smoke set")
    run.add_argument("--codec", action="append", dest="codecs", metavar="SPEC",
                     help=f"codec spec, repeatable (default: {' '.join(DEFAULT_CODECS)})")
    run.add_argument("--out", type=Path, help="run directory (default: runs/<set>-<plan hash>, so a rerun resumes)")
    run.add_argument("--memory-limit", default=None,
                     help="kill a worker whose process tree RSS passes this (e.g. 4G; default half of RAM)")
    run.add_argument("--guard-poll", type=float, default=0.25, help="memory guard poll period in seconds")
    run.add_argument("--warm-repeats", type=int, default=2, help="timed in-process repeats after the cold call")
    run.add_argument("--stage-timeout", type=float, default=600.0, help="seconds before a stage is killed")

    audit = sub.add_parser("audit", help="re-derive a run from its files; non-zero exit on any disagreement")
    audit.add_argument("run_dir", type=Path)
    audit.add_argument("--replay", action="store_true", help="also decode every payload again in a fresh process")

    sub.add_parser("codecs", help="list the codec specs codecarena accepts")
    return parser


def _cmd_codecs() -> int:
    from codecarena.console import console

    for family in FAMILIES.values():
        console.print(f"[bold]{family.name}[/bold]  {family.description}")
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
    return 0


def _cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from codecarena.console import console, print_summary
    from codecarena.environment import describe
    from codecarena.results.summary import summarize

    specs = tuple(parse_spec(s) for s in (args.codecs or DEFAULT_CODECS))
    canon = [s.canonical for s in specs]
    if len(set(canon)) != len(canon):
        raise CliError(f"the same codec configuration is given twice: {canon}")
    if args.input is not None:
        evalset = load_input_dir(args.input)
    else:
        evalset = load_smoke(data_dir=args.data_dir, allow_download=not args.no_download)
    if args.warm_repeats < 0:
        raise CliError("--warm-repeats must be >= 0")
    if args.guard_poll <= 0:
        raise CliError("--guard-poll must be > 0")
    limit = parse_size(args.memory_limit) if args.memory_limit else default_memory_limit()
    opts = RunOptions(out=Path("."), codecs=specs, memory_limit=limit, poll_s=args.guard_poll,
                      warm_repeats=args.warm_repeats, timeout_s=args.stage_timeout)
    if args.out is None:
        digest = hashlib.sha256(json.dumps(plan_of(evalset, opts), sort_keys=True).encode()).hexdigest()[:10]
        name = evalset.name.replace(":", "-").replace("/", "_")
        out = Path("runs") / f"{name}-{digest}"
    else:
        out = args.out
    opts = RunOptions(out=out, codecs=specs, memory_limit=limit, poll_s=args.guard_poll,
                      warm_repeats=args.warm_repeats, timeout_s=args.stage_timeout)
    total = len(specs) * len(evalset.utterances)
    console.print(f"set {evalset.name} ({len(evalset.utterances)} utterances, {evalset.source}); "
                  f"{len(specs)} codec configurations; run directory {out}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("rows", total=total)
        resumed_rows = []

        def on_row(row, resumed: bool) -> None:  # type: ignore[no-untyped-def]
            tag = "resumed" if resumed else row.status
            if resumed:
                resumed_rows.append(row)
            progress.update(task, advance=1, description=f"{row.codec} {row.utterance} ({tag})")

        rows = execute(evalset, opts, describe(["codecarena", *argv]), on_row)
    if resumed_rows:
        console.print(f"{len(resumed_rows)} complete rows resumed from the earlier run (files verified); "
                      f"{len(rows) - len(resumed_rows)} computed now")
    print_summary(summarize(rows))
    failed = [r for r in rows if r.status != "ok" or not r.checks_passed or r.replay_identical is not True]
    console.print(f"run directory: {out}")
    if failed:
        console.print(f"[red]{len(failed)} of {len(rows)} rows failed a stage or a check; see above and "
                      f"{out / 'rows.jsonl'}[/red]")
        return 1
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.results.audit import audit

    if not args.run_dir.is_dir():
        raise CliError(f"{args.run_dir}: not a run directory")
    problems = audit(args.run_dir, replay=args.replay)
    for problem in problems:
        console.print(f"[red]{problem}[/red]", soft_wrap=True)
    if problems:
        console.print(f"audit failed: {len(problems)} problem(s) in {args.run_dir}")
        return 1
    console.print(f"audit passed: {args.run_dir} re-derives from its files")
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "codecs":
            code = _cmd_codecs()
        elif args.command == "run":
            code = _cmd_run(args, argv)
        else:
            code = _cmd_audit(args)
    except (CliError, DatasetError, SpecError, RunError, StoreError, PayloadError, ValueError) as exc:
        print(f"codecarena: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("codecarena: interrupted; rerun the same command to resume", file=sys.stderr)
        code = 130
    sys.exit(code)
