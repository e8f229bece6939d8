"""Quality metrics through the real pipeline and the `score` command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of
from codecarena.metrics.declarations import METRICS, select
from codecarena.metrics.scorer import metrics_code_sha256

pytestmark = pytest.mark.slow

ALL_OUTPUTS = [o for m in METRICS for o in m.outputs]


@pytest.fixture(scope="module")
def pcm_smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirror = need_mirror()
    out = tmp_path_factory.mktemp("pcm") / "run"
    result = codecarena("run", "--data-dir", mirror, "--codec", "pcm:16", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_every_installed_metric_is_selected_by_default() -> None:
    assert set(select("all")) == {m.name for m in METRICS}


def test_pcm_control_scores_as_transparent_on_the_smoke_set(pcm_smoke: Path) -> None:
    rows = rows_of(pcm_smoke)
    assert len(rows) == 10
    for row in rows:
        m = row["metrics"]
        assert set(m) == set(ALL_OUTPUTS)
        assert m["pesq_wb"]["value"] >= 4.4
        assert m["stoi"]["value"] >= 0.99 and m["estoi"]["value"] >= 0.99
        assert m["si_sdr"]["value"] > 60
        assert m["si_sdr"]["details"]["delay_samples"] == 0
        assert m["speaker_sim"]["value"] >= 0.99
        for name in ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808"):
            assert 1.0 <= m[name]["value"] <= 5.0
        if row["language"] == "en":
            assert m["dwer"]["value"] == 0.0
            assert m["wer"]["value"] == m["ref_wer"]["value"]
        else:
            # No offline Mandarin ASR model: recorded as failed with the reason, never as 0 or 1.
            for name in ("wer", "cer", "ref_wer", "dwer", "critical_survived"):
                assert m[name]["value"] is None and m[name]["status"] == "failed"
                assert "no offline ASR model for language 'zh'" in m[name]["error"]


def test_critical_entities_survive_transparent_coding(pcm_smoke: Path) -> None:
    lj = {r["utterance"]: r for r in rows_of(pcm_smoke)}["en_ljspeech_LJ002-0020"]
    record = lj["metrics"]["critical_survived"]
    assert record["value"] == 1.0
    assert record["details"]["entities"][0]["text"] == "EIGHTEEN THIRTEEN"
    librispeech = {r["utterance"]: r for r in rows_of(pcm_smoke)}["en_librispeech_1089-134686-0000"]
    assert librispeech["metrics"]["critical_survived"]["status"] == "not_applicable"


def test_summary_averages_successes_and_counts_failures(pcm_smoke: Path) -> None:
    summary = json.loads((pcm_smoke / "summary.json").read_text())
    (codec,) = summary["codecs"]
    wer = codec["metrics"]["wer"]
    assert (wer["n_ok"], wer["n_failed"]) == (6, 4)
    assert codec["metrics"]["pesq_wb"]["n_ok"] == 10
    values = [r["metrics"]["pesq_wb"]["value"] for r in rows_of(pcm_smoke)]
    assert codec["metrics"]["pesq_wb"]["mean"] == pytest.approx(sum(values) / len(values), rel=1e-12)
    run = json.loads((pcm_smoke / "run.json").read_text())
    declared = {m["name"]: m for m in run["metrics"]}
    assert set(declared) == {m.name for m in METRICS}
    for entry in declared.values():
        assert entry["failure_policy"] and entry["unusable_because"] is None
        for model in entry["model_files"]:
            assert model["sha256"] == model["pinned_sha256"]
    assert declared["asr"]["asr_models"]["en"]["temperature"] == 0.0
    assert codecarena("audit", pcm_smoke).returncode == 0


def test_every_metric_of_the_smoke_run_rescores_from_its_files(pcm_smoke: Path) -> None:
    """Model-based metrics too recompute within their declared tolerance, in another process."""
    assert {row["metrics_code_sha256"] for row in rows_of(pcm_smoke)} == {metrics_code_sha256()}
    result = codecarena("audit", pcm_smoke, "--rescore", "all")
    assert result.returncode == 0, result.stdout + result.stderr


def test_opus_6k_scores_below_12k_on_pesq_wb(tmp_path: Path) -> None:
    mirror = need_mirror()
    out = tmp_path / "opus"
    result = codecarena("run", "--data-dir", mirror, "--codec", "opus:6k", "--codec", "opus:12k",
                        "--metrics", "pesq_wb", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    pesq = {c["codec"]: c["metrics"]["pesq_wb"] for c in summary["codecs"]}
    assert pesq["opus:6k"]["n_ok"] == pesq["opus:12k"]["n_ok"] == 10
    assert pesq["opus:6k"]["mean"] < pesq["opus:12k"]["mean"] - 0.5
    assert "pesq_wb" in result.stdout  # the per-codec quality table


def test_two_runs_give_identical_scores(speech_dir: Path, tmp_path: Path) -> None:
    scores = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = codecarena("run", "--input", speech_dir, "--language", "en", "--codec", "codec2:3200",
                            "--out", out)
        assert result.returncode == 0, result.stdout + result.stderr
        # rows.jsonl is in completion order (rows run in parallel); compare by utterance.
        scores.append([r["metrics"] for r in sorted(rows_of(out), key=lambda r: r["utterance"])])
    assert scores[0] == scores[1]
    assert all(m["pesq_wb"]["status"] == "ok" and m["dwer"]["status"] == "ok" for m in scores[0])


def test_score_command_scores_an_existing_pair_of_folders(tmp_path: Path) -> None:
    mirror = need_mirror()
    refs, decs = tmp_path / "ref", tmp_path / "dec"
    refs.mkdir()
    decs.mkdir()
    for name in SHORT_CLIPS:
        shutil.copy(mirror / name, refs / name)
        shutil.copy(mirror / name, decs / name)
    out = tmp_path / "scores.json"
    result = codecarena("score", refs, decs, "--metrics", "pesq_wb,stoi,si_sdr", "--json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert [m["name"] for m in data["metrics"]] == ["pesq_wb", "stoi", "si_sdr"]
    for item in data["scores"]:
        assert item["metrics"]["pesq_wb"]["value"] >= 4.4 and item["metrics"]["si_sdr"]["value"] > 60
    (decs / SHORT_CLIPS[1]).unlink()
    missing = codecarena("score", refs, decs, "--metrics", "stoi")
    assert missing.returncode == 2 and SHORT_CLIPS[1].removesuffix(".wav") in missing.stderr


def test_unknown_metric_is_a_one_line_error(tmp_path: Path) -> None:
    result = codecarena("run", "--metrics", "pesq_wb,moss", "--out", tmp_path / "r")
    assert result.returncode == 2 and "unknown metric 'moss'" in result.stderr
