"""X-Codec 2.0 (transformers 5.24.0's Xcodec2Model) in its own runtime, with synthetic weights through
from_pretrained and codecarena's checks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import codecarena, rows_of, runtime_python, synthetic_run

from codecarena.payload import read_payload

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def xcodec2_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("xcodec2")


@pytest.fixture(scope="module")
def xcodec2_run(xcodec2_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The 2.5 GB synthetic folder is generated once per session (seed 0).
    return synthetic_run(xcodec2_env, tmp_path_factory, "xcodec2", ("xcodec2",))


def test_rows_replay_identically_with_exact_length(xcodec2_run: Path) -> None:
    rows = rows_of(xcodec2_run)
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["registry"] == "xcodec2"
        assert row["checkpoint"]["file"] == "model.safetensors"
        assert row["runtime"]["executable"].endswith("envs/xcodec2/bin/python")
        # The census figure: about 630 M parameters (the quantizer's projections are
        # counted on both sides, and they are small).
        both = row["model"]["encoder_parameters"] + row["model"]["decoder_parameters"]
        assert 625e6 < both < 640e6
        assert row["model"]["fsq_levels"] == [4] * 8
    assert codecarena("audit", xcodec2_run).returncode == 0


def test_one_16_bit_code_per_50_hz_frame_after_upstreams_padding(xcodec2_run: Path) -> None:
    for row in rows_of(xcodec2_run):
        (stream,) = read_payload(xcodec2_run / row["payload"]).streams
        # The feature extractor appends one sample and pads to whole 320-sample hops.
        frames = row["num_samples"] // 320 + 1
        assert stream.shape == (1, frames) and stream.bit_width == 16
        assert row["representation_bits"] == 16 * frames
        assert row["codec_facts"]["upstream_padded_length"] == 320 * frames
        assert row["codec_facts"]["decode"]["trimmed_samples"] == 320 * frames - row["num_samples"]
        assert 800 < row["representation_bps"] <= 800 + 16 / row["duration_s"]
        assert len(np.unique(stream.values)) >= 30, len(np.unique(stream.values))


def test_real_weights_are_refused_in_one_line_while_the_checkpoint_is_unpinned(xcodec2_env: dict[str, str],
                                                                             speech_dir: Path, tmp_path: Path) -> None:
    result = codecarena("run", "--input", speech_dir, "--codec", "xcodec2", "--out", tmp_path / "r", env=xcodec2_env)
    assert result.returncode == 2 and not (tmp_path / "r").exists()
    (line,) = result.stderr.strip().splitlines()
    assert "xcodec2: registry pins are incomplete (status unpinned)" in line
    assert "--weights synthetic runs its architecture with seeded weights" in line


@pytest.mark.parametrize("damage, needle", [("drop", "missing keys ['quantizer.project_in.weight']"),
                                            ("add", "unexpected keys ['extra.weight']"),
                                            ("reshape", "wrong shapes ['quantizer.project_out.bias']")])
def test_the_loader_refuses_what_from_pretrained_would_initialise_at_random(xcodec2_env: dict[str, str],
                                                                            tmp_path: Path, damage: str,
                                                                            needle: str) -> None:
    # torch.empty reserves no pages until written: the 2.5 GB state costs nothing to build.
    script = f"""
import torch
from pathlib import Path
from codecarena.plugin.torch import Weights
from codecarena.codecs.xcodec2.adapter import load_model, saved_shapes
state = {{k: torch.empty(shape) for k, shape in saved_shapes().items()}}
if {damage!r} == "drop":
    state.pop("quantizer.project_in.weight")
elif {damage!r} == "add":
    state["extra.weight"] = torch.zeros(1)
else:
    state["quantizer.project_out.bias"] = torch.zeros(3)
try:
    load_model(Weights(Path({str(tmp_path / 'model.safetensors')!r}), state, {{}}))
except ValueError as exc:
    print("REFUSED", exc)
"""
    proc = subprocess.run([runtime_python(xcodec2_env, "xcodec2"), "-c", script], capture_output=True, text=True,
                          check=False)
    assert "REFUSED" in proc.stdout and needle in proc.stdout and str(tmp_path) in proc.stdout, \
        proc.stdout + proc.stderr
