"""`codecarena audit RUN --rescore N|all`: recompute the metric values of rows from the run's files.

For a sample of ok rows (the first N of each codec configuration in plan order; `all`: every ok
row) every metric the run selected (run.json `plan.metrics`, `plan.asr_models`) is computed again
from the stored reference and decoded audio, in a guarded scoring process, and each output is
compared with the row: a status that differs, or values further apart than the metric's declared
`rescore_tolerance`, is a problem; a row with an input condition also has its metrics against the
conditioned input computed again from that file (`input_metrics`, docs/conditions.md). The transcript and the critical entities the row was scored
against come from the row's own ASR records. When the row was scored by other metric code (its
`metrics_code_sha256` differs from the current one) the problem says so instead of suggesting an
edited value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from codecarena.metrics.guarded import GuardedScorer
from codecarena.metrics.declarations import BY_NAME, METRICS, against_input
from codecarena.metrics.scorer import UtteranceInfo, metrics_code_sha256
from codecarena.results.run import Run
from codecarena.results.schema import Row
from codecarena.rundir import RunDir, UnsafePathError
from codecarena.runtime.limits import StageLimits, default_memory_limit

Sample = int | Literal["all"]
_TOLERANCE = {output: spec.rescore_tolerance for spec in METRICS for output in spec.outputs}


def parse_sample(text: str) -> Sample:
    """`all` or a positive number of rows per codec configuration; ValueError otherwise."""
    if text == "all":
        return "all"
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"--rescore {text!r}: expected a number of rows per codec configuration (>= 1) or 'all'")
    return count


def sample_rows(rows: list[Row], sample: Sample) -> list[Row]:
    """The ok rows to rescore: `rows` are in plan order, so the first of each codec configuration."""
    taken: dict[str, int] = {}
    chosen = []
    for row in rows:
        if row.status != "ok":
            continue
        if sample == "all" or taken.get(row.codec, 0) < sample:
            taken[row.codec] = taken.get(row.codec, 0) + 1
            chosen.append(row)
    return chosen


def utterance_of(row: Row) -> UtteranceInfo:
    """The utterance as the row's metrics saw it: the transcript is recorded with WER, CER and the
    reference's WER and CER, the critical entities with critical_survived."""
    transcript = None
    for output in ("wer", "cer", "ref_wer", "ref_cer"):
        details = _details(row.metrics.get(output))
        if isinstance(details.get("transcript"), str):
            transcript = details["transcript"]
            break
    entities = _details(row.metrics.get("critical_survived")).get("entities") or []
    critical = tuple((str(e.get("kind")), str(e.get("text"))) for e in entities if isinstance(e, dict))
    return UtteranceInfo(row.utterance, row.language, transcript, critical)


def _details(record: Any) -> dict[str, Any]:
    details = record.get("details") if isinstance(record, dict) else None
    return details if isinstance(details, dict) else {}


def _shown(record: Any) -> str:
    if not isinstance(record, dict):
        return f"{record!r} (not a metric record)"
    if record.get("status") == "ok":
        return repr(record.get("value"))
    return f"{record.get('status')} ({record.get('error')})"


def _agree(output: str, stored: Any, fresh: dict[str, Any]) -> bool:
    if not isinstance(stored, dict) or stored.get("status") != fresh["status"]:
        return False
    if fresh["status"] not in ("ok", "suspect"):
        return True
    value = stored.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(float(value) - fresh["value"]) <= _TOLERANCE.get(output, 0.0)


def differences(row: Row, fresh: dict[str, dict[str, Any]], stored_group: dict[str, Any] | None = None,
                label: str = "") -> list[str]:
    """One line per output whose stored record (of the row's metrics, or of `stored_group` named `label`)
    disagrees with the recomputed one."""
    group = row.metrics if stored_group is None else stored_group
    lines = []
    for output, record in fresh.items():
        stored = group.get(output)
        if output not in group:
            lines.append(f"{label}{output}: not in the row, rescored {_shown(record)}")
        elif not _agree(output, stored, record):
            lines.append(f"{label}{output}: row says {_shown(stored)}, rescored {_shown(record)}")
    lines += [f"{label}{output}: in the row, but the run's metrics do not produce it"
              for output in group if output not in fresh]
    return lines


def _files(run: RunDir, row: Row) -> tuple[Path, Path] | str:
    """(reference, decoded) paths inside the run, or why they cannot be scored."""
    try:
        reference, decoded = run.resolve(row.reference), run.resolve(row.decoded or "")
    except UnsafePathError as exc:
        return str(exc)
    for path in (reference, decoded):
        if not path.is_file():
            return f"{path} is missing"
    return reference, decoded


def rescore_problems(run: Run, sample: Sample) -> list[str]:
    """Every disagreement between the sampled rows' metric records and a fresh scoring, one line each."""
    metrics = run.plan.metrics
    if not all(name in BY_NAME for name in metrics):
        return [f"{run.dir.run_json}: plan.metrics {metrics!r} is not a list of known metric names"]
    if not metrics:
        return []
    try:
        models = {str(lang): str(model) for lang, model in run.plan.asr_models}
    except (TypeError, ValueError):
        return [f"{run.dir.run_json}: plan.asr_models is not a list of [language, model] pairs"]
    current = metrics_code_sha256()
    problems: list[str] = []
    scorer = GuardedScorer(tuple(metrics), models, StageLimits(default_memory_limit()), None)
    try:
        for row in sample_rows(run.rows, sample):
            where = f"{row.codec} {row.utterance}"
            files = _files(run.dir, row)
            if isinstance(files, str):
                problems.append(f"{where}: cannot rescore: {files}")
                continue
            lines = differences(row, scorer.score_files(utterance_of(row), *files))
            if row.condition is not None:
                try:
                    given = run.dir.resolve(row.condition["input"])
                except (UnsafePathError, KeyError, TypeError) as exc:
                    problems.append(f"{where}: cannot rescore against its conditioned input: {exc}")
                else:
                    fresh = scorer.score_files(utterance_of(row), given, files[1], against_input(tuple(metrics)))
                    lines += differences(row, fresh, row.input_metrics or {}, "input_metrics.")
            if lines and row.metrics_code_sha256 != current:
                recorded = row.metrics_code_sha256
                why = (f"metric code changed since the run (sha {recorded[:12]}, now {current[:12]}), values differ"
                       if recorded else "the row does not record its metric code (a row before version 3), "
                                        "values differ")
                lines = [f"{why}: {line}" for line in lines]
            problems += [f"{where}: {line}" for line in lines]
    finally:
        scorer.close()
    return problems
