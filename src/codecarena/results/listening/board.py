"""The leaderboard's MUSHRA column: each MUSHRA test of the runs shown, its condition results put on
the leaderboard entries whose bytes they rated.

A codec condition's results go to an entry only when that entry's run holds, for the entry's
configuration, decoded files with exactly the sha256 of every stimulus the condition played: a
rating belongs to the bytes heard, whatever run folder they are found in. A per-language entry gets
the condition's results over that language's trials. A test that cannot be derived (a rating file
that does not check, a run it names that is gone) shows no column, and says why in its run's notes.
"""

from __future__ import annotations

from typing import Any

from codecarena.results.listening.definition import ListeningError, ListeningTest, test_names
from codecarena.results.listening.results import TestResults, derive


def column_key(test: ListeningTest) -> str:
    return "mushra" if test.name == "mushra" else f"mushra:{test.name}"


def column_header(key: str) -> str:
    return "MUSHRA" if key == "mushra" else f"MUSHRA {key.partition(':')[2]}"


def columns(entries: list[dict[str, Any]]) -> list[str]:
    """The MUSHRA columns' keys of these entries, in the order the tests were found."""
    return list(dict.fromkeys(key for e in entries for key in e.get("listening", {})))


def _matches(entry_rows: dict[str, Any], test: ListeningTest, cid: str) -> bool:
    """Whether an entry's rows (utterance -> row) hold every stimulus the condition played."""
    return all((row := entry_rows.get(t.utterance)) is not None and row.decoded_sha256 == t.stimuli[cid]
               for t in test.trials)


def attach(runs: list[Any], entries: list[dict[str, Any]]) -> list[TestResults]:
    """Derive every listening test the runs hold (`runs`: the leaderboard's RunInfo list), give each
    entry `listening` (column key -> the condition's MUSHRA stats) and return the tests derived."""
    derived: list[TestResults] = []
    opened = {info.run.dir.root: info.run for info in runs}  # each run is loaded once, by the leaderboard
    for info in runs:
        for name in test_names(info.run.dir):
            try:
                derived.append(derive(info.run.dir, name, opened))
            except ListeningError as exc:
                info.notes.append(f"listening test {name}: not shown ({exc})")
    for entry in entries:
        entry["listening"] = {}
    for results in derived:
        test = results.test
        if test.kind != "mushra":
            continue
        languages = sorted({t.language for t in test.trials})
        for stats in results.document["conditions"]:
            if stats["role"] != "codec" or "mean" not in stats:
                continue
            for entry in entries:
                rows = runs[entry["run_index"]].run.by_codec.get(entry["codec"], {})
                if not _matches(rows, test, stats["condition"]):
                    continue
                language = entry["language"]
                if language is None or languages == [language]:
                    entry["listening"][column_key(test)] = stats
                elif language in stats["by_language"]:
                    entry["listening"][column_key(test)] = stats["by_language"][language]
    return derived


def cell_lines(stats: dict[str, Any] | None) -> list[str]:
    """A MUSHRA cell, as a metric's: the mean with its interval, then n, the listeners, and the ratings,
    then "no interval" when there is none: `62.3 [55.1, 69.0]` / `n=12, 120 ratings`."""
    if not stats:
        return ["-"]
    counts = f"n={stats['n_listeners']}, {stats['n_ratings']} rating{'s' if stats['n_ratings'] != 1 else ''}"
    if stats["ci95"]:
        low, high = stats["ci95"]
        return [f"{stats['mean']:.1f} [{low:.1f}, {high:.1f}]", counts]
    return [f"{stats['mean']:.1f}", counts, "no interval"]
