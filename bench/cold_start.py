"""Cold mode against the in-process floor, forked children against new interpreters, and the CPU time
of the interactive commands, measured in one run (issue #39).

Usage: CODECARENA_DATA=../shared/data/speech CODECARENA_MODELS=../shared/models \
       .venv/bin/python bench/cold_start.py [--utterances 20] [--codec opus:12k ...] [--main-run RUN_DIR]
       [--main-job]

The corpus is N smoke-set clips (bench/throughput.py's `build_corpus`, the same audio for every
configuration). For each codec:
  floor:  one process, model loaded once, the adapter's encode and decode per utterance (throughput.py's
          `floor`), wall seconds per utterance (median);
  forked: `codecarena run --mode cold --workers 1 --metrics none`, every stage a child forked from its
          runtime's template (the default), with the default warm sample: only the first 3 rows of the
          configuration repeat each codec call twice more in the same process to measure the warm RTF, so
          the median row of a corpus of more than 6 clips has no repeats;
  fresh:  the same with `--fresh-interpreter`, every stage a new interpreter (the behaviour before #39);
  all repeat: forked with `--warm-sample all`, every row repeating its codec calls (the default before
          --warm-sample), what a cold row paid for the warm RTF.
For each run: the median over rows of the row's stage walls (encode + decode + replay, each from
fork/spawn to exit, as the harness saw it), its ratio to the floor's median, and the rows phase
(run.json execution.rows_wall_s) over the floor's total. A cold row does three stages and the floor
two codec calls, so 1.5x is the least a cold row without repeats could cost if process work were free
(and 4.5x with two repeats of each).
With --main-run RUN_DIR (the README's main job's run directory): the CPU seconds (user + system, the
command and its children) of each interactive command, the median of 3, and `report` twice (its plot
cache cold, then warm). With --main-job: the README's main job (`codecarena run`, default codecs and
metrics) run with the defaults and as before #39 (`--fresh-interpreter --warm-sample all`), side by side.
Nothing is asserted: read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import REPO, build_corpus  # noqa: E402

from codecarena.codecs.loading import adapter_module  # noqa: E402
from codecarena.machine import cpu_model  # noqa: E402
from codecarena.specs import parse_spec  # noqa: E402
from codecarena.worker import make_payload  # noqa: E402

CODECS = ("opus:12k", "codec2:3200", "lyra:6000", "pcm:16")
INTERACTIVE = (("codecs",), ("metrics",), ("registry", "list"), ("codec", "list"), ("leaderboard", "{run}"),
               ("ledger", "{run}"))


def floor_per_utterance(codec: str, corpus: Path) -> list[float]:
    """Wall seconds of encode + decode of each utterance in this process (load excluded)."""
    import soundfile as sf
    import soxr

    spec = parse_spec(codec)
    adapter = adapter_module(spec.family)[0].ADAPTER(spec, "real")
    model = adapter.load()
    times = []
    for path in sorted(corpus.glob("*.wav")):
        audio, rate = sf.read(path, dtype="float64")
        start = time.perf_counter()
        if adapter.input_rate != rate:
            audio = soxr.resample(audio, rate, adapter.input_rate, quality="HQ")
        encoded = adapter.encode(audio)
        payload = make_payload(spec, encoded, model, "", rate, len(audio), adapter.input_rate)
        adapter.decode(payload)
        times.append(time.perf_counter() - start)
    return times


def cold_run(codec: str, corpus: Path, out: Path, *extra: str) -> tuple[list[float], float, str]:
    """(each row's stage walls summed, the rows phase, the first stage's process record) of a cold run."""
    cmd = [sys.executable, "-m", "codecarena", "run", "--input", str(corpus), "--codec", codec, "--metrics", "none",
           "--mode", "cold", "--workers", "1", "--out", str(out), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    rows_wall = json.loads((out / "run.json").read_text())["execution"]["rows_wall_s"]
    return [sum(s["wall_s"] for s in row["stages"]) for row in rows], rows_wall, rows[0]["stages"][0]["process"]


def cpu_of(args: list[str]) -> float:
    """User + system CPU seconds of one command and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "codecarena", *args], capture_output=True, text=True, cwd=REPO,
                   check=True, env={**os.environ, "COLUMNS": "200"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def interactive(run_dir: Path, work: Path) -> None:
    print(f"\ninteractive commands on {run_dir}: CPU s (user + system, children included), median of 3")
    for command in INTERACTIVE:
        args = [a.format(run=run_dir) for a in command]
        print(f"  {' '.join(command):<22} {statistics.median(cpu_of(args) for _ in range(3)):6.2f}", flush=True)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "codecarena" / "report-plots"
    for name in sorted(cache.glob("*.json")) if cache.is_dir() else ():
        name.unlink()
    first = cpu_of(["report", str(run_dir), "--out", str(work / "report.html")])
    again = cpu_of(["report", str(run_dir), "--out", str(work / "report.html")])
    print(f"  {'report {run}':<22} {first:6.2f} (plot cache empty), {again:.2f} (plots cached)")


def main_job(work: Path) -> None:
    print("\nthe README's main job (codecarena run, default codecs and metrics): wall s of the command, and summed "
          "over its rows the codec stages' and the scoring's wall s")
    walls = {}
    for name, extra in (("default", []), ("as before #39", ["--fresh-interpreter", "--warm-sample", "all"])):
        out = work / ("main-" + name.replace(" ", "-").replace("#", ""))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "codecarena", "run", "--out", str(out), *extra], capture_output=True,
                       text=True, cwd=REPO, check=True)
        walls[name] = time.perf_counter() - start
        rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
        stages = sum(s["wall_s"] for row in rows for s in row["stages"])
        scoring = sum(row["scoring_s"] or 0.0 for row in rows)
        print(f"  {name:<16} {walls[name]:7.1f}   stages {stages:7.1f}   scoring {scoring:7.1f}", flush=True)
    print(f"  default / as before #39: {walls['default'] / walls['as before #39']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, default=20)
    parser.add_argument("--codec", action="append", dest="codecs")
    parser.add_argument("--main-run", type=Path, help="the README main job's run directory")
    parser.add_argument("--main-job", action="store_true", help="also run the main job with the defaults and as before #39")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cc-cold-"))
    corpus = work / "corpus"
    corpus.mkdir()
    build_corpus(corpus, args.utterances)
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
          f"load average at start {os.getloadavg()[0]:.2f}")
    print(f"corpus: {args.utterances} smoke-set clips; per row: median s (ratio to the floor's median); "
          "rows phase: total s (ratio to the floor's total)")
    print(f"{'codec':<12} {'floor/row':>10} {'forked/row':>17} {'fresh/row':>17} {'all repeat/row':>17} "
          f"{'forked rows':>18} {'fresh rows':>18} {'all repeat rows':>18} {'fresh/forked':>12}")
    for codec in args.codecs or CODECS:
        floor = floor_per_utterance(codec, corpus)
        f_med, f_sum = statistics.median(floor), sum(floor)
        forked, forked_wall, process = cold_run(codec, corpus, work / f"{codec.replace(':', '_')}-forked")
        fresh, fresh_wall, _ = cold_run(codec, corpus, work / f"{codec.replace(':', '_')}-fresh", "--fresh-interpreter")
        every, every_wall, _ = cold_run(codec, corpus, work / f"{codec.replace(':', '_')}-all", "--warm-sample", "all")
        if not process.startswith("forked from template"):
            raise SystemExit(f"{codec}: its stages were not forked: {process}")
        fk, fr, ar = statistics.median(forked), statistics.median(fresh), statistics.median(every)
        print(f"{codec:<12} {f_med:>10.4f} {fk:>9.4f} ({fk / f_med:>5.2f}x) {fr:>9.4f} ({fr / f_med:>5.2f}x) "
              f"{ar:>9.4f} ({ar / f_med:>5.2f}x) "
              f"{forked_wall:>9.2f} ({forked_wall / f_sum:>5.2f}x) {fresh_wall:>9.2f} ({fresh_wall / f_sum:>5.2f}x) "
              f"{every_wall:>9.2f} ({every_wall / f_sum:>5.2f}x) {fr / fk:>11.2f}x", flush=True)
    if args.main_run:
        interactive(args.main_run.resolve(), work)
    if args.main_job:
        main_job(work)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
