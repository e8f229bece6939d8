"""EnCodec in its own torch runtime, with synthetic weights through the real loading path."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import SHORT_CLIPS, codecarena, rows_of, runtime_python, synthetic_run
from codecarena.payload import read_payload, write_payload
from codecarena.runtime.protocol import Job, read_report, write_job

pytestmark = pytest.mark.slow

LONG_CLIP = "en_librispeech_1089-134686-0000.wav"  # 10.4 s


@pytest.fixture(scope="module")
def encodec_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("encodec")


@pytest.fixture(scope="module")
def encodec_run(encodec_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_run(encodec_env, tmp_path_factory, "encodec", ("encodec:6k", "encodec:1.5k"),
                         (*SHORT_CLIPS, LONG_CLIP), metrics="pesq_wb")


def test_real_weights_absent_stop_the_run_with_one_line_naming_fetch(encodec_env: dict[str, str],
                                                                   speech_dir: Path, tmp_path: Path) -> None:
    result = codecarena("run", "--input", speech_dir, "--codec", "encodec:6k", "--no-download", "--out", tmp_path / "r",
                        env={**encodec_env, "CODECARENA_MODELS": ""})
    assert result.returncode == 2 and not (tmp_path / "r").exists()
    (line,) = result.stderr.strip().splitlines()
    assert "encodec:6k: real weights unavailable" in line and "codecarena fetch encodec:6k" in line
    assert "CODECARENA_MODELS" in line


def test_rows_replay_identically_with_exact_length_and_say_synthetic(encodec_run: Path) -> None:
    rows = rows_of(encodec_run)
    assert len(rows) == 6
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["registry"] == "encodec"
        assert row["checkpoint"]["weights"] == "synthetic" and len(row["checkpoint"]["sha256"]) == 64
        assert row["runtime"]["executable"].endswith("envs/encodec/bin/python")
        assert row["model"]["decoder_model_bytes"] > 0 and row["model"]["threads"] == 1
    summary = json.loads((encodec_run / "summary.json").read_text())
    assert {c["weights"] for c in summary["codecs"]} == {"synthetic"}
    assert json.loads((encodec_run / "run.json").read_text())["plan"]["weights"] == "synthetic:0"
    assert codecarena("audit", encodec_run).returncode == 0


def test_representation_bits_follow_frames_x_codebooks_x_10(encodec_run: Path) -> None:
    quantizers = {"encodec:6k": 8, "encodec:1.5k": 2}
    for row in rows_of(encodec_run):
        payload = read_payload(encodec_run / row["payload"])
        (stream,) = payload.streams
        n_q, frames = stream.shape
        assert n_q == quantizers[row["codec"]] and stream.bit_width == 10
        # 16 -> 24 kHz gives 1.5 samples per input sample; 320-sample hops at 24 kHz (75 Hz).
        assert frames in (math.ceil(math.floor(1.5 * row["num_samples"]) / 320),
                          math.ceil(math.ceil(1.5 * row["num_samples"]) / 320))
        assert row["representation_bits"] == frames * n_q * 10
    long = next(r for r in rows_of(encodec_run) if r["codec"] == "encodec:6k" and r["utterance"] == LONG_CLIP[:-4])
    # On a long input the rate is the theory, 75 Hz x 8 x 10 bits = 6000 bps, plus at most one partial frame.
    assert 6000 <= long["representation_bps"] <= 6000 + 80 * 10 / long["duration_s"]


def test_synthetic_codebooks_give_varied_codes(encodec_run: Path) -> None:
    row = next(r for r in rows_of(encodec_run) if r["codec"] == "encodec:6k" and r["utterance"] == LONG_CLIP[:-4])
    (stream,) = read_payload(encodec_run / row["payload"]).streams
    codes = stream.values.reshape(stream.shape)
    assert all(len(np.unique(layer)) >= 30 for layer in codes[:4]), [len(np.unique(c)) for c in codes]


def test_a_decoder_with_other_weights_refuses_the_payload(encodec_run: Path, encodec_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    row = rows_of(encodec_run)[0]
    payload = read_payload(encodec_run / row["payload"])
    forged = dataclasses.replace(payload, checkpoint={**payload.checkpoint, "sha256": "0" * 64})
    write_payload(tmp_path / "forged.ccap", forged)
    job = Job.decode(tmp_path / "forged.ccap", tmp_path / "d.wav", tmp_path / "r.json")
    write_job(tmp_path / "job.json", job)
    proc = subprocess.run([runtime_python(encodec_env, "encodec"), "-m", "codecarena.worker", str(tmp_path / "job.json")],
                          capture_output=True, env={**__import__("os").environ, **encodec_env})
    assert proc.returncode == 2
    assert "payload was encoded with" in read_report(tmp_path / "r.json").error
    assert not (tmp_path / "d.wav").exists()


@pytest.mark.parametrize("damage, needle", [("drop", "missing keys ['decoder."), ("add", "unexpected keys ['extra.key']")])
def test_strict_loading_rejects_a_missing_and_an_unexpected_key(encodec_env: dict[str, str], tmp_path: Path,
                                                               damage: str, needle: str) -> None:
    script = f"""
import torch
from pathlib import Path
from codecarena.codecs.encodec.adapter import build_model
from codecarena.plugin.torch import Weights, load_strict, weights_only_load
state = build_model().state_dict()
if {damage!r} == "drop":
    state.pop(sorted(k for k in state if k.startswith("decoder."))[0])
else:
    state["extra.key"] = torch.zeros(1)
path = Path({str(tmp_path / 'ckpt.pt')!r})
torch.save(state, path)
try:
    load_strict(build_model(), Weights(path, weights_only_load(path, path.read_bytes()), {{}}))
except ValueError as exc:
    print("REFUSED", exc)
"""
    proc = subprocess.run([runtime_python(encodec_env, "encodec"), "-c", script], capture_output=True, text=True)
    assert "REFUSED" in proc.stdout and needle in proc.stdout, proc.stdout + proc.stderr


def test_audit_refuses_synthetic_rows_relabelled_as_real(encodec_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "relabelled"
    shutil.copytree(encodec_run, copy)
    rows = rows_of(copy)
    rows[0]["weights"] = "real"
    (copy / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = codecarena("audit", copy)
    assert result.returncode == 1 and "row says weights 'real' but its payload's checkpoint says 'synthetic'" in result.stdout


def test_token_stability_runs_in_the_family_runtime(encodec_env: dict[str, str], encodec_run: Path,
                                                    tmp_path: Path) -> None:
    """`codecarena ledger --stability` (#32): two extra encodes per row in EnCodec's own runtime, with the
    run's synthetic weights; the ledger counts them and the audit derives them again."""
    copy = tmp_path / "run"
    shutil.copytree(encodec_run, copy)
    result = codecarena("ledger", copy, "--stability", "--codec", "encodec:1.5k", env=encodec_env)
    assert result.returncode == 0, result.stdout + result.stderr
    entries = {e["codec"]: e for e in json.loads((copy / "summary.json").read_text())["ledger"]["codecs"]}
    entry, other = entries["encodec:1.5k"], entries["encodec:6k"]
    stability = entry["stability"]
    assert stability["utterances"] == {"reencode": 3, "shift": 3} and stability["skipped"] == []
    assert [(c["stream"], c["codebook"]) for c in stability["codebooks"]] == [("codes", 0), ("codes", 1)]
    assert 0 <= stability["idempotence_first"] <= 1 and 0 <= stability["shift_stability_first"] <= 1
    assert other["stability"] is None and [c["size"] for c in other["codebooks"]] == [1024] * 8
    assert entry["weights"] == "synthetic" and entry["claim"]["bps"] == 1500 and entry["claim"]["source"] == "paper"
    assert entry["achievable_bps"] > 0 and 0 < entry["codebooks"][0]["utilisation"] <= 1
    assert codecarena("audit", copy, env=encodec_env).returncode == 0


def test_a_lost_packet_is_whole_frames_of_every_codebook_filled_by_the_arena_and_audited(
        encodec_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> None:
    # One short clip through a 10% loss channel (docs/channel.md): the receiver's count of lost frames
    # is the trace's lost packets times its frames per packet, the fill is labelled the arena's, the
    # impaired decode is the clean one's length but not its samples, and the audit re-derives it all.
    # Through ber=1e-2 as well: the row counts the tokens its flipped bits changed.
    run = synthetic_run(encodec_env, tmp_path_factory, "encodec_channel",
                        ("encodec:1.5k", "encodec:1.5k@loss=10%", "encodec:1.5k@ber=1e-2"), SHORT_CLIPS[:1])
    clean, noisy, lossy = sorted(rows_of(run), key=lambda r: r["codec"])
    assert lossy["codec"] == "encodec:1.5k@loss=10%" and lossy["status"] == "ok" and lossy["replay_identical"]
    trace = json.loads((run / lossy["channel"]["trace"]).read_text())
    per, frames = trace["frames_per_packet"], trace["frames"]
    assert per == 2 and trace["frame_s"] == "1/75" and trace["lost"]
    lost_frames = sum(min(per, frames - packet * per) for packet in trace["lost"])
    receiver = lossy["codec_facts"]["decode"]["receiver"]
    assert receiver["by"] == "arena" and receiver["policy"] == "repeat"
    assert receiver["lost_frames"] == receiver["repeated_frames"] == lost_frames
    assert lossy["channel"]["concealment"] == "arena"
    assert lossy["decoded_samples"] == clean["decoded_samples"] == clean["num_samples"]
    assert lossy["decoded_sha256"] != clean["decoded_sha256"]
    # 1.5k is 2 codebooks of 10 bits: 2 tokens a frame. A loss channel flips nothing; through ber=1e-2
    # nothing is lost, so every code of the impaired payload that differs from the clean one is a changed token.
    tokens = 2 * frames
    assert (lossy["channel"]["tokens"], lossy["channel"]["tokens_changed"]) == (tokens, 0)
    assert noisy["codec"] == "encodec:1.5k@ber=1e-2" and noisy["status"] == "ok" and noisy["channel"]["lost"] == 0
    before = read_payload(run / noisy["payload"]).code_stream("codes").values
    after = read_payload(run / noisy["channel"]["payload"]).code_stream("codes").values
    changed = int((before != after).sum())
    assert noisy["channel"]["tokens"] == tokens and 0 < noisy["channel"]["tokens_changed"] == changed
    assert changed <= noisy["channel"]["flipped_bits"]
    assert noisy["channel"]["tokens_changed_fraction"] == changed / tokens
    assert codecarena("audit", run, env=encodec_env).returncode == 0
