"""Lyra v2 with its real weights: packets, replay, streaming, verified model files."""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import REPO, SHORT_CLIPS, codecarena, need_mirror, rows_of
from codecarena import checkpoints
from codecarena.codecs.lyra.adapter import pack_indices, unpack_indices
from codecarena.payload import PacketStream, Payload, read_payload, write_payload
from codecarena.registry.entries import load_entry
from codecarena.runtime.protocol import Job, read_report, write_job

MODELS = Path(os.environ.get("CODECARENA_MODELS", REPO.parent / "shared" / "models"))
ENTRY = load_entry("lyra_v2")


def need_models() -> Path:
    if not (MODELS / "lyra_v2" / "lyragan.tflite").is_file():
        pytest.skip(f"Lyra model mirror not found at {MODELS}; set CODECARENA_MODELS")
    return MODELS


def test_pack_indices_first_quantizer_in_the_most_significant_bits() -> None:
    # Hand-derived: 16 nibbles 1..15,0 -> bytes 12 34 56 78 9a bc de f0.
    indices = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0])
    assert pack_indices(indices) == bytes.fromhex("123456789abcdef0")
    assert unpack_indices(bytes.fromhex("123456789abcdef0"), 16).tolist() == indices.tolist()
    # 30 quantizers = 120 bits = 15 bytes exactly; 46 = 184 bits = 23 bytes.
    assert len(pack_indices(np.full(30, 15))) == 15 and len(pack_indices(np.full(46, 15))) == 23
    with pytest.raises(ValueError, match="packet of 7 bytes"):
        unpack_indices(bytes(7), 16)


def test_registry_pins_the_mirror_files() -> None:
    models = need_models()
    assert ENTRY.checkpoint is not None
    assert ENTRY.source_commit == "47698dadf0010abff6a848e02642f55f806d4842"
    assert checkpoints.resolve(ENTRY.checkpoint, models_dir=models) == models / "lyra_v2"


@pytest.mark.parametrize("name", ["soundstream_encoder.tflite", "quantizer.tflite", "lyragan.tflite"])
def test_a_tampered_model_file_is_refused_before_loading(tmp_path: Path, name: str) -> None:
    models = need_models()
    mirror = tmp_path / "models"
    shutil.copytree(models / "lyra_v2", mirror / "lyra_v2")
    victim = mirror / "lyra_v2" / name
    victim.chmod(0o644)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    assert ENTRY.checkpoint is not None
    with pytest.raises(checkpoints.CheckpointError, match=f"{name}: sha256 mismatch: expected "):
        checkpoints.resolve(ENTRY.checkpoint, models_dir=mirror)
    # Through the real worker: the encode stage fails with that reason and writes no payload.
    need_mirror()
    audio = tmp_path / "a.wav"
    shutil.copy(Path(os.environ.get("CODECARENA_DATA", REPO.parent / "shared" / "data" / "speech"))
                / SHORT_CLIPS[0], audio)
    job = Job.encode(audio, tmp_path / "p.ccap", tmp_path / "r.json", "lyra:3200")
    write_job(tmp_path / "job.json", job)
    proc = subprocess.run([sys.executable, "-m", "codecarena.worker", str(tmp_path / "job.json")],
                          capture_output=True, env={**os.environ, "CODECARENA_MODELS": str(mirror)})
    assert proc.returncode == 2
    report = read_report(tmp_path / "r.json")
    assert "sha256 mismatch" in report.error and name in report.error
    assert not (tmp_path / "p.ccap").exists()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def file_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "served"
    root.mkdir()
    handler = lambda *a, **k: _Quiet(*a, directory=str(root), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _served_checkpoint(root: Path, base: str, damage: str | None = None) -> checkpoints.Checkpoint:
    models = need_models()
    assert ENTRY.checkpoint is not None
    files = []
    for pin in ENTRY.checkpoint.files:
        data = (models / "lyra_v2" / pin.name).read_bytes()
        if damage == "tamper" and pin.name == "quantizer.tflite":
            data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
        if damage == "truncate" and pin.name == "quantizer.tflite":
            data = data[:-10]
        (root / pin.name).write_bytes(data)
        files.append(dataclasses.replace(pin, url=f"{base}/{pin.name}"))
    return dataclasses.replace(ENTRY.checkpoint, files=tuple(files))


def test_download_verifies_and_caches(file_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    root, base = file_server
    monkeypatch.delenv("CODECARENA_MODELS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    checkpoint = _served_checkpoint(root, base)
    folder = checkpoints.resolve(checkpoint, allow_download=True)
    assert folder == tmp_path / "cache" / "codecarena" / "models" / "lyra_v2"
    for pin in checkpoint.files:
        assert (folder / pin.name).read_bytes() == (root / pin.name).read_bytes()
    for pin in checkpoint.files:
        (root / pin.name).unlink()  # a second resolve must not need the server
    assert checkpoints.resolve(checkpoint, allow_download=True) == folder


@pytest.mark.parametrize("damage, needle", [("tamper", "sha256 mismatch: expected 841ee059"),
                                            ("truncate", "size mismatch: expected 329012 bytes")])
def test_download_of_a_bad_file_is_refused_and_leaves_nothing(file_server, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              damage: str, needle: str) -> None:
    root, base = file_server
    monkeypatch.delenv("CODECARENA_MODELS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    checkpoint = _served_checkpoint(root, base, damage)
    with pytest.raises(checkpoints.CheckpointError, match=needle):
        checkpoints.resolve(checkpoint, allow_download=True)
    folder = tmp_path / "cache" / "codecarena" / "models" / "lyra_v2"
    assert not (folder / "quantizer.tflite").exists()
    assert not [p for p in folder.iterdir() if p.name.endswith(".part")]


def test_offline_without_mirror_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODECARENA_MODELS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert ENTRY.checkpoint is not None
    with pytest.raises(checkpoints.CheckpointError, match="CODECARENA_MODELS"):
        checkpoints.resolve(ENTRY.checkpoint, allow_download=False)


@pytest.fixture(scope="module")
def lyra_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirror = need_mirror()
    need_models()
    folder = tmp_path_factory.mktemp("in")
    for name in (*SHORT_CLIPS, "en_librispeech_1089-134686-0001.wav"):
        shutil.copy(mirror / name, folder / name)
    out = tmp_path_factory.mktemp("lyra") / "run"
    result = codecarena("run", "--input", folder, "--codec", "lyra:3200", "--codec", "lyra:6000",
                        "--codec", "lyra:9200", "--metrics", "pesq_wb", "--out", out,
                        env={"CODECARENA_MODELS": str(MODELS)})
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.mark.slow
def test_packets_are_exactly_8_15_23_bytes_per_20_ms(lyra_run: Path) -> None:
    sizes = {"lyra:3200": 8, "lyra:6000": 15, "lyra:9200": 23}
    for row in rows_of(lyra_run):
        payload = read_payload(lyra_run / row["payload"])
        (stream,) = payload.streams
        assert isinstance(stream, PacketStream)
        frames = -(-row["num_samples"] // 320)
        assert len(stream.packets) == frames
        assert {len(p) for p in stream.packets} == {sizes[row["codec"]]}
        assert row["representation_bits"] == frames * sizes[row["codec"]] * 8
        assert row["weights"] == "real"
        assert payload.checkpoint["soundstream_encoder.tflite"] == "237da0b16226fb0a68d49551c81bebf614e42142af72764448359f68581e88f1"


@pytest.mark.slow
def test_replay_is_identical_and_quality_rises_with_bitrate(lyra_run: Path) -> None:
    rows = rows_of(lyra_run)
    assert all(r["status"] == "ok" and r["replay_identical"] for r in rows)
    summary = json.loads((lyra_run / "summary.json").read_text())
    pesq = [c["metrics"]["pesq_wb"]["mean"] for c in summary["codecs"]]
    assert pesq[0] < pesq[1] < pesq[2]
    assert codecarena("audit", lyra_run).returncode == 0


@pytest.mark.slow
def test_shuffled_packets_decode_far_worse(lyra_run: Path, tmp_path: Path) -> None:
    from codecarena.metrics.signal import pesq_wb

    row = next(r for r in rows_of(lyra_run)
               if r["codec"] == "lyra:6000" and r["utterance"] == "en_librispeech_1089-134686-0001")
    payload = read_payload(lyra_run / row["payload"])
    packets = list(payload.streams[0].packets)
    order = np.random.default_rng(7).permutation(len(packets))
    shuffled = dataclasses.replace(payload, streams=(PacketStream("lyra", tuple(packets[i] for i in order)),))
    assert isinstance(shuffled, Payload)
    write_payload(tmp_path / "shuffled.ccap", shuffled)
    job = Job.decode(tmp_path / "shuffled.ccap", tmp_path / "s.wav", tmp_path / "r.json")
    write_job(tmp_path / "job.json", job)
    subprocess.run([sys.executable, "-m", "codecarena.worker", str(tmp_path / "job.json")], check=True,
                   capture_output=True, env={**os.environ, "CODECARENA_MODELS": str(MODELS)})
    reference, _ = sf.read(lyra_run / row["reference"], dtype="float64")
    decoded, _ = sf.read(lyra_run / row["decoded"], dtype="float64")
    garbled, _ = sf.read(tmp_path / "s.wav", dtype="float64")
    intact, broken = pesq_wb(reference, decoded), pesq_wb(reference, garbled)
    assert intact > 2.5 and broken < intact - 1.0


@pytest.mark.slow
def test_streamed_output_equals_whole_utterance_output(tmp_path: Path) -> None:
    mirror = need_mirror()
    need_models()
    out = tmp_path / "stream.json"
    result = codecarena("stream", "lyra:9200", "--input", mirror / SHORT_CLIPS[0], "--json", out,
                        env={"CODECARENA_MODELS": str(MODELS)})
    assert result.returncode == 0, result.stdout + result.stderr
    (facts,) = json.loads(out.read_text())["results"]
    assert facts["packets_identical"] and facts["audio_identical"]
    assert facts["frames"] == -(-sf.info(mirror / SHORT_CLIPS[0]).frames // 320)
    assert facts["realtime_budget_ms"] == 20.0
    assert 0 < facts["frame_compute_ms"]["p50"] <= facts["frame_compute_ms"]["p99"]


@pytest.mark.slow
def test_xnnpack_off_is_a_recorded_option_that_changes_the_bitstream(tmp_path: Path) -> None:
    mirror = need_mirror()
    need_models()
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(mirror / "en_librispeech_1089-134686-0001.wav", folder / "a.wav")
    out = tmp_path / "run"
    result = codecarena("run", "--input", folder, "--codec", "lyra:6000", "--codec", "lyra:6000,xnnpack=off",
                        "--metrics", "none", "--out", out, env={"CODECARENA_MODELS": str(MODELS)})
    assert result.returncode == 0, result.stdout + result.stderr
    on, off = rows_of(out)
    assert on["model"]["interpreter"]["xnnpack"] is True and off["model"]["interpreter"]["xnnpack"] is False
    assert off["config"]["xnnpack"] == "off"
    assert on["payload_sha256"] != off["payload_sha256"]
    assert on["replay_identical"] and off["replay_identical"]
