"""`codecarena compare`: paired statistics between runs, byte identity, provenance, refusals."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from codecarena.datasets import smoke_manifest
from codecarena.commands.compare import add_parser, run
from codecarena.results.bootstrap import bootstrap_ci, bootstrap_means, percentile_interval
from codecarena.results.compare import CompareError, compare_runs, parse_pairs
from codecarena.results.compare_stats import IDENTICAL
from codecarena.results.compare_text import render_text
from codecarena.results.schema import parse_row
from codecarena.files import read_json, write_json
from codecarena.results.run import Run
from codecarena.results.store import rewrite_rows
from codecarena.rundir import RunDir

DATA = Path(os.environ.get("CODECARENA_DATA", "/work/shared/data/speech"))
CLIPS = ("en_ljspeech_LJ002-0020.wav", "en_ljspeech_LJ002-0035.wav")


# ------------------------------------------------------------------------------ synthetic runs


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_row(codec: str, utt: str, values: dict[str, float | None], *, decoded: str = "same",
             payload: str = "same", weights: str = "none", sample_rate: int = 16000, status: str = "ok",
             error: str = "", ref_sha: str | None = None, language: str = "en") -> dict[str, Any]:
    family, _, config = codec.partition(":")
    metrics = {name: ({"value": v, "status": "ok", "error": None, "details": {}} if v is not None else
                      {"value": None, "status": "failed", "error": "synthetic failure", "details": {}})
               for name, v in values.items()}
    row = {
        "version": 1, "codec": codec, "family": family, "config": {"config": config.split(",")[0]},
        "registry": family, "checkpoint": {}, "runtime": {"executable": "/py", "python": "3.11.7", "numpy": "2.4.6"},
        "weights": weights, "variant": "", "utterance": utt, "language": language, "sample_rate": sample_rate,
        "num_samples": 16000, "duration_s": 1.0, "reference": f"/ref/{utt}.wav",
        "reference_sha256": ref_sha or sha(utt), "reference_resampled_from": None,
        "payload": f"payloads/{utt}.ccap", "payload_bytes": 100, "payload_sha256": sha(f"{payload}:{codec}:{utt}"),
        "representation_bits": 800, "representation_bps": 800.0, "payload_bps": 800.0,
        "decoded": f"decoded/{utt}.wav", "decoded_sha256": sha(f"{decoded}:{utt}"),
        "replay_sha256": sha(f"{decoded}:{utt}"), "replay_identical": True, "decoded_samples": 16000,
        "trimmed_samples": 0, "padded_samples": 0, "length_tolerance": 0, "finite": True, "silent": False,
        "clipped_samples": 0, "checks_passed": True, "codec_facts": {}, "metrics": metrics, "model": {},
        "stages": [], "status": status, "error": error,
    }
    parse_row(row)  # the real schema, strictly
    return row


def write_run(folder: Path, rows: list[dict[str, Any]], utterances: list[tuple[str, str]] | None = None,
              set_name: str = "input:synthetic", manifest: str | None = None, arena_rate: int = 16000,
              packages: list[str] | None = None) -> Path:
    folder.mkdir(parents=True)
    if utterances is None:
        utterances = [(u, sha(u)) for u in dict.fromkeys(r["utterance"] for r in rows)]
    codecs = list(dict.fromkeys(r["codec"] for r in rows))
    info = {
        "version": 1, "codecarena": "0.1.0", "git": {"revision": "0" * 40, "dirty": False},
        "command": ["codecarena", "run"], "created_at": "2026-01-01T00:00:00+00:00", "finished": True,
        "environment": {"python": "3.11.7", "executable": "/py", "os": "Linux", "cpu": "test cpu", "cpu_count": 2,
                        "memory_bytes": 1, "packages": {"numpy": "2.4.6"}},
        "metrics": [],
        "runtimes": {c.partition(":")[0]: {"registry": c.partition(":")[0], "environment": "main",
                                           "interpreter": "/py", "packages": packages or ["numpy==2.4.6"],
                                           "packages_sha256": sha(json.dumps(packages or ["numpy==2.4.6"]))}
                     for c in codecs},
        "plan": {"set": set_name, "manifest_sha256": manifest or sha(json.dumps(utterances)),
                 "utterances": [list(u) for u in utterances], "arena_rate": arena_rate,
                 "codecs": [{"codec": c, "config": {}} for c in codecs], "metrics": [], "weights": "real",
                 "variant": {"name": ""}, "warm_repeats": 2, "mode": "cold", "cold_sample": None, "replay_sample": None,
                 "runtimes": [], "asr_models": []},
        "plan_sha256": "d" * 64, "execution": {"executor": "local", "workers": 1},
    }
    write_json(folder / "run.json", info)
    (folder / "rows.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return folder


def paired_runs(tmp_path: Path, a_values: list[float], b_values: list[float], metric: str = "pesq_wb",
                codec: str = "opus:6k", utterances: list[tuple[str, str]] | None = None,
                set_name: str = "input:synthetic") -> tuple[Path, Path]:
    ids = [u for u, _ in utterances] if utterances else [f"utt{i:03d}" for i in range(len(a_values))]
    refs = dict(utterances) if utterances else {}
    rows_a = [make_row(codec, u, {metric: v}, decoded="a", ref_sha=refs.get(u)) for u, v in zip(ids, a_values)]
    rows_b = [make_row(codec, u, {metric: v}, decoded="b", ref_sha=refs.get(u)) for u, v in zip(ids, b_values)]
    return (write_run(tmp_path / "A", rows_a, utterances, set_name=set_name),
            write_run(tmp_path / "B", rows_b, utterances, set_name=set_name))


def metric_of(result: dict[str, Any], name: str, index: int = 0) -> dict[str, Any]:
    return next(m for m in result["comparisons"][index]["metrics"] if m["metric"] == name)


def cli_args(*argv: str | Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="codecarena")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["compare", *map(str, argv)])


# ------------------------------------------------------------------------------ (3) known answers


def test_constant_shift_gives_a_degenerate_interval_at_the_shift(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    a = rng.uniform(1.0, 4.5, size=40)
    b = a + 0.25
    low, high = bootstrap_ci(b - a, resamples=5000, seed=3)
    assert low == pytest.approx(0.25, abs=1e-12) and high == pytest.approx(0.25, abs=1e-12)

    run_a, run_b = paired_runs(tmp_path, list(a), list(b))
    m = metric_of(compare_runs(run_a, run_b, resamples=5000), "pesq_wb")
    assert m["n"] == 40 and m["units"] == 40
    assert m["mean_diff"] == pytest.approx(0.25, abs=1e-12)
    assert m["ci_low"] == pytest.approx(0.25, abs=1e-12) and m["ci_high"] == pytest.approx(0.25, abs=1e-12)
    assert m["mean_a"] == pytest.approx(a.mean()) and m["mean_b"] == pytest.approx(b.mean())
    assert m["includes_zero"] is False and "higher" in m["verdict"]


def test_three_values_match_the_enumerated_27_resamples() -> None:
    diffs = [0.0, 1.0, 2.0]
    # Every one of the 3^3 equally likely resamples, enumerated: the exact bootstrap distribution.
    exact = sorted(sum(c) / 3 for c in itertools.product(diffs, repeat=3))
    assert len(exact) == 27
    support = sorted(set(exact))
    means = bootstrap_means(diffs, resamples=20000, seed=11)
    for value in support:
        expected = exact.count(value) / 27
        observed = np.mean(np.isclose(means, value))
        assert observed == pytest.approx(expected, abs=0.01), value
    assert np.all(np.isclose(means[:, None], np.array(support)[None, :]).any(axis=1))

    def exact_quantile(q: float) -> float:  # inverse of the exact CDF
        return exact[int(np.ceil(q * 27)) - 1]

    # 50% interval: quartiles of the exact distribution (CDF 4/27 < 0.25 <= 10/27; 17/27 < 0.75 <= 23/27).
    low, high = percentile_interval(means, level=0.5)
    assert (low, high) == (pytest.approx(exact_quantile(0.25)), pytest.approx(exact_quantile(0.75)))
    assert (low, high) == (pytest.approx(2 / 3), pytest.approx(4 / 3))
    # 95%: P(mean 0) = P(mean 2) = 1/27 > 0.025, so the interval is the whole support.
    assert percentile_interval(means, 0.95) == (pytest.approx(0.0), pytest.approx(2.0))


def test_large_sample_interval_matches_the_normal_approximation() -> None:
    rng = np.random.default_rng(5)
    diffs = rng.normal(0.3, 1.0, size=2000)
    low, high = bootstrap_ci(diffs, resamples=10000, seed=1)
    se = diffs.std(ddof=1) / np.sqrt(diffs.size)
    assert (low + high) / 2 == pytest.approx(diffs.mean(), abs=0.1 * se)
    assert (high - low) == pytest.approx(2 * 1.959964 * se, rel=0.05)


# ------------------------------------------------------------------------------ (4) determinism


def test_same_seed_same_result_and_row_order_does_not_matter(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    a = rng.uniform(1, 4, size=30)
    b = a + rng.normal(0.05, 0.3, size=30)
    run_a, run_b = paired_runs(tmp_path, list(a), list(b))
    first = compare_runs(run_a, run_b, resamples=2000, seed=4)
    assert compare_runs(run_a, run_b, resamples=2000, seed=4) == first
    lines = (run_b / "rows.jsonl").read_text().splitlines(keepends=True)
    random.Random(0).shuffle(lines)
    (run_b / "rows.jsonl").write_text("".join(lines))
    shuffled = compare_runs(run_a, run_b, resamples=2000, seed=4)
    assert metric_of(shuffled, "pesq_wb") == metric_of(first, "pesq_wb")
    other = metric_of(compare_runs(run_a, run_b, resamples=2000, seed=5), "pesq_wb")
    m = metric_of(first, "pesq_wb")
    assert other["mean_diff"] == m["mean_diff"]
    assert (other["ci_low"], other["ci_high"]) != (m["ci_low"], m["ci_high"])
    assert np.array_equal(bootstrap_means(b - a, seed=9, resamples=3000),
                          bootstrap_means(b - a, seed=9, resamples=3000))


# ------------------------------------------------------------------------------ (5) refusals and overrides


def test_refuses_runs_of_different_sets(tmp_path: Path) -> None:
    rows_a = [make_row("opus:6k", u, {"pesq_wb": 3.0}) for u in ("u1", "u2", "u3")]
    rows_b = [make_row("opus:6k", u, {"pesq_wb": 3.1}, decoded="b") for u in ("u1", "u2", "u4")]
    # u2 has the same id in B but different audio: it must never be paired.
    utts_b = [("u1", sha("u1")), ("u2", sha("other audio")), ("u4", sha("u4"))]
    rows_b[1] = make_row("opus:6k", "u2", {"pesq_wb": 3.1}, decoded="b", ref_sha=sha("other audio"))
    run_a = write_run(tmp_path / "A", rows_a)
    run_b = write_run(tmp_path / "B", rows_b, utts_b)
    with pytest.raises(CompareError, match="different sets"):
        compare_runs(run_a, run_b)
    result = compare_runs(run_a, run_b, allow_different_sets=True)
    assert result["pairing_overridden"] is True
    assert "1 with the same id but different audio" in result["overrides"][0]
    assert result["set"]["paired_utterances"] == 1 and result["comparisons"][0]["pairs"] == 1  # only u1
    assert "PAIRING OVERRIDDEN" in render_text(result)
    # Same plan, but a row whose reference audio differs: never paired, and said so.
    rows_c = [make_row("opus:6k", u, {"pesq_wb": 3.2}, decoded="c", ref_sha=sha("x") if u == "u3" else None)
              for u in ("u1", "u2", "u3")]
    result = compare_runs(run_a, write_run(tmp_path / "C", rows_c, [(u, sha(u)) for u in ("u1", "u2", "u3")]))
    assert result["comparisons"][0]["pairs"] == 2
    assert any("reference sha256 differ: u3" in n for n in result["notes"])


def test_refuses_different_weights_unless_the_pair_is_named(tmp_path: Path) -> None:
    rows_a = [make_row("dac:16khz", u, {"pesq_wb": 3.0}, weights="real") for u in ("u1", "u2")]
    rows_b = [make_row("dac:16khz", u, {"pesq_wb": 2.0}, weights="synthetic", decoded="b") for u in ("u1", "u2")]
    run_a, run_b = write_run(tmp_path / "A", rows_a), write_run(tmp_path / "B", rows_b)
    with pytest.raises(CompareError, match="weights kinds differ"):
        compare_runs(run_a, run_b)
    result = compare_runs(run_a, run_b, pair="dac:16khz=dac:16khz")
    assert result["pairing_overridden"] and "weights kinds differ" in result["overrides"][0]
    diffs = {d["field"] for d in result["comparisons"][0]["provenance"]["differences"]}
    assert "weights" in diffs


def test_refuses_different_sample_rates_and_unknown_metrics(tmp_path: Path) -> None:
    rows = [make_row("opus:6k", u, {"pesq_wb": 3.0}) for u in ("u1", "u2")]
    run_a = write_run(tmp_path / "A", rows)
    run_b = write_run(tmp_path / "B", rows, arena_rate=8000)
    with pytest.raises(CompareError, match="different sample rates"):
        compare_runs(run_a, run_b)
    with pytest.raises(CompareError, match="'stoi' was not computed"):
        compare_runs(run_a, run_a, metrics=["stoi"])
    other = write_run(tmp_path / "C", [make_row("codec2:3200", u, {"pesq_wb": 3.0}) for u in ("u1", "u2")])
    with pytest.raises(CompareError, match="no codec configuration is in both runs"):
        compare_runs(run_a, other)
    with pytest.raises(CompareError, match="--pair-codecs 'opus:6k=pcm:16' names no codec"):
        compare_runs(run_a, other, pair="opus:6k=pcm:16")
    with pytest.raises(CompareError):
        compare_runs(run_a, tmp_path / "missing")


def test_pair_codecs_splits_on_the_one_equals_sign_that_names_two_codecs(tmp_path: Path) -> None:
    assert parse_pairs("opus:6k,vbr=off=opus:6k,vbr=on", ["opus:6k,vbr=off"], ["opus:6k,vbr=on"]) == [
        ("opus:6k,vbr=off", "opus:6k,vbr=on")]
    # Non-canonical spellings are canonicalised through the spec parser.
    assert parse_pairs("opus:6000=opus:12000", ["opus:6k"], ["opus:12k"]) == [("opus:6k", "opus:12k")]
    # A variant comparison inside one run: codec A vs codec B on the same utterances.
    rows = ([make_row("opus:6k", f"u{i}", {"pesq_wb": 2.0 + 0.1 * i}, decoded="x") for i in range(5)]
            + [make_row("opus:12k", f"u{i}", {"pesq_wb": 3.0 + 0.1 * i}, decoded="y") for i in range(5)])
    folder = write_run(tmp_path / "R", rows)
    result = compare_runs(folder, folder, pair="opus:6k=opus:12k", resamples=500)
    comp = result["comparisons"][0]
    assert (comp["codec_a"], comp["codec_b"], comp["pairing"]) == ("opus:6k", "opus:12k", "named by --pair-codecs")
    assert metric_of(result, "pesq_wb")["mean_diff"] == pytest.approx(1.0)
    assert {d["field"] for d in comp["provenance"]["differences"]} >= {"codec", "config"}


def test_dropped_pairs_are_counted_with_reasons(tmp_path: Path) -> None:
    rows_a = [make_row("opus:6k", "u1", {"pesq_wb": 3.0, "stoi": 0.9}),
              make_row("opus:6k", "u2", {"pesq_wb": None, "stoi": 0.8}),
              make_row("opus:6k", "u3", {"pesq_wb": 3.2, "stoi": 0.85}),
              make_row("opus:6k", "u4", {"pesq_wb": 3.3, "stoi": 0.85})]
    rows_b = [make_row("opus:6k", "u1", {"pesq_wb": 2.0, "stoi": 0.9}, decoded="b"),
              make_row("opus:6k", "u2", {"pesq_wb": 2.1, "stoi": 0.7}, decoded="b"),
              make_row("opus:6k", "u3", {"pesq_wb": None, "stoi": None}, decoded="b", status="failed",
                       error="decode: worker killed"),
              make_row("opus:6k", "u4", {"pesq_wb": 2.2, "stoi": 0.8}, decoded="b")]
    result = compare_runs(write_run(tmp_path / "A", rows_a), write_run(tmp_path / "B", rows_b), resamples=500,
                          few_units=True)
    pesq = metric_of(result, "pesq_wb")
    assert pesq["n"] == 2 and pesq["pairs"] == 4
    assert pesq["dropped"] == {"A: failed (synthetic failure)": 1, "B: row failed (decode: worker killed)": 1}
    assert pesq["mean_diff"] == pytest.approx(((2.0 - 3.0) + (2.2 - 3.3)) / 2)
    assert metric_of(result, "stoi")["n"] == 3
    text = render_text(result)
    # The failed row drops a pair from every metric: said once, not once per metric.
    assert text.count("B: row failed (decode: worker killed)") == 1
    assert "every metric: 1 pair dropped: B: row failed (decode: worker killed)" in text
    assert "pesq_wb: 1 pair dropped: A: failed (synthetic failure)" in text
    # The verdict says which side is better, by the metric's declared direction.
    assert pesq["verdict"] == "B worse than A (higher is better): interval excludes 0"


def test_reference_side_outputs_are_not_compared(tmp_path: Path) -> None:
    rows_a = [make_row("opus:6k", u, {"wer": 0.2, "ref_wer": 0.1}) for u in ("u1", "u2", "u3")]
    rows_b = [make_row("opus:6k", u, {"wer": 0.1 + i / 100, "ref_wer": 0.1}, decoded="b")
              for i, u in enumerate(("u1", "u2", "u3"))]
    result = compare_runs(write_run(tmp_path / "A", rows_a), write_run(tmp_path / "B", rows_b), resamples=500,
                          few_units=True)
    assert [m["metric"] for m in result["comparisons"][0]["metrics"]] == ["wer"]
    assert metric_of(result, "wer")["verdict"] == "B better than A (lower is better): interval excludes 0"
    # Asked for by name, it is compared.
    named = compare_runs(tmp_path / "A", tmp_path / "B", metrics=["ref_wer"], resamples=500)
    assert [m["metric"] for m in named["comparisons"][0]["metrics"]] == ["ref_wer"]


def test_identity_short_circuits_and_flags_disagreeing_values(tmp_path: Path) -> None:
    rows_a = [make_row("opus:6k", u, {"pesq_wb": 3.0, "stoi": 0.9}) for u in ("u1", "u2", "u3")]
    rows_b = [make_row("opus:6k", u, {"pesq_wb": 3.0, "stoi": 0.9 if u != "u3" else 0.91}) for u in ("u1", "u2", "u3")]
    result = compare_runs(write_run(tmp_path / "A", rows_a), write_run(tmp_path / "B", rows_b))
    comp = result["comparisons"][0]
    assert comp["identity"] == {"pairs": 3, "payload_identical": 3, "decoded_identical": 3,
                                "all_decoded_identical": True}
    pesq, stoi = metric_of(result, "pesq_wb"), metric_of(result, "stoi")
    assert pesq["verdict"] == IDENTICAL and pesq["ci_low"] is None and pesq["mean_diff"] is None
    assert stoi["values_disagree"] == 1 and "the metric itself differs" in stoi["verdict"]
    # One pair with different audio: the statistics run again.
    rows_b[0] = make_row("opus:6k", "u1", {"pesq_wb": 2.9, "stoi": 0.9}, decoded="b")
    result = compare_runs(write_run(tmp_path / "B2", rows_b), write_run(tmp_path / "A2", rows_a), few_units=True)
    assert result["comparisons"][0]["identity"]["decoded_identical"] == 2
    assert metric_of(result, "pesq_wb")["ci_low"] is not None


def test_provenance_lists_every_difference(tmp_path: Path) -> None:
    rows = [make_row("opus:6k", u, {"pesq_wb": 3.0}) for u in ("u1", "u2")]
    run_a = write_run(tmp_path / "A", rows, packages=["numpy==2.4.6", "opuslib==1.0", "torch==2.1"])
    run_b = write_run(tmp_path / "B", rows, packages=["numpy==2.4.7", "opuslib==1.0", "scipy==1.11"])
    info = read_json(run_b / "run.json")
    info["git"]["revision"] = "1" * 40
    info["environment"]["cpu"] = "other cpu"
    write_json(run_b / "run.json", info)
    result = compare_runs(run_a, run_b)
    run_fields = {d["field"] for d in result["provenance"]["differences"]}
    assert run_fields == {"git_revision", "cpu"}
    codec_diffs = {d["field"]: (d["a"], d["b"]) for d in result["comparisons"][0]["provenance"]["differences"]}
    assert codec_diffs == {"runtime_packages_sha256": codec_diffs["runtime_packages_sha256"],
                           "runtime package numpy": ("2.4.6", "2.4.7"),
                           "runtime package scipy": (None, "1.11"),
                           "runtime package torch": ("2.1", None)}
    text = render_text(result)
    assert "run provenance: 2 differences" in text and "runtime package torch" in text


# ------------------------------------------------------------------------------ few units, languages


def test_an_interval_on_fewer_units_than_the_bound_is_flagged_in_its_row(tmp_path: Path) -> None:
    # Asked for with few_units (--few-units); without it there is none (test_surfaces.py, issue 38).
    few = compare_runs(*paired_runs(tmp_path / "few", [3.0, 3.2, 3.1], [2.5, 2.9, 2.4]), resamples=500,
                       few_units=True)
    m = metric_of(few, "pesq_wb")
    warning = ("only 3 utterances, fewer than 10: a percentile bootstrap interval on so few is too narrow "
               "(it undercovers): read it as descriptive")
    assert m["units"] == 3 and m["ci_low"] is not None and m["warning"] == warning
    text = render_text(few)
    row = next(line for line in text.splitlines() if line.startswith("  pesq_wb"))
    assert f"[{m['ci_low']:+.4f}, {m['ci_high']:+.4f}]" in row and "3 (< 10)" in row
    assert f"warning (pesq_wb): {warning}" in text
    # At the bound (the same for every surface) the interval stands unflagged.
    rng = np.random.default_rng(3)
    a = rng.uniform(2, 4, size=10)
    enough = compare_runs(*paired_runs(tmp_path / "enough", list(a), list(a - 0.3 + rng.normal(0, 0.1, 10))),
                          resamples=500)
    m = metric_of(enough, "pesq_wb")
    assert m["units"] == 10 and m["warning"] is None
    assert "warning" not in render_text(enough) and "(< 10)" not in render_text(enough)


def test_compare_splits_by_language_each_language_first(tmp_path: Path) -> None:
    language = {"u1": "en", "u2": "en", "u3": "en", "u4": "zh", "u5": "zh", "u6": ""}
    a = {u: 3.0 + i / 10 for i, u in enumerate(language)}
    b = {"u1": 2.9, "u2": 3.0, "u3": 3.1, "u4": 1.0, "u5": 1.2, "u6": 3.4}
    rows_a = [make_row("opus:6k", u, {"pesq_wb": a[u]}, decoded="a", language=language[u]) for u in language]
    rows_b = [make_row("opus:6k", u, {"pesq_wb": b[u]}, decoded="b", language=language[u]) for u in language]
    result = compare_runs(write_run(tmp_path / "A", rows_a), write_run(tmp_path / "B", rows_b), resamples=500)
    comp = result["comparisons"][0]
    assert [(p["language"], p["pairs"]) for p in comp["by_language"]] == [("", 1), ("en", 3), ("zh", 2)]
    for part in comp["by_language"]:
        (m,) = part["metrics"]
        utts = [u for u in language if language[u] == part["language"]]
        assert m["mean_diff"] == pytest.approx(np.mean([b[u] - a[u] for u in utts]))
        assert m["n"] == len(utts)
    assert metric_of(result, "pesq_wb")["mean_diff"] == pytest.approx(np.mean([b[u] - a[u] for u in language]))
    text = render_text(result)
    order = ["-- language (no language declared): 1 pair", "-- language en: 3 pairs", "-- language zh: 2 pairs",
             "-- all 3 languages pooled: 6 pairs"]
    assert [text.index(line) for line in order] == sorted(text.index(line) for line in order)
    assert "-- language :" not in text
    # One language: the pooled table alone.
    one = compare_runs(*paired_runs(tmp_path / "one", [3.0, 3.1], [2.0, 2.2]), resamples=100)
    assert one["comparisons"][0]["by_language"] == [] and "-- " not in render_text(one)


# ------------------------------------------------------------------------------ content metrics: suspect values
# and languages (the summary and the leaderboard too: they share the rules with compare)

CAT = "THE CAT SAT DOWN"
LOOP = "Ring-link-link-link-link-link-link-link-link"  # against RING THE BELL TWICE: WER 2.0, a loop


def asr_row(codec: str, utt: str, language: str, hypothesis: str, transcript: str, decoded: str) -> dict[str, Any]:
    """A row whose ASR records the real metric code made (the reference audio heard as said)."""
    from codecarena.metrics.content import asr_records

    row = make_row(codec, utt, {"pesq_wb": 3.0}, decoded=decoded)
    row["language"] = language
    row["metrics"].update(asr_records(hypothesis, transcript, language, transcript, (), {"model": "test"}).records)
    parse_row(row)
    return row


def test_suspect_asr_values_are_counted_apart_and_left_out_of_means_and_verdicts(tmp_path: Path) -> None:
    """A recogniser loop in one of B's utterances: B's mean WER is that of the other three, the
    loop is counted apart, and compare drops its pair with the reason (as for PESQ's suspect values)."""
    from codecarena.results import leaderboard
    from codecarena.results.summary import summarize

    said = {"u1": CAT, "u2": CAT, "u3": CAT, "u4": "RING THE BELL TWICE"}
    rows_a = [asr_row("opus:6k", u, "en", t, t, "a") for u, t in said.items()]
    rows_b = [asr_row("opus:6k", u, "en", "the dog sat down", t, "b") for u, t in said.items() if u != "u4"]
    rows_b.append(asr_row("opus:6k", "u4", "en", LOOP, said["u4"], "b"))
    assert rows_b[-1]["metrics"]["wer"]["status"] == "suspect"
    run_a, run_b = write_run(tmp_path / "A", rows_a), write_run(tmp_path / "B", rows_b)

    wer = summarize(Run.open(run_b).rows)["codecs"][0]["metrics"]["wer"]
    assert (wer["mean"], wer["n_ok"], wer["n_suspect"]) == (0.25, 3, 1)
    assert wer["mean_with_suspect"] == (0.25 * 3 + 2.0) / 4
    # The corpus rate beside the mean: 3 errors in 12 reference words of the ok values.
    assert (wer["corpus_rate"], wer["corpus_errors"], wer["corpus_tokens"]) == (0.25, 3, 12)
    older = Run.open(run_b).rows
    del older[0].metrics["wer"]["details"]["errors"]  # as a row scored before the counts were recorded
    assert summarize(older)["codecs"][0]["metrics"]["wer"]["corpus_rate"] is None
    (entry,) = leaderboard.compute([run_b]).entries
    assert {k: entry["metrics"]["wer"][k] for k in ("mean", "n_suspect", "corpus_rate", "corpus_tokens")} == {
        "mean": 0.25, "n_suspect": 1, "corpus_rate": 0.25, "corpus_tokens": 12}

    verdict = metric_of(compare_runs(run_a, run_b, resamples=500), "wer")
    assert (verdict["n"], verdict["mean_a"], verdict["mean_b"]) == (3, 0.0, 0.25)
    (dropped,) = verdict["dropped"]
    assert dropped.startswith("B: suspect (the ASR of the decoded audio repeats 'link' 8 times in a row")


def test_error_rates_are_never_pooled_across_languages(tmp_path: Path) -> None:
    """English WERs and Mandarin CERs count different things: the summary, the leaderboard and compare
    give error rates per language only, and Mandarin no WER at all."""
    from codecarena.results import leaderboard
    from codecarena.results.summary import summarize

    def rows(decoded: str, zh_heard: str) -> list[dict[str, Any]]:
        return [asr_row("opus:6k", "e1", "en", "the dog sat down", CAT, decoded),
                asr_row("opus:6k", "e2", "en", "the cat sat", CAT, decoded),
                asr_row("opus:6k", "z1", "zh", zh_heard, "今天天气很好", decoded),
                asr_row("opus:6k", "z2", "zh", "六月一日", "六月一日", decoded)]

    run_a, run_b = write_run(tmp_path / "A", rows("a", "今天天气很好")), write_run(tmp_path / "B", rows("b", "今天天气好"))
    error_rates = {"wer", "cer", "ref_wer", "ref_cer", "dwer", "dcer"}
    codec = summarize(Run.open(run_b).rows)["codecs"][0]
    assert not error_rates & set(codec["metrics"]) and {"pesq_wb", "critical_survived"} <= set(codec["metrics"])
    assert error_rates <= set(codec["by_language"]["en"]["metrics"])
    zh = codec["by_language"]["zh"]["metrics"]
    assert set(zh) & error_rates == {"cer", "ref_cer", "dcer"}
    # 今天天气好 for 今天天气很好: one deletion in 10 characters said (6 + 4).
    assert (zh["cer"]["corpus_errors"], zh["cer"]["corpus_tokens"], zh["cer"]["corpus_rate"]) == (1, 10, 0.1)
    assert zh["cer"]["mean"] == (1 / 6 + 0) / 2
    # A summary written in version 2 (before this rule) still re-derives as it was written.
    assert "wer" in summarize(Run.open(run_b).rows, 2)["codecs"][0]["metrics"]

    board = leaderboard.compute([run_b], by="language")
    by_language = {e["language"]: e["metrics"] for e in board.entries}
    assert not error_rates & set(by_language[None])
    assert error_rates <= set(by_language["en"]) and set(by_language["zh"]) & error_rates == {"cer", "ref_cer", "dcer"}
    assert by_language["zh"]["cer"]["corpus_rate"] == 0.1 and by_language["en"]["wer"]["corpus_rate"] == 2 / 8

    result = compare_runs(run_a, run_b, resamples=500)
    assert {m["metric"] for m in result["comparisons"][0]["metrics"]} == {"pesq_wb", "critical_survived"}
    (note,) = [n for n in result["notes"] if "not compared over the languages 'en', 'zh'" in n]
    assert set(note.split(": ")[1].split(" not compared")[0].split(", ")) == {"wer", "cer", "dwer", "dcer"}
    with pytest.raises(CompareError, match="dcer not compared over the languages 'en', 'zh'"):
        compare_runs(run_a, run_b, metrics=["dcer"], resamples=500)


def test_the_audit_checks_an_error_rate_against_its_counts() -> None:
    from codecarena.results.audit_rows import error_count_problems

    row = parse_row(asr_row("opus:6k", "u1", "en", "the dog sat down", CAT, "a"))
    assert error_count_problems(row, "opus:6k u1") == []
    row.metrics["wer"]["value"] = 0.1
    assert error_count_problems(row, "opus:6k u1") == [
        "opus:6k u1: wer is 0.1, but its counts say otherwise (errors 1, reference_tokens 4)"]


# ------------------------------------------------------------------------------ (6) speaker blocks


def test_speaker_bootstrap_moves_whole_speakers() -> None:
    # Speaker x: diffs 1 and -1; speaker y: 10. Block resamples can only be (x,x), (x,y), (y,y).
    means = bootstrap_means([1.0, -1.0, 10.0], groups=["x", "x", "y"], resamples=5000, seed=0)
    assert set(np.round(means, 12)) == {0.0, round(10 / 3, 12), 10.0}
    per_utterance = bootstrap_means([1.0, -1.0, 10.0], resamples=5000, seed=0)
    assert len(set(np.round(per_utterance, 12))) > 3


def test_by_speaker_uses_the_smoke_speakers_and_widens_the_interval(tmp_path: Path) -> None:
    entries = smoke_manifest()["utterances"]
    utterances = [(e["id"], e["sha256"]) for e in entries]
    speakers = sorted({e["speaker"] for e in entries})
    # Every utterance of a speaker has the same difference: the speaker, not the utterance, is the unit.
    shift = {s: 0.4 * i - 0.5 for i, s in enumerate(speakers)}
    a = [3.0 + 0.01 * i for i in range(len(entries))]
    b = [x + shift[e["speaker"]] for x, e in zip(a, entries)]
    run_a, run_b = paired_runs(tmp_path, a, b, utterances=utterances, set_name="smoke")
    by_utt = metric_of(compare_runs(run_a, run_b, by="utterance", resamples=4000), "pesq_wb")
    by_spk_result = compare_runs(run_a, run_b, by="speaker", resamples=4000, few_units=True)  # 5 speakers
    by_spk = metric_of(by_spk_result, "pesq_wb")
    assert by_utt["units"] == len(entries) and by_spk["units"] == len(speakers) == 5
    assert by_spk["mean_diff"] == pytest.approx(by_utt["mean_diff"])
    assert by_spk["ci_width"] > 1.2 * by_utt["ci_width"]
    assert any("smoke manifest" in n for n in by_spk_result["notes"])


def test_by_speaker_without_speaker_metadata_says_so(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    a = rng.uniform(1, 4, size=12)
    run_a, run_b = paired_runs(tmp_path, list(a), list(a + rng.normal(0, 0.2, size=12)))
    by_spk = compare_runs(run_a, run_b, by="speaker", resamples=1000)
    assert any("each utterance is treated as its own speaker" in n for n in by_spk["notes"])
    by_utt = compare_runs(run_a, run_b, by="utterance", resamples=1000)
    assert metric_of(by_spk, "pesq_wb")["ci_low"] == metric_of(by_utt, "pesq_wb")["ci_low"]


# ------------------------------------------------------------------------------ (1), (2) real runs


def make_run(input_dir: Path, out: Path) -> Path:
    result = subprocess.run([sys.executable, "-m", "codecarena", "run", "--input", str(input_dir), "--codec",
                             "codec2:3200", "--metrics", "pesq_wb,stoi", "--out", str(out)],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    missing = [c for c in CLIPS if not (DATA / c).is_file()]
    if missing:
        pytest.skip(f"speech clips {missing} not found in {DATA}; set CODECARENA_DATA")
    root = tmp_path_factory.mktemp("compare")
    clips = root / "clips"
    clips.mkdir()
    for name in CLIPS:
        shutil.copy(DATA / name, clips / name)
    return make_run(clips, root / "a"), make_run(clips, root / "b")


def add_noise(run_dir: Path, out: Path, snr_db: float = 15.0, seed: int = 0) -> Path:
    """A copy of the run whose decoded audio got seeded white noise, rescored honestly."""
    import soundfile as sf

    from codecarena.metrics.signal import score_signal
    from codecarena.results.summary import summarize

    shutil.copytree(run_dir, out)
    rng = np.random.default_rng(seed)
    rows = Run.open(out).rows
    new_rows = []
    for row in rows:
        path = out / row.decoded
        decoded, rate = sf.read(path, dtype="float64")
        noise = rng.standard_normal(decoded.size) * np.sqrt(np.mean(decoded ** 2)) * 10 ** (-snr_db / 20)
        sf.write(path, np.clip(decoded + noise, -1.0, 32767 / 32768), rate, subtype="PCM_16")
        noisy, _ = sf.read(path, dtype="float64")  # score what is on disk
        reference, _ = sf.read(out / row.reference, dtype="float64")
        metrics = dict(row.metrics)
        metrics.update(score_signal(reference, noisy, {"pesq_wb", "stoi"}))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        # The payload still decodes to the clean audio: the replay no longer matches the stored wav.
        data = {**row.to_dict(), "metrics": metrics, "decoded_sha256": digest, "replay_identical": False}
        new_rows.append(parse_row(data))
    rewrite_rows(RunDir(out), new_rows)
    write_json(out / "summary.json", summarize(new_rows))
    return out


@pytest.mark.slow
def test_two_runs_of_one_configuration_are_byte_identical(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    run_a, run_b = two_runs
    result = compare_runs(run_a, run_b)
    comp = result["comparisons"][0]
    assert comp["codec_a"] == comp["codec_b"] == "codec2:3200"
    assert comp["identity"] == {"pairs": 2, "payload_identical": 2, "decoded_identical": 2,
                                "all_decoded_identical": True}
    assert [m["metric"] for m in comp["metrics"]] == ["pesq_wb", "stoi"]
    for m in comp["metrics"]:
        assert m["verdict"] == IDENTICAL and m["ci_low"] is None and m["n"] == 2
        assert m["mean_a"] == m["mean_b"] and m["values_disagree"] == 0
    assert comp["provenance"]["differences"] == []
    assert result["pairing_overridden"] is False
    # The command-line entry point: exit 0 and the JSON written.
    out = tmp_path / "cmp.json"
    assert run(cli_args(run_a, run_b, "--metric", "pesq_wb", "--json", out)) == 0
    assert [m["metric"] for m in read_json(out)["comparisons"][0]["metrics"]] == ["pesq_wb"]


@pytest.mark.slow
def test_added_noise_shows_a_pesq_drop_whose_interval_excludes_zero(two_runs: tuple[Path, Path],
                                                                    tmp_path: Path) -> None:
    run_a, run_b = two_runs
    noisy = add_noise(run_b, tmp_path / "noisy")
    result = compare_runs(run_a, noisy, resamples=10000, seed=0, few_units=True)
    comp = result["comparisons"][0]
    assert comp["identity"] == {"pairs": 2, "payload_identical": 2, "decoded_identical": 0,
                                "all_decoded_identical": False}
    pesq = metric_of(result, "pesq_wb")
    assert pesq["n"] == 2 and pesq["mean_diff"] < -0.1
    assert pesq["ci_high"] < 0 and pesq["includes_zero"] is False
    assert pesq["verdict"].startswith("B worse than A (higher is better): interval excludes 0")
    # B's scores are honest: rescoring the noisy files on disk reproduces them.
    import soundfile as sf

    from codecarena.metrics.signal import score_signal

    for row in Run.open(noisy).rows:
        ref, _ = sf.read(noisy / row.reference, dtype="float64")
        dec, _ = sf.read(noisy / row.decoded, dtype="float64")
        assert score_signal(ref, dec, {"pesq_wb"})["pesq_wb"]["value"] == row.metrics["pesq_wb"]["value"]
    text = render_text(result)
    assert "identical decoded audio 0/2" in text and "pesq_wb" in text
