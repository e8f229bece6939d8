"""`codecarena compare`: paired statistics between two runs, or two codec configurations."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = subparsers.add_parser("compare",
                              help="paired comparison of two runs (or codec variants) with bootstrap intervals")
    p.add_argument("run_a", type=Path, help="run directory A (the baseline; differences are B - A)")
    p.add_argument("run_b", type=Path, help="run directory B (may be the same directory as A with --pair-codecs)")
    p.add_argument("--metric", action="append", dest="metrics", metavar="M",
                   help="metric output to compare, repeatable or comma-separated (default: every output in both)")
    p.add_argument("--by", choices=["utterance", "speaker"], default="utterance",
                   help="resampling unit of the bootstrap (speaker: all a speaker's utterances move together)")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed of numpy's default_rng for the bootstrap")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write the whole comparison as JSON here")
    p.add_argument("--pair-codecs", action="append", dest="pair", metavar="A_SPEC=B_SPEC",
                   help="compare codec A_SPEC of run A with B_SPEC of run B (repeatable); only named pairs are "
                        "compared, and differing weights kinds or sample rates are then allowed (flagged)")
    p.add_argument("--allow-different-sets", action="store_true",
                   help="compare runs of different sets on the utterances both hold with identical audio (flagged)")
    p.add_argument("--few-units", action="store_true",
                   help="below 10 resampling units, give the interval and its reading anyway (flagged, descriptive); "
                        "by default there are none, as on every other surface")


def run(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.files import write_json
    from codecarena.results.compare import compare_runs
    from codecarena.results.compare_text import render_text

    metrics = None
    if args.metrics:
        metrics = [m.strip() for item in args.metrics for m in item.split(",") if m.strip()]
    result = compare_runs(args.run_a, args.run_b, metrics=metrics, by=args.by, resamples=args.resamples,
                          seed=args.seed, pair=args.pair, allow_different_sets=args.allow_different_sets,
                          few_units=args.few_units)
    console.print(render_text(result), soft_wrap=True, end="")
    if args.json:
        write_json(args.json, result)
        console.print(f"comparison written to {args.json}")
    return 0
