"""`codecarena stream`: feed 20 ms frames one at a time and prove streaming equals whole-utterance coding."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from codecarena.commands.common import CliError


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    stream = subparsers.add_parser(
        "stream", help="feed 20 ms frames one at a time and prove streaming equals whole-utterance coding")
    stream.add_argument("codec", help="codec spec with a frame-streaming interface: lyra:6000, opus:12k, ...")
    stream.add_argument("--input", type=Path, help="16 kHz mono wav (default: every smoke-set utterance)")
    stream.add_argument("--data-dir", type=Path, help="local mirror of the smoke set")
    stream.add_argument("--json", type=Path, help="also write the per-utterance results here")
    stream.add_argument("--models-dir", type=Path, help="local mirror of model files (else $CODECARENA_MODELS)")


def run(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.datasets import load_smoke
    from codecarena.files import write_json
    from codecarena.rundir import StageFiles
    from codecarena.runtime.limits import StageLimits, default_memory_limit
    from codecarena.runtime.protocol import Job
    from codecarena.runtime.stages import run_stage
    from codecarena.sandbox import for_family
    from codecarena.specs import parse_spec

    spec = parse_spec(args.codec)
    if args.input is not None:
        inputs = [(args.input.stem, args.input)]
    else:
        inputs = [(u.id, u.path) for u in load_smoke(data_dir=args.data_dir).utterances]
    results, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in inputs:
            job = Job.stream(path, Path(tmp) / "report.json", spec.canonical)
            stage, report = run_stage("stream", job, StageLimits(default_memory_limit()),
                                      StageFiles.scratch(Path(tmp), "stream"), sys.executable,
                                      sandbox=for_family(spec.family))
            if report is None or not stage.ok:
                why = report.error if report is not None and report.error else stage.error
                raise CliError(f"{path}: streaming failed: {why}")
            f = report.facts
            ok = f["packets_identical"] and f["audio_identical"]
            failed += not ok
            results.append({"utterance": name, **f})
            c = f["frame_compute_ms"]
            console.print(f"{name}: {f['frames']} frames, streamed == whole: packets {f['packets_identical']}, "
                          f"audio {f['audio_identical']}; per-frame ms p50 {c['p50']:.2f} p95 {c['p95']:.2f} "
                          f"p99 {c['p99']:.2f} (budget {f['realtime_budget_ms']:.0f}); "
                          f"algorithmic latency {f['algorithmic_latency_ms']:.1f} ms "
                          f"(frame + measured delay {f['measured_delay_samples']} samples; declared "
                          f"{f['declared_latency_ms']['total_ms']:.1f} ms: frame "
                          f"{f['declared_latency_ms']['frame_ms']:g} + look-ahead "
                          f"{f['declared_latency_ms']['lookahead_ms']:g}); first packet in to first sample out "
                          f"{f['first_packet_to_first_sample_ms']:.2f} ms")
    if args.json:
        write_json(args.json, {"version": 1, "codec": spec.canonical, "results": results})
    console.print(f"{spec.canonical}: streamed output identical to whole-utterance output in "
                  f"{len(results) - failed}/{len(results)} utterances")
    return 1 if failed else 0
