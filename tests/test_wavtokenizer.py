"""WavTokenizer large speech 75 (transformers 5.24.0's WavTokenizerModel) in its own runtime, with
synthetic weights written in the released Lightning layout and read by the real loader."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import codecarena, rows_of, runtime_python, synthetic_run

from codecarena.payload import read_payload

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wavtokenizer_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("wavtokenizer_large_speech_75")


@pytest.fixture(scope="module")
def wavtokenizer_run(wavtokenizer_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_run(wavtokenizer_env, tmp_path_factory, "wavtokenizer", ("wavtokenizer",))


def test_rows_replay_identically_with_exact_length(wavtokenizer_run: Path) -> None:
    rows = rows_of(wavtokenizer_run)
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["registry"] == "wavtokenizer_large_speech_75"
        assert row["checkpoint"]["file"] == "wavtokenizer_large_speech_75-v1-seed0.pt"
        assert row["runtime"]["executable"].endswith("envs/wavtokenizer_large_speech_75/bin/python")
    assert codecarena("audit", wavtokenizer_run).returncode == 0


def test_one_12_bit_code_per_320_samples_at_24_khz(wavtokenizer_run: Path) -> None:
    for row in rows_of(wavtokenizer_run):
        (stream,) = read_payload(wavtokenizer_run / row["payload"]).streams
        # 16 kHz resampled to 24 kHz (1.5x), then whole 320-sample hops.
        frames = math.ceil(math.ceil(row["num_samples"] * 1.5) / 320)
        assert stream.shape == (1, frames) and stream.bit_width == 12
        assert row["representation_bits"] == 12 * frames
        assert 900 <= row["representation_bps"] <= 900 + 12 / row["duration_s"]
        assert len(np.unique(stream.values)) >= 30, len(np.unique(stream.values))


@pytest.mark.parametrize("damage, needle", [
    ("training", None),  # the released file's training-only branches are dropped, not refused
    ("drop", "missing keys ['encoder_model.quantizer.codebook.embed']"),
    ("add", "unexpected keys ['backbone.extra.weight']"),
    ("reshape", "wrong shapes ['head.linear.bias']"),
    ("layout", "not a WavTokenizer checkpoint (a Lightning checkpoint with a state_dict)"),
])
def test_the_loader_reads_the_released_layout_strictly(wavtokenizer_env: dict[str, str], tmp_path: Path,
                                                       damage: str, needle: str | None) -> None:
    script = f"""
import torch
from pathlib import Path
from transformers import WavTokenizerModel
from codecarena.plugin.torch import Weights
from codecarena.codecs.wavtokenizer.adapter import config, load_checkpoint, released_name, transformers_name
model = WavTokenizerModel(config())
state = {{released_name(k): v for k, v in model.state_dict().items()}}
# Released names are the authors' module names, and renaming them back is the identity.
assert "feature_extractor.encodec.quantizer.vq.layers.0._codebook.embed" in state
assert "feature_extractor.encodec.encoder.model.0.conv.conv.weight_v" in state and "head.out.weight" in state
assert all(transformers_name(released_name(k)) == k for k in model.state_dict())
state["head.istft.window"] = torch.hann_window(1280)
damage = {damage!r}
if damage == "training":
    state["multiperioddisc.discriminators.0.convs.0.weight"] = torch.zeros(2)
    state["feature_extractor.encodec.decoder.model.0.conv.conv.weight_v"] = torch.zeros(2)
elif damage == "drop":
    state.pop("feature_extractor.encodec.quantizer.vq.layers.0._codebook.embed")
elif damage == "add":
    state["backbone.extra.weight"] = torch.zeros(1)
elif damage == "reshape":
    state["head.out.bias"] = torch.zeros(3)
saved = state if damage == "layout" else {{"state_dict": state, "epoch": 1}}
try:
    loaded = load_checkpoint(Weights(Path({str(tmp_path / 'model.ckpt')!r}), saved, {{}}))
    same = all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    print("LOADED", same)
except ValueError as exc:
    print("REFUSED", exc)
"""
    proc = subprocess.run([runtime_python(wavtokenizer_env, "wavtokenizer_large_speech_75"), "-c", script],
                          capture_output=True, text=True, check=False)
    if needle is None:
        assert "LOADED True" in proc.stdout, proc.stdout + proc.stderr
    else:
        assert "REFUSED" in proc.stdout and needle in proc.stdout and str(tmp_path) in proc.stdout, \
            proc.stdout + proc.stderr
