"""The device check without a GPU: its table from two CPU runs, and the script's refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import codecarena

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from conftest import SHORT_CLIPS, need_mirror

    clips = tmp_path_factory.mktemp("clips")
    for clip in SHORT_CLIPS:
        (clips / clip).write_bytes((need_mirror() / clip).read_bytes())
    runs = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp(name) / "run"
        result = codecarena("run", "--input", clips, "--codec", "pcm:16", "--codec", "opus:12k", "--metrics", "none",
                            "--out", out)
        assert result.returncode == 0, result.stdout + result.stderr
        runs.append(out)
    return runs[0], runs[1]


def _table(*args: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "codecarena.results.devices_table", *map(str, args)],
                          capture_output=True, text=True)


def test_the_table_counts_identical_payloads_and_shows_each_devices_rtf(two_runs: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    a, b = two_runs
    done = _table(a, b)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "enc RTF A cpu" in lines[1] and "dec RTF B cpu" in lines[1] and "identical payloads" in lines[1]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["pcm:16"][-1] == "2/2" and rows["opus:12k"][-1] == "2/2"
    summary = json.loads((a / "summary.json").read_text())
    rtf = {c["codec"]: c["encode"]["cold_rtf_median"] for c in summary["codecs"]}
    assert rows["opus:12k"][2] == f"{rtf['opus:12k']:.3f}"

    # One payload changed in B: one fewer identical.
    row = json.loads((b / "rows.jsonl").read_text().splitlines()[0])
    edited = b.parent / "edited"
    subprocess.run(["cp", "-r", str(b), str(edited)], check=True)
    lines_b = (edited / "rows.jsonl").read_text().splitlines()
    first = json.loads(lines_b[0])
    first["payload_sha256"] = "0" * 64
    (edited / "rows.jsonl").write_text("\n".join([json.dumps(first), *lines_b[1:]]) + "\n")
    done = _table(a, edited)
    counted = {line.split()[0]: line.split()[-1] for line in done.stdout.splitlines()[2:]}
    assert counted[row["codec"]] == "1/2", done.stdout + done.stderr


def test_the_table_reads_each_switch_of_the_doctors_evidence(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    # A hand-made evidence file in the doctor's version 2 form (no GPU here to make one).
    device = {"device": "cuda:0", "kind": "cuda", "name": "GPU name", "driver": "1.0", "torch": "2.x", "cuda": "12",
              "cudnn": "9", "settings": {}}
    agree = {"agree": True}
    evidence = {"version": 2, "codec": "dac:16khz", "device": device, "verdict": "divergent", "switches": {
        "seeds_only": {"applicable": True, "controls": {"cold_vs_warm": {"agree": False}, "cross_process": agree},
                       "first_divergence": {"module": "encoder.block.1"}},
        "eager_snake_v1": {"applicable": True, "controls": {"cold_vs_warm": agree, "cross_process": agree},
                           "first_divergence": None},
        "tf32_off": {"applicable": False, "reason": "not applicable on cpu: it changes CUDA settings only"}}}
    (tmp_path / "evidence.json").write_text(json.dumps(evidence))
    done = _table(*two_runs, tmp_path)
    assert done.returncode == 0, done.stderr
    switches = {line.split()[0]: line.split()[1:] for line in done.stdout.split("cuDNN 9")[1].splitlines()[2:]}
    assert switches["seeds_only"] == ["DIFFER", "agree", "encoder.block.1"]
    assert switches["eager_snake_v1"] == ["agree", "agree", "-"]
    assert switches["tf32_off"][:2] == ["-", "-"] and "not applicable on cpu" in done.stdout
    bad = _table(*two_runs, tmp_path / "absent")
    assert bad.returncode == 2 and bad.stderr.startswith("devices_table: ") and len(bad.stderr.splitlines()) == 1


def test_device_check_without_a_gpu_stops_in_one_line(tmp_path: Path) -> None:
    # PATH without nvidia-smi, as on this machine: the script refuses before building anything.
    done = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh"), str(tmp_path)], capture_output=True,
                          text=True, env={**os.environ, "PATH": "/usr/bin:/bin", "DEVICE_CHECK_WORK": str(tmp_path / "w")},
                          timeout=120)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1 and "no GPU" in done.stderr, done.stderr
    assert not (tmp_path / "w").exists()
