"""The ledger summary.json holds, when it is still the one the run's files give.

`codecarena ledger RUN` shows it instead of deriving the ledger again (which codes every payload
losslessly: seconds of CPU on the README's main job). It is taken as current only when summary.json was
written after rows.jsonl, counts the same rows, is of the ledger version `ledger.build` writes, and no
file the ledger reads (each row's payload, its stability record and extra payloads) is missing, or
was changed or removed after summary.json; otherwise the ledger is derived as
before. This is a freshness check by modification times, not a proof: `codecarena audit` derives the
ledger again from the files and reports every difference, and `ledger --derive` shows the derived one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codecarena.results.ledger import LEDGER_VERSION
from codecarena.results.schema import Row
from codecarena.results.stability_record import stability_paths
from codecarena.rundir import RunDir, UnsafePathError


def _unchanged_since(path: Path, written_ns: int) -> bool:
    try:
        return path.stat().st_mtime_ns <= written_ns
    except OSError:
        return False


def current_ledger(summary: dict[str, Any] | None, rows: list[Row], run: RunDir) -> dict[str, Any] | None:
    """summary.json's ledger when it is current (module docstring), else None."""
    if not summary or not isinstance(summary.get("ledger"), dict) or summary.get("rows") != len(rows):
        return None
    stored = summary["ledger"]
    if stored.get("version") != LEDGER_VERSION:
        return None
    try:
        written = run.summary.stat().st_mtime_ns
    except OSError:
        return None
    if not _unchanged_since(run.rows, written):
        return None
    for row in rows:
        try:
            payload = run.resolve(row.payload) if row.payload else None
        except UnsafePathError:
            return None
        if payload is not None and not _unchanged_since(payload, written):
            return None
        for path in stability_paths(run, row).values():
            # A file removed since changes its folder's time; one never measured leaves no folder.
            if (path.parent.exists() and not _unchanged_since(path.parent, written)) or (
                    path.exists() and not _unchanged_since(path, written)):
                return None
    return stored
