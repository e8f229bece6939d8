"""The determinism doctor on DAC 16 kHz with synthetic weights, and eager_snake_v1 in runs.

With TorchScript CPU fusion on (docs/determinism.md), the default path's first encode must differ
from the later ones and the trace must name DAC's first Snake1d. These tests fail loudly if a future
torch stops provoking the divergence: they never pass on a case that did not happen.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SHORT_CLIPS, codecarena, need_mirror, runtime_python
from codecarena.payload import read_payload

pytestmark = pytest.mark.slow

FIRST_SNAKE = "encoder.block.1.block.0.block.0"


@pytest.fixture(scope="module")
def dac_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("dac")


def doctor(env: dict[str, str], out: Path, *args: str) -> tuple[int, dict, str]:
    result = codecarena("determinism", "dac:16khz", "--weights", "synthetic", "--out", out, *args, env=env)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads((out / "evidence.json").read_text()), result.stdout


@pytest.fixture(scope="module")
def fused_doctor(dac_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, str]:
    """One doctor run under TorchScript fusion with every switch: each DAC probe costs a process start
    and a model load, so the default path's controls and the switches' share one run."""
    return doctor(dac_env, tmp_path_factory.mktemp("fused") / "e", "--jit-fusion", "on", "--seconds", "0.02",
                  "--switches", "all")


def test_fused_default_path_diverges_cold_vs_warm_at_the_first_snake(fused_doctor: tuple[int, dict, str]) -> None:
    code, evidence, stdout = fused_doctor
    cold_warm = evidence["controls"]["cold_vs_warm"]
    assert code == 1 and not cold_warm["latent_equal"], (
        "TorchScript CPU fusion no longer makes the first DAC encode differ from the second on this torch "
        f"({evidence['settings']}); the reproduction of docs/determinism.md needs revisiting\n{stdout}")
    assert evidence["controls"]["warm_vs_warm"]["agree"]
    found = evidence["first_divergence"]
    assert found["module"] == FIRST_SNAKE and found["kind"] == "Snake1d" and found["calls"] == [1, 2], found
    assert found["reason"] == "same input hash, different output hash" and found["modules_diverging_after"] > 0
    assert evidence["settings"]["can_fuse_on_cpu"] and evidence["settings"]["texpr_fuser_enabled"]
    assert evidence["parameters"]["unchanged"] and evidence["weights"] == "synthetic"
    assert "codecarena/determinism/probe.py" in evidence["sources_sha256"]
    assert "first divergence (encode 1 vs 2" in stdout and FIRST_SNAKE in stdout


def test_eager_snake_v1_makes_every_control_agree_under_fusion(dac_env: dict[str, str], tmp_path: Path) -> None:
    code, evidence, stdout = doctor(dac_env, tmp_path / "e", "--jit-fusion", "on", "--seconds", "0.02",
                                    "--variant", "eager_snake_v1")
    assert code == 0 and evidence["verdict"] == "deterministic", stdout
    assert all(c["latent_equal"] and c["codes_equal"] for c in evidence["controls"].values())
    assert evidence["variant"]["replaced_modules"] == 58 and len(evidence["variant"]["source_sha256"]) == 64
    assert "codecarena/variants/eager_snake_v1.py" in evidence["sources_sha256"]
    assert evidence["first_divergence"] is None and evidence["parameters"]["unchanged"]


def test_the_tracer_finds_an_injected_divergence(dac_env: dict[str, str], tmp_path: Path) -> None:
    target = "encoder.block.2.block.1"  # a ResidualUnit in the second encoder block
    code, evidence, stdout = doctor(dac_env, tmp_path / "e", "--seconds", "0.2", "--inject-divergence", target)
    assert code == 1 and evidence["injected_divergence"] == target and "SELF-CHECK" in stdout
    assert not evidence["controls"]["cold_vs_warm"]["latent_equal"]
    assert evidence["first_divergence"]["module"] == target, evidence["first_divergence"]
    # Only the injected encode moved: the fresh processes (no injection) agree with each other.
    assert evidence["controls"]["fresh_processes"]["agree"]


def test_dac_16khz_has_58_snakes_and_upstream_code_is_untouched(dac_env: dict[str, str]) -> None:
    python = runtime_python(dac_env, "dac")
    script = """
import torch, dac.nn.layers as layers
from codecarena.codecs.dac.adapter import build_model
from codecarena import variants
forward, scripted = layers.Snake1d.forward, layers.snake
model, other = build_model(), build_model()
alphas = {n: p for n, p in model.named_parameters() if n.endswith("alpha")}
state = {k: v.clone() for k, v in model.state_dict().items()}
print("REPLACED", variants.apply("eager_snake_v1", model))
print("SAME_PARAMS", all(dict(model.named_parameters())[n] is p for n, p in alphas.items()), len(alphas))
after = model.state_dict()
print("SAME_STATE", list(after) == list(state) and all(torch.equal(after[k], state[k]) for k in state))
print("OTHER_SNAKES", sum(isinstance(m, layers.Snake1d) for m in other.modules()))
print("UNPATCHED", layers.Snake1d.forward is forward and layers.snake is scripted)
"""
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True, env={**os.environ, **dac_env})
    out = proc.stdout
    assert "REPLACED 58" in out and "SAME_PARAMS True 58" in out and "SAME_STATE True" in out, out + proc.stderr
    assert "OTHER_SNAKES 58" in out and "UNPATCHED True" in out, out


@pytest.fixture(scope="module")
def default_and_eager_runs(dac_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("in")
    for name in SHORT_CLIPS:
        shutil.copy(need_mirror() / name, folder / name)
    runs = []
    for variant in ("", "eager_snake_v1"):
        out = tmp_path_factory.mktemp("run") / (variant or "default")
        extra = ("--variant", variant) if variant else ()
        result = codecarena("run", "--input", folder, "--weights", "synthetic", "--codec", "dac:16khz",
                            "--metrics", "pesq_wb,stoi", "--out", out, *extra, env=dac_env)
        assert result.returncode == 0, result.stdout + result.stderr
        runs.append(out)
    return runs[0], runs[1]


def test_a_variant_run_records_the_variant_everywhere(default_and_eager_runs: tuple[Path, Path]) -> None:
    _, eager = default_and_eager_runs
    plan = json.loads((eager / "run.json").read_text())["plan"]
    assert plan["variant"]["name"] == "eager_snake_v1" and len(plan["variant"]["source_sha256"]) == 64
    for line in (eager / "rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert row["variant"] == "eager_snake_v1" and row["replay_identical"]
        assert row["model"]["variant"]["replaced_modules"] == 58
        assert read_payload(eager / row["payload"]).variant == "eager_snake_v1"
    summary = json.loads((eager / "summary.json").read_text())
    assert {c["variant"] for c in summary["codecs"]} == {"eager_snake_v1"}
    assert codecarena("audit", eager).returncode == 0


def test_audit_catches_a_row_that_hides_its_variant(default_and_eager_runs: tuple[Path, Path], tmp_path: Path) -> None:
    copy = tmp_path / "hidden"
    shutil.copytree(default_and_eager_runs[1], copy)
    rows = [json.loads(line) for line in (copy / "rows.jsonl").read_text().splitlines()]
    rows[0]["variant"] = ""
    (copy / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = codecarena("audit", copy)
    assert result.returncode == 1 and "payload was encoded with variant 'eager_snake_v1', row says 'none'" in result.stdout


def test_compare_default_against_eager_snake_reports_identity_and_intervals(
        default_and_eager_runs: tuple[Path, Path], tmp_path: Path) -> None:
    default, eager = default_and_eager_runs
    result = codecarena("compare", default, eager, "--resamples", "2000", "--json", tmp_path / "c.json")
    assert result.returncode == 0, result.stdout + result.stderr
    (comparison,) = json.loads((tmp_path / "c.json").read_text())["comparisons"]
    assert comparison["identity"]["pairs"] == len(SHORT_CLIPS)
    assert any(d.get("field") == "variant" or "variant" in json.dumps(d)
               for d in comparison["provenance"]["differences"]), comparison["provenance"]["differences"]
    if not comparison["identity"]["all_decoded_identical"]:
        assert all("ci" in m or "verdict" in m for m in comparison["metrics"].values())


def test_switches_on_cpu_name_which_remove_the_divergence_and_list_the_cuda_ones(
        fused_doctor: tuple[int, dict, str]) -> None:
    # The GPU case's controls, on the CPU divergence that TorchScript fusion provokes: seeds and
    # deterministic algorithms leave it, the eager Snake removes it; the CUDA settings cannot apply.
    code, evidence, stdout = fused_doctor
    switches = evidence["switches"]
    assert sorted(switches) == sorted(["seeds_only", "cudnn_deterministic", "deterministic_algorithms", "tf32_off",
                                       "jit_fusion_on", "jit_fusion_off", "eager_snake_v1"])
    for name in ("cudnn_deterministic", "tf32_off", "jit_fusion_on", "jit_fusion_off"):
        assert switches[name] == {"sets": switches[name]["sets"], "applicable": False,
                                  "reason": "not applicable on cpu: it changes CUDA settings only"}, switches[name]
        assert f"{name}" in stdout and "not applicable on cpu" in stdout
    assert evidence["switches_agreeing"] == ["eager_snake_v1"], stdout
    assert evidence["switches_differing"] == ["seeds_only", "deterministic_algorithms"], stdout
    for name in ("seeds_only", "deterministic_algorithms"):
        assert not switches[name]["controls"]["cold_vs_warm"]["agree"]
        assert switches[name]["first_divergence"]["module"] == FIRST_SNAKE
        assert switches[name]["applied"]["seeds"] == {"random": 0, "numpy": 0, "torch": 0}
    assert switches["deterministic_algorithms"]["device_settings"]["deterministic_algorithms"] is True
    assert switches["deterministic_algorithms"]["device_settings"]["cublas_workspace_config"] == ":4096:8"
    assert switches["seeds_only"]["device_settings"]["deterministic_algorithms"] is False
    assert switches["eager_snake_v1"]["first_divergence"] is None
    assert evidence["device"]["device"] == "cpu" and evidence["version"] == 2
