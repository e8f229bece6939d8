"""--runtime-python: a family's workers in an existing interpreter instead of its locked runtime.

The external interpreter here is the harness's own (it has PyAV): Opus is made an isolated-runtime
family in a registry fork, so no runtime has to be built and the rows still cross the whole path.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import codecarena, registry_fork, rows_of


@pytest.fixture
def isolated_opus(tmp_path: Path) -> dict[str, str]:
    toml = registry_fork(tmp_path, "opus")
    toml.write_text(re.sub(r'environment = "main"', 'environment = "isolated"\nlock = "opus.lock.txt"',
                           toml.read_text()))
    (toml.parent / "opus.lock.txt").write_text("av==18.1.0\n")
    # XDG_DATA_HOME without runtimes: a run that needed the locked one would stop at `env create`.
    return {"CODECARENA_REGISTRY": str(toml.parent.parent), "XDG_DATA_HOME": str(tmp_path / "data")}


def _one_line_refusal(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_a_path_that_is_not_an_executable_interpreter_is_refused_in_one_line(speech_dir: Path, tmp_path: Path) -> None:
    args = ("run", "--input", speech_dir, "--codec", "encodec:6k", "--weights", "synthetic", "--metrics", "none",
            "--out", tmp_path / "run")
    _one_line_refusal(codecarena(*args, "--runtime-python", tmp_path / "absent"), "not an executable file")
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho not python\n")
    script.chmod(0o755)
    _one_line_refusal(codecarena(*args, "--runtime-python", script), "not a working Python interpreter")
    assert not (tmp_path / "run").exists()


def test_an_interpreter_without_the_familys_packages_is_refused_naming_them(speech_dir: Path, tmp_path: Path) -> None:
    # The harness's interpreter has torch but not the encodec package.
    result = codecarena("run", "--input", speech_dir, "--codec", "encodec:6k", "--weights", "synthetic",
                        "--metrics", "none", "--out", tmp_path / "run", "--runtime-python", sys.executable)
    _one_line_refusal(result, "cannot import encodec's adapter", "encodec==0.1.1", "missing there: encodec")


def test_a_run_of_main_environment_codecs_only_refuses_runtime_python(speech_dir: Path, tmp_path: Path) -> None:
    result = codecarena("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "none",
                        "--out", tmp_path / "run", "--runtime-python", sys.executable)
    _one_line_refusal(result, "none of pcm runs in an isolated runtime")


def test_an_interpreter_without_this_codecarena_is_told_how_to_add_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.registry.entries import load_entry
    from codecarena.runtime.external import ExternalRuntimeError, describe

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(ExternalRuntimeError, match=r"cannot import codecarena .*pip install --no-deps .*PYTHONPATH="):
        describe(str(tmp_path / "venv" / "bin" / "python"), load_entry("encodec"))
    other = tmp_path / "other" / "codecarena"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("__version__ = 'an older copy'\n")
    monkeypatch.setenv("PYTHONPATH", str(other.parent))
    with pytest.raises(ExternalRuntimeError, match="which is not this harness's code"):
        describe(str(tmp_path / "venv" / "bin" / "python"), load_entry("encodec"))


def test_rows_from_an_external_runtime_say_so_everywhere(isolated_opus: dict[str, str], speech_dir: Path,
                                                         tmp_path: Path) -> None:
    import av

    out = tmp_path / "run"
    result = codecarena("run", "--input", speech_dir, "--codec", "opus:12k", "--codec", "pcm:16", "--metrics", "none",
                        "--out", out, "--runtime-python", sys.executable, env=isolated_opus)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"opus:12k\s+│\s+none † external runtime", result.stdout), result.stdout
    assert not re.search(r"pcm:16\s+│\s+none †", result.stdout)
    rows = rows_of(out)
    assert sorted(row["codec"] for row in rows) == ["opus:12k", "opus:12k", "pcm:16", "pcm:16"]
    for row in rows:
        if row["codec"] == "opus:12k":
            assert row["status"] == "ok"
            assert row["runtime"]["environment"] == "external" and row["runtime"]["interpreter"] == sys.executable
            assert row["runtime"]["package_versions"] == {"av": av.__version__}
            assert row["runtime"]["python"] == sys.version.split()[0]
        else:
            assert "environment" not in row["runtime"]
    record = json.loads((out / "run.json").read_text())
    assert ["opus", "opus", sys.executable, "external"] in record["plan"]["runtimes"]
    assert record["runtimes"]["opus"]["environment"] == "external"
    summary = json.loads((out / "summary.json").read_text())
    assert {c["codec"]: c.get("runtime") for c in summary["codecs"]} == {"opus:12k": "external", "pcm:16": None}

    audited = codecarena("audit", out, env=isolated_opus)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert f"opus: rows ran in the external runtime {sys.executable}" in " ".join(audited.stdout.split())

    board = codecarena("leaderboard", out, env=isolated_opus)
    assert board.returncode == 0 and "external runtime" in board.stdout, board.stdout + board.stderr
    compared = codecarena("compare", out, out, env=isolated_opus)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "opus:12k of run A ran in an external runtime" in " ".join(compared.stdout.split())

    # The same run with the opus rows claiming the pinned runtime fails the audit.
    lines = (out / "rows.jsonl").read_text().splitlines()
    edited = []
    for line in lines:
        row = json.loads(line)
        if row["codec"] == "opus:12k":
            del row["runtime"]["environment"]
        edited.append(json.dumps(row))
    (out / "rows.jsonl").write_text("\n".join(edited) + "\n")
    audited = codecarena("audit", out, env=isolated_opus)
    assert audited.returncode == 1 and "does not say it ran in the external runtime" in audited.stdout


def test_an_external_runtime_is_another_plan_and_never_added_to_a_locked_one(speech_dir: Path, tmp_path: Path) -> None:
    from codecarena.pipeline.plan import RunError, assemble
    from codecarena.pipeline.resume import added_codecs
    from codecarena.runtime.limits import StageLimits
    from codecarena.selection import evaluation_set
    from codecarena.specs import parse_configuration

    evalset = evaluation_set(speech_dir, "auto", "", None, False, None, None)

    def plan(codec: str, *runtime: str):  # type: ignore[no-untyped-def]
        return assemble(evalset, (parse_configuration(codec),), tmp_path, StageLimits(1 << 30, 0.1, 60),
                        runtimes=(runtime,))

    locked = plan("opus:12k", "opus", "opus", "/envs/opus/bin/python")
    external = plan("opus:12k", "opus", "opus", "/envs/opus/bin/python", "external")
    assert locked.plan.runtimes != external.plan.runtimes
    with pytest.raises(RunError, match="ran in the runtime opus .*would run in the external runtime"):
        added_codecs(locked.plan, plan("opus:6k", "opus", "opus", "/envs/opus/bin/python", "external"))
