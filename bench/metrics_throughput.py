"""Metric throughput on this machine: seconds of audio scored per second of wall time, per metric.

Usage: CODECARENA_DATA=../shared/data/speech .venv/bin/python bench/metrics_throughput.py [--repeats 3]

Each metric scores every smoke-set utterance against a seeded noisy copy (20 dB SNR). Model loading
is timed separately (first call), then the median over --repeats passes is reported. Nothing is
asserted: this prints measurements, to be read as ratios on one machine.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import soundfile as sf

from codecarena.datasets import load_smoke
from codecarena.machine import cpu_model
from codecarena.metrics.declarations import METRICS, available
from codecarena.metrics.scorer import Scorer, UtteranceInfo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    evalset = load_smoke(allow_download=False)
    rng = np.random.default_rng(0)
    pairs = []
    for utt in evalset.utterances:
        ref, rate = sf.read(utt.path, dtype="float64")
        noise = rng.standard_normal(len(ref))
        noise *= np.sqrt(np.sum(ref**2) / np.sum(noise**2) / 10 ** (20 / 10))
        info = UtteranceInfo(utt.id, utt.language, utt.transcript, utt.critical)
        pairs.append((info, ref, np.clip(ref + noise, -1, 1), rate))
    audio_s = sum(len(p[1]) / p[3] for p in pairs)
    print(f"machine: {cpu_model()}, {platform.platform()}; {len(pairs)} utterances, {audio_s:.1f} s of audio")
    print(f"{'metric':<14} {'first pass s':>12} {'median pass s':>14} {'audio s per s':>14}")
    for spec in METRICS:
        if not available(spec):
            print(f"{spec.name:<14} not installed")
            continue
        scorer = Scorer((spec.name,))
        t = time.perf_counter()
        for info, ref, dec, rate in pairs:
            scorer.score(info, ref, dec, rate)
        first = time.perf_counter() - t
        passes = []
        for _ in range(args.repeats):
            # Reference-side results forgotten each pass, so that a pass times both sides of every pair.
            scorer.forget_reference_results()
            t = time.perf_counter()
            for info, ref, dec, rate in pairs:
                scorer.score(info, ref, dec, rate)
            passes.append(time.perf_counter() - t)
        median = statistics.median(passes)
        print(f"{spec.name:<14} {first:>12.2f} {median:>14.2f} {audio_s / median:>14.1f}")
    print("asr: tiny.en on the 6 English utterances, base on the 4 Mandarin ones.")


if __name__ == "__main__":
    main()
