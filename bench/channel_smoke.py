"""The channel for every codec on the smoke set (issue #41's done-when; docs/channel.md).

Runs `codecarena run` on the smoke set with every telephony unit (g722, g726, gsm, speex, lc3 at their
default configurations, real binaries) and every neural family (`--weights synthetic`: their rows say
`weights: synthetic`) through loss=5%, 10%, 20% and burst=10%,len=3 (beside each clean configuration),
metrics PESQ-WB and PLCMOS, audits each run, then prints per configuration: rows ok, replay identical,
the realised loss, who concealed (`by: codec` or `arena`, as each row's receiver reports) and its count
of lost frames against the frames of the trace's lost packets, and the mean PESQ-WB and PLCMOS.

`--weights` is one per run and the telephony units run real code only (they refuse `synthetic`), so
this is two runs under --out: `telephony/` and `neural/`. Rerunning with the same options resumes both;
--print reads existing runs only. Usage:

    CODECARENA_DATA=... CODECARENA_MODELS=... .venv/bin/python bench/channel_smoke.py --out runs/smoke-channel
    ... bench/channel_smoke.py --out runs/channel-sample --limit-per-language 1 --family g722 --family snac
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

TELEPHONY = ("g722", "g726", "gsm", "speex", "lc3")
NEURAL = ("encodec", "dac", "snac", "mimi", "bigcodec", "xcodec2", "wavtokenizer", "fish_dac")
CHANNELS = ("loss=5%", "loss=10%", "loss=20%", "burst=10%,len=3")
METRICS = ("pesq_wb", "plcmos")
RUNS = {"telephony": ("real", TELEPHONY), "neural": ("synthetic", NEURAL)}


def command(out: Path, weights: str, families: list[str], limit: int | None, workers: int, warm: int) -> list[str]:
    limited = ["--limit-per-language", str(limit)] if limit else []
    return [sys.executable, "-m", "codecarena", "run", "--set", "smoke", "--weights", weights,
            *(a for f in families for a in ("--codec", f)), *(a for c in CHANNELS for a in ("--channel", c)),
            "--metrics", ",".join(METRICS), *limited, "--warm-repeats", str(warm), "--workers", str(workers),
            "--out", str(out)]


def _lost_frames(run: Path, channel: dict[str, Any]) -> int:
    """The frames of the trace's lost packets (the last packet holds only the frames there are)."""
    trace = json.loads((run / channel["trace"]).read_text())
    per, frames = trace.get("frames_per_packet", 1), trace.get("frames", trace["units"])
    return sum(min(per, frames - packet * per) for packet in trace["lost"])


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f} (n={len(values)})" if values else "-"


def report(run: Path) -> None:
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
    by_config: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_config[row["codec"]].append(row)
    for config, group in by_config.items():
        ok = [r for r in group if r["status"] == "ok"]
        replayed = sum(1 for r in group if r.get("replay_identical"))
        line = f"  {config}: {len(ok)}/{len(group)} ok, {replayed}/{len(group)} replay identical"
        crossed = [r for r in ok if r.get("channel")]
        if crossed:
            units = sum(r["channel"]["units"] for r in crossed)
            packets = sum(r["channel"]["lost"] for r in crossed)
            frames = sum(_lost_frames(run, r["channel"]) for r in crossed)
            receivers = [r["codec_facts"]["decode"].get("receiver", {}) for r in crossed]
            who = sorted({str(x.get("by")) for x in receivers})
            # Speex names the frames the channel erased lost_packets (one frame a packet at its default).
            said = sum(x.get("lost_frames", x.get("lost_packets", 0)) for x in receivers)
            counts: dict[str, int] = defaultdict(int)
            for facts in receivers:
                for key, value in facts.items():
                    if type(value) is int and key not in ("lost_frames", "lost_packets"):
                        counts[key] += value
            shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            line += (f"; realised loss {packets}/{units} packets = {packets / units:.1%}; by {'/'.join(who)}: "
                     f"{said} lost frames concealed, the traces' lost packets hold {frames} "
                     f"({'match' if said == frames else 'MISMATCH'}){'; ' + shown if shown else ''}")
        for metric in METRICS:
            values = [r["metrics"][metric]["value"] for r in ok
                      if (r.get("metrics") or {}).get(metric, {}).get("status") == "ok"]
            line += f"; {metric} {_mean(values)}"
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/smoke-channel"))
    parser.add_argument("--limit-per-language", type=int, default=None, metavar="N",
                        help="sample N utterances per language (default: the whole smoke set)")
    parser.add_argument("--family", action="append", default=None,
                        help="only these families (repeatable; default: every telephony unit and neural family)")
    parser.add_argument("--workers", type=int, default=1)
    # The warm repeats time the codec, which this sweep is not about; each costs an encode and a decode a row.
    parser.add_argument("--warm-repeats", type=int, default=0, help="run's --warm-repeats (default 0)")
    parser.add_argument("--replay", action="store_true", help="also `audit --replay` each run")
    parser.add_argument("--print", action="store_true", help="only print the figures of existing runs")
    args = parser.parse_args()
    chosen = args.family or [*TELEPHONY, *NEURAL]
    unknown = [f for f in chosen if f not in TELEPHONY + NEURAL]
    if unknown:
        parser.error(f"--family {unknown[0]}: not one of {', '.join(TELEPHONY + NEURAL)}")
    failed = False
    for name, (weights, families) in RUNS.items():
        picked = [f for f in families if f in chosen]
        run = args.out / name
        if not picked:
            continue
        if not args.print:
            subprocess.run(command(run, weights, picked, args.limit_per_language, args.workers,
                                   args.warm_repeats), check=False)
            audits = [["audit", str(run)], *([["audit", str(run), "--replay"]] if args.replay else [])]
            for audit in audits:
                status = subprocess.run([sys.executable, "-m", "codecarena", *audit], check=False).returncode
                failed |= status != 0
                print(f"{' '.join(audit)}: exit status {status}")
        print(f"\n{name} (--weights {weights}):")
        report(run)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
