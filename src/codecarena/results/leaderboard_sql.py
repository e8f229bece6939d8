"""The leaderboard's SQL: DuckDB queries over the Parquet export of every row (`leaderboard.export_rows`),
with the same definitions as `summary.py` (duration-weighted bitrates and medians over completed rows,
metric means over successes), and the entries they make, one per (run, codec) over a `rows` view."""

from __future__ import annotations

from typing import Any

from codecarena.metrics import outputs
from codecarena.results.summary import mean_ci, resampling_units


def sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# Same definitions as results/summary.py, as SQL over the exported rows.
CODEC_SQL = """
SELECT run_index, codec,
       any_value(run) AS run, any_value(run_label) AS run_label, any_value(group_id) AS "group",
       min(codec_order) AS codec_order, any_value(family) AS family, any_value(weights) AS weights,
       any_value(variant) AS variant, any_value(registry) AS registry, max(user_codec) AS user_codec,
       max(runtime) AS runtime,
       count(*) AS rows,
       count(*) FILTER (WHERE status = 'ok') AS rows_ok,
       count(*) FILTER (WHERE status <> 'ok') AS rows_failed,
       sum(num_samples::DOUBLE / sample_rate) FILTER (WHERE status = 'ok') AS audio_s,
       sum(representation_bits) FILTER (WHERE status = 'ok')
         / nullif(sum(num_samples::DOUBLE / sample_rate) FILTER (WHERE status = 'ok'), 0) AS representation_bps,
       sum(payload_bytes) FILTER (WHERE status = 'ok') * 8
         / nullif(sum(num_samples::DOUBLE / sample_rate) FILTER (WHERE status = 'ok'), 0) AS payload_bps,
       count(*) FILTER (WHERE replay_sampled) AS replay_sampled,
       count(*) FILTER (WHERE replay_identical) AS replay_identical,
       count(*) FILTER (WHERE checks_passed) AS checks_passed,
       max(decoder_model_bytes) AS decoder_model_bytes,
       list_sort(list(DISTINCT language)) AS languages
FROM rows
GROUP BY run_index, codec
ORDER BY run_index, codec_order
"""

STAGE_SQL = """
SELECT run_index, codec, s.name AS stage,
       median(s.cold_rtf) AS cold_rtf_median,
       median(s.warm_rtf) AS warm_rtf_median,
       count(s.warm_rtf) AS warm_rtf_n,
       max(s.peak_rss_bytes) AS peak_rss_bytes_max
FROM (SELECT run_index, codec, unnest(stages) AS s FROM rows WHERE status = 'ok')
GROUP BY run_index, codec, s.name
"""

METRIC_SQL = """
SELECT run_index, codec, m.output AS output,
       fsum(m.value) FILTER (WHERE m.status = 'ok')
         / nullif(count(*) FILTER (WHERE m.status = 'ok'), 0) AS mean,
       count(*) FILTER (WHERE m.status = 'ok') AS n_ok,
       count(*) FILTER (WHERE m.status = 'failed') AS n_failed,
       count(*) FILTER (WHERE m.status = 'not_applicable') AS n_not_applicable,
       count(*) FILTER (WHERE m.status = 'suspect') AS n_suspect,
       fsum(m.value) FILTER (WHERE m.status IN ('ok', 'suspect'))
         / nullif(count(*) FILTER (WHERE m.status IN ('ok', 'suspect')), 0) AS mean_with_suspect,
       list(m.value ORDER BY utterance) FILTER (WHERE m.status = 'ok') AS ok_values,
       list(CASE WHEN speaker <> '' THEN 'speaker:' || speaker ELSE 'utterance:' || utterance END ORDER BY utterance)
         FILTER (WHERE m.status = 'ok') AS ok_speakers,
       count(*) FILTER (WHERE m.status = 'ok' AND (m.errors IS NULL OR m.reference_tokens IS NULL)) AS n_uncounted,
       sum(m.errors) FILTER (WHERE m.status = 'ok') AS corpus_errors,
       sum(m.reference_tokens) FILTER (WHERE m.status = 'ok') AS corpus_tokens
FROM (SELECT run_index, codec, utterance, speaker, unnest(metrics) AS m FROM rows)
GROUP BY run_index, codec, m.output
"""

# Every metric value that is not ok, one line per (run, codec, output, status, reason).
METRIC_PROBLEMS_SQL = """
SELECT run_index, codec, m.output AS output, m.status AS status, m.error AS error,
       count(*) AS n, list(utterance ORDER BY utterance) AS utterances
FROM (SELECT run_index, codec, codec_order, utterance, unnest(metrics) AS m FROM rows)
WHERE m.status <> 'ok'
GROUP BY run_index, codec, codec_order, m.output, m.status, m.error
ORDER BY run_index, codec_order, m.status, m.output, m.error
"""


def query(con: Any, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, values)) for values in cursor.fetchall()]


def codec_entries(con: Any, ci_unit: str) -> list[dict[str, Any]]:
    """One entry per (run, codec) over the rows the `rows` view holds."""
    entries = [{**e, "language": None} for e in query(con, CODEC_SQL)]
    stages = query(con, STAGE_SQL)
    metrics = query(con, METRIC_SQL)
    by_key = {(e["run_index"], e["codec"]): e for e in entries}
    for e in entries:
        e["metrics"] = {}
        for stage in ("encode", "decode"):
            e[stage] = {"cold_rtf_median": None, "warm_rtf_median": None, "warm_rtf_n": 0, "peak_rss_bytes_max": None}
    for s in stages:
        entry = by_key[(s["run_index"], s["codec"])]
        if s["stage"] in ("encode", "decode"):
            entry[s["stage"]] = {k: s[k] for k in ("cold_rtf_median", "warm_rtf_median", "warm_rtf_n",
                                                   "peak_rss_bytes_max")}
    for m in metrics:
        entry = by_key[(m["run_index"], m["codec"])]
        # An error rate counts each language's own words or characters: no mean over several languages,
        # and no word error rate for a language written without spaces (as in summary.json).
        if not outputs.summarised(m["output"], entry["languages"]):
            continue
        values = list(m["ok_values"] or [])
        units = list(m["ok_speakers"] or []) if ci_unit == "speaker" else None
        entry["metrics"][m["output"]] = {
            **{k: m[k] for k in ("mean", "n_ok", "n_failed", "n_not_applicable", "n_suspect", "mean_with_suspect")},
            "ci95": mean_ci(values, units), "ci_unit": ci_unit, "ci_units": resampling_units(values, units),
            **(_corpus(m) if m["output"] in outputs.ERROR_RATES else {})}
    for e in entries:
        peaks = [e[s]["peak_rss_bytes_max"] for s in ("encode", "decode") if e[s]["peak_rss_bytes_max"] is not None]
        e["peak_rss_bytes_max"] = max(peaks) if peaks else None
        e["metrics"] = dict(sorted(e["metrics"].items(), key=lambda kv: outputs.sort_key(kv[0])))
    return entries


def _corpus(m: dict[str, Any]) -> dict[str, Any]:
    """An error rate's total errors over total reference tokens of its ok values (None where a row
    does not record its counts), as summary.json's `corpus_rate`."""
    counted = not m["n_uncounted"] and m["corpus_tokens"]
    return {"corpus_rate": m["corpus_errors"] / m["corpus_tokens"] if counted else None,
            "corpus_errors": int(m["corpus_errors"]) if counted else None,
            "corpus_tokens": int(m["corpus_tokens"]) if counted else None}
