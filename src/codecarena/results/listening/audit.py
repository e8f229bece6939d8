"""What `codecarena audit` re-derives of a run's listening tests.

For every test in the run's `listening/`: test.json parses and hashes to its digest; each of its runs
opens with the plan the test was built from; every stimulus file still hashes to its sha256; each
trial's stimuli are still the runs' own bytes (a codec condition's the row's decoded_sha256, the
reference's the row's reference_sha256) and each anchor is the recipe applied again to the reference;
every listener's file chains, and every line passes the server's check again in order (so a rating
whose stimulus hash is not the test's, and therefore not the run's, is refused); and results.json is
what the rating files give now.
"""

from __future__ import annotations

from pathlib import Path

from codecarena.files import json_differences
from codecarena.results.listening.anchors import rederive_problem
from codecarena.results.listening.answers import history_problems
from codecarena.results.listening.definition import (ListeningError, ListeningTest, load_test, stimulus_paths,
                                             stimulus_problems, test_names)
from codecarena.results.listening.results import derive, listener_lines, open_runs, stored_results
from codecarena.results.run import Run
from codecarena.rundir import RunDir, UnsafePathError


def _stimulus_problems(test: ListeningTest, runs: list[Run], paths: dict[str, Path], where: str) -> list[str]:
    problems = []
    for trial in [*test.trials, test.training]:
        here = f"{where} trial {trial.id} ({trial.utterance})"
        for c in test.conditions:
            sha = trial.stimuli[c.id]
            if c.role == "codec":
                row = runs[c.run].by_codec.get(c.codec or "", {}).get(trial.utterance)  # type: ignore[index]
                if row is None or row.decoded_sha256 != sha:
                    problems.append(f"{here}: {c.label}'s stimulus {sha[:12]} is not the run's decoded audio "
                                    f"({'no row' if row is None else str(row.decoded_sha256)[:12]})")
                elif row.reference_sha256 != trial.reference:
                    problems.append(f"{here}: the reference {trial.reference[:12]} is not the run's "
                                    f"({row.reference_sha256[:12]})")
            elif c.role == "hidden_reference" and sha != trial.reference:
                problems.append(f"{here}: the hidden reference {sha[:12]} is not the open reference")
            elif c.role == "anchor" and c.cutoff_hz and sha in paths and trial.reference in paths:
                why = rederive_problem(paths[trial.reference], paths[sha], c.cutoff_hz)
                if why:
                    problems.append(f"{here}: {c.label}: {why}")
    return problems


def _test_problems(home: RunDir, name: str, notes: list[str] | None, opened: dict[Path, Run]) -> list[str]:
    where = f"{home.root}: listening test {name}"
    test = load_test(home, name)
    runs = open_runs(home, test, opened)
    opened.update((r.dir.root, r) for r in runs)
    try:
        paths = stimulus_paths(home, test)
    except UnsafePathError as exc:
        return [f"{where}: {exc}"]
    problems = [f"{where}: {p}" for p in stimulus_problems(paths)]
    if problems:
        return problems
    problems += _stimulus_problems(test, runs, paths, where)
    lines, torn = listener_lines(home, test)
    for who, listener in lines.items():
        problems += history_problems(test, listener, f"{where}: listener {who}")
    if notes is not None:
        notes += [f"{where}: {note}" for note in torn]
    if problems:
        return problems
    stored = stored_results(home, name)
    derived = derive(home, name, opened).document
    if stored is None:
        if notes is not None and lines:
            notes.append(f"{where}: no results.json yet (`codecarena listen {home.root} --name {name} --results` "
                         "writes it)")
        return []
    differences = json_differences("results", stored, derived, "results.json", "the rating files")
    if differences:
        problems.append(f"{where}: results.json is not what the rating files give ({differences[0]}"
                        f"{f' and {len(differences) - 1} more' if len(differences) > 1 else ''}); "
                        f"`codecarena listen {home.root} --name {name} --results` writes it again")
    return problems


def listening_problems(run: Run, notes: list[str] | None = None) -> list[str]:
    """Every disagreement the run's listening tests hold, one line each."""
    problems = []
    opened = {run.dir.root: run}  # each run a test names is loaded once, the audited one not again
    for name in test_names(run.dir):
        try:
            problems += _test_problems(run.dir, name, notes, opened)
        except ListeningError as exc:
            problems.append(f"{run.dir.root}: listening test {name}: {exc}")
    return problems
