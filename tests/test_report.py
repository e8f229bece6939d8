"""The HTML report and the DuckDB leaderboard (issue #8).

Fast tests build small run directories by hand (rows that pass the strict schema, a summary
computed by codecarena's own summarizer, real WAV files) and check the Pareto frontier, the
grouping that refuses to merge incomparable runs, the exports and the DuckDB numbers. The slow
tests make a real run through the command line, render its report and load it in headless
Chromium (Debian package `chromium`, driven by Playwright with executable_path; never
`playwright install`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from conftest import REPO, SHORT_CLIPS, codecarena, need_mirror

from codecarena.commands import leaderboard as leaderboard_command
from codecarena.commands import report as report_command
from codecarena.results import compare, compare_text, leaderboard_export, report
from codecarena.results import leaderboard as lb
from codecarena.results.formatting import fmt_kbps, fmt_mib, fmt_num, fmt_rtf, fmt_signed, metric_cell
from codecarena.results.report import audio, markup, plots
from codecarena.results.run import Run
from codecarena.results.schema import parse_row
from codecarena.files import write_json
from codecarena.results.store import append_row
from codecarena.rundir import RunDir
from codecarena.results.summary import summarize

# The bound below which no interval is printed (bootstrap.MIN_UNITS, docs/report.md), as the docs declare it.
MIN_UNITS = 10
MODELS = Path(os.environ.get("CODECARENA_MODELS", REPO.parent / "shared" / "models"))
CHROMIUM = "/usr/bin/chromium"

# ------------------------------------------------------------------------------------------------
# Hand-made run directories


def _stage(name: str, cold: float | None, warm: float | None, rss: int, ok: bool = True) -> dict[str, Any]:
    return {"name": name, "exit_status": 0 if ok else 1, "ok": ok, "error": "" if ok else "boom",
            "wall_s": 0.3, "process_start_s": 0.02, "imports_s": 0.2, "load_s": 0.01, "io_s": 0.001,
            "compute_s": 0.01, "warm_compute_s": [0.001, 0.002] if warm is not None else [],
            "cold_rtf": cold, "warm_rtf": warm, "peak_rss_bytes": rss,
            "guard": {"limit_bytes": 2**33, "poll_s": 0.25, "fired": False, "peak_rss_bytes": rss, "polls": 2,
                      "timed_out": False}}


def _metric(value: float | None, status: str = "ok", error: str | None = None) -> dict[str, Any]:
    return {"value": value, "status": status, "error": error, "details": {}}


def _tone(seconds: float, freq: float, seed: int, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).normal(0, 0.02, t.size)
    return (0.3 * np.sin(2 * np.pi * freq * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2 + noise).astype(np.float64)


def make_run(root: Path, name: str, codecs: list[tuple[str, str, str, float]], *, set_name: str = "input:fake",
             manifest: str = "a" * 64, cpu: str = "Test CPU", cpu_count: int = 2, os_name: str = "Linux-test",
             utterances: tuple[str, ...] = ("utt_a", "utt_b", "utt_c"), fail: tuple[str, str] | None = None,
             audio: bool = True, seed: int = 0, suspect: tuple[str, str] | None = None,
             languages: dict[str, str] | None = None, speakers: dict[str, str] | None = None,
             silent: tuple[str, str] | None = None, replay_differs: tuple[str, str] | None = None,
             conversions: dict[str, list[str]] | None = None, heard: bool = False,
             skipped_inputs: list[dict[str, str]] | None = None, metric_declarations: list[dict[str, Any]] = (),
             metrics_hook: Any = None, row_hook: Any = None) -> Path:
    """A run directory with schema-valid rows, summary.json from codecarena's summarizer and real
    wav files. `codecs`: (spec, family, weights, kbps); `fail`: (codec, utterance) whose row failed;
    `suspect`: (codec, utterance) whose PESQ-WB is suspect; `languages`: utterance -> language (default en);
    `silent`: (codec, utterance) whose decoded audio failed the silence check; `replay_differs`:
    (codec, utterance) whose replay decoded other bytes; `conversions`: utterance -> how its reference was
    made (rows then carry version 4's fields); `heard`: dWER records carry ASR texts ("transcript of U",
    "reference heard U", "CODEC heard U"); `skipped_inputs` and `metric_declarations` go into run.json;
    `metrics_hook(codec, utterance, language, metrics)` and `row_hook(row)` may change a row's metric
    records and the whole row in place."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    rate = 16000
    lengths = {u: 16000 + 4000 * i for i, u in enumerate(utterances)}
    refs = {}
    for i, utt in enumerate(utterances):
        ref = run_dir / "references" / f"{utt}.wav"
        ref.parent.mkdir(parents=True, exist_ok=True)
        sf.write(ref, _tone(lengths[utt] / rate, 220 + 40 * i, i), rate, subtype="PCM_16")
        refs[utt] = ref
    rows = []
    for k, (codec, family, weights, kbps) in enumerate(codecs):
        for j, utt in enumerate(utterances):
            n = lengths[utt]
            dur = n / rate
            failed = fail == (codec, utt)
            bits = None if failed else int(kbps * 1000 * dur)
            payload_bytes = None if failed else bits // 8 + 40 + j
            decoded = None if failed else f"decoded/{codec.replace(':', '_')}/{utt}.wav"
            if decoded and audio:
                path = run_dir / decoded
                path.parent.mkdir(parents=True, exist_ok=True)
                sig, _ = sf.read(refs[utt])
                sf.write(path, np.clip(sig + rng.normal(0, 0.01 * (k + 1), sig.size), -1, 1), rate, subtype="PCM_16")
            q = float(rng.uniform(1.0, 4.5))
            metrics = {
                "pesq_wb": (_metric(None, "failed", "row failed") if failed else
                            _metric(1.1, "suspect", SUSPECT_REASON) if suspect == (codec, utt) else _metric(q)),
                "stoi": _metric(None, "failed", "row failed") if failed else _metric(float(rng.uniform(0.6, 1.0))),
                "dwer": (_metric(None, "failed", "row failed") if failed else
                         _metric(None, "not_applicable", "no reference transcript") if j == 0 else
                         _metric(float(rng.uniform(0, 0.5)))),
            }
            if heard and not failed:
                metrics["dwer"]["details"] = {"hypothesis": f"{codec} heard {utt}", "transcript": f"transcript of {utt}",
                                              "reference_hypothesis": f"reference heard {utt}"}
            stages = [_stage("encode", float(rng.uniform(0.05, 0.2)), float(rng.uniform(1e-4, 1e-2)),
                             int(rng.integers(30, 90)) * 2**20),
                      _stage("decode", float(rng.uniform(0.05, 0.2)), None if j == 1 else float(rng.uniform(1e-4, 1e-2)),
                             int(rng.integers(30, 90)) * 2**20, ok=not failed)]
            if not failed:
                stages.append(_stage("replay", 0.1, None, 40 * 2**20))
            model = ({"decoder_model_bytes": 1_804_172, "encoder_model_bytes": 2_108_212} if weights != "none"
                     else {"parameter_bytes": 0, "parameters": 0})
            if metrics_hook is not None:
                metrics_hook(codec, utt, (languages or {}).get(utt, "en"), metrics)
            checkpoint = ({"registry": family, "revision": "f" * 40, "model.tflite": "e" * 64} if weights != "none"
                          else {})
            digest = hashlib.sha256(f"{codec}{utt}".encode()).hexdigest()
            row = {
                "version": 1, "codec": codec, "family": family, "config": {"config": codec.split(":")[-1]},
                "registry": family, "checkpoint": checkpoint,
                "runtime": {"executable": sys.executable, "python": "3.11.7", "numpy": np.__version__},
                "weights": weights, "variant": "", "utterance": utt, "language": (languages or {}).get(utt, "en"), "sample_rate": rate,
                "num_samples": n, "duration_s": dur, "reference": f"references/{utt}.wav",
                "reference_sha256": hashlib.sha256(refs[utt].read_bytes()).hexdigest(),
                "reference_resampled_from": None,
                "payload": None if failed else f"payloads/{codec}/{utt}.ccap", "payload_bytes": payload_bytes,
                "payload_sha256": None if failed else digest, "representation_bits": bits,
                "representation_bps": None if failed else bits / dur,
                "payload_bps": None if failed else payload_bytes * 8 / dur,
                "decoded": decoded, "decoded_sha256": None if failed else digest,
                "replay_sha256": None if failed else digest, "replay_identical": None if failed else True,
                "decoded_samples": None if failed else n, "trimmed_samples": None if failed else 0,
                "padded_samples": None if failed else 0, "length_tolerance": None if failed else 320,
                "finite": None if failed else True, "silent": None if failed else False,
                "clipped_samples": None if failed else 0, "checks_passed": not failed, "codec_facts": {},
                "metrics": metrics, "model": model, "stages": stages, "status": "failed" if failed else "ok",
                "error": "decode: worker exited 1 (boom)" if failed else "",
            }
            if silent == (codec, utt):
                row.update(silent=True, checks_passed=False, error="checks failed: decoded audio is silent")
            if replay_differs == (codec, utt):
                row.update(replay_sha256="0" * 64, replay_identical=False)
            if speakers is not None or conversions is not None:  # the fields version 4 added
                row.update(speaker=(speakers or {}).get(utt, ""), reference_conversions=(conversions or {}).get(utt, []))
            if row_hook is not None:
                row_hook(row)
            rows.append(parse_row(json.loads(json.dumps(row))))
    for row in rows:
        append_row(RunDir(run_dir), row)
    write_json(run_dir / "summary.json", summarize(rows))
    write_json(run_dir / "run.json", {
        "version": 1, "codecarena": "0.1.0", "git": {"revision": "0" * 40, "dirty": False},
        "command": ["codecarena", "run", "--out", str(run_dir)], "created_at": "2026-11-30T00:00:00+00:00",
        "environment": {"python": "3.11.7", "executable": sys.executable, "os": os_name, "cpu": cpu,
                        "cpu_count": cpu_count, "memory_bytes": 2**34, "packages": {"numpy": np.__version__}},
        **({"skipped_inputs": skipped_inputs} if skipped_inputs is not None else {}),
        "metrics": list(metric_declarations), "runtimes": {f: {"registry": f, "environment": "main", "interpreter": sys.executable,
                                        "packages": ["numpy==2"], "packages_sha256": "b" * 64}
                                    for _, f, _, _ in codecs},
        "plan": {"set": set_name, "manifest_sha256": manifest, "utterances": [[u, "c" * 64] for u in utterances],
                 "codecs": [{"codec": c, "config": {}} for c, _, _, _ in codecs], "arena_rate": rate,
                 "weights": "real", "variant": {"name": ""}, "warm_repeats": 2, "mode": "cold", "cold_sample": None,
                 "replay_sample": None, "memory_limit_bytes": 2**33, "metrics": ["pesq_wb", "stoi", "asr"],
                 "runtimes": [], "asr_models": []},
        "plan_sha256": "d" * 64, "execution": {"executor": "local", "workers": 1}, "finished": True,
    })
    return run_dir


SUSPECT_REASON = "whole-file pesq_wb 1.10 is more than 0.5 below every segment of the same file (2.41, 2.70)"
CODECS = [("opus:6k", "opus", "none", 6.0), ("codec2:3200", "codec2", "none", 3.2), ("pcm:16", "pcm", "none", 256.0)]


def _same(got: float | None, want: float | None) -> bool:
    return got is None if want is None else got == pytest.approx(want, rel=1e-12, abs=0)


def assert_matches_summary(board: lb.Leaderboard, run_index: int, summary: dict[str, Any]) -> None:
    """Every number of summary.json equals the DuckDB leaderboard's for the same codec."""
    entries = {e["codec"]: e for e in board.entries if e["run_index"] == run_index and e["language"] is None}
    assert summary["codecs"] and set(entries) == {c["codec"] for c in summary["codecs"]}
    for c in summary["codecs"]:
        e = entries[c["codec"]]
        for key in ("rows", "rows_ok", "rows_failed", "replay_identical", "checks_passed", "family", "weights",
                    "variant"):
            assert e[key] == c[key], (c["codec"], key)
        for key in ("audio_s", "representation_bps", "payload_bps"):
            assert _same(e[key], c[key]), (c["codec"], key)
        for stage in ("encode", "decode"):
            for key, value in c[stage].items():
                assert _same(e[stage][key], value), (c["codec"], stage, key)
        assert set(e["metrics"]) == set(c["metrics"])
        for name, stats in c["metrics"].items():
            got = e["metrics"][name]
            for key in ("n_ok", "n_failed", "n_not_applicable", "n_suspect"):
                assert got[key] == stats[key], (c["codec"], name, key)
            assert _same(got["mean"], stats["mean"]), (c["codec"], name)
            assert _same(got["mean_with_suspect"], stats["mean_with_suspect"]), (c["codec"], name)
            assert got["ci95"] == stats["ci95"], (c["codec"], name)  # same values, order and seed: same bits


# ------------------------------------------------------------------------------------------------
# Pareto frontier


def test_pareto_front_higher_is_better() -> None:
    #        0     1     2     3     4     5     6
    xs = [0.7, 1.0, 2.0, 3.2, 3.2, 6.0, 256.0]
    ys = [1.2, 2.0, 1.5, 3.0, 2.5, 3.0, 4.6]
    # 2: more bits and worse than 1; 4: same bits, worse than 3; 5: more bits, same quality as 3
    assert plots.pareto_front(xs, ys) == [0, 1, 3, 6]


def test_pareto_front_lower_is_better() -> None:
    xs = [0.7, 1.0, 3.2, 6.0, 12.0]
    dwer = [0.48, 0.50, 0.05, 0.10, 0.0]
    assert plots.pareto_front(xs, dwer, lower_is_better=True) == [0, 2, 4]
    # the same points read as higher-is-better give another frontier
    assert plots.pareto_front(xs, dwer) == [0, 1]


def test_pareto_front_ties_and_single_point() -> None:
    assert plots.pareto_front([1.0, 1.0, 2.0], [3.0, 3.0, 3.0]) == [0, 1]  # identical points both stay
    assert plots.pareto_front([5.0], [1.0]) == [0]
    assert plots.pareto_front([], []) == []
    with pytest.raises(ValueError):
        plots.pareto_front([1.0], [])


# ------------------------------------------------------------------------------------------------
# Number formatting (terminal, report, leaderboard, compare)


def test_one_set_of_number_formatters() -> None:
    assert (fmt_num(None), fmt_num(float("nan")), fmt_num(2.0), fmt_num(0.00012, 4)) == ("-", "-", "2.000", "0.0001")
    assert (fmt_signed(0.25), fmt_signed(-0.00004), fmt_signed(None)) == ("+0.2500", "-0.0000", "-")
    assert (fmt_kbps(6000.0), fmt_kbps(5423.4, 2), fmt_kbps(None)) == ("6.000", "5.42", "-")
    assert (fmt_mib(3 * 2**20), fmt_mib(1_804_172, 2), fmt_mib(None)) == ("3", "1.72", "-")
    entry = {"encode": {"warm_rtf_median": 0.00012, "cold_rtf_median": 0.05},
             "decode": {"warm_rtf_median": None, "cold_rtf_median": 0.1}}
    assert (fmt_rtf(entry, "warm"), fmt_rtf(entry, "cold")) == ("0.0001/-", "0.050/0.100")
    assert metric_cell({"mean": 3.0, "n_failed": 1, "n_not_applicable": 2}) == "3.000 (1 failed, 2 n/a)"
    assert (metric_cell({"mean": None, "n_failed": 0, "n_not_applicable": 0}), metric_cell(None)) == ("-", "-")


# ------------------------------------------------------------------------------------------------
# Grouping


def test_runs_with_different_sets_are_not_merged(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", CODECS, set_name="smoke", manifest="1" * 64)
    b = make_run(tmp_path, "b", CODECS, set_name="input:mine", manifest="2" * 64, seed=1)
    c = make_run(tmp_path, "c", CODECS, set_name="smoke", manifest="3" * 64, seed=2)
    board = lb.compute([a, b, c])
    assert [g.runs for g in board.groups] == [[0], [1], [2]]
    g1 = board.groups[0]
    assert any("evaluation set differs (smoke vs input:mine)" in r for r in g1.reasons)
    assert any("different manifest" in r for r in g1.reasons if "G3" in r)  # same name, other files
    assert all(r.startswith("not ranked with") for g in board.groups for r in g.reasons)
    # every entry is in the group of its own run only
    assert {(e["group"], e["run_index"]) for e in board.entries} == {("G1", 0), ("G2", 1), ("G3", 2)}


def test_synthetic_weights_and_other_machines_are_kept_apart(tmp_path: Path) -> None:
    real = make_run(tmp_path, "real", [("lyra:3200", "lyra", "real", 3.2), ("opus:6k", "opus", "none", 6.0)])
    synth = make_run(tmp_path, "synth", [("lyra:3200", "lyra", "synthetic", 3.2)], seed=1)
    other = make_run(tmp_path, "other", [("opus:6k", "opus", "none", 6.0)], cpu="Other CPU", cpu_count=16, seed=2)
    board = lb.compute([real, synth, other])
    by_id = {g.id: g for g in board.groups}
    assert [(g.key.weights_class, g.runs) for g in board.groups] == [("real", [0]), ("synthetic", [1]), ("real", [2])]
    assert any("weights differ" in r and "synthetic weights measure the pipeline" in r for r in by_id["G2"].reasons)
    assert any("machine differs" in r and "Other CPU x16" in r for r in by_id["G3"].reasons)
    # the real lyra ranks with opus (DSP), the synthetic lyra is alone
    assert [e["codec"] for e in board.group_entries("G1")] == ["lyra:3200", "opus:6k"]
    assert [(e["codec"], e["weights"]) for e in board.group_entries("G2")] == [("lyra:3200", "synthetic")]


def test_comparable_runs_share_one_leaderboard(tmp_path: Path) -> None:
    a = make_run(tmp_path, "x", CODECS)
    b = make_run(tmp_path / "second", "x", CODECS[:2], seed=5)  # same name, other folder
    board = lb.compute([a, b])
    assert len(board.groups) == 1 and board.groups[0].reasons == []
    assert board.groups[0].runs == [0, 1]
    assert [e["run_label"] for e in board.entries] == ["x#1"] * 3 + ["x#2"] * 2


# ------------------------------------------------------------------------------------------------
# DuckDB over Parquet


def test_duckdb_leaderboard_equals_summary_json(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", CODECS, fail=("codec2:3200", "utt_b"))
    b = make_run(tmp_path, "b", CODECS[:1], set_name="other", manifest="9" * 64, seed=3)
    rows_parquet = tmp_path / "all_rows.parquet"
    board = lb.compute([a, b], rows_parquet=rows_parquet)
    for index, run_dir in enumerate((a, b)):
        assert_matches_summary(board, index, json.loads((run_dir / "summary.json").read_text()))
    codec2 = next(e for e in board.entries if e["codec"] == "codec2:3200")
    assert (codec2["rows_failed"], codec2["metrics"]["pesq_wb"]["n_failed"]) == (1, 1)
    assert codec2["decoder_model_bytes"] == 0  # DSP: parameter_bytes 0
    # the exported Parquet holds every row of both runs, with nested stages and metrics
    import duckdb

    con = duckdb.connect()
    n, n_metrics = con.execute(
        f"SELECT count(*), sum(len(metrics)) FROM read_parquet('{rows_parquet}')").fetchone()
    assert (n, n_metrics) == (3 * 3 + 3, (3 * 3 + 3) * 3)
    problems = [p for p in board.metric_problems if p["status"] == "failed"]
    assert {(p["codec"], p["output"], p["error"], p["n"]) for p in problems} == {
        ("codec2:3200", name, "row failed", 1) for name in ("pesq_wb", "stoi", "dwer")}


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_leaderboard_export_round_trip(tmp_path: Path, fmt: str) -> None:
    a = make_run(tmp_path, "a", CODECS, fail=("opus:6k", "utt_c"))
    b = make_run(tmp_path, "b", [("lyra:3200", "lyra", "synthetic", 3.2)], seed=4)
    board = lb.compute([a, b])
    columns, records = leaderboard_export.flatten(board)
    out = tmp_path / f"board.{fmt}"
    leaderboard_export.write_export(board, fmt, out)
    back = leaderboard_export.read_export(out)
    assert back == records  # every value, type and None survives (floats bit for bit)
    assert [name for name, _ in columns][:4] == ["group", "run", "run_label", "codec"]
    assert {"pesq_wb_mean", "pesq_wb_n_failed", "dwer_n_not_applicable"} <= set(back[0])
    opus = next(r for r in back if r["codec"] == "opus:6k")
    assert opus["rows_failed"] == 1 and opus["variant"] == "" and isinstance(opus["representation_bps"], float)
    if fmt == "json":
        doc = json.loads(out.read_text())
        assert [g["weights"] for g in doc["groups"]] == ["real", "synthetic"]
        assert any("weights differ" in r for r in doc["groups"][1]["reasons"])


def test_intervals_and_languages_agree_between_summary_and_leaderboard(tmp_path: Path) -> None:
    # 16 English utterances and 8 Mandarin: the pooled and English means have intervals, the Mandarin none.
    utterances = tuple(f"utt_{i:02d}" for i in range(24))
    languages = {u: "zh" if i % 3 == 0 else "en" for i, u in enumerate(utterances)}
    run_dir = make_run(tmp_path, "a", CODECS, utterances=utterances, languages=languages, audio=False,
                       fail=("opus:6k", "utt_04"))
    summary = json.loads((run_dir / "summary.json").read_text())
    board = lb.compute([run_dir], by="language")
    assert board.languages == ["en", "zh"]
    assert_matches_summary(board, 0, summary)  # the pooled entries
    for c in summary["codecs"]:
        for language, part in c["by_language"].items():
            entry = next(e for e in board.entries if e["codec"] == c["codec"] and e["language"] == language)
            assert entry["rows"] == part["utterances"] == sum(1 for u in utterances if languages[u] == language)
            for name, stats in part["metrics"].items():
                got = entry["metrics"][name]
                assert (got["n_ok"], got["ci95"]) == (stats["n_ok"], stats["ci95"]), (c["codec"], language, name)
                assert _same(got["mean"], stats["mean"])
            assert all(stats["ci95"] is None and stats["ci_units"] == stats["n_ok"] < MIN_UNITS
                       for stats in c["by_language"]["zh"]["metrics"].values())
        for name, stats in c["metrics"].items():
            assert (stats["ci_unit"], stats["ci_units"]) == ("utterance", stats["n_ok"])
            if stats["n_ok"] >= MIN_UNITS:
                low, high = stats["ci95"]
                rows = [r for r in rows_of_run(run_dir) if r["codec"] == c["codec"]]
                values = [r["metrics"][name]["value"] for r in rows if r["metrics"][name]["status"] == "ok"]
                # a resampled mean never leaves the values' range, and the interval holds the mean
                assert min(values) <= low <= stats["mean"] <= high <= max(values), (c["codec"], name)
            else:
                assert stats["ci95"] is None
    # The interval does not depend on the order rows finished in.
    rows = [parse_row(r) for r in rows_of_run(run_dir)]
    def intervals(summary: dict[str, Any]) -> dict[str, Any]:
        return {c["codec"]: {n: m["ci95"] for n, m in c["metrics"].items()} for c in summary["codecs"]}
    assert intervals(summarize(rows[::-1])) == intervals(summarize(rows))
    # A constant metric has a zero-width interval.
    constant = [parse_row({**r, "metrics": {"stoi": _metric(0.9)}}) for r in rows_of_run(run_dir)
                if r["status"] == "ok"]
    assert summarize(constant)["codecs"][0]["metrics"]["stoi"]["ci95"] == pytest.approx([0.9, 0.9], abs=1e-12)


def test_speaker_intervals_resample_speakers_with_their_utterances(tmp_path: Path) -> None:
    from codecarena.results.bootstrap import bootstrap_ci

    utterances = tuple(f"utt_{i:02d}" for i in range(24))
    speakers = {u: f"s{i // 2:02d}" for i, u in enumerate(utterances)}  # twelve speakers, two utterances each
    run_dir = make_run(tmp_path, "a", CODECS[:1], utterances=utterances, audio=False, speakers=speakers)
    by_utterance = lb.compute([run_dir])
    by_speaker = lb.compute([run_dir], ci_unit="speaker")
    rows = sorted(rows_of_run(run_dir), key=lambda r: r["utterance"])
    values = [r["metrics"]["stoi"]["value"] for r in rows]
    labels = [f"speaker:{r['speaker']}" for r in rows]
    assert [r["speaker"] for r in rows][:6] == ["s00", "s00", "s01", "s01", "s02", "s02"]
    assert (by_speaker.entries[0]["metrics"]["stoi"]["ci_unit"], by_speaker.entries[0]["metrics"]["stoi"]["ci_units"]) == (
        "speaker", 12)
    # The same bootstrap the compare command uses, called with the speakers as groups.
    assert by_speaker.entries[0]["metrics"]["stoi"]["ci95"] == list(bootstrap_ci(values, labels, resamples=2000,
                                                                                   seed=0))
    assert by_speaker.entries[0]["metrics"]["stoi"]["ci95"] != by_utterance.entries[0]["metrics"]["stoi"]["ci95"]
    with pytest.raises(lb.LeaderboardError, match="--ci-unit corpus"):
        lb.compute([run_dir], ci_unit="corpus")


def rows_of_run(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]


def test_leaderboard_ranks_fits_the_width_and_says_what_it_hid(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from codecarena import console as console_module

    run_dir = make_run(tmp_path, "a", CODECS, audio=False, utterances=tuple(f"utt_{i:02d}" for i in range(12)))
    board = lb.compute([run_dir])
    means = {e["codec"]: e["metrics"]["pesq_wb"]["mean"] for e in board.entries}
    best_first = sorted(means, key=lambda c: -means[c])
    ranked = [e["codec"] for e in lb.ranked(board.entries, "pesq_wb")]
    assert ranked == best_first
    dwer = {e["codec"]: e["metrics"]["dwer"]["mean"] for e in board.entries}
    assert [e["codec"] for e in lb.ranked(board.entries, "dwer")] == sorted(dwer, key=lambda c: dwer[c])
    assert [e["codec"] for e in lb.ranked(board.entries, "kbps")] == ["codec2:3200", "opus:6k", "pcm:16"]

    buffer = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=buffer, width=90, highlight=False))
    leaderboard_command.print_table(board, sort="pesq_wb")
    text = buffer.getvalue()
    assert "…" not in text
    lines = text.splitlines()
    table = [line for line in lines if line.startswith(" ") and any(c in line for c in means)]
    assert [next(c for c in means if c in line) for line in table] == best_first
    assert all(len(line.rstrip()) <= 90 for line in table)
    for codec, mean in means.items():  # every mean and its interval whole
        entry = next(e for e in board.entries if e["codec"] == codec)
        low, high = entry["metrics"]["pesq_wb"]["ci95"]
        row = next(line for line in table if codec in line)
        assert f"{mean:.3f} [{low:.3f}, {high:.3f}]" in row
    # The note wraps at the terminal's width: read from its first line on.
    hidden = " ".join(lines[next(i for i, line in enumerate(lines) if line.startswith("hidden to fit 90 columns")):])
    assert "--columns" in hidden and "dec_model" in hidden

    buffer.truncate(0)
    buffer.seek(0)
    leaderboard_command.print_table(board, columns=["kbps", "quality"])
    header = buffer.getvalue()
    assert "PESQ-WB" in header and "STOI" in header and "RTF warm" not in header and "hidden" not in header
    with pytest.raises(lb.LeaderboardError, match="--columns nope: not a column"):
        leaderboard_command.print_table(board, columns=["nope"])
    with pytest.raises(lb.LeaderboardError, match="--sort visqol: no such metric"):
        leaderboard_command.print_table(board, sort="visqol")


def test_a_100_column_terminal_shows_the_quality_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from codecarena import console as console_module

    run_dir = make_run(tmp_path, "a", CODECS, audio=False)
    buffer = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=buffer, width=100, highlight=False))
    leaderboard_command.print_table(lb.compute([run_dir]))
    lines = buffer.getvalue().splitlines()
    header = next(line for line in lines if "PESQ-WB" in line)
    assert "STOI" in header
    # The values, computed here from rows.jsonl, each whole on its codec's line.
    for codec, *_ in CODECS:
        values = [r["metrics"] for r in rows_of_run(run_dir) if r["codec"] == codec]
        line = next(line for line in lines if line.startswith(f" {codec} "))
        below = lines[lines.index(line) + 1]
        for metric in ("pesq_wb", "stoi"):
            assert f"{np.mean([m[metric]['value'] for m in values]):.3f}" in line, (metric, line)
            assert below.count("n=3, no") >= 2, below  # three utterances: no interval, said under each mean
    hidden = [" ".join(lines[i:]) for i, line in enumerate(lines) if line.startswith("hidden to fit 100 columns")]
    assert "dWER" in header or (len(hidden) == 1 and "dWER" in hidden[0] and "dwer" in hidden[0])


def test_leaderboard_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_run(tmp_path, "a", CODECS)
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    leaderboard_command.add_parser(sub)
    assert leaderboard_command.run(parser.parse_args(["leaderboard", str(a), "--format", "csv"])) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("group,run,run_label,codec,")
    assert len(text.splitlines()) == 1 + len(CODECS)
    assert leaderboard_command.run(parser.parse_args(["leaderboard", str(a)])) == 0  # the rich table
    out = capsys.readouterr().out
    assert "opus:6k" in out and "PESQ-WB" in out
    with pytest.raises(lb.LeaderboardError, match="needs --out"):
        leaderboard_command.run(parser.parse_args(["leaderboard", str(a), "--format", "parquet"]))
    with pytest.raises(lb.LeaderboardError, match="not a run directory"):
        leaderboard_command.run(parser.parse_args(["leaderboard", str(tmp_path)]))


# ------------------------------------------------------------------------------------------------
# The report without a browser


def _fake_compare(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, Path]]:
    calls: list[tuple[Path, Path]] = []

    def compare_runs(run_a: Run, run_b: Run) -> dict[str, Any]:  # the report passes the runs it loaded
        calls.append((run_a.path, run_b.path))
        return {"a": str(run_a.path), "b": str(run_b.path)}

    monkeypatch.setattr(compare, "compare_runs", compare_runs)
    monkeypatch.setattr(compare_text, "render_html",
                        lambda result: f'<p class="fake-compare">{Path(result["a"]).name} vs {Path(result["b"]).name}</p>')
    monkeypatch.setattr(compare_text, "render_text",
                        lambda result: f'fake comparison {Path(result["a"]).name} vs {Path(result["b"]).name}\n')
    return calls


def test_report_html_is_self_contained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = make_run(tmp_path, "a", CODECS, fail=("codec2:3200", "utt_b"))
    b = make_run(tmp_path, "b", CODECS, seed=1)  # comparable with a
    c = make_run(tmp_path, "c", [("lyra:3200", "lyra", "synthetic", 3.2)], seed=2)  # same set, synthetic weights
    calls = _fake_compare(monkeypatch)
    out = report.write_report([a, b, c], tmp_path / "out" / "report.html")
    page = out.read_text()
    # nothing outside the file is referenced
    assert not re.search(r'(?:src|href)="(?!data:|#)', page)
    assert "http://" not in page and "https://" not in page
    # two leaderboards: a+b (real/DSP), c (synthetic), and why
    assert page.count('<table class="leaderboard sortable"') == 2
    assert page.count('class="lb-row') == 3 + 3 + 1
    assert page.count('class="lb-row failed-row"') == 1  # codec2:3200 in run a: the whole row is marked
    assert "Not one ranking" in page and "synthetic weights measure the pipeline" in page
    # one player per decoded file plus one per reference (per group), all lossless FLAC here
    decoded = 3 * 3 * 2 - 1 + 3
    assert page.count("<audio ") == decoded + 3 + 3
    assert page.count('src="data:audio/flac;base64,') == decoded + 6
    # plots per group: PESQ-WB, STOI, dWER (the metrics these runs have) and the cost plot
    assert page.count('<img class="plot"') == 2 * 4
    # the failed row, its failed metric values and the not-applicable ones, each with the reason
    assert "decode: worker exited 1 (boom)" in page and "row failed" in page and "no reference transcript" in page
    # the comparison of the only comparable consecutive pair (a -> b); c is not comparable with b
    assert calls == [(a, b)]
    assert '<p class="fake-compare">a vs b</p>' in page
    # provenance
    assert "registry" in page and "e" * 12 in page and "packages" in page
    md = out.with_suffix(".md").read_text()
    assert "## G1" in md and "## G2" in md and "| opus:6k |" in md and "weights differ" in md
    assert "1 failed rows" in md


def test_a_failed_check_or_a_differing_replay_marks_the_whole_row(tmp_path: Path) -> None:
    # Every row of every configuration completed; opus:6k has a silent output, codec2:3200 a replay
    # that differs, pcm:16 neither: only the first two are marked.
    run_dir = make_run(tmp_path, "a", CODECS, silent=("opus:6k", "utt_b"), replay_differs=("codec2:3200", "utt_c"))
    page = report.write_report([run_dir], tmp_path / "r.html", audio="none").read_text()
    marked = re.findall(r'<tr class="lb-row failed-row" data-codec="([^"]+)"', page)
    assert sorted(marked) == ["codec2:3200", "opus:6k"]
    assert '<tr class="lb-row" data-codec="pcm:16"' in page


def test_a_multilingual_report_opens_per_language(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    utterances = ("utt_a", "utt_b", "utt_c", "utt_d")
    run_dir = make_run(tmp_path, "a", CODECS, utterances=utterances, languages={"utt_c": "zh", "utt_d": "zh"})
    out = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    page = out.read_text()
    group = page[page.index('<section class="group"'):page.index('<h2 id="listening"')]
    # Open sections, one per language, before the pooled table; each with its table and its own plots.
    assert "<details" not in group
    tables = re.findall(r'<table class="leaderboard sortable" data-group="G1"( data-language="(\w+)")?>', group)
    assert [lang for _, lang in tables] == ["en", "zh", ""]
    assert group.index("Language en: 2 utterances") < group.index("Language zh: 2 utterances") < group.index(
        "All 2 languages pooled")
    for lang in ("en", "zh"):
        for metric in ("pesq_wb", "stoi"):
            assert group.count(f'<figure data-metric="{metric}" data-language="{lang}"') == 1, (metric, lang)
    # A word error rate only where words are written with spaces (docs/metrics.md, "Per language").
    assert group.count('<figure data-metric="dwer" data-language="en"') == 1
    assert 'data-metric="dwer" data-language="zh"' not in group
    assert group.count('data-metric="cost"') == 1
    # A plot per language, drawn from that language's means alone.
    board = lb.compute([run_dir], by="language")
    zh = {e["codec"]: e["metrics"]["pesq_wb"]["mean"] for e in board.entries if e["language"] == "zh"}
    rows = [r for r in rows_of_run(run_dir) if r["language"] == "zh"]
    assert zh == {c: pytest.approx(np.mean([r["metrics"]["pesq_wb"]["value"] for r in rows if r["codec"] == c]))
                  for c, *_ in CODECS}
    # report.md: each language's table first, then the pooled one.
    md = out.with_suffix(".md").read_text()
    assert md.index("### Language en: 2 utterances") < md.index("### Language zh: 2 utterances") < md.index(
        "### All 2 languages pooled")
    assert md.count("| opus:6k |") == 3
    # The terminal leaderboard splits by language without being asked, per language first.
    parser = argparse.ArgumentParser()
    leaderboard_command.add_parser(parser.add_subparsers(dest="command"))
    assert leaderboard_command.run(parser.parse_args(["leaderboard", str(run_dir)])) == 0
    text = capsys.readouterr().out
    headings = [line for line in text.splitlines() if line.startswith("G1: ")]
    assert [h.split(";")[0].rsplit(" - ", 1)[1] for h in headings] == ["language en", "language zh",
                                                                        "all 2 languages pooled"]
    # An export keeps the shape it was asked for: per-language records only with --by language.
    assert leaderboard_command.run(parser.parse_args(["leaderboard", str(run_dir), "--format", "csv"])) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 + len(CODECS)


def test_an_undeclared_language_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = make_run(tmp_path, "a", CODECS[:2], languages={"utt_a": "", "utt_b": ""})
    out = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    page = out.read_text()
    assert "Language (no language declared): 2 utterances" in page
    assert page.count('data-language=""') >= 1 and "Language : " not in page
    assert "utt_a <span class=\"muted\">((no language declared), " in page  # the listening section's heading
    assert "### Language (no language declared): 2 utterances" in out.with_suffix(".md").read_text()
    parser = argparse.ArgumentParser()
    leaderboard_command.add_parser(parser.add_subparsers(dest="command"))
    assert leaderboard_command.run(parser.parse_args(["leaderboard", str(run_dir)])) == 0
    text = capsys.readouterr().out
    assert " - language (no language declared);" in text and " - language ;" not in text
    # A single undeclared language is the pooled table, named.
    alone = make_run(tmp_path, "b", CODECS[:1], languages=dict.fromkeys(("utt_a", "utt_b", "utt_c"), ""))
    assert leaderboard_command.run(parser.parse_args(["leaderboard", str(alone)])) == 0
    assert " - language (no language declared);" in capsys.readouterr().out
    from codecarena.results import formatting

    assert getattr(formatting, "NO_LANGUAGE", None) == "(no language declared)"  # the one wording


def _terminal(monkeypatch: pytest.MonkeyPatch, width: int = 250) -> io.StringIO:
    """Every console codecarena prints through, into a buffer of `width` columns."""
    from codecarena import console as console_module

    buffer = io.StringIO()
    monkeypatch.setattr(console_module, "console", console_module.make_console(file=buffer, width=width))
    return buffer


def test_no_surface_prints_an_interval_on_fewer_units_than_the_bound(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.console import print_quality
    from codecarena.results import bootstrap

    # Three utterances: three values per mean, and every surface says there is no interval, and why.
    run_dir = make_run(tmp_path, "a", CODECS, speakers={"utt_a": "s1", "utt_b": "s1", "utt_c": "s1"})
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["version"] == 6 and summary["ci"]["min_units"] == MIN_UNITS
    stoi = summary["codecs"][0]["metrics"]["stoi"]
    assert (stoi["ci95"], stoi["ci_unit"], stoi["ci_units"]) == (None, "utterance", 3)
    buffer = _terminal(monkeypatch)
    print_quality({c["codec"]: c["metrics"] for c in summary["codecs"]})
    board = lb.compute([run_dir])
    leaderboard_command.print_table(board)
    terminal = buffer.getvalue()
    assert terminal.count("n=3, no") >= 3 * 2 * 2  # PESQ-WB and STOI of three codecs, in both tables
    assert "+-" not in terminal and not re.search(r"\[\d", terminal)
    out = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    page, md = out.read_text(), out.with_suffix(".md").read_text()
    body = page[page.index("<main>"):page.index("<script>")]
    assert "&plusmn;" not in body and not re.search(r"\[\d", body) and not re.search(r"\[\d", md)
    # The HTML says what each mean rests on in its cell, and once under the table why there is no interval
    # (issue 38: the whole sentence in every cell left room for 2 or 3 metric columns at 1,400 px).
    withheld = ('<span class="sub ci none" title="only 3 utterances, fewer than 10: a percentile bootstrap interval '
                'on so few is too narrow (it undercovers), so none is given; read the mean as descriptive">'
                "n=3</span>")
    assert page.count(withheld) == 3 * 2  # PESQ-WB and STOI of every codec (dWER has 2 values)
    assert page.count('<p class="note ci-note">No interval under a mean on fewer than 10 utterances (n=2, n=3 '
                      "here)") == 1
    assert md.count("n=3 utterances: no interval, fewer than 10") == 3 * 2
    # The plots draw no bar, and say why.
    assert page.count('data-intervals="0"') == 3
    assert "No bar on 3 points: fewer than 10 utterances, too few for an interval." in page
    # The export has no interval either, and says on how many units.
    _, records = leaderboard_export.flatten(board)
    assert {(r["stoi_ci95_low"], r["stoi_ci95_high"], r["stoi_ci_units"], r["ci_unit"]) for r in records} == {
        (None, None, 3, "utterance")}
    # --ci-unit speaker with one speaker: no interval, and the reason, instead of a silent gap.
    by_speaker = lb.compute([run_dir], ci_unit="speaker")
    assert by_speaker.entries[0]["metrics"]["stoi"]["ci_units"] == 1
    buffer.truncate(0)
    buffer.seek(0)
    leaderboard_command.print_table(by_speaker)
    assert "n=1, no" in buffer.getvalue() and "interval [lo, hi] over speakers" in buffer.getvalue()
    from codecarena.results.formatting import interval_text

    assert interval_text(by_speaker.entries[0]["metrics"]["stoi"]) == "n=1 speaker: no interval, fewer than 10"
    assert getattr(bootstrap, "MIN_UNITS", None) == MIN_UNITS  # the one declared bound


def test_an_interval_prints_as_lo_hi_with_its_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.console import print_quality
    from codecarena.results.formatting import metric_ci_cell

    # The interval the issue saw printed as "2.797 +-3.579": both ends, never half the width.
    stats = {"mean": 2.797, "ci95": [0.308, 7.467], "ci_unit": "utterance", "ci_units": 12, "n_ok": 12,
             "n_failed": 0, "n_not_applicable": 0}
    assert metric_ci_cell(stats) == "2.797 [0.308, 7.467]\nn=12"
    # Twelve utterances, the last one far off: an asymmetric interval on every surface as [lo, hi].
    utterances = tuple(f"utt_{i:02d}" for i in range(12))
    run_dir = make_run(tmp_path, "a", CODECS, utterances=utterances, audio=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    buffer = _terminal(monkeypatch)
    print_quality({c["codec"]: c["metrics"] for c in summary["codecs"]})
    board = lb.compute([run_dir])
    leaderboard_command.print_table(board)
    terminal = buffer.getvalue()
    out = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    page, md = out.read_text(), out.with_suffix(".md").read_text()
    for c in summary["codecs"]:
        stats = c["metrics"]["pesq_wb"]
        values = sorted(r["metrics"]["pesq_wb"]["value"] for r in rows_of_run(run_dir) if r["codec"] == c["codec"])
        low, high = stats["ci95"]
        assert values[0] <= low < np.mean(values) < high <= values[-1]
        both = f"{stats['mean']:.3f} [{low:.3f}, {high:.3f}]"
        assert terminal.count(both) == 2, (both, terminal)
        assert f"{both} n=12 utterances" in md
        assert (f'<td data-v="{stats["mean"]!r}">{stats["mean"]:.3f}<span class="sub ci" title="95% percentile '
                f'bootstrap interval of the mean, resampling 12 utterances">[{low:.3f}, {high:.3f}] n=12 utterances'
                "</span>") in page
    assert "+-" not in terminal + md and "&plusmn;" not in page
    assert page.count('data-intervals="3"') == 3  # a bar on every point of the three plots


def test_summaries_of_earlier_versions_re_derive_with_their_own_intervals(tmp_path: Path) -> None:
    from codecarena.results import audit, summary

    run_dir = make_run(tmp_path, "a", CODECS[:1], audio=False)
    rows = [parse_row(r) for r in rows_of_run(run_dir)]
    v2, v3 = summarize(rows, 2), summarize(rows)
    # Version 2 gave an interval from 2 values on and named no unit; version 3 withholds it below the bound.
    old, new = v2["codecs"][0]["metrics"]["stoi"], v3["codecs"][0]["metrics"]["stoi"]
    values = [r.metrics["stoi"]["value"] for r in rows]
    assert min(values) <= old["ci95"][0] < old["ci95"][1] <= max(values) and "ci_units" not in old
    assert new["ci95"] is None and new["ci_units"] == 3
    assert "min_units" not in v2["ci"] and v3["ci"]["min_units"] == MIN_UNITS
    assert "ci95" not in summarize(rows, 1)["codecs"][0]["metrics"]["stoi"]
    # The audit re-derives a summary in any of these versions (the one it was written in).
    assert summary.SUMMARY_VERSIONS == (1, 2, 3, 4, 5, 6) and audit.SUMMARY_VERSIONS is summary.SUMMARY_VERSIONS


LONG_VERSION = "faster_whisper " + "1.0.3+" + "x" * 200  # one unbroken string, like the 1,274 px one seen


def test_the_report_tells_the_whole_story_of_an_input(tmp_path: Path) -> None:
    mp3 = ["decoded MP3 MPEG_LAYER_III (libsndfile), 44100 Hz, 2 channels", "downmixed 2 channels to mono (their mean)",
           "resampled 44100 -> 16000 Hz (soxr VHQ)", "written as 16-bit PCM wav"]
    skipped = [{"file": "notes.txt", "reason": "not audio: no decoder recognises it"},
               {"file": "cut.ogg", "reason": "truncated Ogg: the last page is missing"}]
    run_dir = make_run(tmp_path, "a", CODECS[:2], conversions={"utt_a": mp3}, heard=True, skipped_inputs=skipped,
                       metric_declarations=[{"name": "asr", "outputs": ["dwer"], "versions": {"asr": LONG_VERSION},
                                             "description": "Whisper transcripts"}])
    page = report.write_report([run_dir], tmp_path / "report.html", audio="none").read_text()
    provenance = page[page.index('<h2 id="provenance">'):]
    # Conversions and skipped files, in provenance: one line per way a reference was made, with its utterances.
    assert ('<tr><td class="wrap">' + "; ".join(mp3).replace(">", "&gt;") + '</td><td>1</td><td class="wrap mono">'
            "utt_a</td></tr>") in provenance
    assert ("<tr><td class=\"wrap\">the input file&#x27;s own bytes, unchanged</td><td>2</td><td class=\"wrap mono\">"
            "utt_b, utt_c</td></tr>") in provenance
    for item in skipped:
        assert f'<td class="wrap mono">{item["file"]}</td><td class="wrap">{item["reason"]}</td>' in provenance
    # The long version string sits in a cell that wraps, and every provenance cell may wrap anywhere.
    assert f'<td class="wrap">asr {LONG_VERSION}</td>' in provenance
    assert "table.provenance td { white-space: normal; overflow-wrap: anywhere; }" in page
    # Each utterance's cards: the reference's conversions, transcript and what the recogniser heard in
    # it; on every decoded card what it heard in the decoded audio.
    listening = page[page.index('<h2 id="listening">'):page.index('<h2 id="failures">')]
    utt_a = listening[listening.index('data-utterance="utt_a"'):listening.index('data-utterance="utt_b"')]
    reference = utt_a[utt_a.index('<div class="card ref'):]
    reference = reference[:reference.index("</dl>")]
    assert ("<dt>input</dt><dd>" + esc_html("; ".join(mp3)) + "</dd><dt>transcript</dt><dd>transcript of utt_a</dd>"
            "<dt>recognised in the reference</dt><dd>reference heard utt_a</dd>") in reference
    for codec, *_ in CODECS[:2]:
        assert f"<dt>recognised</dt><dd>{codec} heard utt_a</dd>" in utt_a
    utt_b = listening[listening.index('data-utterance="utt_b"'):]
    assert "<dt>input</dt><dd>the input file&#x27;s own bytes, unchanged</dd>" in utt_b
    # A run that records no skipped inputs (run.json before version 3) says so rather than "none".
    older = report.write_report([make_run(tmp_path, "b", CODECS[:1])], tmp_path / "b.html", audio="none").read_text()
    assert "Skipped input files: not recorded (run.json before version 3)." in older
    assert "<dt>input</dt><dd>not recorded (a row before version 4)</dd>" in older


def esc_html(text: str) -> str:
    import html

    return html.escape(text, quote=True)


COLUMN_TOGGLES = ("rate", "quality", "content", "cost", "checks")


def test_the_listening_section_is_bounded_and_takes_each_language_in_turn(tmp_path: Path) -> None:
    from codecarena.results.report.listening import listened

    utterances = [f"u{i}" for i in range(7)]
    language = {u: "zh" if i >= 5 else "en" for i, u in enumerate(utterances)}
    assert listened(utterances, language, 3) == ["u0", "u1", "u5"]
    assert listened(utterances, language, 4) == ["u0", "u1", "u5", "u6"]
    assert listened(utterances, language, None) == utterances == listened(utterances, language, 7)
    run_dir = make_run(tmp_path, "a", CODECS[:1], utterances=tuple(utterances), languages=language)
    small = report.write_report([run_dir], tmp_path / "small.html", listen=3).read_text()
    assert small.count('class="utt" data-utterance=') == 3 and "3 of 7 utterances are shown here" in small
    assert '<h2 id="listening">Listening: 3 of 7 utterances, reference and decoded versions</h2>' in small
    assert small.count("<audio") == 3 * 2  # reference and decoded of each shown utterance
    full = report.write_report([run_dir], tmp_path / "full.html", listen=None)
    assert full.read_text().count('class="utt" data-utterance=') == 7
    assert '<h2 id="listening">Listening: every utterance (7), reference and decoded versions</h2>' in full.read_text()
    assert (tmp_path / "small.html").stat().st_size < full.stat().st_size / 1.8
    assert "4 utterances are not in the listening section" in (tmp_path / "small.md").read_text()


def test_the_default_listening_choice_ranks_each_configuration_and_samples_the_rest() -> None:
    from codecarena.results.report.listening import ranked_selection

    fifty = [f"u{i:02d}" for i in range(50)]
    assert ranked_selection(fifty, [{u: 1.0 for u in fifty}], lower_is_better=False) == fifty
    utts = [f"u{i:02d}" for i in range(60)]
    a = {u: float(i) for i, u in enumerate(utts)}  # worst u00, lower median u29, best u59
    b = {u: float((i + 10) % 60) for i, u in enumerate(utts)}  # value 0 at u50, 29 at u19, 59 at u49
    chosen = ranked_selection(utts, [a, b], lower_is_better=False)
    assert chosen == sorted(chosen) and len(chosen) == 6 + 6
    assert {"u00", "u29", "u59", "u50", "u19", "u49"} <= set(chosen)
    assert ranked_selection(utts, [a, b], lower_is_better=False) == chosen  # seeded
    other_seed = ranked_selection(utts, [a, b], lower_is_better=False, seed=1)
    assert other_seed != chosen and {"u00", "u29", "u59", "u50", "u19", "u49"} <= set(other_seed)
    # lower is better: u59 is the worst, u00 the best, and the lower middle of 59..0 is 30
    lower = ranked_selection(utts, [a], lower_is_better=True)
    assert {"u59", "u30", "u00"} <= set(lower) and len(lower) == 3 + 6
    # a configuration with values for only some utterances ranks those (u10, u12, u14 by value)
    partial = ranked_selection(utts, [{"u10": 3.0, "u14": 1.0, "u12": 2.0, "u90": 0.0}], lower_is_better=False)
    assert {"u10", "u12", "u14"} <= set(partial) and "u90" not in partial and len(partial) == 3 + 6


def test_the_report_by_default_embeds_chosen_utterances_and_links_the_rest(tmp_path: Path) -> None:
    utterances = tuple(f"u{i:02d}" for i in range(53))
    run_dir = make_run(tmp_path, "a", CODECS[:2], utterances=utterances)
    rows = rows_of_run(run_dir)
    ranked: set[str] = set()
    for codec in ("opus:6k", "codec2:3200"):
        by_value = sorted((r["metrics"]["pesq_wb"]["value"], r["utterance"]) for r in rows if r["codec"] == codec)
        ranked |= {by_value[0][1], by_value[26][1], by_value[-1][1]}  # worst, median of 53, best
    page = report.write_report([run_dir], tmp_path / "report.html", audio="none").read_text()
    embedded = re.findall(r'class="utt" data-utterance="([^"]+)"', page)
    assert ranked <= set(embedded) and len(embedded) == len(ranked) + 6
    assert f"{len(embedded)} of 53 utterances are shown here, more than 50, so each configuration&#x27;s worst" in page
    assert "by PESQ-WB and 6 more drawn at random (seed 0)" in page
    linked = re.findall(r'<li data-utterance="([^"]+)">(.*?)</li>', page)
    assert sorted(u for u, _ in linked) == sorted(set(utterances) - set(embedded))
    for utt, item in linked:
        hrefs = re.findall(r'href="([^"]+)"', item)
        assert hrefs == [f"a/references/{utt}.wav", f"a/decoded/opus_6k/{utt}.wav", f"a/decoded/codec2_3200/{utt}.wav"]
        assert all((tmp_path / h).is_file() for h in hrefs)
    assert f"{53 - len(embedded)} utterances are not in the listening section (the default choice" in page


def test_report_says_when_comparable_runs_share_no_codec(tmp_path: Path) -> None:
    # Same set, machine and weights kind, different codecs: complementary runs, not a failure.
    a = make_run(tmp_path, "a", CODECS[:1])
    b = make_run(tmp_path, "b", CODECS[1:2], seed=1)
    out = report.write_report([a, b], tmp_path / "r.html", audio="none")
    page = out.read_text()
    assert "a and b share no codec configuration: nothing to pair" in page and "comparison failed" not in page
    assert "<audio" not in page and 'class="spec"' in page
    assert "Comparison: a and b share no codec configuration" in out.with_suffix(".md").read_text()


def test_report_notes_a_failed_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = make_run(tmp_path, "a", CODECS)
    b = make_run(tmp_path, "b", CODECS, seed=1)

    def refuse(run_a: Path, run_b: Path) -> dict[str, Any]:
        raise compare.CompareError("opus:6k: libopus differ between the runs")
    monkeypatch.setattr(compare, "compare_runs", refuse)
    out = report.write_report([a, b], tmp_path / "r.html", audio="none")
    assert "a -&gt; b: comparison failed (CompareError: opus:6k: libopus differ" in out.read_text()
    assert "Comparison: a -> b: comparison failed (CompareError: " in out.with_suffix(".md").read_text()


def test_report_says_which_plots_are_skipped(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", CODECS)
    page = report.write_report([a], tmp_path / "r.html", audio="none").read_text()
    # the hand-made runs have no DNSMOS or speaker similarity
    assert "Plots skipped: DNSMOS OVRL (the metric was not computed in these runs); speaker sim" in page
    assert page.count('<img class="plot"') == 3 + 1
    assert "comparison" not in page.lower().split("<main>")[1][:200]


def test_the_cost_plot_marks_synthetic_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.collections import PathCollection

    real = make_run(tmp_path, "real", CODECS[:1], audio=False)
    synth = make_run(tmp_path, "synth", [("lyra:3200", "lyra", "synthetic", 3.2)], audio=False, seed=1)
    entries = lb.compute([real, synth]).entries
    figures: list[Any] = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or b"")
    plots.cost_plot(entries, plots.family_styles([e["family"] for e in entries]), with_run=False)
    (fig,) = figures
    assert len(fig.axes) == 3
    for ax in fig.axes:  # cold RTF, warm RTF, peak RSS
        labels = [t.get_text() for t in ax.texts]
        assert "lyra:3200 (synthetic)" in labels and "opus:6k" in labels
        dashed = [c for c in ax.collections if isinstance(c, PathCollection)
                  and any(dashes is not None for _, dashes in c.get_linestyles())]
        solid = [c for c in ax.collections if isinstance(c, PathCollection) and c not in dashed]
        assert dashed and solid  # lyra's points dashed, opus's solid
        assert all(c.get_offsets()[0][0] == pytest.approx(3.2) for c in dashed)


def test_embedded_audio_is_lossless(tmp_path: Path) -> None:
    path = tmp_path / "x.wav"
    pcm = (np.random.default_rng(0).normal(0, 3000, 16000)).astype(np.int16)
    sf.write(path, pcm, 16000, subtype="PCM_16")
    stats = audio.AudioStats(mode="flac")
    uri = audio.embed_audio(path, "flac", stats)
    assert uri.startswith("data:audio/flac;base64,")
    data, rate = sf.read(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])), dtype="int16")
    assert rate == 16000 and np.array_equal(data, pcm)
    assert stats.flac == 1 and stats.bytes_embedded < stats.bytes_on_disk
    assert audio.embed_audio(path, "wav", stats) == markup.data_uri(path.read_bytes(), "audio/wav")
    # float WAV has no FLAC equivalent: its own bytes go in
    fpath = tmp_path / "f.wav"
    sf.write(fpath, pcm / 32768.0, 16000, subtype="FLOAT")
    assert audio.embed_audio(fpath, "flac", stats).startswith("data:audio/wav;base64,")


def test_report_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_run(tmp_path, "a", CODECS[:2], audio=False)
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    report_command.add_parser(sub)
    args = parser.parse_args(["report", str(a), "--out", str(tmp_path / "rep.html")])
    assert args.audio == "flac"
    assert report_command.run(args) == 0
    assert "report:" in capsys.readouterr().out
    page = (tmp_path / "rep.html").read_text()
    assert page.count("decoded file missing") == 2 * 3  # files gone: said, not crashed
    assert (tmp_path / "rep.md").is_file()
    with pytest.raises(report.ReportError):
        report.write_report([a], tmp_path / "x.html", audio="mp3")


# ------------------------------------------------------------------------------------------------
# A real run, its report in headless Chromium


def _lyra_models() -> bool:
    return (MODELS / "lyra_v2" / "lyragan.tflite").is_file()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirror = need_mirror()
    root = tmp_path_factory.mktemp("report_run")
    speech = root / "speech"
    speech.mkdir()
    for name in SHORT_CLIPS:
        shutil.copy(mirror / name, speech / name)
    codecs = ["opus:6k", "codec2:3200", "pcm:16"] + (["lyra:3200"] if _lyra_models() else [])
    args: list[str | Path] = ["run", "--input", speech, "--language", "en",
                              "--metrics", "pesq_wb,stoi,dnsmos,speaker_sim,asr", "--out", root / "run"]
    for codec in codecs:
        args += ["--codec", codec]
    codecarena(*args, check=True, env={"CODECARENA_MODELS": str(MODELS)})
    return root / "run"


@pytest.mark.slow
def test_duckdb_equals_summary_of_a_real_run(real_run: Path) -> None:
    board = lb.compute([real_run])
    assert_matches_summary(board, 0, json.loads((real_run / "summary.json").read_text()))


def _chromium_page(pw: Any, profile: Path, messages: list[str], outside: list[str]) -> tuple[Any, Any]:
    """A headless Chromium context at 1,400 px and its page, collecting console errors and warnings
    and every request that leaves the file."""
    context = pw.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("data:", "file:")) else None)
    return context, page


def _artifacts(tmp_path: Path) -> Path:
    artifacts = Path(os.environ.get("CODECARENA_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    return artifacts


def _need_chromium() -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM} missing; Debian: apt-get install chromium)")


@pytest.mark.slow
def test_report_in_headless_chromium(real_run: Path, tmp_path: Path) -> None:
    _need_chromium()
    from playwright.sync_api import sync_playwright

    out = report.write_report([real_run], tmp_path / "report.html")
    rows = [json.loads(line) for line in (real_run / "rows.jsonl").read_text().splitlines()]
    codecs = list(dict.fromkeys(r["codec"] for r in rows))
    n_decoded = sum(1 for r in rows if r["decoded"])
    n_refs = len({r["reference_sha256"] for r in rows})
    if _lyra_models():
        assert "lyra:3200" in codecs
    shot = _artifacts(tmp_path) / "report.png"
    messages: list[str] = []
    outside: list[str] = []
    with sync_playwright() as pw:
        context, page = _chromium_page(pw, tmp_path / "chromium-profile", messages, outside)
        try:
            page.goto(out.as_uri(), wait_until="load")
            lb_rows = page.locator("table.leaderboard tr.lb-row")
            assert lb_rows.count() == len(codecs)
            assert sorted(lb_rows.evaluate_all("rs => rs.map(r => r.dataset.codec)")) == sorted(codecs)
            plots = page.locator("img.plot")
            assert plots.count() == 6  # PESQ-WB, STOI, dWER, DNSMOS OVRL, speaker sim, cost
            assert all(w > 100 for w in plots.evaluate_all("is => is.map(i => i.naturalWidth)"))
            spectrograms = page.locator("img.spec").evaluate_all("is => is.map(i => i.naturalWidth)")
            assert len(spectrograms) == n_decoded + n_refs  # one on every card, as its player
            assert all(w > 10 for w in spectrograms)
            audio = page.locator("audio")
            assert audio.count() == n_decoded + n_refs
            assert page.locator("audio.ref").count() == n_refs
            # every player's data URI decodes to audio of the utterance's length
            durations = page.evaluate("""async () => {
                const els = Array.from(document.querySelectorAll('audio'));
                await Promise.all(els.map(a => a.readyState >= 1 ? null : new Promise(done => {
                    a.addEventListener('loadedmetadata', done); a.addEventListener('error', done);
                    setTimeout(done, 15000); })));
                return els.map(a => a.error ? -1 : a.duration); }""")
            assert min(durations) > 1.0, durations
            # The cards say what the recogniser heard: in the reference, and in every decoded version.
            said = page.locator("div.card dl.said").evaluate_all("ds => ds.map(d => d.innerText)")
            assert sum("recognised in the reference" in t for t in said) == n_refs
            assert sum(t.startswith("recognised") for t in said) == n_decoded
            _assert_provenance_fits(page)
            # sorting by a header works (the only script on the page)
            page.locator("table.leaderboard th", has_text="repr kbps").click()
            first = page.locator("table.leaderboard tr.lb-row").first.get_attribute("data-codec")
            assert first in ("codec2:3200", "lyra:3200")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            context.close()
    assert messages == []
    assert outside == []
    assert shot.stat().st_size > 10_000


@pytest.fixture(scope="module")
def bilingual_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run over English and Mandarin utterances of the smoke set in which one configuration
    failed: opus:12k, added with a memory limit no Python worker fits in (as in test_pipeline's guard test)."""
    mirror = need_mirror()
    out = tmp_path_factory.mktemp("bilingual") / "run"
    # Shard 1 of 4 of the smoke set's sorted ids: two English clips and one Mandarin. The signal metrics
    # are cheap and give the table more columns than fit at 1,400 px.
    common: list[str | Path] = ["run", "--set", "smoke", "--data-dir", mirror, "--no-download", "--shard", "1/4",
                                "--metrics", "pesq_wb,pesq_nb,stoi,estoi,si_sdr,lsd,mel_distance", "--out", out]
    codecarena(*common, "--codec", "opus:6k", "--codec", "pcm:16", check=True)
    added = codecarena(*common, "--add", "--codec", "opus:12k", "--memory-limit", "20M", "--guard-poll", "0.02")
    assert added.returncode == 1, added.stdout + added.stderr
    return out


@pytest.mark.slow
def test_report_in_headless_chromium_by_language_with_a_failed_configuration(bilingual_run: Path,
                                                                             tmp_path: Path) -> None:
    _need_chromium()
    from playwright.sync_api import sync_playwright

    rows = [json.loads(line) for line in (bilingual_run / "rows.jsonl").read_text().splitlines()]
    assert {r["language"] for r in rows} == {"en", "zh"}
    assert {r["codec"] for r in rows if r["status"] == "failed"} == {"opus:12k"}
    out = report.write_report([bilingual_run], tmp_path / "report.html")
    shot = _artifacts(tmp_path) / "report-by-language.png"
    messages: list[str] = []
    outside: list[str] = []
    with sync_playwright() as pw:
        context, page = _chromium_page(pw, tmp_path / "chromium-profile", messages, outside)
        try:
            page.goto(out.as_uri(), wait_until="load")
            # The report opens per language: the group's first tables are English's and Mandarin's, shown
            # (nothing folded), then the pooled one.
            tables = page.locator("section.group table.leaderboard")
            assert tables.evaluate_all("ts => ts.map(t => t.dataset.language ?? null)") == ["en", "zh", None]
            assert all(tables.nth(i).is_visible() for i in range(3))
            assert page.locator("details.by-language").count() == 0
            headings = page.locator("section.language h4").all_inner_texts()
            assert headings == ["Language en: 2 utterances", "Language zh: 1 utterance"]
            # Rate-quality plots per language; none pooled across languages. Two English utterances and one
            # Mandarin are fewer than the bound: no bars, and the caption says why.
            for language, n in (("en", 2), ("zh", 1)):
                for metric in ("pesq_wb", "stoi"):
                    figure = page.locator(f"figure[data-metric='{metric}'][data-language='{language}']")
                    assert figure.is_visible()
                    assert figure.get_attribute("data-intervals") == "0"
                    caption = figure.locator("figcaption").inner_text()
                    assert "No bar on" in caption and "fewer than 10 utterances" in caption, caption
                    assert figure.locator("img.plot").evaluate("i => i.naturalWidth") > 100
            assert page.locator("figure[data-metric='pesq_wb']:not([data-language])").count() == 0
            cells = page.locator("table.leaderboard[data-language='en'] span.sub.ci").all_inner_texts()
            assert cells and all(t == "n=2" for t in cells), cells
            note = page.locator("table.leaderboard[data-language='en']").locator("xpath=../following-sibling::p[1]")
            assert note.inner_text().startswith("No interval under a mean on fewer than 10 utterances (n=2 here)")
            _assert_provenance_fits(page)
            pooled = page.locator("table.leaderboard:not([data-language])")
            box = pooled.locator("xpath=..")  # the scrolling div around the table
            widths = box.evaluate("d => [d.scrollWidth, d.clientWidth]")
            assert widths[0] > widths[1] + 100, widths  # the table overflows its box at this width
            box.evaluate("d => { d.scrollLeft = d.scrollWidth; }")
            assert box.evaluate("d => d.scrollLeft") > 100
            left = box.bounding_box()["x"]
            codec_cells = pooled.locator("td.codec").all()
            assert len(codec_cells) == 3  # opus:6k, pcm:16 and the failed opus:12k
            for cell in codec_cells:
                cell_box = cell.bounding_box()
                assert cell_box["x"] == pytest.approx(left, abs=1.5) and cell_box["width"] > 20
            failed = pooled.locator("tr.lb-row[data-codec='opus:12k']")
            assert "failed-row" in (failed.get_attribute("class") or "")
            colours = failed.locator("td").evaluate_all("ts => ts.map(t => getComputedStyle(t).backgroundColor)")
            ok_colours = pooled.locator("tr.lb-row[data-codec='opus:6k'] td").evaluate_all(
                "ts => ts.map(t => getComputedStyle(t).backgroundColor)")
            # report.css: failed cells #fdecea, the failed row's codec cell #f8d7d3
            assert colours[0] == "rgb(248, 215, 211)"
            assert set(colours[1:]) == {"rgb(253, 236, 234)"}, colours
            assert not set(ok_colours) & set(colours)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            context.close()
    assert messages == []
    assert outside == []
    assert shot.stat().st_size > 10_000


def _assert_provenance_fits(page: Any) -> None:
    """No provenance table is wider than the box it scrolls in, and no cell reaches past it."""
    sizes = page.locator("table.provenance").evaluate_all(
        "ts => ts.map(t => [t.getBoundingClientRect().width, t.parentElement.clientWidth, "
        "Math.max(...Array.from(t.querySelectorAll('td')).map(c => c.getBoundingClientRect().right)) - "
        "t.parentElement.getBoundingClientRect().right])")
    assert sizes and all(width <= box + 1 and overhang <= 1 for width, box, overhang in sizes), sizes


@pytest.mark.slow
def test_long_provenance_strings_wrap_in_headless_chromium(tmp_path: Path) -> None:
    _need_chromium()
    from playwright.sync_api import sync_playwright

    run_dir = make_run(tmp_path, "a", CODECS, heard=True, conversions={"utt_a": ["resampled 44100 -> 16000 Hz "
                                                                                  "(soxr VHQ)"]},
                       skipped_inputs=[{"file": "x" * 300 + ".wav", "reason": "not audio"}],
                       metric_declarations=[{"name": "asr", "outputs": ["dwer"], "versions": {"asr": LONG_VERSION},
                                             "description": "Whisper transcripts"}])
    out = report.write_report([run_dir], tmp_path / "report.html")
    messages: list[str] = []
    outside: list[str] = []
    with sync_playwright() as pw:
        context, page = _chromium_page(pw, tmp_path / "chromium-profile", messages, outside)
        try:
            page.goto(out.as_uri(), wait_until="load")
            _assert_provenance_fits(page)
            versions = page.locator("table.provenance td", has_text=LONG_VERSION[:40])
            assert versions.count() == 1 and versions.bounding_box()["height"] > 30  # wrapped onto several lines
            said = page.locator("div[data-utterance='utt_a'] div.card dl.said").all_inner_texts()
            assert any("transcript of utt_a" in t and "reference heard utt_a" in t for t in said)
            assert sum("heard utt_a" in t for t in said) == 1 + len(CODECS)
            page.screenshot(path=str(_artifacts(tmp_path) / "report-provenance.png"), full_page=True)
        finally:
            context.close()
    assert messages == [] and outside == []


def test_a_suspect_value_is_counted_kept_out_of_the_mean_and_shown(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    a = make_run(tmp_path, "a", CODECS, suspect=("opus:6k", "utt_b"))
    summary = json.loads((a / "summary.json").read_text())
    opus = next(c for c in summary["codecs"] if c["codec"] == "opus:6k")["metrics"]["pesq_wb"]
    rows = [json.loads(line) for line in (a / "rows.jsonl").read_text().splitlines()]
    ok = [r["metrics"]["pesq_wb"]["value"] for r in rows if r["codec"] == "opus:6k" and r["utterance"] != "utt_b"]
    assert (opus["n_ok"], opus["n_suspect"], opus["n_failed"]) == (2, 1, 0)
    assert opus["mean"] == pytest.approx(sum(ok) / 2) and opus["mean_with_suspect"] == pytest.approx((sum(ok) + 1.1) / 3)
    board = lb.compute([a])
    assert_matches_summary(board, 0, summary)
    (problem,) = [p for p in board.metric_problems if p["status"] == "suspect"]
    assert (problem["codec"], problem["output"], problem["error"]) == ("opus:6k", "pesq_wb", SUSPECT_REASON)
    _fake_compare(monkeypatch)
    page = report.write_report([a], tmp_path / "out" / "report.html").read_text()
    assert "1 suspect</span>" in page and SUSPECT_REASON in page and "suspect (kept out of the mean)" in page
    assert "1 suspect" in (tmp_path / "out" / "report.md").read_text()


def test_an_error_rate_shows_its_corpus_rate_beside_its_mean() -> None:
    """Issue 30: the corpus rate (total errors over total reference tokens) beside the mean of the
    per-utterance rates, on the terminal, report.md and HTML surfaces; other outputs show none."""
    from codecarena.results.formatting import metric_ci_cell, metric_ci_text

    stats = {"mean": 0.31, "ci95": None, "ci_unit": "utterance", "ci_units": 4, "n_ok": 4, "n_failed": 0,
             "n_not_applicable": 0, "n_suspect": 0, "mean_with_suspect": 0.31, "failure_reasons": {},
             "corpus_rate": 31 / 104, "corpus_errors": 31, "corpus_tokens": 104}
    assert "corpus 0.298 (31/104)" in metric_ci_cell(stats).splitlines()
    assert "; corpus 0.298 (31/104)" in metric_ci_text(stats)
    plain = {k: v for k, v in stats.items() if not k.startswith("corpus")}
    assert "corpus" not in metric_ci_cell(plain) + metric_ci_text(plain)
