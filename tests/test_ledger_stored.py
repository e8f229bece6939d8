"""`codecarena ledger RUN` shows summary.json's ledger while it is current, and derives it from the
files as soon as a payload or rows.jsonl changed after summary.json (results/ledger_stored.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import codecarena, need_mirror

CLIP = "en_ljspeech_LJ002-0020.wav"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("in")
    shutil.copy(need_mirror() / CLIP, folder / CLIP)
    out = tmp_path_factory.mktemp("ledger") / "run"
    codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--out", out, check=True)
    return out


def _ledger(run: Path, *args: str) -> dict:
    result = codecarena("ledger", run, "--format", "json", *args, check=True)
    return json.loads(result.stdout)


def _marked(run_dir: Path, tmp_path: Path) -> tuple[Path, float]:
    """A copy whose stored ledger carries a value no derivation gives, written after everything else."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    summary = json.loads((run / "summary.json").read_text())
    derived = summary["ledger"]["codecs"][0]["achievable_bps"]
    summary["ledger"]["codecs"][0]["achievable_bps"] = 1.5
    (run / "summary.json").write_text(json.dumps(summary))
    return run, derived


def test_a_current_stored_ledger_is_shown_and_derive_derives_it(run_dir: Path, tmp_path: Path) -> None:
    assert _ledger(run_dir) == _ledger(run_dir, "--derive")
    run, derived = _marked(run_dir, tmp_path)
    assert _ledger(run)["codecs"][0]["achievable_bps"] == 1.5
    assert _ledger(run, "--derive")["codecs"][0]["achievable_bps"] == derived


@pytest.mark.parametrize("change", ["payload touched", "rows touched", "payload removed"])
def test_a_file_changed_after_summary_json_means_the_ledger_is_derived(run_dir: Path, tmp_path: Path,
                                                                      change: str) -> None:
    run, derived = _marked(run_dir, tmp_path)
    written = (run / "summary.json").stat().st_mtime_ns
    payload = next((run / "payloads").rglob("*.ccap"))
    if change == "payload removed":
        payload.unlink()
        result = codecarena("ledger", run)
        assert result.returncode == 0 and "no ledger measurement" in result.stdout, result.stdout
        return
    os.utime(payload if change == "payload touched" else run / "rows.jsonl", ns=(written + 10**9, written + 10**9))
    assert _ledger(run)["codecs"][0]["achievable_bps"] == derived
