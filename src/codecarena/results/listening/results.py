"""A listening test's results, derived from its files alone: test.json, the runs it names and every
listener's rating file. The same derivation feeds `listen --results` (which writes
`listening/<test>/results.json`), the leaderboard's MUSHRA column, the report and the audit, which
derives it again and compares it with results.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codecarena.files import JSONFileError, read_json, sha256_file, write_json
from codecarena.results.listening.answers import history_problems
from codecarena.results.listening.correlation import metric_correlations
from codecarena.results.listening.definition import ListeningError, ListeningTest, load_test, run_folder
from codecarena.results.listening.screening import ListenerStatus, answers, screen
from codecarena.results.listening.stats import ab_stats, mushra_stats
from codecarena.results.listening.store import RatingLine, read_lines
from codecarena.results.record import RunLoadError
from codecarena.results.run import Run
from codecarena.rundir import RunDir, unsafe_id_reason

RESULTS_VERSION = 1


@dataclass(frozen=True)
class TestResults:
    home: RunDir  # the run holding the test
    test: ListeningTest
    runs: list[Run]  # the test's runs, in its order
    document: dict[str, Any]  # what results.json holds


def open_runs(home: RunDir, test: ListeningTest, opened: Mapping[Path, Run] | None = None) -> list[Run]:
    """The test's runs, each checked to be the run the test was built from: taken from `opened` (runs
    already loaded, by their resolved folder) or opened here."""
    runs = []
    for test_run in test.runs:
        folder = run_folder(home, test_run)
        try:
            run = (opened or {}).get(folder.resolve()) or Run.open(folder)
        except RunLoadError as exc:
            raise ListeningError(f"test {test.name}: its run {test_run.label} ({folder}) cannot be opened: {exc}") from None
        if run.plan.sha256 != test_run.plan_sha256:
            raise ListeningError(f"test {test.name}: the run at {folder} has plan {run.plan.sha256[:12]}, the test was "
                                 f"built from plan {test_run.plan_sha256[:12]}")
        runs.append(run)
    return runs


def listener_lines(home: RunDir, test: ListeningTest) -> tuple[dict[str, list[RatingLine]], list[str]]:
    """Every listener's lines (by listener id, sorted) and notes on torn final lines dropped."""
    folder = home.listening_file(test.name, "test.json").parent / "listeners"
    out: dict[str, list[RatingLine]] = {}
    notes = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        if unsafe_id_reason(path.stem):
            raise ListeningError(f"{path}: not a listener's file (listener id {unsafe_id_reason(path.stem)})")
        lines, torn = read_lines(home.listener_ratings(test.name, path.stem))
        if any(line.listener != path.stem for line in lines):
            raise ListeningError(f"{path}: holds lines of another listener than {path.stem}")
        if torn:
            notes.append(f"listener {path.stem}: a torn final line (never acknowledged) was dropped")
        out[path.stem] = lines
    return out, notes


def _mushra(test: ListeningTest, runs: list[Run], included: dict[str, list[RatingLine]]) -> dict[str, Any]:
    import numpy as np

    ratings = {who: {line.trial: line.ratings for line in answers(test, lines)} for who, lines in included.items()}
    languages = sorted({t.language for t in test.trials})
    conditions, stimulus_means, system_means = [], {}, {}
    for c in test.conditions:
        entry: dict[str, Any] = {"condition": c.id, "role": c.role, "label": c.label, "run": c.run, "codec": c.codec}
        if ratings:
            table = np.array([[ratings[who][t.id][c.id] for t in test.trials] for who in ratings], dtype=np.float64)
            entry.update(mushra_stats(table))
            entry["by_language"] = {lang: mushra_stats(table[:, [i for i, t in enumerate(test.trials)
                                                                 if t.language == lang]])
                                    for lang in languages} if len(languages) > 1 else {}
            if c.role == "codec":
                system_means[c.id] = entry["mean"]
                for i, t in enumerate(test.trials):
                    stimulus_means[(c.id, t.id)] = float(table[:, i].mean())
        conditions.append(entry)
    return {"conditions": conditions,
            "correlations": metric_correlations(test, runs, stimulus_means, system_means)}


def _ab(test: ListeningTest, included: dict[str, list[RatingLine]]) -> dict[str, Any]:
    from codecarena.results.listening.answers import NO_PREFERENCE

    a, b = test.condition_ids
    choices = [line.choice or "" for lines in included.values() for line in answers(test, lines)]
    labels = {c.id: c.label for c in test.conditions}
    return {"ab": {"a": a, "b": b, "a_label": labels[a], "b_label": labels[b], "no_preference_allowed":
                   test.no_preference, **ab_stats(choices, a, b, NO_PREFERENCE)}}


def derive(home: RunDir, name: str, opened: Mapping[Path, Run] | None = None) -> TestResults:
    """The results of test `name` of the run at `home`, from its files (`opened`: runs already loaded)."""
    test = load_test(home, name)
    runs = open_runs(home, test, opened)
    lines, notes = listener_lines(home, test)
    problems = [p for who in lines for p in history_problems(test, lines[who], f"listener {who}")]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ListeningError(f"test {test.name}: {problems[0]}{more}")
    statuses: list[ListenerStatus] = [screen(test, lines[who], who) for who in lines]
    included = {s.listener: lines[s.listener] for s in statuses if s.status == "included"}
    document: dict[str, Any] = {
        "version": RESULTS_VERSION, "test": test.name, "kind": test.kind, "test_sha256": test.test_sha256,
        "screening": test.screening.rule if test.screening else "none (an A/B test has no hidden reference)",
        "listeners": [asdict(s) for s in statuses],
        "rating_files": {who: sha256_file(home.listener_ratings(test.name, who)) for who in lines},
        "notes": notes,
        **(_mushra(test, runs, included) if test.kind == "mushra" else _ab(test, included)),
    }
    return TestResults(home, test, runs, document)


def write_results(results: TestResults) -> None:
    write_json(results.home.listening_file(results.test.name, "results.json"), results.document)


def stored_results(home: RunDir, name: str) -> dict[str, Any] | None:
    path = home.listening_file(name, "results.json")
    if not path.exists():
        return None
    try:
        data = read_json(path)
    except JSONFileError as exc:
        raise ListeningError(str(exc)) from None
    if not isinstance(data, dict) or data.get("version") != RESULTS_VERSION:
        raise ListeningError(f"{path}: not results of version {RESULTS_VERSION}")
    return data
