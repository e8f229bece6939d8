"""Throughput of codecarena's executors against the in-process floor, measured in one run.

Usage: CODECARENA_DATA=../shared/data/speech CODECARENA_MODELS=../shared/models \
       .venv/bin/python bench/throughput.py [--utterances 100] [--codec opus:12k ...] [--no-ray]

The corpus is N real utterances: the smoke-set clips repeated under new names (the same audio for
every configuration). For each codec, wall seconds per audio second of:
  (a) floor: one process, model loaded once, a plain loop of the codec adapter's encode and decode
      (the library calls themselves, no files, no workers, no payloads) over the N utterances;
  (b) `codecarena run --mode cold --workers 1` (three fresh worker processes per row);
  (c) `codecarena run --mode warm` with 1 and with 2 workers (defaults: 1 cold-start row and 1
      fresh-process replay per configuration);
  (d) `--executor ray --mode warm --workers 2` on a private local Ray cluster, inside a network
      namespace with only a loopback interface (needs `unshare`, i.e. root).
Each codecarena figure is given three ways: `rows` is the executor's rows phase (run.json
execution.rows_wall_s: everything from the first row dispatched to the last row stored, including
the cold-start sample, the replay sample, worker start-up and model loads), `cmd` the whole command
(interpreter start, set loading), and for the warm executors `marginal`, the steady state a large
corpus converges to: (rows(N) - rows(N/2)) / (audio(N) - audio(N/2)), from a second run over the
first N/2 utterances, whose one-off costs are the same. Ratios are to (a). The metrics stage:
(a) a direct loop of the metric libraries over the (reference, decoded) pairs; codecarena's scorer
time summed over the rows (row.scoring_s: alignment, records and failure handling included); and
the rows phase of a warm run with those metrics at 1 and 2 workers. Nothing is asserted: read the
ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import soundfile as sf
import soxr

from codecarena.codecs.loading import adapter_module
from codecarena.datasets import load_smoke
from codecarena.machine import cpu_model
from codecarena.specs import parse_spec
from codecarena.worker import make_payload

REPO = Path(__file__).resolve().parent.parent
CODECS = ("opus:12k", "codec2:3200", "lyra:6000")


def build_corpus(folder: Path, n: int) -> list[float]:
    """Durations of the N files, in sorted (= --limit) order."""
    clips = [u.path for u in load_smoke(allow_download=False).utterances]
    durations = []
    for i in range(n):
        shutil.copy(clips[i % len(clips)], folder / f"b{i:04d}.wav")
        durations.append(sf.info(folder / f"b{i:04d}.wav").duration)
    return durations


def floor(codec: str, corpus: Path) -> float:
    """Wall seconds for encode + decode of every utterance in this process (load excluded)."""
    spec = parse_spec(codec)
    adapter = adapter_module(spec.family)[0].ADAPTER(spec, "real")
    model = adapter.load()
    files = sorted(corpus.glob("*.wav"))
    start = time.perf_counter()
    for path in files:
        audio, rate = sf.read(path, dtype="float64")
        if adapter.input_rate != rate:
            audio = soxr.resample(audio, rate, adapter.input_rate, quality="HQ")
        encoded = adapter.encode(audio)
        payload = make_payload(spec, encoded, model, "", rate, len(audio), adapter.input_rate)
        adapter.decode(payload)
    return time.perf_counter() - start


def ray_possible(no_ray: bool) -> bool:
    """Whether this process may make a loopback-only network namespace for Ray (`unshare`, as root)."""
    return not no_ray and subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0


def run_command(args: list[str], out: Path, netns: bool = False) -> list[str]:
    """The argv of one `codecarena run` into `out`, in a loopback-only network namespace with `netns`."""
    cmd = [sys.executable, "-m", "codecarena", "run", *args, "--out", str(out)]
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd] if netns else cmd


def run(args: list[str], out: Path, netns: bool = False) -> tuple[float, float]:
    """(command wall, rows-phase wall) of one `codecarena run`."""
    cmd = run_command(args, out, netns)
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"codecarena run {' '.join(args)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return wall, json.loads((out / "run.json").read_text())["execution"]["rows_wall_s"]


def metric_floor(run_dir: Path, metrics: tuple[str, ...], part: tuple[int, int] = (0, 1)) -> float:
    """Wall seconds of a direct pesq/pystoi loop over the run's pairs (every part[1]-th from part[0])."""
    from pesq import pesq
    from pystoi import stoi

    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()][part[0]::part[1]]
    start = time.perf_counter()
    for row in rows:
        ref, rate = sf.read(row["reference"] if row["reference"].startswith("/") else run_dir / row["reference"])
        dec, _ = sf.read(run_dir / row["decoded"])
        if "pesq_wb" in metrics:
            pesq(rate, ref, dec, "wb")
        if "stoi" in metrics:
            stoi(ref, dec, rate, extended=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, default=100)
    parser.add_argument("--codec", action="append", dest="codecs")
    parser.add_argument("--metrics", default="pesq_wb,stoi", help="metrics for the metrics-stage section")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    codecs = tuple(args.codecs or CODECS)
    ray = ray_possible(args.no_ray)
    work = Path(tempfile.mkdtemp(prefix="cc-bench-"))
    corpus = work / "corpus"
    corpus.mkdir()
    durations = build_corpus(corpus, args.utterances)
    audio_s, half = sum(durations), args.utterances // 2
    half_s = sum(durations[:half])
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}")
    print(f"corpus: {args.utterances} utterances, {audio_s:.1f} s of audio; figures are wall s per audio s "
          f"(ratio to the floor in brackets; rows = rows phase, cmd = whole command)")
    base = ["--input", str(corpus), "--metrics", "none"]
    variants: list[tuple[str, list[str], bool]] = [
        ("cold 1w", ["--mode", "cold", "--workers", "1"], False),
        ("warm 1w", ["--mode", "warm", "--workers", "1"], False),
        ("warm 2w", ["--mode", "warm", "--workers", "2"], False),
    ]
    if ray:
        variants.append(("ray warm 2w", ["--executor", "ray", "--mode", "warm", "--workers", "2"], True))
    else:
        print("ray: skipped (needs `unshare --net`, i.e. root, for a loopback-only namespace)")
    print(f"{'codec':<12} {'variant':<12} {'s per audio s':>13} {'rows':>7} {'cmd':>7} {'marginal':>9}")
    for codec in codecs:
        a = floor(codec, corpus) / audio_s
        print(f"{codec:<12} {'floor':<12} {a:>13.4f} {1:>6.2f}x {1:>6.2f}x {1:>8.2f}x")
        marginal: dict[str, float] = {}
        for i, (name, extra, netns) in enumerate(variants):
            slug = f"{codec.replace(':', '_')}-{i}"
            cmd_wall, rows_wall = run([*base, "--codec", codec, *extra], work / slug, netns)
            cell = f"{codec:<12} {name:<12} {rows_wall / audio_s:>13.4f} {rows_wall / audio_s / a:>6.2f}x " \
                   f"{cmd_wall / audio_s / a:>6.2f}x"
            if "warm" in name:
                _, rows_half = run([*base, "--codec", codec, *extra, "--limit", str(half)], work / f"{slug}-half", netns)
                marginal[name] = (rows_wall - rows_half) / (audio_s - half_s)
                cell += f" {marginal[name] / a:>8.2f}x"
            print(cell, flush=True)
        print(f"{codec:<12} warm 2 workers vs 1: {marginal['warm 1w'] / marginal['warm 2w']:.2f}x faster (marginal)")
    metrics = tuple(args.metrics.split(","))
    print(f"\nmetrics stage ({','.join(metrics)}) on {codecs[0]}'s decoded audio; s per audio s")
    reference_run = work / f"{codecs[0].replace(':', '_')}-1"
    m_floor = metric_floor(reference_run, metrics) / audio_s
    print(f"direct library loop: {m_floor:.4f}")
    # What this machine gives two CPU-bound processes at once: the ceiling for any 2-worker speed-up.
    from concurrent.futures import ProcessPoolExecutor

    start = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(metric_floor, [reference_run] * 2, [metrics] * 2, [(0, 2), (1, 2)]))
    both = (time.perf_counter() - start) / audio_s
    print(f"direct library loop split over 2 processes: {both:.4f} ({m_floor / both:.2f}x faster, "
          f"process start included)")
    walls = {}
    for workers in ("1", "2"):
        out = work / f"m-{workers}"
        _, walls[workers] = run(["--input", str(corpus), "--codec", codecs[0], "--mode", "warm", "--workers", workers,
                                 "--metrics", ",".join(metrics)], out)
        if workers == "1":
            rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
            scoring = sum(r["scoring_s"] for r in rows) / audio_s
            print(f"codecarena scorer, summed over rows (1 worker): {scoring:.4f} ({scoring / m_floor:.2f}x)")
    print(f"warm run with these metrics, rows phase: 1 worker {walls['1'] / audio_s:.4f}, 2 workers "
          f"{walls['2'] / audio_s:.4f} ({walls['1'] / walls['2']:.2f}x faster)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
