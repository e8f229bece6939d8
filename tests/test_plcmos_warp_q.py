"""PLCMOS and WARP-Q validated on the smoke set through the real pipeline (issue 41): PLCMOS scores clean
speech high and falls with every step of an Opus loss sweep; WARP-Q ranks pcm:16 above opus:12k above
codec2:700C and agrees in direction with PESQ-WB on the clean configurations; both rescore from the
run's files. The measured numbers are in docs/metrics.md ("Validity checks")."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from conftest import codecarena, need_mirror, rows_of

pytestmark = pytest.mark.slow

CLEAN = ("pcm:16", "opus:12k", "codec2:700C")
SWEEP = ("opus:12k", "opus:12k@loss=5%", "opus:12k@loss=10%", "opus:12k@loss=20%")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("speechmos")
    pytest.importorskip("warpq")
    mirror = need_mirror()
    out = tmp_path_factory.mktemp("sweep") / "run"
    codecs = [arg for codec in dict.fromkeys(CLEAN + SWEEP) for arg in ("--codec", codec)]
    result = codecarena("run", "--data-dir", mirror, *codecs, "--metrics", "plcmos,warp_q,pesq_wb", "--workers", "2",
                        "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _means(run: Path) -> dict[str, dict[str, float]]:
    summary = json.loads((run / "summary.json").read_text())
    for codec in summary["codecs"]:
        for name in ("plcmos", "warp_q", "pesq_wb"):
            assert codec["metrics"][name]["n_ok"] == 10, (codec["codec"], name, codec["metrics"][name])
    return {c["codec"]: {name: stats["mean"] for name, stats in c["metrics"].items()} for c in summary["codecs"]}


def test_plcmos_is_high_on_clean_speech_and_falls_with_every_step_of_loss(sweep: Path) -> None:
    means = _means(sweep)
    assert means["pcm:16"]["plcmos"] >= 4.0  # the references themselves: 4.10 (English 4.29, Mandarin 3.82)
    curve = [means[codec]["plcmos"] for codec in SWEEP]
    assert all(later < earlier for earlier, later in zip(curve, curve[1:])), curve
    assert curve[-1] < curve[0] - 0.5, curve  # a fifth of the packets lost: 3.36 against 3.98 clean
    # Every row through the channel has it, and so has the clean configuration its robustness is read against.
    assert all(row["metrics"]["plcmos"]["status"] == "ok" for row in rows_of(sweep))
    (curve_entry,) = json.loads((sweep / "summary.json").read_text())["channels"]["curves"]
    assert curve_entry["robustness"]["plcmos"]["clean"] == pytest.approx(means["opus:12k"]["plcmos"])
    assert curve_entry["robustness"]["plcmos"]["rate"] is not None


def test_warp_q_ranks_pcm_over_opus_over_codec2_as_pesq_wb_does(sweep: Path) -> None:
    means = _means(sweep)
    warp_q = [means[codec]["warp_q"] for codec in CLEAN]
    assert warp_q[0] < warp_q[1] < warp_q[2], warp_q  # lower is better
    # Direction agrees with PESQ-WB's for every pair of clean configurations, on the means and on each utterance.
    by_utterance: dict[str, dict[str, dict[str, float]]] = {}
    for row in rows_of(sweep):
        if row["codec"] in CLEAN:
            by_utterance.setdefault(row["utterance"], {})[row["codec"]] = {
                name: row["metrics"][name]["value"] for name in ("warp_q", "pesq_wb")}
    assert len(by_utterance) == 10
    for a, b in combinations(CLEAN, 2):
        assert (means[a]["warp_q"] < means[b]["warp_q"]) == (means[a]["pesq_wb"] > means[b]["pesq_wb"]), (a, b)
        for utterance, scores in by_utterance.items():
            assert (scores[a]["warp_q"] < scores[b]["warp_q"]) == (scores[a]["pesq_wb"] > scores[b]["pesq_wb"]), \
                (utterance, a, b, scores)


def test_the_sweep_audits_and_its_new_metrics_rescore(sweep: Path) -> None:
    result = codecarena("audit", sweep, "--rescore", "2")
    assert result.returncode == 0, result.stdout + result.stderr
