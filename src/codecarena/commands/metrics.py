"""`codecarena metrics`: every metric, its outputs (which end is better, range), what it needs, whether
it can run here, and the metrics codecarena knows of but cannot run."""

from __future__ import annotations

import argparse


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("metrics", help="list the metrics, their scales and whether they can run here")
    parser.add_argument("--verify", action="store_true",
                        help="also hash every pinned model file (a few seconds) and say whether it matches")


def _range(low: float | None, high: float | None) -> str:
    if low is None and high is None:
        return "unbounded"
    if high is None:
        return f">= {low:g}"
    if low is None:
        return f"<= {high:g}"
    return f"{low:g} to {high:g}"


def run(args: argparse.Namespace) -> int:
    from rich.text import Text

    from codecarena.console import console
    from codecarena.metrics import outputs
    from codecarena.metrics.declarations import METRICS, UNAVAILABLE, available, verify_models

    for spec in METRICS:
        state = "available" if available(spec) else "not installed (install codecarena[metrics])"
        if args.verify and available(spec) and spec.models:
            problem = verify_models(spec)[1]
            state = f"unusable: {problem}" if problem else "available, model files match their pins"
        console.print(Text.assemble((spec.name, "bold"), f"  {state}"))
        console.print(f"  {spec.description}")
        needs = ", ".join(need.value for need in spec.needs)
        shortest = f"; at least {spec.min_audio_s:g} s of audio" if spec.min_audio_s else ""
        longest = f", at most {spec.max_audio_s:g} s" if spec.max_audio_s else ""
        console.print(f"  needs: {needs}{shortest}{longest}")
        for name in spec.outputs:
            scale = outputs.BY_NAME.get(name)
            if scale is None:
                continue
            unit = f" {scale.unit}" if scale.unit else ""
            console.print(f"  {name:<18} {scale.better} is better, {_range(scale.low, scale.high)}{unit}")
    for name, reason in UNAVAILABLE.items():
        console.print(Text.assemble((name, "bold"), f"  unavailable: {reason}"))
    return 0
