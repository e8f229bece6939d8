"""Cost of guarded scoring (a scoring process per row runner) against scoring in-process.

Scores every smoke-set clip against a noisy copy of itself, with the same metrics, both ways:
`Scorer.score_files` in this process and `GuardedScorer.score_files` through its scoring process.
Prints the first pass (process start and model loading included) and the best of the warm passes
(models loaded), per clip and as a ratio guarded / in-process. Also checks that both give the same
records. Run: .venv/bin/python bench/scoring_overhead.py [--metrics all] [--passes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import soundfile as sf

from codecarena.metrics.guarded import GuardedScorer
from codecarena.metrics.declarations import select
from codecarena.metrics.scorer import Scorer, UtteranceInfo
from codecarena.runtime.limits import StageLimits, default_memory_limit

Pair = tuple[UtteranceInfo, Path, Path]


def pairs(data: Path, folder: Path) -> list[Pair]:
    entries = json.loads((data / "manifest.json").read_text())
    rng = np.random.default_rng(0)
    out = []
    for entry in entries:
        reference = data / entry["file"]
        audio, rate = sf.read(reference, dtype="float64")
        decoded = folder / entry["file"]
        sf.write(decoded, np.clip(audio + 0.01 * rng.standard_normal(audio.size), -1, 1), rate, subtype="PCM_16")
        critical = tuple((c["kind"], c["text"]) for c in entry.get("critical") or ())
        out.append((UtteranceInfo(entry["id"], entry["language"], entry.get("transcript"), critical), reference, decoded))
    return out


def timed_passes(score: Callable[[UtteranceInfo, Path, Path], Any], work: list[Pair],
                 passes: int) -> tuple[list[float], list[Any]]:
    times, records = [], []
    for _ in range(passes):
        start = time.perf_counter()
        records = [score(*pair) for pair in work]
        times.append(time.perf_counter() - start)
    return times, records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", default="all")
    parser.add_argument("--passes", type=int, default=3, help="passes per way (the first includes loading)")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("CODECARENA_DATA", "../shared/data/speech")))
    args = parser.parse_args()
    metrics = select(args.metrics)
    with tempfile.TemporaryDirectory() as tmp:
        work = pairs(args.data, Path(tmp))
        inproc_times, inproc = timed_passes(Scorer(metrics).score_files, work, args.passes)
        guarded = GuardedScorer(metrics, {}, StageLimits(default_memory_limit()), Path(tmp) / "scoring.log")
        try:
            guarded_times, records = timed_passes(guarded.score_files, work, args.passes)
        finally:
            guarded.close()
    same = json.dumps(inproc) == json.dumps(records)
    n = len(work)
    print(f"metrics {','.join(metrics)}; {n} clips; {args.passes} passes each; cpus {len(os.sched_getaffinity(0))}")
    print(f"first pass (start + load): in-process {inproc_times[0]:.2f} s, guarded {guarded_times[0]:.2f} s, "
          f"ratio {guarded_times[0] / inproc_times[0]:.3f}")
    if args.passes > 1:
        a, b = min(inproc_times[1:]), min(guarded_times[1:])
        print(f"warm pass (best): in-process {a / n * 1000:.1f} ms/clip, guarded {b / n * 1000:.1f} ms/clip, "
              f"ratio {b / a:.3f}, difference {(b - a) / n * 1000:+.1f} ms/clip")
    print(f"identical records: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
