"""Quality against input conditions on the smoke set (issue #40; the figures of docs/conditions.md).

Runs `codecarena run` on the smoke set with opus:6k, lyra:3200, codec2:3200 and pcm:16 at babble SNR
20/10/5/0 dB, RT60 0.3/0.6/1.0 s and levels -16/-26/-36 dBov, and Opus's and Codec 2's generations 2 to 5,
audits it, then prints per configuration the mean PESQ-WB and STOI against the clean reference and against
the conditioned input, with n and the 95% interval, what each condition reached and what each generation
kept. Usage (rerunning resumes; --print reads an existing run only):

    CODECARENA_DATA=... CODECARENA_MODELS=... .venv/bin/python bench/conditions_smoke.py --out runs/smoke-conditions
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CODECS = ("opus:6k", "lyra:3200", "codec2:3200", "pcm:16")
CONDITIONS = (*(f"noise=babble,snr={snr}" for snr in (20, 10, 5, 0)), *(f"rt60={rt}" for rt in ("0.3", "0.6", "1.0")),
              *(f"level={level}" for level in (-16, -26, -36)))
GENERATIONS = ("opus:6k", "codec2:3200")
METRICS = ("pesq_wb", "stoi")


def command(out: Path, workers: int) -> list[str]:
    codecs = [*CODECS, *(f"{codec}%gen={k}" for codec in GENERATIONS for k in range(2, 6))]
    return [sys.executable, "-m", "codecarena", "run", *(a for c in codecs for a in ("--codec", c)),
            *(a for c in CONDITIONS for a in ("--condition", c)), "--metrics", ",".join(METRICS),
            "--workers", str(workers), "--out", str(out)]


def _cell(stats: dict | None) -> str:
    if not stats:
        return "-"
    interval = f" [{stats['ci95'][0]:.2f}, {stats['ci95'][1]:.2f}]" if stats.get("ci95") else ""
    return f"{stats['mean']:.3f}{interval}"


def report(out: Path) -> None:
    conditions = json.loads((out / "summary.json").read_text())["conditions"]
    for metric in METRICS:
        print(f"\n{metric}: mean vs clean reference / vs conditioned input [95% interval], n per point")
        for curve in conditions["curves"]:
            clean = (curve["clean"] or {}).get("vs_clean", {}).get(metric)
            print(f"  {curve['codec']} {curve['curve']}: clean {_cell(clean)} (n={clean['n'] if clean else 0})")
            for p in curve["points"]:
                extra = f"; kept {p['agreement']['fraction']:.3f} of {p['agreement']['unit']}s" if "agreement" in p else ""
                print(f"    {p['condition']}: {_cell(p['vs_clean'].get(metric))} / {_cell(p['vs_input'].get(metric))} "
                      f"(n={p['vs_clean'].get(metric, {}).get('n')}; realised {p['realised']}; clipped "
                      f"{p['clipped_samples']}{extra})")
            for reference, found in (curve["robustness"] or {}).items():
                if metric in found:
                    print(f"    robustness {reference}: {found[metric]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/smoke-conditions"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--print", action="store_true", help="only print the figures of an existing run")
    args = parser.parse_args()
    if not args.print:
        subprocess.run(command(args.out, args.workers), check=False)
        audit = subprocess.run([sys.executable, "-m", "codecarena", "audit", str(args.out)], check=False)
        print(f"audit exit status {audit.returncode}")
    report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
