"""A leaderboard as flat records for other tools: csv, json or parquet, one record per codec
configuration and run (and language, with `--by language`), metric stats as `<output>_mean`,
`<output>_ci95_low`, `<output>_n_ok`, ...; and reading any of
the three back with the types restored."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codecarena.results.leaderboard import Leaderboard, LeaderboardError

# 2: `language` (empty for the pooled entry; `--by language` adds one entry per language) and each
# metric's `_ci95_low`/`_ci95_high`. 3: `ci_unit` and each metric's `_ci_units` (the interval is null
# below bootstrap.MIN_UNITS units), and the bitrate ledger's columns (LEDGER_COLUMNS). 4: each MUSHRA
# column of the runs' listening tests (`mushra_mean`, ..., or `mushra_<test>_mean` for a test not named
# mushra: LISTENING_SUFFIXES); a version 3 export reads as it did. 5: `encode_warm_rtf_n` and
# `decode_warm_rtf_n`, the rows each warm RTF median is over (only the warm sample's rows have one).
EXPORT_VERSION = 5
READABLE_VERSIONS = (3, 4, 5)

BASE_COLUMNS: tuple[tuple[str, type], ...] = (
    ("group", str), ("run", str), ("run_label", str), ("codec", str), ("family", str), ("weights", str),
    ("variant", str), ("registry", str), ("language", str), ("rows", int), ("rows_ok", int), ("rows_failed", int),
    ("audio_s", float), ("representation_bps", float), ("payload_bps", float),
    ("encode_cold_rtf_median", float), ("encode_warm_rtf_median", float), ("encode_warm_rtf_n", int),
    ("encode_peak_rss_bytes_max", int),
    ("decode_cold_rtf_median", float), ("decode_warm_rtf_median", float), ("decode_warm_rtf_n", int),
    ("decode_peak_rss_bytes_max", int),
    ("peak_rss_bytes_max", int), ("decoder_model_bytes", int), ("replay_sampled", int), ("replay_identical", int),
    ("checks_passed", int), ("ci_unit", str),
)
# From the run's bitrate ledger (summary.json `ledger`, docs/ledger.md), on pooled entries; empty without one.
LEDGER_COLUMNS: tuple[tuple[str, type], ...] = (
    ("claimed_bps", float), ("claim_source", str), ("claim_reference", str), ("claim_flag", str),
    ("container_bps", float), ("framing_bps", float), ("achievable_bps", float), ("entropy_bps", float),
    ("token_rate", float), ("idempotence", float), ("shift_stability", float),
)
METRIC_SUFFIXES: tuple[tuple[str, type], ...] = (("mean", float), ("n_ok", int), ("n_failed", int),
                                                 ("n_not_applicable", int), ("n_suspect", int),
                                                 ("mean_with_suspect", float), ("ci95_low", float),
                                                 ("ci95_high", float), ("ci_units", int))


LISTENING_SUFFIXES: tuple[tuple[str, type], ...] = (("mean", float), ("ci95_low", float), ("ci95_high", float),
                                                    ("n_listeners", int), ("n_utterances", int), ("n_ratings", int))


def listening_prefix(key: str) -> str:
    """A MUSHRA column's prefix in an export: `mushra`, or `mushra_<test>`."""
    return key.replace(":", "_")


def flat_columns(metric_names: list[str], listening: Sequence[str] = ()) -> list[tuple[str, type]]:
    cols = list(BASE_COLUMNS) + list(LEDGER_COLUMNS)
    for name in metric_names:
        cols += [(f"{name}_{suffix}", kind) for suffix, kind in METRIC_SUFFIXES]
    for key in listening:
        cols += [(f"{listening_prefix(key)}_{suffix}", kind) for suffix, kind in LISTENING_SUFFIXES]
    return cols


def flatten(board: Leaderboard) -> tuple[list[tuple[str, type]], list[dict[str, Any]]]:
    """One flat record per leaderboard entry; metric stats as `<output>_mean`, `<output>_n_ok`, ..."""
    from codecarena.results.listening.board import columns as listening_columns

    listening = listening_columns(board.entries)
    columns = flat_columns(board.metric_names, listening)
    records = []
    for e in board.entries:
        rec: dict[str, Any] = {k: e.get(k) for k, _ in BASE_COLUMNS}
        rec["language"] = e.get("language") or ""  # pooled: empty, which reads back the same from csv
        rec["ci_unit"] = board.ci_unit
        for stage in ("encode", "decode"):
            for k, v in e[stage].items():
                rec[f"{stage}_{k}"] = v
        rec.update(_ledger_record(e.get("ledger")))
        for name in board.metric_names:
            stats = e["metrics"].get(name) or {}
            low, high = stats.get("ci95") or (None, None)
            stats = {**stats, "ci95_low": low, "ci95_high": high}
            for suffix, _ in METRIC_SUFFIXES:
                rec[f"{name}_{suffix}"] = stats.get(suffix)
        for key in listening:
            stats = e.get("listening", {}).get(key) or {}
            low, high = stats.get("ci95") or (None, None)
            stats = {**stats, "ci95_low": low, "ci95_high": high}
            for suffix, _ in LISTENING_SUFFIXES:
                rec[f"{listening_prefix(key)}_{suffix}"] = stats.get(suffix)
        records.append({k: _coerce(rec.get(k), kind) for k, kind in columns})
    return columns, records


def _ledger_record(entry: dict[str, Any] | None) -> dict[str, Any]:
    """A leaderboard entry's ledger columns; text columns are "" when absent, which reads back the same from csv."""
    entry = entry or {}
    claim, check, stability = entry.get("claim") or {}, entry.get("claim_check") or {}, entry.get("stability") or {}
    return {"claimed_bps": claim.get("bps"), "claim_source": claim.get("source", ""),
            "claim_reference": claim.get("reference", ""), "claim_flag": check.get("flag", ""),
            **{k: entry.get(k) for k in ("container_bps", "framing_bps", "achievable_bps", "entropy_bps",
                                         "token_rate")},
            "idempotence": stability.get("idempotence"), "shift_stability": stability.get("shift_stability")}


def _coerce(value: Any, kind: type) -> Any:
    if value is None:
        return None
    if kind is float:
        return float(value)
    if kind is int:
        return int(value)
    return str(value)


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same double
    return str(value)


def write_export(board: Leaderboard, fmt: str, out: Path | None) -> bytes | str:
    """Write the flat leaderboard as csv, json or parquet to `out` (or return csv/json text)."""
    columns, records = flatten(board)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([name for name, _ in columns])
        for rec in records:
            writer.writerow([_csv_cell(rec[name]) for name, _ in columns])
        text = buf.getvalue()
    elif fmt == "json":
        doc = {
            "version": EXPORT_VERSION,
            "columns": [{"name": n, "type": k.__name__} for n, k in columns],
            "groups": [{"id": g.id, "title": g.title, "set": g.key.set_name, "manifest_sha256": g.key.manifest,
                        "machine": g.key.machine, "weights": g.key.weights_class,
                        "runs": [str(board.runs[i].run.path) for i in g.runs], "reasons": g.reasons}
                       for g in board.groups],
            "rows": records,
        }
        text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        if out is None:
            raise LeaderboardError("--format parquet needs --out FILE")
        types = {str: pa.string(), int: pa.int64(), float: pa.float64()}
        schema = pa.schema([(n, types[k]) for n, k in columns])
        pq.write_table(pa.Table.from_pylist(records, schema=schema), out)
        return out.read_bytes()
    else:
        raise LeaderboardError(f"unknown format {fmt!r}")
    if out is not None:
        Path(out).write_text(text, encoding="utf-8")
    return text


def _column_type(name: str) -> type:
    base = dict(BASE_COLUMNS + LEDGER_COLUMNS)
    if name in base:
        return base[name]
    for suffix, kind in METRIC_SUFFIXES + LISTENING_SUFFIXES:
        if name.endswith(f"_{suffix}"):
            return kind
    raise LeaderboardError(f"unknown column {name!r}")


def read_export(path: Path) -> list[dict[str, Any]]:
    """The flat records of a csv, json or parquet export, with their types restored."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            out = []
            for raw in reader:
                rec = {}
                for name, text in raw.items():
                    kind = _column_type(name)
                    rec[name] = text if kind is str else (None if text == "" else kind(text))
                out.append(rec)
            return out
    if suffix == ".json":
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("version") not in READABLE_VERSIONS:
            raise LeaderboardError(f"{path}: export version {doc.get('version')}, expected one of "
                                   f"{', '.join(map(str, READABLE_VERSIONS))}")
        return [{k: _coerce(v, _column_type(k)) for k, v in rec.items()} for rec in doc["rows"]]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return [{k: _coerce(v, _column_type(k)) for k, v in rec.items()} for rec in pq.read_table(path).to_pylist()]
    raise LeaderboardError(f"{path}: expected .csv, .json or .parquet")

