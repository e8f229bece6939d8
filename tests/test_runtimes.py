"""Isolated runtimes: two families with mutually incompatible pins in one run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import codecarena, registry_fork

pytestmark = pytest.mark.slow

# The worker base (numpy, soundfile, soxr) plus PyAV, with numpy < 2 while the harness has numpy >= 2.
OPUS_NUMPY1_LOCK = "numpy==1.26.4\nsoundfile==0.14.0\nsoxr==1.1.0\nav==18.1.0\n"


def rows_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]


@pytest.fixture
def isolated_opus(tmp_path: Path) -> dict[str, str]:
    """A registry fork in which Opus runs in its own numpy-1 runtime."""
    toml = registry_fork(tmp_path, "opus")
    registry = toml.parent.parent
    text = toml.read_text()
    text = re.sub(r'environment = "main"', 'environment = "isolated"\nlock = "opus.lock.txt"', text)
    toml.write_text(text)
    (toml.parent / "opus.lock.txt").write_text(OPUS_NUMPY1_LOCK)
    assert int(np.__version__.split(".")[0]) >= 2, "the harness must run numpy >= 2 for this test to mean anything"
    return {"CODECARENA_REGISTRY": str(registry), "XDG_DATA_HOME": str(tmp_path / "data")}


def test_two_families_with_conflicting_numpy_pins_in_one_run(isolated_opus: dict[str, str], speech_dir: Path,
                                                             tmp_path: Path) -> None:
    missing = codecarena("run", "--input", speech_dir, "--codec", "opus:12k", "--out", tmp_path / "x",
                         env=isolated_opus)
    assert missing.returncode == 2 and "codecarena env create opus" in missing.stderr

    created = codecarena("env", "create", "opus", env=isolated_opus)
    assert created.returncode == 0, created.stdout + created.stderr
    listed = codecarena("env", "list", env=isolated_opus)
    assert "opus:" in listed.stdout

    out = tmp_path / "run"
    result = codecarena("run", "--input", speech_dir, "--codec", "opus:12k", "--codec", "pcm:16",
                        "--metrics", "none", "--out", out, env=isolated_opus)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = rows_of(out)
    opus = [r for r in rows if r["codec"] == "opus:12k"]
    pcm = [r for r in rows if r["codec"] == "pcm:16"]
    assert len(opus) == len(pcm) == 2
    env_python = str(Path(isolated_opus["XDG_DATA_HOME"]) / "codecarena" / "envs" / "opus" / "bin" / "python")
    for row in opus:
        assert row["status"] == "ok" and row["replay_identical"]
        assert row["registry"] == "opus"
        assert row["runtime"]["numpy"] == "1.26.4" and row["runtime"]["executable"] == env_python
    for row in pcm:
        assert row["status"] == "ok" and row["replay_identical"]
        assert row["runtime"]["numpy"] == np.__version__ and row["runtime"]["executable"] != env_python

    run = json.loads((out / "run.json").read_text())
    assert run["runtimes"]["opus"]["environment"] == "isolated"
    assert "numpy==1.26.4" in run["runtimes"]["opus"]["packages"]
    assert f"numpy=={np.__version__}" in run["runtimes"]["pcm"]["packages"]
    assert len(run["runtimes"]["opus"]["packages_sha256"]) == 64
    # A fresh decode for the audit also runs in the family's own runtime.
    assert codecarena("audit", out, "--replay", env=isolated_opus).returncode == 0

    removed = codecarena("env", "remove", "opus", env=isolated_opus)
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert not Path(env_python).exists()


def test_a_family_with_incomplete_pins_is_refused(speech_dir: Path, tmp_path: Path) -> None:
    toml = registry_fork(tmp_path, "codec2")
    registry = toml.parent.parent
    text = re.sub(r'^status = "scored"$', 'status = "unpinned"', toml.read_text(), flags=re.M)
    toml.write_text(text)
    result = codecarena("run", "--input", speech_dir, "--codec", "codec2:3200", "--out", tmp_path / "r",
                        env={"CODECARENA_REGISTRY": str(registry)})
    assert result.returncode == 2
    assert "codec2: registry pins are incomplete (status unpinned)" in result.stderr
    assert not (tmp_path / "r").exists()


def test_a_runtime_copy_of_codecarena_is_resynced_when_the_harness_code_changes(tmp_path: Path) -> None:
    from codecarena.runtime import venvs

    site = tmp_path / "env" / "lib" / "site-packages"
    stale = site / "codecarena"
    stale.mkdir(parents=True)
    (stale / "worker.py").write_text("# an older worker\n")
    record = {"version": 1, "codecarena_sha256": "0" * 64, "site": str(site)}
    (tmp_path / "env" / venvs.RUNTIME_FILE).write_text(json.dumps(record))
    synced = venvs.sync_package(tmp_path / "env", record)
    assert synced["codecarena_sha256"] == venvs.package_sha256() == venvs.package_sha256(stale)
    assert (stale / "worker.py").read_text() != "# an older worker\n"
    assert json.loads((tmp_path / "env" / venvs.RUNTIME_FILE).read_text())["codecarena_sha256"] == venvs.package_sha256()
    mtime = (stale / "worker.py").stat().st_mtime_ns
    assert venvs.sync_package(tmp_path / "env", synced) == synced
    assert (stale / "worker.py").stat().st_mtime_ns == mtime  # current: nothing copied
    (stale / "worker.py").write_text("# tampered\n")
    venvs.sync_package(tmp_path / "env", synced)
    assert venvs.package_sha256(stale) == venvs.package_sha256()  # an edited copy is replaced as well
