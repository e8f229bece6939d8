"""Mimi (transformers' MimiModel) in its own torch runtime, with synthetic weights through from_pretrained."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import SHORT_CLIPS, codecarena, rows_of, runtime_python, synthetic_run
from codecarena.payload import read_payload

pytestmark = pytest.mark.slow

LONG_CLIP = "en_librispeech_1089-134686-0000.wav"  # 10.4 s


@pytest.fixture(scope="module")
def mimi_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("mimi")


@pytest.fixture(scope="module")
def mimi_run(mimi_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_run(mimi_env, tmp_path_factory, "mimi", ("mimi:8", "mimi:32"), (SHORT_CLIPS[0], LONG_CLIP))


def test_rows_replay_identically_with_exact_length_and_say_synthetic(mimi_run: Path) -> None:
    rows = rows_of(mimi_run)
    assert len(rows) == 4
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["registry"] == "mimi"
        assert row["runtime"]["executable"].endswith("envs/mimi/bin/python")
        assert row["model"]["frame_rate_hz"] == 12.5 and row["model"]["bits_per_code"] == 11
    assert codecarena("audit", mimi_run).returncode == 0


def test_the_quantizer_count_is_the_rate_and_never_confused(mimi_run: Path) -> None:
    for row in rows_of(mimi_run):
        (stream,) = read_payload(mimi_run / row["payload"]).streams
        n_q, frames = stream.shape
        assert n_q == {"mimi:8": 8, "mimi:32": 32}[row["codec"]] == row["model"]["quantizers"]
        # 1920 samples at 24 kHz per 12.5 Hz frame; a partial last frame is a whole frame.
        assert frames in (math.ceil(math.floor(1.5 * row["num_samples"]) / 1920),
                          math.ceil(math.ceil(1.5 * row["num_samples"]) / 1920))
        assert stream.bit_width == 11 and row["representation_bits"] == frames * n_q * 11
    for codec, theory in (("mimi:8", 1100), ("mimi:32", 4400)):
        long = next(r for r in rows_of(mimi_run) if r["codec"] == codec and r["utterance"] == LONG_CLIP[:-4])
        assert theory <= long["representation_bps"] <= theory + theory / 12.5 / long["duration_s"]


def test_synthetic_codebooks_give_varied_codes_in_every_layer(mimi_run: Path) -> None:
    row = next(r for r in rows_of(mimi_run) if r["codec"] == "mimi:8" and r["utterance"] == LONG_CLIP[:-4])
    (stream,) = read_payload(mimi_run / row["payload"]).streams
    codes = stream.values.reshape(stream.shape)
    assert all(len(np.unique(layer)) >= 0.5 * codes.shape[1] for layer in codes), [len(np.unique(c)) for c in codes]


@pytest.mark.parametrize("damage, needle", [
    ("drop", "missing keys ['decoder.layers.11.conv.weight']"),
    # transformers itself ignores unexpected keys under encoder. (its _keys_to_ignore_on_load_unexpected)
    ("add", "unexpected keys ['encoder.layers.99.conv.weight']"),
    ("reshape", "wrong shapes ['downsample.conv.weight']"),
])
def test_strict_loading_rejects_what_from_pretrained_would_let_through(
        mimi_run: Path, mimi_env: dict[str, str], tmp_path: Path, damage: str, needle: str) -> None:
    synthetic = next((Path(mimi_env["XDG_CACHE_HOME"]) / "codecarena" / "models" / "synthetic" / "mimi").rglob("model.safetensors")).parent
    script = f"""
import shutil, torch
from safetensors.torch import load_file, save_file
from codecarena.codecs.mimi.adapter import load_model
from codecarena.plugin.transformers import safetensors_weights
state = load_file({str(synthetic / 'model.safetensors')!r})
if {damage!r} == "drop":
    state.pop("decoder.layers.11.conv.weight")
elif {damage!r} == "add":
    state["encoder.layers.99.conv.weight"] = torch.zeros(1)
else:
    state["downsample.conv.weight"] = torch.zeros(2)
shutil.copy({str(synthetic / 'config.json')!r}, {str(tmp_path)!r})
save_file(state, {str(tmp_path / 'model.safetensors')!r}, metadata={{"format": "pt"}})
try:
    path = __import__("pathlib").Path({str(tmp_path / 'model.safetensors')!r})
    load_model(safetensors_weights(path, path.read_bytes(), {{}}))
except ValueError as exc:
    print("REFUSED", exc)
"""
    proc = subprocess.run([runtime_python(mimi_env, "mimi"), "-c", script], capture_output=True, text=True,
                          env={**os.environ, **mimi_env})
    assert "REFUSED" in proc.stdout and needle in proc.stdout, proc.stdout + proc.stderr


def test_the_doctor_adds_the_attention_backend_control_for_mimi(mimi_env: dict[str, str], tmp_path: Path) -> None:
    result = codecarena("determinism", "mimi:8", "--weights", "synthetic", "--seconds", "0.5", "--out", tmp_path / "e",
                        env=mimi_env)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    evidence = json.loads((tmp_path / "e" / "evidence.json").read_text())
    control = evidence["controls"]["sdpa_math_vs_default"]
    assert control["codes_total"] == 8 * 7 and len(control["latent_sha256"]) == 2
    # Without TorchScript in Mimi, the in-process and cross-process controls agree.
    assert all(evidence["controls"][name]["agree"] for name in ("cold_vs_warm", "warm_vs_warm", "fresh_processes"))
