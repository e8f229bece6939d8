"""`codecarena audit --rescore`: metric values re-derive from the run's files (issue 15, defect 7).

Each tampering keeps the run self-consistent as far as the plain audit can tell: the edited row gets
its digest recomputed and rows.jsonl a summary.json rebuilt from it, so only recomputing the metrics
can tell (issue 28: without the recomputed digest, the plain audit already tells).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of
from codecarena.results.rescore import parse_sample
from codecarena.results.run import Run
from codecarena.results.schema import parse_row
from codecarena.results.summary import summarize


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirror = need_mirror()
    folder = tmp_path_factory.mktemp("speech")
    smoke = {entry["file"]: entry for entry in json.loads((mirror / "manifest.json").read_text())}
    listing = []
    for i, name in enumerate(SHORT_CLIPS):
        shutil.copy(mirror / name, folder / f"clip{i}.wav")
        listing.append({"file": f"clip{i}.wav", "transcript": smoke[name]["transcript"],
                        "critical": smoke[name].get("critical") or []})
    (folder / "manifest.json").write_text(json.dumps(listing))
    out = tmp_path_factory.mktemp("rescore") / "run"
    result = codecarena("run", "--input", folder, "--language", "en", "--codec", "pcm:16", "--codec", "opus:6k",
                        "--metrics", "pesq_wb,stoi,asr", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def tampered(run: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None], codec: str = "opus:6k",
             utterance: str = "clip1", reseal: bool = True) -> Path:
    """A copy of `run` with one row edited (its digest recomputed unless `reseal` is False) and
    summary.json rebuilt so that it agrees."""
    copy = tmp_path / "tampered"
    shutil.copytree(run, copy)
    rows = rows_of(copy)
    (row,) = [r for r in rows if (r["codec"], r["utterance"]) == (codec, utterance)]
    edit(row)
    if reseal:
        row.update(parse_row({**row, "row_sha256": None}).sealed().to_dict())
    (copy / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (copy / "summary.json").write_text(json.dumps(summarize(Run.open(copy).rows)))
    return copy


def audit(run: Path, *args: str) -> tuple[int, str]:
    result = codecarena("audit", run, *args)
    return result.returncode, result.stdout + result.stderr


def set_value(output: str, value: float) -> Callable[[dict[str, Any]], None]:
    def edit(row: dict[str, Any]) -> None:
        row["metrics"][output]["value"] = value
    return edit


def test_rescore_parses_its_sample() -> None:
    assert parse_sample("all") == "all" and parse_sample("3") == 3
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ValueError, match="expected a number of rows per codec configuration"):
            parse_sample(bad)


@pytest.mark.slow
def test_an_untouched_run_rescores(scored_run: Path) -> None:
    rows = rows_of(scored_run)
    assert {row["metrics_code_sha256"] for row in rows} != {None}
    assert all(row["metrics"]["wer"]["details"]["transcript"] for row in rows)
    assert any(row["metrics"]["critical_survived"]["status"] == "ok" for row in rows)
    code, text = audit(scored_run, "--rescore", "all")
    assert code == 0, text


@pytest.mark.slow
def test_an_edited_pesq_value_fails_the_plain_audit_and_a_resealed_one_rescore(scored_run: Path,
                                                                                tmp_path: Path) -> None:
    original = [r for r in rows_of(scored_run) if (r["codec"], r["utterance"]) == ("opus:6k", "clip1")][0]
    code, text = audit(tampered(scored_run, tmp_path, set_value("pesq_wb", 3.9), reseal=False))
    assert code == 1 and "opus:6k clip1: the row's content does not hash to its row_sha256" in text
    shutil.rmtree(tmp_path / "tampered")
    run = tampered(scored_run, tmp_path, set_value("pesq_wb", 3.9))
    assert audit(run)[0] == 0  # a digest recomputed by the forger: only recomputing the value tells
    code, text = audit(run, "--rescore", "all")
    assert code == 1
    assert f"opus:6k clip1: pesq_wb: row says 3.9, rescored {original['metrics']['pesq_wb']['value']!r}" in text
    assert "audit failed: 1 problem in" in text


@pytest.mark.slow
def test_rescore_samples_the_first_rows_of_each_codec_in_plan_order(scored_run: Path, tmp_path: Path) -> None:
    run = tampered(scored_run, tmp_path, set_value("stoi", 0.5))
    assert audit(run, "--rescore", "1")[0] == 0  # clip1 is the second row of opus:6k
    code, text = audit(run, "--rescore")  # default: 2 rows per codec configuration
    assert code == 1 and "opus:6k clip1: stoi: row says 0.5, rescored " in text


@pytest.mark.slow
def test_an_edited_wer_is_caught(scored_run: Path, tmp_path: Path) -> None:
    run = tampered(scored_run, tmp_path, set_value("wer", 0.75), codec="pcm:16", utterance="clip0")
    code, text = audit(run, "--rescore", "all")
    assert code == 1 and "pcm:16 clip0: wer: row says 0.75, rescored " in text


@pytest.mark.slow
def test_a_status_difference_is_a_problem(scored_run: Path, tmp_path: Path) -> None:
    def fail_stoi(row: dict[str, Any]) -> None:
        row["metrics"]["stoi"] = {"value": None, "status": "failed", "error": "made up", "details": {}}

    run = tampered(scored_run, tmp_path, fail_stoi)
    code, text = audit(run, "--rescore", "all")
    assert code == 1 and "opus:6k clip1: stoi: row says failed (made up), rescored 0." in text


@pytest.mark.slow
def test_changed_metric_code_is_reported_as_such(scored_run: Path, tmp_path: Path) -> None:
    def older_code(row: dict[str, Any]) -> None:
        row["metrics_code_sha256"] = "0" * 64
        row["metrics"]["pesq_wb"]["value"] = 3.9

    code, text = audit(tampered(scored_run, tmp_path, older_code), "--rescore", "all")
    assert code == 1
    assert "opus:6k clip1: metric code changed since the run (sha 000000000000, now " in text
    assert "), values differ: pesq_wb: row says 3.9, rescored " in text
    # Other code that still gives the same values is no problem.
    shutil.rmtree(tmp_path / "tampered")
    same = tampered(scored_run, tmp_path, lambda row: row.update(metrics_code_sha256="0" * 64))
    assert audit(same, "--rescore", "all")[0] == 0


@pytest.mark.slow
def test_a_bad_sample_is_a_one_line_error(scored_run: Path) -> None:
    code, text = audit(scored_run, "--rescore", "0")
    assert code == 2
    assert text.strip() == "codecarena: error: --rescore '0': expected a number of rows per codec configuration " \
                           "(>= 1) or 'all'"
