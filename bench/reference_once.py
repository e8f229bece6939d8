"""Reference-side work counted once: how many times a real run transcribes each utterance.

Usage: CODECARENA_DATA=../shared/data/speech .venv/bin/python bench/reference_once.py [--keep DIR]

Runs `codecarena run` on the smoke set's Mandarin clips with five lossy codec configurations and the
asr and speaker_sim metrics (two executor workers, so two scoring processes share the run), then
counts the transcriptions the scoring processes logged (one line per call, with the hash of the
audio they heard) and tells the reference's apart from the decoded audio's by that hash. Without
reference-side results kept once per reference, each row would transcribe its reference again:
two calls per row, ten per utterance. Nothing is asserted: it prints what the run did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import soundfile as sf

CODECS = ("opus:6k", "opus:12k", "opus:24k", "codec2:1200", "codec2:3200")
_LINE = re.compile(r"codecarena\.asr: transcribed [0-9.]+ s of audio \(float32 sha256 ([0-9a-f]{16})\)")


def heard_as(path: Path) -> str:
    """The hash the transcriber logs for a wav: sha256 of its float32 samples, as it hears them."""
    audio, _ = sf.read(path, dtype="float64")
    return hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", type=Path, help="keep the run directory here")
    args = parser.parse_args()
    mirror = Path(os.environ.get("CODECARENA_DATA", "../shared/data/speech"))
    manifest = json.loads((mirror / "manifest.json").read_text(encoding="utf-8"))
    clips = [entry for entry in manifest if entry["language"] == "zh"]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "zh"
        corpus.mkdir()
        for entry in clips:
            shutil.copy(mirror / entry["file"], corpus / entry["file"])
            (corpus / entry["file"]).with_suffix(".txt").write_text(entry["transcript"], encoding="utf-8")
        out = args.keep or Path(tmp) / "run"
        command = [sys.executable, "-m", "codecarena", "run", "--input", str(corpus), "--language", "zh",
                   "--metrics", "asr,speaker_sim", "--workers", "2", "--out", str(out)]
        for codec in CODECS:
            command += ["--codec", codec]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"the run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        heard = Counter(m.group(1) for log in sorted((out / "work" / "scoring").glob("*.log"))
                        for m in _LINE.finditer(log.read_text(encoding="utf-8")))
        rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
        print(f"{len(CODECS)} codec configurations x {len(clips)} Mandarin utterances, 2 workers; run {wall:.1f} s")
        print(f"{'utterance':<32} {'reference':>9} {'decoded':>8} {'per utterance':>14}")
        total = 0
        for entry in clips:
            reference = heard[heard_as(corpus / entry["file"])]
            decoded = sum(heard[heard_as(out / row["decoded"])] for row in rows if row["utterance"] == entry["id"]
                          or row["utterance"] == Path(entry["file"]).stem)
            total += reference + decoded
            print(f"{entry['id']:<32} {reference:>9} {decoded:>8} {reference + decoded:>14}")
        print(f"ASR calls: {total} in all, {total / len(clips):.1f} per utterance "
              f"(without reference results kept once: {2 * len(CODECS)} per utterance)")
        stored = sorted((out / "reference_results").glob("*/*.json"))
        print(f"reference_results entries: {len(stored)} "
              f"({Counter(p.name.split('-')[0] for p in stored)})")
        scoring = [row["scoring_s"] for row in rows if row["scoring_s"] is not None]
        print(f"scoring wall time per row: median {float(np.median(scoring)):.2f} s over {len(scoring)} rows")


if __name__ == "__main__":
    main()
