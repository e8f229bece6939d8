"""Devices (--device): parsing, the recorded device facts, the runtime probe and its refusals. This
machine has no GPU and a CPU-only torch: CUDA paths are tested through refusals, torch's `meta`
device and, where a real CUDA is required, fakes that say so."""

from __future__ import annotations

import json
import sys

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
