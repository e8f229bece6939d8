"""BigCodec in its own torch runtime, with synthetic weights in the released checkpoint's layout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import codecarena, rows_of, runtime_python, synthetic_run

from codecarena.payload import read_payload

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bigcodec_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("bigcodec")


@pytest.fixture(scope="module")
def bigcodec_run(bigcodec_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Seed 0, as test_real_weights uses: the 638 MB synthetic file is generated once per session.
    return synthetic_run(bigcodec_env, tmp_path_factory, "bigcodec", ("bigcodec",))


def test_rows_replay_identically_with_exact_length(bigcodec_run: Path) -> None:
    rows = rows_of(bigcodec_run)
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["checkpoint"]["file"] == "bigcodec-v1-seed0.pt"
        assert row["runtime"]["executable"].endswith("envs/bigcodec/bin/python")
        # The released checkpoint is 637,937,326 bytes; the model's tensors are that much, give or
        # take the file's pickling overhead (the quantizer is counted on both sides).
        # The quantizer's parameters: in_proj (g 8, v 8x1024, bias 8), out_proj (g 1024, v 1024x8,
        # bias 1024) and the 8192 x 8 codebook, in float32.
        quantizer = 4 * (8 + 8 * 1024 + 8 + 1024 + 1024 * 8 + 1024 + 8192 * 8)
        both = row["model"]["encoder_model_bytes"] + row["model"]["decoder_model_bytes"]
        assert 637_000_000 < both - quantizer < 637_937_326
    assert codecarena("audit", bigcodec_run).returncode == 0


def test_bits_are_13_per_80_hz_frame_after_upstreams_padding(bigcodec_run: Path) -> None:
    for row in rows_of(bigcodec_run):
        (stream,) = read_payload(bigcodec_run / row["payload"]).streams
        # Upstream pads by 200 - n % 200: always at least one sample, a whole frame at exact multiples.
        frames = row["num_samples"] // 200 + 1
        assert stream.shape == (1, frames) and stream.bit_width == 13
        assert row["representation_bits"] == 13 * frames
        assert row["codec_facts"]["upstream_padded_length"] == 200 * frames
        assert row["codec_facts"]["decode"]["trimmed_samples"] == 200 * frames - row["num_samples"]
        assert row["representation_bps"] == pytest.approx(13 * frames / row["duration_s"])
        assert 1040 < row["representation_bps"] <= 1040 + 13 / row["duration_s"]
        assert len(np.unique(stream.values)) >= 30, len(np.unique(stream.values))


@pytest.mark.parametrize("damage, needle", [("drop", "generator does not match the architecture: missing keys"),
                                            ("add", "CodecEnc does not match the architecture: unexpected keys ['extra']"),
                                            ("reshape", "wrong shapes ['quantizer.layers.0._codebook.weight']"),
                                            ("side", "not a BigCodec checkpoint")])
def test_strict_loading_names_the_side_and_key(bigcodec_env: dict[str, str], tmp_path: Path, damage: str,
                                                needle: str) -> None:
    script = f"""
import torch
from pathlib import Path
from codecarena.codecs.bigcodec.adapter import BigCodecModel, load_checkpoint, released_names
from codecarena.plugin.torch import Weights, weights_only_load
model = BigCodecModel()
saved = {{"CodecEnc": released_names(model.encoder.state_dict()),
          "generator": released_names(model.decoder.state_dict())}}
assert any(k.endswith("weight_g") for k in saved["generator"])
if {damage!r} == "drop":
    saved["generator"].pop(sorted(saved["generator"])[-1])
elif {damage!r} == "add":
    saved["CodecEnc"]["extra"] = torch.zeros(1)
elif {damage!r} == "reshape":
    saved["generator"]["quantizer.layers.0._codebook.weight"] = torch.zeros(4, 8)
else:
    saved = {{"state_dict": saved["generator"]}}
path = Path({str(tmp_path / 'bigcodec.pt')!r})
torch.save(saved, path)
try:
    load_checkpoint(Weights(path, weights_only_load(path, path.read_bytes()), {{}}))
except ValueError as exc:
    print("REFUSED", exc)
"""
    proc = subprocess.run([runtime_python(bigcodec_env, "bigcodec"), "-c", script], capture_output=True, text=True,
                          check=False)
    assert "REFUSED" in proc.stdout and needle in proc.stdout and str(tmp_path) in proc.stdout, \
        proc.stdout + proc.stderr
