"""The device check's one table (scripts/device_check.sh): two runs of the same codecs and utterances on
two devices, and a determinism doctor's evidence folder.

`python -m codecarena.results.devices_table RUN_A RUN_B [DOCTOR_DIR]` prints, per codec configuration,
the median cold encode and decode RTF on each run's device, how many payload files are byte-identical
between the runs, and, per doctor switch, whether cold vs warm and cross-process encodes agreed.
Everything is read from the runs' files (rows.jsonl, summary.json, run.json) and evidence.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from codecarena.determinism.switches import NAMES
from codecarena.results.formatting import weights_label
from codecarena.results.record import RunLoadError
from codecarena.results.run import Run


class TableError(ValueError):
    """A folder that is not a finished run or a doctor's evidence folder."""


def _device(plan: dict[str, Any]) -> str:
    # Runs made before the device was part of the plan ran on the CPU.
    device = plan.get("device", "cpu")
    return device if isinstance(device, str) else str(device.get("device", "?"))


def _rtf(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def run_part(path: Path) -> tuple[str, dict[str, dict[str, Any]], dict[str, dict[str, str | None]]]:
    """(device, summary entry per codec, payload sha256 per codec and utterance) of a run folder."""
    try:
        loaded = Run.open(path)
    except RunLoadError as exc:
        raise TableError(str(exc)) from None
    if loaded.summary is None:
        raise TableError(f"{path}: no summary.json (did the run finish?)")
    payloads: dict[str, dict[str, str | None]] = {}
    for row in loaded.rows:
        payloads.setdefault(row.codec, {})[row.utterance] = row.payload_sha256 if row.status == "ok" else None
    device = _device(loaded.record.plan.to_dict())
    return device, {c["codec"]: c for c in loaded.summary["codecs"]}, payloads


def doctor_part(folder: Path) -> dict[str, Any]:
    path = folder / "evidence.json"
    try:
        evidence = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: not a readable evidence file ({exc})") from None
    if not isinstance(evidence, dict) or evidence.get("version") != 2:
        raise TableError(f"{path}: not a version 2 evidence file (determinism --switches writes one)")
    return evidence


def table(run_a: Path, run_b: Path, doctor: Path | None = None) -> str:
    device_a, codecs_a, payloads_a = run_part(run_a)
    device_b, codecs_b, payloads_b = run_part(run_b)
    a, b = f"A {device_a}", f"B {device_b}"
    head = ["codec", "weights", f"enc RTF {a}", f"enc RTF {b}", f"dec RTF {a}", f"dec RTF {b}",
            "identical payloads"]
    body = []
    for codec, entry in codecs_a.items():
        other = codecs_b.get(codec)
        if other is None:
            body.append([codec, "-", "-", "-", "-", "-", "only in A"])
            continue
        shared = sorted(payloads_a[codec].keys() & payloads_b[codec].keys())
        same = sum(1 for u in shared if payloads_a[codec][u] is not None
                   and payloads_a[codec][u] == payloads_b[codec][u])
        label = weights_label(entry["weights"], entry.get("user_codec", ""),
                              "external" if "external" in (entry.get("runtime"), other.get("runtime")) else "")
        body.append([codec, label, _rtf(entry["encode"]["cold_rtf_median"]), _rtf(other["encode"]["cold_rtf_median"]),
                     _rtf(entry["decode"]["cold_rtf_median"]), _rtf(other["decode"]["cold_rtf_median"]),
                     f"{same}/{len(shared)}"])
    lines = [f"A = {run_a} (device {device_a}); B = {run_b} (device {device_b}); RTF: median cold seconds of "
             "compute per second of audio", *_aligned([head, *body])]
    if doctor is not None:
        evidence = doctor_part(doctor)
        device = evidence["device"]
        lines += ["", f"doctor: {evidence['codec']} on {device['device']} ({device['name']}, torch {device['torch']}, "
                      f"CUDA {device['cuda'] or '-'}, cuDNN {device['cudnn'] or '-'}); plain controls: "
                      f"{evidence['verdict']}"]
        rows = [["switch", "cold vs warm", "cross-process", "first divergent module"]]
        # evidence.json keeps its keys sorted: the switches are shown in the order of their list.
        for name in sorted(evidence["switches"], key=lambda n: NAMES.index(n) if n in NAMES else len(NAMES)):
            result = evidence["switches"][name]
            if not result["applicable"]:
                rows.append([name, "-", "-", result["reason"]])
                continue
            controls, where = result["controls"], result["first_divergence"]
            rows.append([name, "agree" if controls["cold_vs_warm"]["agree"] else "DIFFER",
                         "agree" if controls["cross_process"]["agree"] else "DIFFER",
                         (where["module"] or "-") if where else "-"])
        lines += _aligned(rows)
    return "\n".join(lines) + "\n"


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m codecarena.results.devices_table RUN_A RUN_B [DOCTOR_DIR]", file=sys.stderr)
        return 64
    try:
        text = table(Path(argv[0]), Path(argv[1]), Path(argv[2]) if len(argv) == 3 else None)
    except TableError as exc:
        print(f"devices_table: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
