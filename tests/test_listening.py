"""Listening tests (issue #42): the design, the anchors, the rating files, every refusal of an answer,
post-screening, the statistics, the server, the static bundle's import, the audit and the surfaces.

Runs are made by hand (test_report.make_run: schema-valid rows and real wav files, each decoded
file's sha256 put in its row); listeners are simulated by answers built here. The real browser
test, on a real run, is tests/test_listening_browser.py.
"""

from __future__ import annotations

import json
import hashlib
import math
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from test_report import make_run

from codecarena.files import sha256_file
from codecarena.results.listening import anchors
from codecarena.results.listening.answers import AnswerError, check_answer
from codecarena.results.listening.build import Design, build
from codecarena.results.listening.definition import ListeningError, ListeningTest, load_test, save_test
from codecarena.results.listening.design import fnv1a32, listener_plan, mulberry32
from codecarena.results.listening.results import derive
from codecarena.results.listening.store import append_lines, read_lines
from codecarena.results.run import Run
from codecarena.rundir import RunDir

FAKE_CODECS = [("opus:6k", "opus", "none", 6.0), ("codec2:3200", "codec2", "none", 3.2), ("pcm:16", "pcm", "none", 256.0)]
UTTERANCES = ("utt_a", "utt_b", "utt_c", "utt_d")
T0 = "2026-12-01T10:00:00.000Z"


def fake_run(root: Path, name: str = "run", codecs: list[tuple[str, str, str, float]] = FAKE_CODECS,
             **kwargs: Any) -> Path:
    """A hand-made run whose rows name their decoded files' real sha256 (as a real run's do)."""
    folder = root / name

    def real_hash(row: dict[str, Any]) -> None:
        if row["decoded"]:
            row["decoded_sha256"] = sha256_file(folder / row["decoded"])
            if row["replay_identical"]:
                row["replay_sha256"] = row["decoded_sha256"]

    kwargs.setdefault("utterances", UTTERANCES)
    return make_run(root, name, codecs, row_hook=real_hash, **kwargs)


def built(run_dir: Path, name: str = "mushra", **design: Any) -> ListeningTest:
    """Build and save a test as `codecarena listen --build-only` does."""
    fields = {"name": name, "kind": "mushra", "codecs": (), "utterances": (), "trials": 10, "seed": 7,
              "training": None, "no_preference": False, **design}
    test, made = build([Run.open(run_dir)], Design(**fields))
    for path, data in made.items():
        anchors.write_file(path, data)
    save_test(RunDir(run_dir), test)
    return test


def answer(test: ListeningTest, listener: str, trial: str | None = None, ratings: dict[str, int] | None = None,
           choice: str | None = None, **override: Any) -> dict[str, Any]:
    """The answer a page sends: the training (trial None), or `trial` at its place in `listener`'s order."""
    if trial is None:
        kind, t, order, position = "training", test.training, test.condition_ids, None
    else:
        kind, t = test.kind, test.trial(trial)
        plan = listener_plan(test, listener)
        position = [tid for tid, _ in plan].index(trial)
        order = plan[position][1]
    assert t is not None
    body = {"test_sha256": test.test_sha256, "listener": listener, "kind": kind, "trial": t.id, "position": position,
            "order": order, "stimuli": dict(t.stimuli),
            "ratings": (ratings if ratings is not None else {c: 50 for c in order}) if kind == "mushra" else {},
            "choice": choice if kind == "ab" else None, "plays": {c: 1 for c in order},
            "heard_s": {c: 1.0 for c in order}, "reference_plays": 1, "started_at": T0, "submitted_at": T0}
    body.update(override)
    return body


def rated(test: ListeningTest, listener: str, score: Any) -> list[dict[str, Any]]:
    """A listener's training and every trial in their order; score(trial, condition) -> rating."""
    out = [answer(test, listener)]
    for tid, order in listener_plan(test, listener):
        out.append(answer(test, listener, tid, {c: score(tid, c) for c in order}))
    return out


def submit(run_dir: Path, test: ListeningTest, answers: list[dict[str, Any]]) -> None:
    home = RunDir(run_dir)
    for a in answers:
        append_lines(home.listener_ratings(test.name, a["listener"]),
                     lambda history, a=a: [check_answer(test, a, history, T0, "server")])


# ---------------------------------------------------------------------------------------------- design


def test_orders_are_drawn_bit_for_bit_as_the_page_script_draws_them() -> None:
    """The vectors were computed by listen.js's own fnv1a32 and mulberry32 in Debian's Chromium 156
    (Playwright, page.evaluate), not by the Python under test."""
    assert [fnv1a32(""), fnv1a32("a"), fnv1a32("7:listener-1")] == [2166136261, 3826002220, 3440362046]
    draw = mulberry32(12345)
    assert [draw() for _ in range(5)] == [0.9797282677609473, 0.3067522644996643, 0.484205421525985,
                                          0.817934412509203, 0.5094283693470061]
    draw = mulberry32(4294967295)
    assert [draw() for _ in range(3)] == [0.8964226141106337, 0.189478256739676, 0.7156526781618595]


def test_each_listener_gets_a_permutation_of_their_own_and_the_same_one_again(tmp_path: Path) -> None:
    test = built(fake_run(tmp_path))
    plans = {who: listener_plan(test, who) for who in ("ann", "ben", "cat")}
    for plan in plans.values():
        assert sorted(tid for tid, _ in plan) == sorted(t.id for t in test.trials)
        assert all(sorted(order) == sorted(test.condition_ids) for _, order in plan)
    assert listener_plan(test, "ann") == plans["ann"]
    assert len({json.dumps(p) for p in plans.values()}) == 3


# ---------------------------------------------------------------------------------------------- anchors


def _tone_level(cutoff: int, freq: float) -> float:
    """Gain in dB of the anchor filter for a steady tone (the middle second, away from the edges)."""
    rate = 16000
    t = np.arange(3 * rate) / rate
    pcm = np.round(16000 * np.sin(2 * np.pi * freq * t)).astype(np.int16)
    out = anchors.low_pass(pcm, rate, cutoff).astype(np.float64)
    mid = slice(rate, 2 * rate)
    return 20 * math.log10(max(np.sqrt(np.mean(out[mid] ** 2)), 1e-9) / np.sqrt(np.mean(pcm[mid].astype(float) ** 2)))


@pytest.mark.parametrize(("cutoff", "passed", "stopped"), [(3500, (1000.0, 3300.0), (3700.0, 5000.0)),
                                                           (7000, (1000.0, 6800.0), (7200.0, 7800.0))])
def test_an_anchor_passes_below_its_cutoff_and_stops_80_db_above_it(cutoff: int, passed: tuple[float, ...],
                                                                   stopped: tuple[float, ...]) -> None:
    for freq in passed:
        assert abs(_tone_level(cutoff, freq)) < 0.05, freq
    for freq in stopped:
        # 16-bit rounding of a 16000-peak tone leaves a floor near -90 dB
        assert _tone_level(cutoff, freq) < -75, freq
    assert -7.0 < _tone_level(cutoff, float(cutoff)) < -5.0  # the cut-off is the -6 dB point


def test_an_anchor_is_sample_aligned_with_its_reference() -> None:
    noise = np.random.default_rng(1).normal(0, 3000, 16000).astype(np.int16)
    out = anchors.low_pass(noise, 16000, 7000).astype(np.float64)
    lags = range(-5, 6)
    corr = [float(np.dot(out[20 + lag:-20 + lag], noise[20:-20].astype(np.float64))) for lag in lags]
    assert list(lags)[int(np.argmax(corr))] == 0
    assert len(out) == len(noise)


# ---------------------------------------------------------------------------------------------- building


def test_a_test_names_every_stimulus_by_the_sha256_of_the_bytes_it_plays(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path)
    test = built(run_dir)
    run = Run.open(run_dir)
    assert [c.id for c in test.conditions] == ["ref", "lp7000", "lp3500", "c1", "c2", "c3"]
    assert len(test.trials) == len(UTTERANCES)
    for trial in test.trials:
        assert trial.stimuli["ref"] == trial.reference == sha256_file(run_dir / "references" / f"{trial.utterance}.wav")
        for c in test.conditions[3:]:
            assert trial.stimuli[c.id] == sha256_file(run_dir / run.by_codec[c.codec][trial.utterance].decoded)
        for cid, cutoff in (("lp7000", 7000), ("lp3500", 3500)):
            path = RunDir(run_dir).anchor("mushra", trial.utterance, cutoff)
            assert sha256_file(path) == trial.stimuli[cid]
    recipe = test.anchors
    assert recipe is not None and recipe["stopband_db"] == 80.0 and set(recipe["taps"]) == {"3500", "7000"}


def test_runs_of_other_evaluation_sets_cannot_be_mixed(tmp_path: Path) -> None:
    a = fake_run(tmp_path, "a")
    b = fake_run(tmp_path, "b", manifest="f" * 64)
    with pytest.raises(ListeningError, match="runs on different evaluation sets cannot be mixed"):
        build([Run.open(a), Run.open(b)], Design("mushra", "mushra", (), (), 10, 1, None, False))


def test_the_design_is_refused_when_it_cannot_be_built(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path, fail=("opus:6k", "utt_b"))
    run = Run.open(run_dir)

    def design(**fields: Any) -> Design:
        return Design(**{"name": "t", "kind": "mushra", "codecs": (), "utterances": (), "trials": 10, "seed": 1,
                         "training": None, "no_preference": False, **fields})

    with pytest.raises(ListeningError, match=r"--utterance utt_b: opus:6k: failed"):
        build([run], design(utterances=("utt_b",)))
    with pytest.raises(ListeningError, match="opus:99k: no run of the test has this configuration"):
        build([run], design(codecs=("opus:99k",)))
    with pytest.raises(ListeningError, match="an A/B test compares two configurations; 3 were named"):
        build([run], design(kind="ab", codecs=("opus:6k", "pcm:16", "codec2:3200")))
    test, _ = build([run], design())  # by default the utterance with a failed row is left out
    assert "utt_b" not in [t.utterance for t in test.trials] and len(test.trials) == 3
    many = [(f"pcm:{k}", "pcm", "none", 16.0 * k) for k in range(1, 11)]
    with pytest.raises(ListeningError, match="13 stimuli a trial; at most 12"):
        build([Run.open(fake_run(tmp_path, "many", codecs=many))], design())


def test_the_sample_takes_languages_in_turn(tmp_path: Path) -> None:
    utterances = tuple(f"u{i}" for i in range(12))
    languages = {u: ("zh" if i >= 9 else "en") for i, u in enumerate(utterances)}
    run_dir = fake_run(tmp_path, utterances=utterances, languages=languages)
    test = built(run_dir, trials=4)
    chosen = [t.language for t in test.trials]
    assert len(chosen) == 4 and chosen.count("zh") == 2 and chosen.count("en") == 2


# ---------------------------------------------------------------------------------------------- answers


def test_every_bad_answer_is_refused_with_its_reason_and_nothing_is_written(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path)
    test = built(run_dir)
    path = RunDir(run_dir).listener_ratings("mushra", "ann")
    submit(run_dir, test, [answer(test, "ann")])
    first = listener_plan(test, "ann")[0]
    good = answer(test, "ann", first[0])
    other_sha = test.trials[0].stimuli["c1"] if test.trials[0].id != first[0] else test.trials[1].stimuli["c1"]
    cases = [
        ({**good, "ratings": {**good["ratings"], "c1": 101}}, 422, "rating 101 for c1 is not an integer from 0 to 100"),
        ({**good, "ratings": {**good["ratings"], "c1": -1}}, 422, "rating -1"),
        ({**good, "ratings": {**good["ratings"], "c1": 50.5}}, 422, "rating 50.5"),
        ({**good, "trial": "t99"}, 422, "unknown trial 't99'"),
        ({**good, "stimuli": {**good["stimuli"], "c1": other_sha}}, 422, "is not the test's"),
        ({**good, "stimuli": {**good["stimuli"], "c9": "0" * 64}}, 422, f"stimulus '{'0' * 64}' for 'c9' is not the test's"),
        ({**good, "order": sorted(good["order"])}, 422, "not shown in listener ann's order"),
        ({**good, "position": 1}, 409, "is not listener ann's next"),
        ({**good, "plays": {**good["plays"], "c2": 0}}, 422, "not every stimulus was played"),
        ({**good, "heard_s": {**good["heard_s"], "c2": 0.2}}, 422, "not every stimulus was played"),
        ({**good, "test_sha256": "0" * 64}, 409, "is for test '000000000000', not this test"),
        ({k: v for k, v in good.items() if k != "ratings"}, 400, "malformed answer: missing keys ['ratings']"),
        ({**good, "listener": "../../etc"}, 400, "listener id '../../etc' is not a safe id"),
        ({**good, "started_at": "yesterday"}, 400, "started_at 'yesterday' is not an ISO 8601 time"),
        (answer(test, "ann"), 409, "has already done the training"),
        (answer(test, "bob", first[0]), 409, "has not done the training yet"),
    ]
    before = path.read_bytes()
    for body, status, message in cases:
        # The server writes to the file of the listener the answer names (once the id is known to be safe).
        target = path if body["listener"] in ("ann", "../../etc") else RunDir(run_dir).listener_ratings("mushra", "bob")
        with pytest.raises(AnswerError, match=None) as refused:
            append_lines(target, lambda history, body=body: [check_answer(test, body, history, T0, "server")])
        assert (refused.value.status, message in str(refused.value)) == (status, True), str(refused.value)
        assert path.read_bytes() == before and not path.with_name("bob.jsonl").exists()
    submit(run_dir, test, [good])
    with pytest.raises(AnswerError, match="already answered by listener ann .a repeated or duplicated submission"):
        submit(run_dir, test, [good])
    assert len(read_lines(path)[0]) == 2


# ---------------------------------------------------------------------------------------------- the rating file


def test_a_rating_file_is_chained_and_a_torn_tail_is_dropped_then_cut(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path)
    test = built(run_dir)
    submit(run_dir, test, rated(test, "ann", lambda t, c: 60)[:2])
    path = RunDir(run_dir).listener_ratings("mushra", "ann")
    lines, torn = read_lines(path)
    assert (len(lines), torn) == (2, False)
    assert lines[1].previous_sha256 == lines[0].line_sha256 and lines[0].previous_sha256 == ""
    assert lines[1].stimuli == test.trial(lines[1].trial).stimuli  # type: ignore[union-attr]
    with open(path, "ab") as fh:  # a write killed half-way: never acknowledged
        fh.write(b'{"version": 1, "kind": "mus')
    assert read_lines(path)[1] is True
    submit(run_dir, test, rated(test, "ann", lambda t, c: 60)[2:3])
    lines, torn = read_lines(path)
    assert (len(lines), torn) == (3, False)
    # A line removed in the middle breaks the chain; an edited one its own digest.
    text = path.read_text().splitlines()
    path.write_text(text[0] + "\n" + text[2] + "\n")
    with pytest.raises(ListeningError, match="line 2: previous_sha256 does not name the line before it"):
        read_lines(path)
    path.write_text("\n".join([text[0], text[1].replace('"c1": 60', '"c1": 61'), text[2]]) + "\n")
    with pytest.raises(ListeningError, match="line 2: line_sha256 is not the sha256 of the line"):
        read_lines(path)


def test_answers_arriving_at_once_are_checked_one_after_the_other_and_listeners_apart(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path)
    test = built(run_dir)
    submit(run_dir, test, [answer(test, "ann")])
    body = answer(test, "ann", listener_plan(test, "ann")[0][0])
    outcomes: list[str] = []

    def post() -> None:
        try:
            submit(run_dir, test, [body])
            outcomes.append("ok")
        except AnswerError as exc:
            outcomes.append(f"{exc.status}")

    threads = [threading.Thread(target=post) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["409"] * 7 + ["ok"]
    assert len(read_lines(RunDir(run_dir).listener_ratings("mushra", "ann"))[0]) == 2
    # Listeners answering at once do not wait on, or write into, each other's files.
    others = [threading.Thread(target=submit, args=(run_dir, test, rated(test, f"l{k}", lambda t, c: 70)))
              for k in range(6)]
    for t in others:
        t.start()
    for t in others:
        t.join()
    for k in range(6):
        lines, _ = read_lines(RunDir(run_dir).listener_ratings("mushra", f"l{k}"))
        assert [line.listener for line in lines] == [f"l{k}"] * (1 + len(test.trials))


# ---------------------------------------------------------------------------------------------- screening, statistics


def test_post_screening_follows_bs1534_3(tmp_path: Path) -> None:
    utterances = tuple(f"u{i:02d}" for i in range(20))
    run_dir = fake_run(tmp_path, utterances=utterances)
    test = built(run_dir, trials=20)
    trials = [t.id for t in test.trials]

    def listener(who: str, low_ref: int = 0, high_anchor: int = 0) -> list[dict[str, Any]]:
        def score(tid: str, cid: str) -> int:
            i = trials.index(tid)
            return {"ref": 80 if i < low_ref else 100, "lp7000": 95 if i < high_anchor else 60}.get(cid, 40)
        return rated(test, who, score)

    submit(run_dir, test, listener("fine") + listener("ref3", low_ref=3) + listener("ref4", low_ref=4)
           + listener("anchor4", high_anchor=4) + listener("anchor3", high_anchor=3) + listener("part")[:5])
    document = derive(RunDir(run_dir), "mushra").document
    status = {s["listener"]: (s["status"], s["reasons"]) for s in document["listeners"]}
    assert status["fine"] == ("included", [])
    assert status["ref3"] == ("included", [])  # 3 of 20 is 15%: not more than 15%
    assert status["ref4"] == ("excluded", ["rated the hidden reference below 90 in 4 of 20 trials (20%, more than 15%)"])
    assert status["anchor3"] == ("included", [])
    assert status["anchor4"] == ("excluded", ["rated the mid anchor above 90 in 4 of 20 trials (20%, more than 15%)"])
    assert status["part"] == ("incomplete", ["answered 4 of 20 trials"])
    by = {c["condition"]: c for c in document["conditions"]}
    # fine: 100 on every trial; ref3: 80 on 3 trials, 100 on 17; anchor3 100 throughout
    assert by["ref"]["mean"] == pytest.approx((20 * 100 + 3 * 80 + 17 * 100 + 20 * 100) / 60)
    assert by["ref"]["n_listeners"] == 3 and by["ref"]["n_ratings"] == 60 and by["ref"]["ci95"] is None
    assert by["ref"]["ci_note"] == "no interval: only 3 listeners, fewer than 10"
    assert by["c1"]["mean"] == 40.0


def test_the_interval_resamples_listeners_not_only_ratings() -> None:
    """Ten listeners who differ by a fixed offset: the uncertainty of the mean is the offsets' spread
    over sqrt(10), which the interval resampling listeners shows and one over 100 independent ratings
    (BS.1534-3's t-interval) does not."""
    from codecarena.results.listening.stats import mushra_stats

    offsets = np.array([-20, -15, -10, -5, -2, 2, 5, 10, 15, 20], dtype=float)
    noise = np.random.default_rng(3).normal(0, 2, (10, 10))
    table = 50 + offsets[:, None] + noise
    stats = mushra_stats(table)
    assert stats["mean"] == pytest.approx(float(table.mean()))
    half = (stats["ci95"][1] - stats["ci95"][0]) / 2
    expected = 1.96 * offsets.std(ddof=1) / math.sqrt(10)
    assert 0.6 * expected < half < 1.4 * expected
    t_half = (stats["ci95_t"][1] - stats["ci95_t"][0]) / 2
    assert t_half < half / 2


def test_correlations_say_agreement_for_both_directions_with_fisher_intervals() -> None:
    from codecarena.results.listening.correlation import correlate

    x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    y = [2.0, 1.0, 4.0, 3.0, 6.0, 5.0, 8.0, 7.0, 10.0, 9.0, 12.0, 11.0]
    higher = correlate(x, y, lower_is_better=False)
    lower = correlate([-v for v in x], y, lower_is_better=True)
    assert higher["pearson"]["r"] == pytest.approx(float(np.corrcoef(x, y)[0, 1]))
    assert lower["pearson"]["r"] == pytest.approx(-higher["pearson"]["r"])
    assert lower["pearson"]["agreement"] == pytest.approx(higher["pearson"]["agreement"])
    # Kendall: 66 pairs, 6 discordant (each swapped neighbour pair) -> (60 - 6) / 66
    assert higher["kendall"]["r"] == pytest.approx(54 / 66)
    # Fisher z for r = 0.5 at n = 12, by hand: atanh(0.5) = 0.5493, se = 1/3, 1.96 se = 0.6533
    half = correlate([0.0] * 0 + x, list(np.array(x) * 0.5 + np.array([3, -3, 2, -2, 1, -1, 3, -3, 2, -2, 1, -1]) * 1.0),
                     False)["pearson"]
    r = half["r"]
    z = math.atanh(r)
    assert half["ci95"] == pytest.approx([math.tanh(z - 1.959964 / 3), math.tanh(z + 1.959964 / 3)], abs=1e-5)
    few = correlate(x[:5], y[:5], False)
    assert few["pearson"]["ci95"] is None and few["pearson"]["note"] == "no interval: 5 points, fewer than 10"
    assert correlate(x, [3.0] * 12, False)["spearman"]["note"] == "undefined: constant values"


# ---------------------------------------------------------------------------------------------- results and surfaces


def _two_listeners(run_dir: Path) -> ListeningTest:
    """ann rates c1 (opus:6k) 30, c2 (codec2:3200) 20, c3 (pcm:16) 90; bob is excluded (hidden reference 50)."""
    test = built(run_dir)
    score = {"ref": 100, "lp7000": 60, "lp3500": 30, "c1": 30, "c2": 20, "c3": 90}
    submit(run_dir, test, rated(test, "ann", lambda t, c: score[c]))
    submit(run_dir, test, rated(test, "bob", lambda t, c: 50))
    return test


def test_the_leaderboard_report_and_exports_carry_the_mushra_column(tmp_path: Path) -> None:
    from codecarena.results import leaderboard as lb
    from codecarena.results import leaderboard_export, report

    run_dir = fake_run(tmp_path)
    _two_listeners(run_dir)
    other = fake_run(tmp_path, "other", seed=5)  # the same configurations, other bytes: no ratings of its own
    board = lb.compute([run_dir, other], by="language")
    mushra = {(e["run_label"], e["codec"]): e["listening"].get("mushra", {}).get("mean") for e in board.pooled}
    assert mushra == {("run", "opus:6k"): 30.0, ("run", "codec2:3200"): 20.0, ("run", "pcm:16"): 90.0,
                      ("other", "opus:6k"): None, ("other", "codec2:3200"): None, ("other", "pcm:16"): None}
    out = tmp_path / "lb.csv"
    leaderboard_export.write_export(board, "csv", out)
    records = leaderboard_export.read_export(out)
    assert {(r["run_label"], r["codec"]): r["mushra_mean"] for r in records if not r["language"]} == mushra
    assert {r["mushra_n_listeners"] for r in records if r["run_label"] == "run"} == {1}
    html = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    text = html.read_text()
    assert 'data-col-group="listening"' in text and 'section class="listening-test" data-test="mushra"' in text
    assert 'data-listener="bob" data-status="excluded"' in text
    md = html.with_suffix(".md").read_text()
    assert "| MUSHRA |" in md and "### Which metric predicts your listeners" in md
    assert "- bob: excluded (rated the hidden reference below 90 in 4 of 4 trials (100%, more than 15%))" in md


def test_the_terminal_leaderboard_shows_the_column_and_who_was_excluded(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from codecarena import cli

    run_dir = fake_run(tmp_path)
    _two_listeners(run_dir)
    with pytest.raises(SystemExit) as done:
        cli.main(["leaderboard", str(run_dir), "--columns", "codec,listening"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "MUSHRA" in out and "90.0" in out and "n=1, 4 ratings" in out and "no interval" in out
    assert "excluded by BS.1534-3 post-screening: bob (rated the hidden reference below 90 in 4 of 4 trials" in out


def test_the_audit_rederives_the_test_and_refuses_a_rating_of_other_bytes(tmp_path: Path) -> None:
    from codecarena.results.listening.audit import listening_problems
    from codecarena.results.listening.results import write_results
    from codecarena.results.listening.store import seal

    run_dir = fake_run(tmp_path)
    test = _two_listeners(run_dir)
    home = RunDir(run_dir)
    notes: list[str] = []
    assert listening_problems(Run.open(run_dir), notes) == []
    assert any("no results.json yet" in n for n in notes)
    write_results(derive(home, "mushra"))
    assert listening_problems(Run.open(run_dir)) == []
    # A forged answer: a stimulus hash that is not the run's, in a line sealed and chained as the store does.
    path = home.listener_ratings("mushra", "cat")
    submit(run_dir, test, [answer(test, "cat")])
    first = listener_plan(test, "cat")[0][0]
    fields = check_answer(test, answer(test, "cat", first), read_lines(path)[0], T0, "server")
    fields["stimuli"] = {**fields["stimuli"], "c1": "e" * 64}
    with open(path, "a") as fh:
        fh.write(json.dumps(seal(fields, read_lines(path)[0][-1].line_sha256)) + "\n")
    problems = listening_problems(Run.open(run_dir))
    assert any(f"listener cat: line 2: trial {first}: stimulus 'eeeeeeeeee" in p and "is not the test's" in p
               for p in problems), problems
    path.unlink()
    # An anchor made otherwise, and a decoded file changed under the test.
    anchor = home.anchor("mushra", test.trials[0].utterance, 3500)
    pcm, rate = sf.read(anchor, dtype="int16")
    pcm[100] += 7
    sf.write(anchor, pcm, rate, subtype="PCM_16")
    problems = listening_problems(Run.open(run_dir))
    assert any(f"{anchor}: no longer hashes to" in p for p in problems), problems


def test_results_json_that_the_ratings_no_longer_give_fails_the_audit(tmp_path: Path) -> None:
    from codecarena.results.listening.audit import listening_problems
    from codecarena.results.listening.results import write_results

    run_dir = fake_run(tmp_path)
    test = _two_listeners(run_dir)
    write_results(derive(RunDir(run_dir), "mushra"))
    submit(run_dir, test, rated(test, "cat", lambda t, c: 95 if c == "ref" else 40))
    (problem,) = listening_problems(Run.open(run_dir))
    assert "results.json is not what the rating files give" in problem and "--results` writes it again" in problem


def test_a_test_over_two_runs_scores_each_runs_own_bytes(tmp_path: Path) -> None:
    from codecarena.results import leaderboard as lb

    a, b = fake_run(tmp_path, "a"), fake_run(tmp_path, "b", seed=5)  # one evaluation set, other decoded bytes
    test, made = build([Run.open(a), Run.open(b)], Design("variants", "mushra", ("opus:6k",), (), 10, 2, None, False))
    for path, data in made.items():
        anchors.write_file(path, data)
    save_test(RunDir(a), test)
    assert [(c.label, c.run) for c in test.conditions if c.role == "codec"] == [("opus:6k [a]", 0), ("opus:6k [b]", 1)]
    assert [r.path for r in test.runs] == [".", "../b"]
    score = {"ref": 100, "lp7000": 60, "lp3500": 30, "c1": 30, "c2": 70}
    submit(a, test, rated(test, "ann", lambda t, c: score[c]))
    board = lb.compute([a, b])
    assert {(e["run_label"], e["codec"]): e["listening"].get("mushra:variants", {}).get("mean")
            for e in board.pooled if e["codec"] == "opus:6k"} == {("a", "opus:6k"): 30.0, ("b", "opus:6k"): 70.0}


def test_an_ab_test_counts_preferences_and_refuses_what_it_does_not_allow(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path)
    test = built(run_dir, name="ab", kind="ab", codecs=("opus:6k", "pcm:16"))
    assert test.condition_ids == ["c1", "c2"] and test.screening is None and test.anchors is None
    submit(run_dir, test, [answer(test, "ann")])
    first = listener_plan(test, "ann")[0][0]
    with pytest.raises(AnswerError, match="choice 'none' is not one of c1, c2"):
        submit(run_dir, test, [answer(test, "ann", first, choice="none")])
    submit(run_dir, test, [answer(test, "ann", tid, choice="c2") for tid, _ in listener_plan(test, "ann")])
    ab = derive(RunDir(run_dir), "ab").document["ab"]
    # 4 of 4 decided answers for B: the exact two-sided binomial p of 50% is 2 * 0.5**4
    assert (ab["a"], ab["b"], ab["no_preference"], ab["share_a"], ab["ci95"]) == (0, 4, 0, 0.0, None)
    assert ab["p_value"] == pytest.approx(0.125)


# ---------------------------------------------------------------------------------------------- import


def test_an_imported_ratings_file_is_checked_whole_before_anything_is_added(tmp_path: Path) -> None:
    from codecarena.results.listening.export import import_ratings

    run_dir = fake_run(tmp_path)
    test = built(run_dir)
    home = RunDir(run_dir)
    answers = rated(test, "crowd-1", lambda t, c: 70)
    bad = [*answers[:2], {**answers[2], "stimuli": {**answers[2]["stimuli"], "c2": "a" * 64}}, *answers[3:]]
    downloaded = tmp_path / "ratings.jsonl"
    downloaded.write_text("".join(json.dumps(a) + "\n" for a in bad))
    with pytest.raises(ListeningError, match=r"answer 3: trial t0\d: stimulus 'aaaa.* is not the test's; nothing was "
                                             "imported"):
        import_ratings(home, [test], downloaded)
    assert not home.listener_ratings("mushra", "crowd-1").exists()
    downloaded.write_text("".join(json.dumps(a) + "\n" for a in answers))
    assert import_ratings(home, [test], downloaded)[1:] == ("crowd-1", len(answers))
    lines, _ = read_lines(home.listener_ratings("mushra", "crowd-1"))
    assert {line.via for line in lines} == {f"import {sha256_file(downloaded)}"}
    with pytest.raises(ListeningError, match="has already done the training"):
        import_ratings(home, [test], downloaded)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({**answers[0], "test_sha256": "9" * 64}) + "\n")
    with pytest.raises(ListeningError, match="for test '999999999999', which .* does not hold"):
        import_ratings(home, [test], other)


def test_the_static_bundle_holds_the_page_the_manifest_and_every_stimulus_by_hash(tmp_path: Path) -> None:
    from codecarena.results.listening.export import export_bundle

    run_dir = fake_run(tmp_path)
    test = built(run_dir)
    bundle = tmp_path / "bundle"
    export_bundle(RunDir(run_dir), test, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["mode"] == "static" and manifest["test_sha256"] == test.test_sha256
    for sha, where in manifest["audio"].items():
        assert sha256_file(bundle / where) == sha
    sums = dict(line.split("  ")[::-1] for line in (bundle / "SHA256SUMS").read_text().splitlines())
    assert all(sha256_file(bundle / name) == sha for name, sha in sums.items()) and "index.html" in sums
    assert "opus" not in (bundle / "manifest.json").read_text()  # no codec named to a listener
    with pytest.raises(ListeningError, match="exists and is not an empty folder"):
        export_bundle(RunDir(run_dir), test, bundle)


# ---------------------------------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(run_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """`codecarena listen` on a run, as a user starts it, once it answers."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "codecarena", "listen", str(run_dir), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(base + "/manifest.json", timeout=2).read()
            return proc, base
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(proc.communicate()[0]) from None
            time.sleep(0.2)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path, ListeningTest]]:
    run_dir = fake_run(tmp_path)
    test = built(run_dir)
    proc, base = _start(run_dir)
    try:
        yield proc, base, run_dir, test
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def _post(base: str, body: bytes | dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(base + "/api/answer", data=data,
                                     headers=headers if headers is not None else {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_server_refuses_bad_requests_and_keeps_every_acknowledged_answer_when_killed(
        served: tuple[subprocess.Popen[str], str, Path, ListeningTest]) -> None:
    proc, base, run_dir, test = served
    path = RunDir(run_dir).listener_ratings("mushra", "ann")
    assert _post(base, b'{"listener": "ann"', {"Content-Type": "application/json"})[0] == 400
    assert _post(base, answer(test, "ann"), {"Content-Type": "text/plain"}) == (
        415, {"error": "an answer is sent as application/json"})
    assert _post(base, b"x" * (65 << 10))[0] == 413
    assert _post(base, {**answer(test, "ann"), "listener": "a/b"}) == (
        400, {"error": "listener id 'a/b' is not a safe id (letters, digits, '.', '_' and '-', not starting with a dot, "
                       "at most 128 characters)"})
    assert not path.parent.exists()
    request = urllib.request.Request(base + "/manifest.json", headers={"Host": "evil.example:80"})
    with pytest.raises(urllib.error.HTTPError) as foreign:
        urllib.request.urlopen(request, timeout=10)
    assert foreign.value.code == 421
    sha = test.trials[0].stimuli["lp3500"]
    with urllib.request.urlopen(f"{base}/audio/{sha}.wav", timeout=10) as reply:
        assert hashlib.sha256(reply.read()).hexdigest() == sha
    with pytest.raises(urllib.error.HTTPError) as unknown:
        urllib.request.urlopen(f"{base}/audio/{'0' * 64}.wav", timeout=10)
    assert unknown.value.code == 404
    answers = rated(test, "ann", lambda t, c: 100 if c == "ref" else 50)
    for a in answers[:3]:
        assert _post(base, a)[0] == 200
    assert _post(base, answers[2])[0] == 409
    progress = json.loads(urllib.request.urlopen(f"{base}/api/progress?listener=ann", timeout=10).read())
    assert progress == {"listener": "ann", "trained": True, "answered": [a["trial"] for a in answers[1:3]],
                        "complete": False}
    # Killed where it stands: nothing acknowledged is lost, and the test goes on after a restart.
    proc.kill()
    proc.wait(30)
    lines, torn = read_lines(path)
    assert ([line.trial for line in lines], torn) == ([a["trial"] for a in answers[:3]], False)
    again, base = _start(run_dir)
    try:
        assert [_post(base, a)[0] for a in answers[3:]] == [200] * len(answers[3:])
    finally:
        again.send_signal(signal.SIGTERM)
        assert again.wait(30) == 128 + signal.SIGTERM  # stopped as services are, after writing results.json
    assert derive(RunDir(run_dir), "mushra").document["listeners"][0]["status"] == "included"
    assert (run_dir / "listening" / "mushra" / "results.json").is_file()  # written as the server stopped


def test_a_changed_stimulus_is_not_served(served: tuple[subprocess.Popen[str], str, Path, ListeningTest]) -> None:
    _, base, run_dir, test = served
    trial = test.trials[0]
    decoded = Run.open(run_dir).by_codec["pcm:16"][trial.utterance].decoded
    assert decoded is not None
    shutil.copy(run_dir / "references" / f"{test.trials[1].utterance}.wav", run_dir / decoded)
    with pytest.raises(urllib.error.HTTPError) as changed:
        urllib.request.urlopen(f"{base}/audio/{trial.stimuli['c3']}.wav", timeout=10)
    assert changed.value.code == 500


# ---------------------------------------------------------------------------------------------- the command


def test_the_command_reuses_a_test_and_refuses_another_design_under_its_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from codecarena import cli

    run_dir = fake_run(tmp_path)

    def listen(*args: str) -> int:
        with pytest.raises(SystemExit) as done:
            cli.main(["listen", str(run_dir), *args])
        return int(done.value.code or 0)

    assert listen("--build-only", "--seed", "3", "--codec", "opus:6k") == 0
    first = load_test(RunDir(run_dir), "mushra")
    assert listen("--build-only", "--seed", "3", "--codec", "opus:6k") == 0
    assert listen("--build-only") == 0
    assert load_test(RunDir(run_dir), "mushra") == first
    capsys.readouterr()
    assert listen("--build-only", "--codec", "pcm:16") == 2
    assert "a test named mushra was built on" in capsys.readouterr().err
    assert listen("--name", "other", "--results") == 2
    assert "no listening test 'other'" in capsys.readouterr().err
    other_set = fake_run(tmp_path, "b", manifest="f" * 64)
    assert listen(str(other_set), "--name", "both", "--build-only") == 2
    assert "runs on different evaluation sets cannot be mixed" in capsys.readouterr().err


def test_every_reader_opens_each_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`audit`, `ledger`, `compare`, `leaderboard` and `report` load each run once, a run holding a
    listening test included (the leaderboard hands its loaded runs to the test's derivation)."""
    from codecarena import cli

    run_dir = fake_run(tmp_path)
    _two_listeners(run_dir)
    other = fake_run(tmp_path, "other", seed=5)
    opened: list[Path] = []
    real_open = Run.open.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Run], where: Any) -> Run:
        run = real_open(cls, where)
        opened.append(run.dir.root)
        return run

    monkeypatch.setattr(Run, "open", classmethod(counting))
    commands = {"leaderboard": ["leaderboard", str(run_dir), str(other)],
                "report": ["report", str(run_dir), str(other), "--audio", "none", "--out", str(tmp_path / "r.html")],
                "compare": ["compare", str(run_dir), str(other), "--resamples", "50"],
                "ledger": ["ledger", str(run_dir)],
                "audit": ["audit", str(run_dir)]}
    for name, argv in commands.items():
        opened.clear()
        try:
            cli.main(argv)
        except SystemExit as exc:  # audit exits 1 on a hand-made run's findings; argparse would exit 2
            assert exc.code in (0, 1, None), f"{name}: exit {exc.code}"
        runs = {Path(a).resolve() for a in argv[1:] if Path(a).is_dir()}
        assert sorted(opened) == sorted(runs), f"{name} opened {[p.name for p in opened]}"
