"""The leaderboard: one ranking row per codec configuration, computed by DuckDB.

All rows of all given runs are exported to one Parquet file (one record per codec x utterance,
with the stages and metric records as nested lists); the leaderboard is then a handful of SQL
GROUP BY queries over that file. The numbers are the same as `summary.json`'s (same definitions:
duration-weighted bitrates and medians over completed rows, metric means over successes), but they
come from the rows, so any number of runs can be queried together.

Runs are never merged into one ranking silently: entries are grouped by evaluation set (name and
manifest sha256), machine (cpu, core count, os) and weights kind (synthetic weights are kept apart
from real weights and DSP codecs), and every group says why it is separate from the others.
The queries are `leaderboard_sql.py`; the flat csv/json/parquet export of a leaderboard is
`leaderboard_export.py`; the terminal table is the `leaderboard` command's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecarena.choices import BY_CHOICES, CI_UNITS, SORT_BY_RATE
from codecarena.metrics import outputs
from codecarena.metrics.declarations import ASR_OUTPUTS
from codecarena.results import ledger_view
from codecarena.results.record import Plan, RunLoadError
from codecarena.results.run import Run
from codecarena.results.leaderboard_sql import METRIC_PROBLEMS_SQL, codec_entries, query, sql_str

# Metric outputs in the order a reader expects them (anything else follows alphabetically), their
# directions and labels: one catalogue, metrics/outputs.py.
METRIC_ORDER = outputs.ORDER
LOWER_IS_BETTER = outputs.LOWER_IS_BETTER
METRIC_LABELS = outputs.LABELS
CONTENT_OUTPUTS = frozenset(ASR_OUTPUTS)


def metric_group(name: str) -> str:
    return "content" if name in CONTENT_OUTPUTS else "quality"


class LeaderboardError(ValueError):
    """Run directories that cannot be ranked, or an export that cannot be read back."""


def through_channel(codec: str) -> bool:
    """Whether a configuration is a clean one's payloads through a channel (`SPEC@CHANNEL`): its rates
    and costs are its clean configuration's, its quality is the channel's (docs/channel.md)."""
    return "@" in codec


def conditioned(codec: str) -> bool:
    """Whether a configuration's input went through a condition (`SPEC%CONDITION`, and no channel): its
    quality is of another input than the clean configurations', so it ranks apart (docs/conditions.md)."""
    return "%" in codec and not through_channel(codec)


def metric_label(name: str) -> str:
    return METRIC_LABELS.get(name, name)


def metric_sort_key(name: str) -> tuple[int, str]:
    return outputs.sort_key(name)


def weights_class(weights: str) -> str:
    """Synthetic weights measure the pipeline, not the codec: they never rank with real ones.
    DSP codecs (`none`) are real codecs and rank with real weights."""
    return "synthetic" if weights == "synthetic" else "real"


WEIGHTS_CLASS_LABEL = {"real": "real weights and DSP codecs", "synthetic": "synthetic weights"}


# ---------------------------------------------------------------------------------------------
# Loading runs and grouping them


@dataclass
class RunInfo:
    """A run as the leaderboard shows it: where it stands among the runs given, its label and notes."""
    index: int
    label: str
    run: Run
    notes: list[str] = field(default_factory=list)

    @property
    def plan(self) -> Plan:
        return self.run.plan

    @property
    def set_name(self) -> str:
        return self.plan.set

    @property
    def manifest(self) -> str:
        return self.plan.manifest_sha256

    @property
    def machine(self) -> dict[str, Any]:
        env = self.run.record.environment
        return {"cpu": env.get("cpu", "?"), "cpu_count": env.get("cpu_count"), "os": env.get("os", "?")}

    @property
    def codec_order(self) -> dict[str, int]:
        order = {c.codec: i for i, c in enumerate(self.plan.codecs)}
        for row in self.run.rows:  # rows outside the plan (never in an audited run) go last
            order.setdefault(row.codec, len(order))
        return order


def machine_text(machine: dict[str, Any]) -> str:
    cores = f" x{machine['cpu_count']}" if machine.get("cpu_count") else ""
    return f"{machine.get('cpu')}{cores}, {machine.get('os')}"


def load_runs(run_dirs: list[Path]) -> list[RunInfo]:
    if not run_dirs:
        raise LeaderboardError("no run directory given")
    runs: list[RunInfo] = []
    names = [Path(d).resolve().name for d in run_dirs]
    for index, run_dir in enumerate(run_dirs):
        try:
            run = Run.open(Path(run_dir))
        except RunLoadError as exc:
            raise LeaderboardError(str(exc)) from None
        name = names[index]
        label = name if names.count(name) == 1 else f"{name}#{index + 1}"
        info = RunInfo(index, label, run)
        if not run.rows:
            info.notes.append("no rows")
        if not run.record.finished:
            info.notes.append("run not finished: only the rows written so far are shown")
        if run.torn:
            info.notes.append("a torn final line of rows.jsonl (an interrupted append) was dropped")
        runs.append(info)
    return runs


@dataclass(frozen=True)
class GroupKey:
    set_name: str
    manifest: str
    cpu: str
    cpu_count: int | None
    os: str
    weights_class: str  # "real" (real weights and DSP codecs) or "synthetic"

    @property
    def machine(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "cpu_count": self.cpu_count, "os": self.os}


@dataclass
class Group:
    id: str
    key: GroupKey
    runs: list[int]  # run indexes, in the order given
    reasons: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        k = self.key
        return (f"set {k.set_name} ({k.manifest[:12]}), {machine_text(k.machine)}, "
                f"{WEIGHTS_CLASS_LABEL.get(k.weights_class, k.weights_class)}")


def run_key(run: RunInfo) -> tuple[str, str, str, Any, str]:
    """What makes two runs comparable at all: the same evaluation set on the same machine."""
    m = run.machine
    return (run.set_name, run.manifest, str(m["cpu"]), m["cpu_count"], str(m["os"]))


def comparison_key(run: RunInfo) -> tuple[Any, ...]:
    """Runs that may be compared pair by pair: same set and machine, and the same weights kinds."""
    return (*run_key(run), tuple(sorted({weights_class(r.weights) for r in run.run.rows})))


def _differences(a: GroupKey, b: GroupKey) -> list[str]:
    out = []
    if a.set_name != b.set_name:
        out.append(f"evaluation set differs ({a.set_name} vs {b.set_name})")
    elif a.manifest != b.manifest:
        out.append(f"evaluation set {a.set_name!r} has a different manifest ({a.manifest[:12]} vs "
                   f"{b.manifest[:12]}: other files, languages or transcripts)")
    if (a.cpu, a.cpu_count, a.os) != (b.cpu, b.cpu_count, b.os):
        out.append(f"machine differs ({machine_text(a.machine)} vs {machine_text(b.machine)}): "
                   "costs are not comparable")
    if a.weights_class != b.weights_class:
        out.append(f"weights differ ({WEIGHTS_CLASS_LABEL[a.weights_class]} vs {WEIGHTS_CLASS_LABEL[b.weights_class]}): "
                   "synthetic weights measure the pipeline, not the codec")
    return out


def group_runs(runs: list[RunInfo]) -> tuple[list[Group], dict[tuple[int, str], str]]:
    """Groups of (run, weights class) that may share one ranking, and which group each
    (run index, codec) entry belongs to. Every group lists why it is kept apart from each other."""
    keys: dict[GroupKey, Group] = {}
    membership: dict[tuple[int, str], str] = {}
    for run in runs:
        s, man, cpu, count, os_ = run_key(run)
        for row in run.run.rows:
            key = GroupKey(s, man, cpu, count, os_, weights_class(row.weights))
            if key not in keys:
                keys[key] = Group(id=f"G{len(keys) + 1}", key=key, runs=[])
            group = keys[key]
            if run.index not in group.runs:
                group.runs.append(run.index)
            membership[(run.index, row.codec)] = group.id
    groups = list(keys.values())
    for group in groups:
        for other in groups:
            if other is not group:
                why = "; ".join(_differences(group.key, other.key))
                group.reasons.append(f"not ranked with {other.id}: {why}")
    return groups, membership


# ---------------------------------------------------------------------------------------------
# Export of every row to Parquet, and the DuckDB queries over it


def _row_schema() -> Any:
    import pyarrow as pa

    stage = pa.struct([("name", pa.string()), ("ok", pa.bool_()), ("cold_rtf", pa.float64()),
                       ("warm_rtf", pa.float64()), ("peak_rss_bytes", pa.int64())])
    metric = pa.struct([("output", pa.string()), ("value", pa.float64()), ("status", pa.string()),
                        ("error", pa.string()), ("errors", pa.int64()), ("reference_tokens", pa.int64())])
    return pa.schema([
        ("run_index", pa.int32()), ("run", pa.string()), ("run_label", pa.string()),
        ("set", pa.string()), ("manifest_sha256", pa.string()), ("cpu", pa.string()),
        ("cpu_count", pa.int32()), ("os", pa.string()), ("group_id", pa.string()),
        ("codec", pa.string()), ("codec_order", pa.int32()), ("family", pa.string()),
        ("weights", pa.string()), ("variant", pa.string()), ("registry", pa.string()), ("user_codec", pa.string()),
        ("runtime", pa.string()),
        ("utterance", pa.string()), ("language", pa.string()), ("speaker", pa.string()), ("status", pa.string()),
        ("error", pa.string()), ("sample_rate", pa.int32()), ("num_samples", pa.int64()),
        ("duration_s", pa.float64()), ("representation_bits", pa.int64()), ("payload_bytes", pa.int64()),
        ("representation_bps", pa.float64()), ("payload_bps", pa.float64()),
        ("replay_sampled", pa.bool_()), ("replay_identical", pa.bool_()), ("checks_passed", pa.bool_()),
        ("decoder_model_bytes", pa.int64()), ("decoded", pa.string()),
        ("stages", pa.list_(stage)), ("metrics", pa.list_(metric)),
    ])


def decoder_model_bytes(model: dict[str, Any]) -> int | None:
    """Bytes of the model a decoder needs: Lyra-style `decoder_model_bytes`, else the adapter's
    `parameter_bytes` (0 for DSP codecs), else unknown."""
    for key in ("decoder_model_bytes", "parameter_bytes"):
        value = model.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def export_rows(runs: list[RunInfo], path: Path, membership: dict[tuple[int, str], str] | None = None) -> Path:
    """Every row of every run as one Parquet file (nested stages and metric records)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if membership is None:
        _, membership = group_runs(runs)
    records = []
    for run in runs:
        order = run.codec_order
        m = run.machine
        for row in run.run.rows:
            records.append({
                "run_index": run.index, "run": str(run.run.path), "run_label": run.label,
                "set": run.set_name, "manifest_sha256": run.manifest, "cpu": str(m["cpu"]),
                "cpu_count": m["cpu_count"], "os": str(m["os"]),
                "group_id": membership.get((run.index, row.codec)),
                "codec": row.codec, "codec_order": order[row.codec], "family": row.family,
                "weights": row.weights, "variant": row.variant, "registry": row.registry,
                "user_codec": row.user_codec, "runtime": "external" if row.external_runtime else "",
                "utterance": row.utterance, "language": row.language, "speaker": row.speaker, "status": row.status,
                "error": row.error, "sample_rate": row.sample_rate, "num_samples": row.num_samples,
                "duration_s": row.duration_s, "representation_bits": row.representation_bits,
                "payload_bytes": row.payload_bytes, "representation_bps": row.representation_bps,
                "payload_bps": row.payload_bps, "replay_sampled": row.replay_sampled,
                "replay_identical": row.replay_identical,
                "checks_passed": row.checks_passed, "decoder_model_bytes": decoder_model_bytes(row.model),
                "decoded": row.decoded,
                "stages": [{"name": s.name, "ok": s.ok, "cold_rtf": s.cold_rtf, "warm_rtf": s.warm_rtf,
                            "peak_rss_bytes": s.peak_rss_bytes} for s in row.stages],
                "metrics": [{"output": name, "value": rec.get("value"), "status": rec.get("status"),
                             "error": rec.get("error"),
                             **dict(zip(("errors", "reference_tokens"), outputs.error_counts(rec) or (None, None)))}
                            for name, rec in row.metrics.items()],
            })
    table = pa.Table.from_pylist(records, schema=_row_schema())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@dataclass
class Leaderboard:
    runs: list[RunInfo]
    groups: list[Group]
    entries: list[dict[str, Any]]  # one per (run, codec); metrics nested: output -> stats
    metric_problems: list[dict[str, Any]]
    metric_names: list[str]
    # With `by="language"`: one more entry per (run, codec, language), its "language" set; pooled
    # entries have "language" None.
    by: str | None = None
    languages: list[str] = field(default_factory=list)
    ci_unit: str = "utterance"  # what the intervals resample: utterances, or speakers with their utterances
    # The runs' listening tests, derived; each entry's `listening`: its MUSHRA results (results/listening/board.py).
    listening: list[Any] = field(default_factory=list)

    @property
    def pooled(self) -> list[dict[str, Any]]:
        """The entries over every language: one per (run, codec)."""
        return [e for e in self.entries if e["language"] is None]

    def group_entries(self, group_id: str, language: str | None = None,
                      channel: bool | None = None, condition: bool = False) -> list[dict[str, Any]]:
        """A group's entries over one language (None: pooled); `channel` False keeps the clean
        configurations, True those through a channel (`SPEC@CHANNEL`), None every one; `condition` keeps
        only those whose input went through a condition (`SPEC%CONDITION`)."""
        def kept(codec: str) -> bool:
            if condition:
                return conditioned(codec)
            if channel is None:
                return True
            return through_channel(codec) if channel else not through_channel(codec) and not conditioned(codec)

        return [e for e in self.entries if e["group"] == group_id and e["language"] == language and kept(e["codec"])]

    def group_languages(self, group_id: str) -> list[str]:
        """The languages with entries of their own in a group (sorted; "" is undeclared); none without
        `by="language"`."""
        return [lang for lang in self.languages if self.group_entries(group_id, lang)]

    def group(self, group_id: str) -> Group:
        return next(g for g in self.groups if g.id == group_id)


def compute(run_dirs_or_runs: list[Path] | list[RunInfo], rows_parquet: Path | None = None,
            by: str | None = None, ci_unit: str = "utterance") -> Leaderboard:
    """Load the runs, export their rows to Parquet (kept at `rows_parquet` if given) and build the
    leaderboard with DuckDB; `by="language"` adds one entry per language beside the pooled ones;
    `ci_unit="speaker"` resamples speakers with all their utterances for the intervals (an utterance
    without a recorded speaker is its own unit)."""
    import duckdb

    if by is not None and by not in BY_CHOICES:
        raise LeaderboardError(f"--by {by}: not one of {', '.join(BY_CHOICES)}")
    if ci_unit not in CI_UNITS:
        raise LeaderboardError(f"--ci-unit {ci_unit}: not one of {', '.join(CI_UNITS)}")
    runs = (run_dirs_or_runs if run_dirs_or_runs and isinstance(run_dirs_or_runs[0], RunInfo)
            else load_runs(list(run_dirs_or_runs)))  # type: ignore[arg-type]
    groups, membership = group_runs(runs)  # type: ignore[arg-type]
    languages = sorted({r.language for run in runs for r in run.run.rows}) if by == "language" else []  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory(prefix="codecarena-lb-") as tmp:
        path = export_rows(runs, Path(rows_parquet) if rows_parquet else Path(tmp) / "rows.parquet",  # type: ignore[arg-type]
                           membership)
        con = duckdb.connect(":memory:")
        try:
            source = f"read_parquet({sql_str(str(path))})"
            con.execute(f"CREATE VIEW rows AS SELECT * FROM {source}")
            entries, problems = codec_entries(con, ci_unit), query(con, METRIC_PROBLEMS_SQL)
            for language in languages:
                con.execute(f"CREATE OR REPLACE VIEW rows AS SELECT * FROM {source} "
                            f"WHERE language = {sql_str(language)}")
                entries += [{**e, "language": language} for e in codec_entries(con, ci_unit)]
        finally:
            con.close()
    summaries = {run.index: run.run.summary for run in runs}  # type: ignore[union-attr]
    for e in entries:
        # The ledger is the run's (summary.json, derived from its payloads), pooled over languages.
        e["ledger"] = ledger_view.entry_for(summaries[e["run_index"]], e["codec"]) if e["language"] is None else None
    group_order = {g.id: i for i, g in enumerate(groups)}
    entries.sort(key=lambda e: (group_order[e["group"]], e["run_index"], e["codec_order"]))
    names = sorted({n for e in entries for n in e["metrics"]}, key=metric_sort_key)
    from codecarena.results.listening.board import attach

    listening = attach(runs, entries)  # type: ignore[arg-type]
    return Leaderboard(runs=runs, groups=groups, entries=entries, metric_problems=problems,  # type: ignore[arg-type]
                       metric_names=names, by=by, languages=languages, ci_unit=ci_unit, listening=listening)


def ranked(entries: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    """Entries best first by a metric's mean in its declared direction (no mean: last), or by
    representation bitrate, lowest first (`kbps`); ties keep run order."""
    def key(entry: dict[str, Any]) -> tuple[bool, float]:
        if sort == SORT_BY_RATE:
            value = entry["representation_bps"]
        else:
            value = (entry["metrics"].get(sort) or {}).get("mean")
            if value is not None and sort not in LOWER_IS_BETTER:
                value = -value
        return (value is None, 0.0 if value is None else value)
    return sorted(entries, key=key)
