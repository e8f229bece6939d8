"""SNAC 24 kHz in its own torch runtime, with synthetic weights through SNAC's own loader."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from conftest import SHORT_CLIPS, codecarena, rows_of, synthetic_run
from codecarena.payload import read_payload

pytestmark = pytest.mark.slow

LONG_CLIP = "en_librispeech_1089-134686-0000.wav"  # 10.4 s


@pytest.fixture(scope="module")
def snac_run(runtime_env, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return synthetic_run(runtime_env("snac"), tmp_path_factory, "snac", ("snac:24khz",), (*SHORT_CLIPS, LONG_CLIP),
                         weights="synthetic:3")


def test_noisy_decoder_replays_identically_once_seeded(snac_run: Path) -> None:
    rows = rows_of(snac_run)
    assert len(rows) == 3
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["checkpoint"]["seed"] == "3"
        assert row["config"]["noise_seed"] == 0 and row["model"]["noise_seed"] == 0
    assert codecarena("audit", snac_run).returncode == 0


def test_three_scales_keep_their_lengths_and_bits(snac_run: Path) -> None:
    for row in rows_of(snac_run):
        payload = read_payload(snac_run / row["payload"])
        lengths = [s.shape[0] for s in payload.streams]
        assert [s.name for s in payload.streams] == ["scale0", "scale1", "scale2"]
        assert all(s.bit_width == 12 for s in payload.streams)
        # SNAC pads the 24 kHz input to a multiple of 2048 samples (hop 512 x coarsest stride 4);
        # each 2048-sample block gives 1 + 2 + 4 codes.
        blocks = {math.ceil(math.floor(1.5 * row["num_samples"]) / 2048),
                  math.ceil(math.ceil(1.5 * row["num_samples"]) / 2048)}
        assert lengths[0] in blocks and lengths == [lengths[0], 2 * lengths[0], 4 * lengths[0]]
        assert row["representation_bits"] == 12 * sum(lengths)
    long = next(r for r in rows_of(snac_run) if r["utterance"] == LONG_CLIP[:-4])
    # 84 bits per 2048 samples at 24 kHz = 984.375 bps, plus at most one padded block.
    assert 984.375 <= long["representation_bps"] <= 984.375 + 84 / long["duration_s"]


def test_synthetic_codebooks_give_varied_codes(snac_run: Path) -> None:
    row = next(r for r in rows_of(snac_run) if r["utterance"] == LONG_CLIP[:-4])
    for stream in read_payload(snac_run / row["payload"]).streams:
        assert len(np.unique(stream.values)) >= 0.3 * len(stream.values), stream.name
