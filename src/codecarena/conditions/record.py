"""What a row records of its condition, and the files it names: the conditioned input the encoder got
(`conditions/<configuration>/<utterance>.wav`), its trace (`.trace.json`) and, for tandem and
generations, each hop's payload and decoded audio (docs/conditions.md, docs/results.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.conditions.make import realised, wav_bytes
from codecarena.files import replace_text, sha256_file
from codecarena.rundir import RunDir

#: The keys of a row's `condition` record.
RECORD_KEYS = ("condition", "model", "parameters", "seed", "input", "input_sha256", "trace", "trace_sha256",
               "speech_level_dbov", "input_level_dbov", "clipped_samples", "realised", "hops", "agreement")
#: The keys of each hop of a tandem or generations condition.
HOP_KEYS = ("codec", "payload", "payload_sha256", "payload_bytes", "representation_bits", "representation_bps",
            "payload_bps", "decoded", "decoded_sha256", "device")


def trace_text(trace: dict[str, Any]) -> str:
    return json.dumps(trace, indent=1, sort_keys=True) + "\n"


def write(samples: np.ndarray | None, trace: dict[str, Any], input_path: Path, trace_path: Path) -> None:
    """The conditioned input (unless a hop's decoder wrote it already) and its trace."""
    input_path.parent.mkdir(parents=True, exist_ok=True)
    if samples is not None:
        input_path.write_bytes(wav_bytes(samples))
    replace_text(trace_path, trace_text(trace))


def record(trace: dict[str, Any], run: RunDir, input_path: Path, trace_path: Path) -> dict[str, Any]:
    """The row's `condition` record (RECORD_KEYS), from its trace and the files written; `agreement` is
    filled in once the row's own payload exists (generations only)."""
    return {"condition": trace["condition"], "model": trace["model"], "parameters": trace["parameters"],
            "seed": trace.get("seed", 0), "input": run.relative(input_path), "input_sha256": sha256_file(input_path),
            "trace": run.relative(trace_path), "trace_sha256": sha256_file(trace_path),
            "speech_level_dbov": trace["speech_level_dbov"], "input_level_dbov": trace["input_level_dbov"],
            "clipped_samples": trace["clipped_samples"], "realised": realised(trace),
            "hops": trace.get("hops", []), "agreement": None}


def named_files(condition: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(run-relative path, sha256) of every file a condition record names."""
    files = [(condition.get("input"), condition.get("input_sha256")), (condition.get("trace"),
                                                                         condition.get("trace_sha256"))]
    for hop in condition.get("hops") or []:
        if isinstance(hop, dict):
            files.append((hop.get("payload"), hop.get("payload_sha256")))
            files.append((hop.get("decoded"), hop.get("decoded_sha256")))
    return files


def files_verify(condition: dict[str, Any] | None, run: RunDir) -> bool:
    """A row's conditioned input, trace and hop files still hash as it says (True for a row without one)."""
    return condition is None or run.hold(named_files(condition))
