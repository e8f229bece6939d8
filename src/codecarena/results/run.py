"""A run directory loaded once: the one value every reader of a run works from.

`Run.open(path)` reads run.json strictly into a `RunRecord` (exact keys, types, a known version;
record.py), rows.jsonl into rows in plan order (a torn final line, an interrupted append, is dropped
and flagged), and summary.json into its dict (None when the run has none yet: an unfinished run). The
audit (and its --rescore and --replay), the ledger and its stability measurement, compare, the
leaderboard, the report and the device table each open a run once and pass the `Run` on, so they agree
on what a valid run is and read it one way; files inside the run are named by its `RunDir`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from codecarena.files import JSONFileError, read_json
from codecarena.results.record import Plan, RunLoadError, RunRecord, read_record
from codecarena.results.schema import Row
from codecarena.results.store import StoreError, load_rows
from codecarena.rundir import RunDir


@dataclass(frozen=True)
class Run:
    path: Path  # the run directory as it was named (messages and labels show it so)
    dir: RunDir  # its files
    record: RunRecord
    rows: list[Row]  # in plan order; rows outside the plan last
    torn: bool  # a torn final line of rows.jsonl (an interrupted append) was dropped
    summary: dict[str, Any] | None  # summary.json, None when it is missing

    @classmethod
    def open(cls, where: Path | RunDir) -> Run:
        """The run at `where`; RunLoadError (one line naming the file) when it is not a run directory,
        or run.json, a row or summary.json cannot be read. A missing summary.json is None."""
        run = where if isinstance(where, RunDir) else RunDir(where)
        path = run.root if isinstance(where, RunDir) else Path(where)
        if not run.root.is_dir():
            raise RunLoadError(f"{path}: not a run directory")
        if not run.run_json.is_file():
            raise RunLoadError(f"{path}: not a run directory (no {run.run_json.name})")
        record = read_record(run)
        try:
            rows, torn = load_rows(run, record.plan.keys())
        except StoreError as exc:
            raise RunLoadError(str(exc)) from None
        summary = None
        if run.summary.exists():
            try:
                summary = read_json(run.summary)
            except JSONFileError as exc:
                raise RunLoadError(str(exc)) from None
        return cls(path, run, record, rows, torn, summary)

    @property
    def plan(self) -> Plan:
        return self.record.plan

    @cached_property
    def by_codec(self) -> dict[str, dict[str, Row]]:
        """codec configuration -> utterance -> its row (of two rows for one key, the later; the audit
        refuses such a run, compare refuses to pair it)."""
        grouped: dict[str, dict[str, Row]] = {}
        for row in self.rows:
            grouped.setdefault(row.codec, {})[row.utterance] = row
        return grouped

    def codecs(self) -> list[str]:
        """Codec configurations in plan order, then any with rows but not in the plan."""
        planned = [c.codec for c in self.plan.codecs]
        return list(dict.fromkeys([c for c in planned if c in self.by_codec] + list(self.by_codec)))

    def utterances(self) -> list[tuple[str, str]]:
        """(id, sha256) of every planned utterance, in order."""
        return [(u[0], u[1]) for u in self.plan.utterances]
