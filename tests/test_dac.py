"""DAC 16 kHz in its own torch runtime, with synthetic weights through DAC's real loader."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import SHORT_CLIPS, codecarena, rows_of, runtime_python, synthetic_run

from codecarena.payload import read_payload, write_payload
from codecarena.runtime.protocol import Job, read_report, write_job

pytestmark = pytest.mark.slow

LONG_CLIP = "en_librispeech_1089-134686-0000.wav"  # 10.4 s
QUANTIZERS = {"dac:16khz": 12, "dac:16khz,n_quantizers=4": 4}


@pytest.fixture(scope="module")
def dac_env(runtime_env) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return runtime_env("dac")


@pytest.fixture(scope="module")
def dac_run(dac_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_run(dac_env, tmp_path_factory, "dac", tuple(QUANTIZERS), (SHORT_CLIPS[0], LONG_CLIP),
                         metrics="pesq_wb")


def test_real_weights_absent_stop_the_run_with_one_line_naming_fetch(dac_env: dict[str, str],
                                                                   speech_dir: Path, tmp_path: Path) -> None:
    result = codecarena("run", "--input", speech_dir, "--codec", "dac:16khz", "--no-download", "--out", tmp_path / "r",
                        env={**dac_env, "CODECARENA_MODELS": ""})
    assert result.returncode == 2 and not (tmp_path / "r").exists()
    (line,) = result.stderr.strip().splitlines()
    assert "dac:16khz: real weights unavailable" in line and "codecarena fetch dac:16khz" in line
    assert "CODECARENA_MODELS" in line


def test_rows_replay_identically_with_exact_length_and_say_synthetic(dac_run: Path) -> None:
    rows = rows_of(dac_run)
    assert len(rows) == 4
    for row in rows:
        assert row["status"] == "ok" and row["replay_identical"], row["error"]
        assert row["decoded_samples"] == row["num_samples"]
        assert row["weights"] == "synthetic" and row["registry"] == "dac"
        assert row["checkpoint"]["weights"] == "synthetic" and len(row["checkpoint"]["sha256"]) == 64
        assert row["checkpoint"]["file"] == "dac_16khz-v1-seed0.pt"
        assert row["runtime"]["executable"].endswith("envs/dac/bin/python")
        assert row["model"]["decoder_model_bytes"] > 0 and row["model"]["threads"] == 1
        assert row["model"]["quantizers"] == QUANTIZERS[row["codec"]]
    summary = json.loads((dac_run / "summary.json").read_text())
    assert {c["weights"] for c in summary["codecs"]} == {"synthetic"}
    assert json.loads((dac_run / "run.json").read_text())["plan"]["weights"] == "synthetic:0"
    assert codecarena("audit", dac_run).returncode == 0


def test_representation_bits_follow_frames_x_codebooks_x_10(dac_run: Path) -> None:
    for row in rows_of(dac_run):
        payload = read_payload(dac_run / row["payload"])
        (stream,) = payload.streams
        n_q, frames = stream.shape
        assert n_q == QUANTIZERS[row["codec"]] and stream.bit_width == 10
        # 16 kHz in, no resampling; the input is padded to whole 320-sample hops (50 Hz).
        assert frames == math.ceil(row["num_samples"] / 320)
        assert row["representation_bits"] == frames * n_q * 10
    long = next(r for r in rows_of(dac_run) if r["codec"] == "dac:16khz" and r["utterance"] == LONG_CLIP[:-4])
    # On a long input the rate is the theory, 50 Hz x 12 x 10 bits = 6000 bps, plus at most one partial frame.
    assert 6000 <= long["representation_bps"] <= 6000 + 120 / long["duration_s"]


def test_synthetic_codebooks_give_varied_codes(dac_run: Path) -> None:
    row = next(r for r in rows_of(dac_run) if r["codec"] == "dac:16khz" and r["utterance"] == LONG_CLIP[:-4])
    (stream,) = read_payload(dac_run / row["payload"]).streams
    codes = stream.values.reshape(stream.shape)
    assert all(len(np.unique(layer)) >= 30 for layer in codes), [len(np.unique(c)) for c in codes]


def test_a_decoder_with_other_weights_refuses_the_payload(dac_run: Path, dac_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    row = rows_of(dac_run)[0]
    payload = read_payload(dac_run / row["payload"])
    forged = dataclasses.replace(payload, checkpoint={**payload.checkpoint, "sha256": "0" * 64})
    write_payload(tmp_path / "forged.ccap", forged)
    job = Job.decode(tmp_path / "forged.ccap", tmp_path / "d.wav", tmp_path / "r.json")
    write_job(tmp_path / "job.json", job)
    proc = subprocess.run([runtime_python(dac_env, "dac"), "-m", "codecarena.worker", str(tmp_path / "job.json")],
                          capture_output=True, env={**os.environ, **dac_env}, check=False)
    assert proc.returncode == 2
    assert "payload was encoded with" in read_report(tmp_path / "r.json").error
    assert not (tmp_path / "d.wav").exists()


@pytest.mark.parametrize("damage, needle", [("drop", "missing keys ['decoder."),
                                            ("add", "unexpected keys ['extra.key']"),
                                            ("reshape", "wrong shapes ['decoder."),
                                            ("config", "not the 16 kHz configuration: encoder_rates=")])
def test_strict_loading_rejects_a_missing_unexpected_or_reshaped_key_or_another_config(
        dac_env: dict[str, str], tmp_path: Path, damage: str, needle: str) -> None:
    script = f"""
import torch
from pathlib import Path
from codecarena.codecs.dac.adapter import CONFIG_16KHZ, build_model, load_checkpoint
from codecarena.plugin.torch import Weights, weights_only_load
saved = {{"state_dict": build_model().state_dict(), "metadata": {{"kwargs": dict(CONFIG_16KHZ)}}}}
first_decoder_key = sorted(k for k in saved["state_dict"] if k.startswith("decoder."))[0]
if {damage!r} == "drop":
    saved["state_dict"].pop(first_decoder_key)
elif {damage!r} == "add":
    saved["state_dict"]["extra.key"] = torch.zeros(1)
elif {damage!r} == "reshape":
    saved["state_dict"][first_decoder_key] = torch.zeros(1)
else:
    saved["metadata"]["kwargs"]["encoder_rates"] = [2, 4, 8, 8]
path = Path({str(tmp_path / 'ckpt.pt')!r})
torch.save(saved, path)
try:
    load_checkpoint(Weights(path, weights_only_load(path, path.read_bytes()), {{}}))
except ValueError as exc:
    print("REFUSED", exc)
"""
    proc = subprocess.run([runtime_python(dac_env, "dac"), "-c", script], capture_output=True, text=True, check=False)
    assert "REFUSED" in proc.stdout and needle in proc.stdout, proc.stdout + proc.stderr


# Loads the 16 kHz adapter as the worker does, with `FILE` (built by the caller's code) in place of
# the cached synthetic checkpoint, and reports what happened: whether the planted object's code ran
# (it creates MARKER), how often the file was opened through Python, and the outcome.
LOAD_WITH_FILE = """
import builtins, io, json, os, torch
from pathlib import Path
from codecarena.checkpoints import cache_dir
from codecarena.codecs.dac.adapter import ADAPTER, CONFIG_16KHZ, SYNTHETIC_VERSION, build_model
from codecarena.specs import parse_spec

MARKER = Path(os.environ["MARKER"])

class Planted:
    def __reduce__(self):
        return (open, (str(MARKER), "w"))

FILE = cache_dir() / "synthetic" / "dac" / f"dac_16khz-v{SYNTHETIC_VERSION}-seed0.pt"
FILE.parent.mkdir(parents=True)
MAKE
opened = []
real_open = builtins.open
def spy(file, *args, **kwargs):
    if isinstance(file, (str, os.PathLike)) and Path(file) == FILE:
        opened.append(str(file))
    return real_open(file, *args, **kwargs)
builtins.open = io.open = spy
try:
    outcome = "loaded " + ADAPTER(parse_spec("dac:16khz"), "synthetic:0").load()["checkpoint"]["sha256"]
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
builtins.open = io.open = real_open
print(json.dumps({"outcome": outcome, "opens": len(opened), "ran": MARKER.exists(), "file": str(FILE)}))
"""
WEIGHTS = 'weights = io.BytesIO(); torch.save({"state_dict": build_model().state_dict(), ' \
          '"metadata": {"kwargs": dict(CONFIG_16KHZ)}}, weights)'
PACKAGE = 'package = io.BytesIO()\nwith torch.package.PackageExporter(package) as exporter:\n' \
          '    exporter.extern("io")\n    exporter.save_pickle("DAC", "DAC.pth", Planted())'
# One zip holding both: torch.load reads archive/data.pkl, torch.package reads archive/DAC/DAC.pth.
BOTH = f"""{WEIGHTS}
{PACKAGE}
import zipfile
with zipfile.ZipFile(FILE, "w") as both:
    for part in (weights, package):
        with zipfile.ZipFile(part) as zipped:
            for name in zipped.namelist():
                if name not in both.namelist():
                    both.writestr(name, zipped.read(name))
"""


def load_with_file(dac_env: dict[str, str], tmp_path: Path, make: str) -> dict[str, object]:
    env = {**os.environ, **dac_env, "XDG_CACHE_HOME": str(tmp_path / "cache"), "MARKER": str(tmp_path / "ran")}
    proc = subprocess.run([runtime_python(dac_env, "dac"), "-c", LOAD_WITH_FILE.replace("MAKE", make)],
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_package_hidden_in_a_weights_file_never_runs_and_the_file_is_read_once(
        dac_env: dict[str, str], tmp_path: Path) -> None:
    # DAC.load tries torch.package first: it would run the package even though the same file
    # passes a weights-only check. The adapter loads the weights and never looks at the package.
    result = load_with_file(dac_env, tmp_path, BOTH)
    assert result["ran"] is False
    assert result["outcome"] == "loaded " + hashlib.sha256(Path(str(result["file"])).read_bytes()).hexdigest()
    # Hashed and loaded from one read: no second open could see another file.
    assert result["opens"] == 1


@pytest.mark.parametrize("make", [
    # A DAC-format file carrying an object only an unpickler that runs code could load.
    'torch.save({"state_dict": build_model().state_dict(), '
    '"metadata": {"kwargs": {**CONFIG_16KHZ, "note": Planted()}}}, FILE)',
    # A torch.package, DAC.load's preferred format.
    f'{PACKAGE}\nFILE.write_bytes(package.getvalue())',
], ids=["pickled-object", "package"])
def test_a_checkpoint_that_is_not_plain_weights_is_refused_in_one_line(dac_env: dict[str, str], tmp_path: Path,
                                                                      make: str) -> None:
    result = load_with_file(dac_env, tmp_path, make)
    assert result["ran"] is False
    outcome = str(result["outcome"])
    assert outcome.startswith(f"ValueError: {result['file']}: not a plain weights file "
                              f"(torch.load with weights_only=True refused it: "), outcome
    assert "\n" not in outcome and outcome.endswith("; refusing to load")


def test_24_and_44_khz_configurations_pack_their_own_frame_rates(dac_env: dict[str, str], speech_dir: Path,
                                                                   tmp_path: Path) -> None:
    (speech_dir / "clip1.wav").unlink()  # one clip per configuration keeps the two big models affordable in CI
    out = tmp_path / "run"
    result = codecarena("run", "--input", speech_dir, "--weights", "synthetic", "--codec", "dac:24khz,n_quantizers=8",
                        "--codec", "dac:44khz", "--metrics", "none", "--warm-repeats", "0", "--out", out, env=dac_env)
    assert result.returncode == 0, result.stdout + result.stderr
    # (codec rate, hop, codebooks): upstream conf/final/24khz.yml and 44khz.yml.
    expected = {"dac:24khz,n_quantizers=8": (24000, 320, 8), "dac:44khz": (44100, 512, 9)}
    rows = rows_of(out)
    assert len(rows) == 2
    for row in rows:
        rate, hop, n_q = expected[row["codec"]]
        assert row["status"] == "ok" and row["replay_identical"] and row["decoded_samples"] == row["num_samples"]
        assert row["codec_facts"]["resampled_to"] == rate and row["model"]["frame_rate_hz"] == rate / hop
        (stream,) = read_payload(out / row["payload"]).streams
        resampled = int(row["num_samples"] * rate / 16000 + 0.5)  # soxr rounds to the nearest sample
        assert stream.shape == (n_q, math.ceil(resampled / hop)) and stream.bit_width == 10
        assert row["representation_bits"] == stream.shape[1] * n_q * 10
        assert row["checkpoint"]["file"] == f"dac_{row['codec'][4:9]}-v1-seed0.pt"
    too_many = codecarena("run", "--input", speech_dir, "--weights", "synthetic", "--codec", "dac:44khz,n_quantizers=12",
                          "--out", tmp_path / "bad", env=dac_env)
    assert too_many.returncode != 0 and "n_quantizers=12 is above 9" in too_many.stderr
