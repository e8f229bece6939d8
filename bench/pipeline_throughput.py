"""Throughput of the whole arena, every default metric, against a floor, measured in one run.

Usage: CODECARENA_DATA=../shared/data/speech CODECARENA_MODELS=../shared/models \
       .venv/bin/python bench/pipeline_throughput.py [--utterances 100] [--codec opus:12k --codec codec2:3200]
       [--no-ray]

Corpus: N distinct utterances made from the smoke set: copy k of a clip is the clip circularly shifted
by 97 k samples (the same speech, other bytes, so no reference-side result is shared between copies),
with the clip's language and transcript (manifest.json), so every metric, ASR included, applies.

Measured, in this order:
  (a) the floor: one process that loads every metric's model once and, per utterance, encodes and
      decodes in memory with the codec adapter, aligns the pair once and calls each metric's library
      (through codecarena's thin wrappers of them) on arrays, the reference-side work (its ASR
      transcript, its speaker embedding) once per utterance; no files, no workers, no records;
  (b) `codecarena run --mode warm --metrics all` with 1 worker and with 2 (rows phase, from
      run.json), and the same over the first N/2 utterances, whose difference is the marginal cost
      a large corpus converges to;
  (c) with --ray (default when `unshare --net` works, i.e. as root): the same warm run with 2 workers
      through `--executor ray` on a private local cluster in a loopback-only network namespace.
Printed: seconds of audio per wall second per core for the whole pipeline and per stage (codec
stages from the rows' stage walls, metrics from the rows' scoring_s), the ratio to the floor, the
2-worker speed-up, the peak RSS of the whole run's process tree (sampled every 0.5 s) at N/2 and N
utterances, and a projection for LibriSpeech test-clean (5.4 h, 2,620 utterances) x 8 codec
configurations on this machine and on Ray clusters of 4 and 16 such machines, from the measured
marginal throughput and the measured Ray overhead, assumptions printed with it. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import soundfile as sf

from codecarena.datasets import load_smoke
from codecarena.machine import cpu_model
from throughput import ray_possible, run_command  # bench/throughput.py, beside this script

REPO = Path(__file__).resolve().parent.parent
CODECS = ("opus:12k", "codec2:3200")
TEST_CLEAN_S = 5.4 * 3600
CONFIGURATIONS = 8


def build_corpus(folder: Path, n: int) -> list[float]:
    """N shifted copies of the smoke clips with their languages and transcripts; their durations."""
    utterances = load_smoke(allow_download=False).utterances
    manifest, durations = [], []
    for i in range(n):
        utt = utterances[i % len(utterances)]
        audio, rate = sf.read(utt.path, dtype="int16")
        name = f"b{i:04d}.wav"
        sf.write(folder / name, np.roll(audio, 97 * (i // len(utterances))), rate, subtype="PCM_16")
        manifest.append({"file": name, "language": utt.language, "transcript": utt.transcript or "",
                         "speaker": utt.speaker})
        durations.append(len(audio) / rate)
    (folder / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    return durations


def floor(corpus: Path, codecs: tuple[str, ...]) -> dict[str, float]:
    """Wall seconds per stage (codec, alignment, each metric) of the in-memory loop over every
    codec x utterance; model loading excluded."""
    import soxr

    from codecarena.alignment import aligned, find_delay
    from codecarena.codecs.loading import adapter_module
    from codecarena.metrics import asr_models, signal
    from codecarena.metrics.transcriber import Transcriber
    from codecarena.metrics.distill_mos import DistillMos
    from codecarena.metrics.dnsmos import Dnsmos
    from codecarena.metrics.mcd import MelCepstralDistortion
    from codecarena.metrics.pitch import PitchFidelity
    from codecarena.metrics.speaker import SpeakerSimilarity
    from codecarena.metrics.visqol_speech import Visqol
    from codecarena.specs import parse_spec
    from codecarena.worker import make_payload

    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    dnsmos, visqol, pitch, mcd = Dnsmos(), Visqol(), PitchFidelity(), MelCepstralDistortion()
    distill, speaker = DistillMos(), SpeakerSimilarity()
    transcribers = {lang: Transcriber(asr_models.resolve(asr_models.default_choice(lang)), lang)
                    for lang in {m["language"] for m in manifest}}
    times: dict[str, float] = {}

    def timed(stage: str, call: Any, *args: Any) -> Any:
        start = time.perf_counter()
        value = call(*args)
        times[stage] = times.get(stage, 0.0) + time.perf_counter() - start
        return value

    references = {}
    for item in manifest:  # reference-side work, once per utterance
        ref, rate = sf.read(corpus / item["file"], dtype="float64")
        transcriber = transcribers[item["language"]]
        references[item["file"]] = (ref, timed("asr (reference, once)", transcriber.transcribe, ref, rate),
                                    timed("speaker_sim (reference, once)", speaker.embed, ref, rate))
    for codec in codecs:
        spec = parse_spec(codec)
        adapter = adapter_module(spec.family)[0].ADAPTER(spec, "real")
        model = adapter.load()
        for item in manifest:
            ref, _, embedding = references[item["file"]]
            start = time.perf_counter()
            audio = soxr.resample(ref, 16000, adapter.input_rate, quality="HQ") if adapter.input_rate != 16000 else ref
            payload = make_payload(spec, adapter.encode(audio), model, "", 16000, len(audio), adapter.input_rate)
            out = adapter.decode(payload)
            dec = out.audio if out.sample_rate == 16000 else soxr.resample(out.audio, out.sample_rate, 16000, quality="HQ")
            dec = np.asarray(dec, dtype=np.float64)[: len(ref)]
            dec = np.pad(dec, (0, len(ref) - len(dec)))
            times["codec"] = times.get("codec", 0.0) + time.perf_counter() - start
            delay = timed("alignment", find_delay, ref, dec, int(signal.MAX_DELAY_S * 16000))
            r, d = aligned(ref, dec, delay)
            timed("pesq_wb", signal.pesq_wb, ref, dec)
            timed("pesq_nb", signal.pesq_nb, ref, dec)
            timed("stoi", signal.stoi, r, d)
            timed("estoi", signal.stoi, r, d, True)
            timed("si_sdr", signal.si_sdr, r, d)
            timed("lsd", signal.log_spectral_distance, r, d)
            timed("mel_distance", signal.mel_distance, r, d)
            timed("dnsmos", dnsmos.score, dec)
            timed("visqol", visqol.score, ref, dec, 16000)
            timed("pitch", pitch.scores, r, d, 16000)
            timed("mcd", mcd.scores, r, d, 16000)
            timed("distill_mos", distill.score, dec)
            timed("speaker_sim", speaker.similarity_to, embedding, dec, 16000)
            timed("asr", transcribers[item["language"]].transcribe, dec, 16000)
    return times


class TreePeak:
    """The peak RSS of a process and everything under it, sampled every 0.5 s."""

    def __init__(self, pid: int) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(pid,), daemon=True)
        self._thread.start()

    def _poll(self, pid: int) -> None:
        while not self._stop.is_set():
            try:
                root = psutil.Process(pid)
                total = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
                self.peak = max(self.peak, total)
            except psutil.Error:
                pass
            time.sleep(0.5)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def run(args: list[str], out: Path, netns: bool = False) -> dict[str, Any]:
    """One `codecarena run`: its rows-phase wall, rows, and the process tree's peak RSS."""
    proc = subprocess.Popen(run_command(args, out, netns), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = TreePeak(proc.pid)
    stdout, stderr = proc.communicate()
    rss = peak.stop()
    if proc.returncode != 0:
        raise SystemExit(f"codecarena run {' '.join(args)} failed:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    record = json.loads((out / "run.json").read_text())
    return {"rows_wall": record["execution"]["rows_wall_s"], "rows": rows, "peak_rss": rss,
            "threads": record["execution"].get("scoring_threads")}


def stage_sums(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Wall seconds summed over rows: the codec stages (encode, decode, replay) and the metrics."""
    codec = sum(s["wall_s"] for r in rows for s in r["stages"])
    return {"codec stages": codec, "metrics": sum(r["scoring_s"] or 0.0 for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, default=100)
    parser.add_argument("--codec", action="append", dest="codecs")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    codecs = tuple(args.codecs or CODECS)
    ray = ray_possible(args.no_ray)
    work = Path(tempfile.mkdtemp(prefix="cc-pipe-"))
    corpus = work / "corpus"
    corpus.mkdir()
    durations = build_corpus(corpus, args.utterances)
    half = args.utterances // 2
    audio_s = sum(durations) * len(codecs)  # audio seconds through the pipeline: every codec codes all of it
    half_s = sum(durations[:half]) * len(codecs)
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}")
    print(f"corpus: {args.utterances} utterances, {sum(durations):.1f} s of audio, x {len(codecs)} codecs "
          f"({', '.join(codecs)}) = {audio_s:.1f} audio s through the pipeline; every default metric")

    start = time.perf_counter()
    times = floor(corpus, codecs)
    floor_wall = time.perf_counter() - start
    floor_s = sum(times.values())
    print(f"\n(a) floor, one process, in memory ({floor_wall:.0f} s with model loads): "
          f"{audio_s / floor_s:.2f} audio s per s per core")
    for stage, seconds in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"    {stage:<32} {seconds / audio_s * 1000:8.1f} ms per audio s  ({seconds / floor_s:5.1%})")

    base = ["--input", str(corpus), "--mode", "warm", "--metrics", "all", *[a for c in codecs for a in ("--codec", c)]]
    results: dict[str, dict[str, Any]] = {}
    variants = [("warm 1w", ["--workers", "1"], False), ("warm 2w", ["--workers", "2"], False)]
    if ray:
        variants.append(("ray warm 2w", ["--executor", "ray", "--workers", "2"], True))
    else:
        print("ray: skipped (needs `unshare --net`, i.e. root, for a loopback-only namespace)")
    print("\n(b) codecarena run --mode warm --metrics all: audio s per wall s per core (rows phase); marginal = "
          "(rows(N) - rows(N/2)) / (audio(N) - audio(N/2))")
    for i, (name, extra, netns) in enumerate(variants):
        full = run([*base, *extra], work / f"v{i}", netns)
        part = run([*base, *extra, "--limit", str(half)], work / f"v{i}-half", netns)
        cores = 2 if "2w" in name else 1
        marginal = (full["rows_wall"] - part["rows_wall"]) / (audio_s - half_s)
        results[name] = {**full, "marginal": marginal, "cores": cores, "half_rss": part["peak_rss"]}
        sums = stage_sums(full["rows"])
        print(f"  {name:<12} whole {audio_s / full['rows_wall'] / cores:6.2f}  marginal {1 / marginal / cores:6.2f}  "
              f"vs floor {marginal * cores / (floor_s / audio_s):5.2f}x  peak RSS {full['peak_rss'] / 2**20:6.0f} MiB "
              f"(N/2: {part['peak_rss'] / 2**20:.0f})")
        for stage, seconds in sums.items():
            print(f"      {stage:<14} {seconds / audio_s * 1000:8.1f} ms per audio s, summed over rows "
                  f"({seconds / sum(sums.values()):5.1%})")
    one, two = results["warm 1w"], results["warm 2w"]
    print(f"\n2 workers vs 1 (marginal): {one['marginal'] / two['marginal']:.2f}x faster; metric stage alone "
          f"(rows' scoring_s, 1w vs 2w walls): {stage_sums(one['rows'])['metrics'] / one['rows_wall']:.2f} of "
          f"the 1-worker wall is scoring")
    print(f"scoring threads recorded in run.json: {json.dumps(two['threads'])}")

    per_machine = 1 / two["marginal"]  # audio s per wall s, this machine, 2 workers
    total = TEST_CLEAN_S * CONFIGURATIONS
    print(f"\nprojection: LibriSpeech test-clean ({TEST_CLEAN_S / 3600:.1f} h) x {CONFIGURATIONS} configurations = "
          f"{total / 3600:.1f} h of audio through the pipeline")
    print(f"  this machine, 2 workers, marginal {per_machine:.2f} audio s per s: {total / per_machine / 3600:.1f} h")
    if "ray warm 2w" in results:
        overhead = results["ray warm 2w"]["marginal"] / two["marginal"]
        for machines in (4, 16):
            hours = total / (per_machine * machines / overhead) / 3600
            print(f"  Ray, {machines} such machines: {hours:.1f} h (measured Ray overhead {overhead:.2f}x on one "
                  f"machine, assumed unchanged per machine; shared run directory and runtimes at the same paths; "
                  f"one-off costs, cold rows and replays excluded)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
