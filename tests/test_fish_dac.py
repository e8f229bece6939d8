"""The Fish Audio codec (fish-speech 0.1.0 modded_dac) in its own runtime, with synthetic weights
through fish-speech's loader steps."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import SHORT_CLIPS, codecarena, rows_of, runtime_python, synthetic_run

from codecarena.payload import read_payload

pytestmark = pytest.mark.slow

QUANTIZERS = {"fish_dac:44khz": 9, "fish_dac:44khz,n_quantizers=2": 2}


@pytest.fixture(scope="module")
def fish_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("fish_s2_codec")


@pytest.fixture(scope="module")
def fish_run(fish_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One short clip: the 44.1 kHz model is the slowest in CI, and both configurations still run.
    return synthetic_run(fish_env, tmp_path_factory, "fish", tuple(QUANTIZERS), SHORT_CLIPS[:1])


def test_rows_replay_identically_with_exact_length(fish_run: Path) -> None:
    rows = rows_of(fish_run)
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["registry"] == "fish_s2_codec"
        assert row["checkpoint"]["file"] == "fish_dac_44khz-v1-seed0.pt"
        assert row["runtime"]["executable"].endswith("envs/fish_s2_codec/bin/python")
        # The census counts 58 Snake1d activations in the Fish codec.
        assert row["model"]["snake1d_modules"] == 58
    assert codecarena("audit", fish_run).returncode == 0


def test_semantic_and_residual_streams_are_all_counted(fish_run: Path) -> None:
    for row in rows_of(fish_run):
        semantic, residual = read_payload(fish_run / row["payload"]).streams
        assert (semantic.name, semantic.bit_width, residual.name, residual.bit_width) == ("semantic", 12, "residual", 10)
        frames = semantic.shape[1]
        # 16 kHz resampled to 44.1 kHz, padded to whole 2048-sample frames (hop 512 x 4).
        resampled = row["num_samples"] * 44100 / 16000
        assert frames in {math.ceil(math.floor(resampled) / 2048), math.ceil(math.ceil(resampled) / 2048)}
        assert semantic.shape == (1, frames) and residual.shape == (QUANTIZERS[row["codec"]], frames)
        assert row["representation_bits"] == frames * (12 + 10 * QUANTIZERS[row["codec"]])
        # At most one padded frame above the theory: 21.533 Hz x (12 + 10 n) bits.
        theory = 44100 / 2048 * (12 + 10 * QUANTIZERS[row["codec"]])
        assert theory <= row["representation_bps"] <= theory + (12 + 10 * QUANTIZERS[row["codec"]]) / row["duration_s"]
        assert len(np.unique(semantic.values)) >= 10 and len(np.unique(residual.values)) >= 10


def test_real_weights_are_refused_in_one_line_while_the_checkpoint_is_unpinned(fish_env: dict[str, str],
                                                                             speech_dir: Path, tmp_path: Path) -> None:
    result = codecarena("run", "--input", speech_dir, "--codec", "fish_dac", "--out", tmp_path / "r", env=fish_env)
    assert result.returncode == 2 and not (tmp_path / "r").exists()
    (line,) = result.stderr.strip().splitlines()
    assert "fish_s2_codec: registry pins are incomplete (status unpinned)" in line
    assert "--weights synthetic runs its architecture with seeded weights" in line


def test_the_loader_is_strict_and_the_config_pinned(fish_env: dict[str, str], tmp_path: Path) -> None:
    script = f"""
import torch
from pathlib import Path
from unittest import mock
from codecarena.codecs.fish_dac import adapter as fish_dac
from codecarena.plugin.torch import Weights, weights_only_load
state = fish_dac.build_model().state_dict()
path = Path({str(tmp_path / 'codec.pth')!r})

def attempt(saved):
    torch.save(saved, path)
    try:
        fish_dac.load_checkpoint(Weights(path, weights_only_load(path, path.read_bytes()), {{}}))
        print("LOADED")
    except ValueError as exc:
        print("REFUSED", exc)

# A plain state dict and a training checkpoint whose non-generator keys upstream drops both load.
attempt(dict(state))
attempt({{"state_dict": {{**{{f"generator.{{k}}": v for k, v in state.items()}}, "discriminator.w": torch.zeros(1)}}}})
first = sorted(state)[0]
attempt({{k: v for k, v in state.items() if k != first}})
attempt({{**state, first: torch.zeros(1)}})
with mock.patch.object(fish_dac, "CONFIG_SHA256", "0" * 64):
    attempt(dict(state))
"""
    proc = subprocess.run([runtime_python(fish_env, "fish_s2_codec"), "-c", script], capture_output=True, text=True,
                          check=False)
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["LOADED", "LOADED"], proc.stdout + proc.stderr
    assert "does not match the modded_dac_vq architecture: missing keys" in lines[2]
    assert "wrong shapes" in lines[3] and str(tmp_path) in lines[3]
    assert "not fish-speech 0.1.0's modded_dac_vq config (sha256 differs)" in lines[4]


def fish_doctor(env: dict[str, str], out: Path, *args: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    # Only the variant's run is tested: without it, the fused first encode of this 391 M-parameter model
    # runs through the TE fuser's interpreter and the doctor took 942 s here (docs/measurements.md).
    result = codecarena("determinism", "fish_dac:44khz", "--weights", "synthetic", "--jit-fusion", "on",
                        "--seconds", "0.02", "--out", out, *args, env=env)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads((out / "evidence.json").read_text()), result.stdout


def test_eager_snake_v1_leaves_only_the_attention_backend_control_differing(fish_env: dict[str, str],
                                                                            tmp_path: Path) -> None:
    code, evidence, stdout = fish_doctor(fish_env, tmp_path / "e", "--variant", "eager_snake_v1")
    assert evidence["variant"]["replaced_modules"] == 58
    snake_controls = {name: c for name, c in evidence["controls"].items() if name != "sdpa_math_vs_default"}
    assert all(c["latent_equal"] and c["codes_equal"] for c in snake_controls.values()), stdout
    # The Fish encoder's transformer makes the attention backend a second, separate numerical path:
    # the math-only backend gives another latent whatever the Snake1d evaluation (docs/determinism-doctor.md).
    assert code == 1 and evidence["divergent_controls"] == ["sdpa_math_vs_default"], stdout
