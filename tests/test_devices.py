"""Devices (--device): parsing, the recorded device facts, the runtime probe and its refusals. This
machine has no GPU and a CPU-only torch: CUDA paths are tested through refusals, torch's `meta`
device and, where a real CUDA is required, fakes that say so."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from codecarena.devices import SETTINGS, DeviceError, DeviceInfo, parse_device, parse_probe_output, probe

CPU_INFO = {"device": "cpu", "kind": "cpu", "name": "Some CPU", "driver": None, "torch": "2.13.0+cpu",
            "cuda": None, "cudnn": None,
            "settings": {"matmul_allow_tf32": False, "cudnn_allow_tf32": True, "cudnn_benchmark": False,
                         "cudnn_deterministic": False, "deterministic_algorithms": False,
                         "float32_matmul_precision": "highest", "cublas_workspace_config": None, "threads": 2}}


@pytest.mark.parametrize(("text", "canonical"), [("cpu", "cpu"), ("CUDA", "cuda"), ("cuda:0", "cuda:0"),
                                                  ("cuda:007", "cuda:7"), (" mps ", "mps")])
def test_parse_device_canonical(text: str, canonical: str) -> None:
    assert parse_device(text) == canonical


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cuda:x", "cuda0", "meta", "cpu:0", ""])
def test_parse_device_refuses_other_forms(text: str) -> None:
    with pytest.raises(DeviceError, match=r"--device .*accepted: cpu, cuda, cuda:N"):
        parse_device(text)


def test_device_info_round_trips_and_parses_strictly() -> None:
    info = DeviceInfo.from_dict(CPU_INFO)
    assert info.to_dict() == CPU_INFO
    assert json.loads(json.dumps(info.to_dict())) == CPU_INFO
    bad = [
        {**CPU_INFO, "extra": 1},
        {k: v for k, v in CPU_INFO.items() if k != "driver"},
        {**CPU_INFO, "device": "cuda:00"},
        {**CPU_INFO, "kind": "cuda"},
        {**CPU_INFO, "torch": 2},
        {**CPU_INFO, "cuda": 12},
        {**CPU_INFO, "settings": {**CPU_INFO["settings"], "threads": True}},
        {**CPU_INFO, "settings": {**CPU_INFO["settings"], "cudnn_benchmark": 0}},
        {**CPU_INFO, "settings": {k: v for k, v in CPU_INFO["settings"].items() if k != "threads"}},
        [CPU_INFO],
    ]
    for data in bad:
        with pytest.raises(DeviceError):
            DeviceInfo.from_dict(data)


def test_probe_of_this_runtime_on_cpu_records_the_settings() -> None:
    info = probe(sys.executable, "cpu")
    torch = pytest.importorskip("torch")
    assert info.device == info.kind == "cpu"
    assert info.torch == torch.__version__
    assert set(info.settings) == set(SETTINGS)
    assert info.settings["deterministic_algorithms"] is torch.are_deterministic_algorithms_enabled()


def test_probe_refuses_cuda_on_a_runtime_without_it() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(DeviceError) as caught:
        probe(sys.executable, "cuda")
    message = str(caught.value)
    assert message.startswith(f"{sys.executable}: cuda requested but this runtime's torch {torch.__version__}")
    assert "\n" not in message


def test_probe_names_an_interpreter_that_cannot_run() -> None:
    with pytest.raises(DeviceError, match=r"^/nonexistent/python: cannot run the device probe"):
        probe("/nonexistent/python", "cpu")


def test_probe_output_is_parsed_strictly() -> None:
    good = json.dumps({"version": 1, "ok": True, "error": "", "info": CPU_INFO})
    assert parse_probe_output("torch says hello\n" + good, "py", "cpu").name == "Some CPU"
    for text in ["", "not json", json.dumps({"version": 2, "ok": True, "error": "", "info": CPU_INFO}),
                 json.dumps({"version": 1, "ok": True, "info": CPU_INFO})]:
        with pytest.raises(DeviceError, match="^py: the device probe for cpu gave no answer"):
            parse_probe_output(text, "py", "cpu")
    with pytest.raises(DeviceError, match="^py: no GPU here$"):
        parse_probe_output(json.dumps({"version": 1, "ok": False, "error": "no GPU here", "info": None}), "py", "cpu")


# A user codec whose adapter is a TorchAdapter (declared `torch = true`), running in the harness's own
# interpreter: the 8-bit quantiser of test_plugins, computed by torch on the adapter's device.
TORCH_TOP8 = '''
import numpy as np
import torch

from codecarena.plugin import CodeStream, Decoded, Encoded, Payload, from_int16, to_int16
from codecarena.plugin.torch import TorchAdapter


class TorchTop8(TorchAdapter):
    input_rate = 16000

    def load(self):
        self.model = torch.nn.Identity().to(self.device)
        return {"parameters": 0}

    def encode(self, audio):
        x = self.to_device(torch.from_numpy(to_int16(audio).astype(np.int64)))
        codes = ((self.model(x) + 32768) >> 8).cpu().numpy()
        return Encoded(streams=(CodeStream("codes", 8, (len(codes),), codes.astype(np.uint64)),), side_info={})

    def decode(self, payload: Payload):
        values = self.to_device(torch.from_numpy(payload.code_stream("codes").values.astype(np.int64)))
        pcm = ((values << 8) - 32768 + 128).cpu().numpy().astype(np.int16)
        return Decoded(from_int16(pcm), self.input_rate)


ADAPTER = TorchTop8
'''

TORCH_DECLARATION = '''api_version = 1
name = "ttop8"
description = "a test codec computed by torch"
configs = ["q8"]
default_config = "q8"
supported_weights = "none"
torch = true
'''


@pytest.fixture
def torch_codec(tmp_path: Path) -> dict[str, str]:
    """A data home holding the user codec ttop8 (torch = true) and a folder of one clip."""
    pytest.importorskip("torch")
    from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror

    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    folder = tmp_path / "codec"
    folder.mkdir()
    (folder / "ttop8.py").write_text(TORCH_TOP8)
    (folder / "ttop8.toml").write_text(TORCH_DECLARATION)
    added = codecarena("codec", "add", "ttop8", "--module", folder / "ttop8.py", env=env)
    assert added.returncode == 0, added.stdout + added.stderr
    need_mirror()
    (tmp_path / "in").mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    return env


def test_cuda_on_a_runtime_without_it_is_refused_before_any_row(tmp_path: Path, torch_codec: dict[str, str]) -> None:
    import torch

    from conftest import codecarena

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "run"
    run = codecarena("run", "--input", tmp_path / "in", "--codec", "ttop8:q8", "--codec", "pcm:16", "--metrics", "none",
                     "--device", "cuda", "--out", out, env=torch_codec)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"codecarena: error: --device cuda: ttop8's runtime cannot run there: {sys.executable}: cuda requested but "
        f"this runtime's torch {torch.__version__} (a build without CUDA) sees no CUDA device"]
    assert not out.exists()
    # A family that is not torch runs on the CPU: a run of it alone asks no runtime about the device.
    alone = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--metrics", "none", "--device", "cuda",
                       "--out", tmp_path / "pcm", env=torch_codec)
    assert alone.returncode == 0, alone.stdout + alone.stderr


def test_rows_and_plan_record_the_device_and_another_device_is_not_a_resume(tmp_path: Path,
                                                                            torch_codec: dict[str, str]) -> None:
    from conftest import codecarena, rows_of

    out = tmp_path / "run"
    args = ("run", "--input", tmp_path / "in", "--codec", "ttop8:q8", "--codec", "pcm:16", "--metrics", "none",
            "--out", out)
    run = codecarena(*args, env=torch_codec)
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads((out / "run.json").read_text())
    assert record["version"] == 7
    assert (record["plan"]["device"], record["plan"]["metric_device"]) == ("cpu", "cpu")
    rows = {r["family"]: r for r in rows_of(out)}
    torch_row, pcm_row = rows["ttop8"], rows["pcm"]
    assert torch_row["version"] == 7 and torch_row["status"] == "ok"
    assert {k: torch_row["device"][k] for k in ("requested", "device", "applied")} == \
        {"requested": "cpu", "device": "cpu", "applied": True}
    info = DeviceInfo.from_dict(torch_row["device"]["info"])
    assert info.kind == "cpu" and set(info.settings) == set(SETTINGS)
    assert torch_row["device"]["peak_device_memory_bytes"] == {"encode": None, "decode": None, "replay": None}
    assert pcm_row["device"] == {"requested": "cpu", "device": "cpu", "applied": False, "info": None,
                                 "peak_device_memory_bytes": {"encode": None, "decode": None, "replay": None}}
    assert codecarena("audit", out, env=torch_codec).returncode == 0

    # The same command into a run made on another device (here: its record edited to say mps, as a
    # run made on a Mac would) is refused before any row, whatever else agrees.
    edited = json.loads((out / "run.json").read_text())
    edited["plan"]["device"] = "mps"
    (out / "run.json").write_text(json.dumps(edited))
    before = (out / "rows.jsonl").read_bytes()
    again = codecarena(*args, env=torch_codec)
    assert again.returncode == 2
    assert again.stderr.strip() == (f"codecarena: error: {out}: holds a run with --device mps, this command asks for "
                                    "cpu: another device is another configuration, never a resume; use a new --out "
                                    "directory")
    assert (out / "rows.jsonl").read_bytes() == before


def test_learned_metrics_are_refused_on_another_device_before_any_row(tmp_path: Path) -> None:
    from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror

    need_mirror()
    (tmp_path / "in").mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    out = tmp_path / "run"
    run = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--metrics", "stoi,distill_mos",
                     "--device", "cuda", "--out", out)
    assert run.returncode == 2
    assert run.stderr.strip() == ("codecarena: error: --metric-device cuda: the learned metrics distill_mos run on the "
                                  "CPU only in this version; ask for --metric-device cpu (the codecs still run on "
                                  "--device) or leave them out with --metrics")
    assert not out.exists()
    bad = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--device", "gpu", "--out", out)
    assert bad.returncode == 2 and bad.stderr.strip() == ("codecarena: error: --device 'gpu': not a device; accepted: "
                                                          "cpu, cuda, cuda:N (N = 0, 1, ...) or mps")
    score = codecarena("score", tmp_path / "in", tmp_path / "in", "--metrics", "distill_mos", "--device", "cuda:0")
    assert score.returncode == 2 and "--metric-device cuda:0: the learned metrics distill_mos" in score.stderr
