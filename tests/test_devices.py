"""Devices (--device): parsing, the recorded device facts, the runtime probe and its refusals. This
machine has no GPU and a CPU-only torch: CUDA paths are tested through refusals, torch's `meta`
device and, where a real CUDA is required, fakes that say so."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

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


LEARNED = "asr, distill_mos, dnsmos, plcmos, speaker_sim"


def test_a_device_nothing_of_the_run_can_use_is_refused_before_any_work(tmp_path: Path) -> None:
    """Issue 38 (7): --device cuda with families that are not torch and metrics computed on the CPU ran on
    the CPU, its rows saying `applied: false` and the console nothing. Now it is refused at once, naming
    the flag typed and why, and nothing is written."""
    from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror

    need_mirror()
    (tmp_path / "in").mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    out = tmp_path / "run"
    dsp = ("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--codec", "opus:12k", "--out", out)
    run = codecarena(*dsp, "--metrics", "stoi,si_sdr", "--device", "cuda")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        "codecarena: error: --device cuda: nothing in this run can use it (pcm and opus are not torch families; "
        "stoi and si_sdr are computed on the CPU on any device); leave --device out to run on the CPU (a device "
        f"serves the torch codec families and the metrics {LEARNED})"]
    alone = codecarena(*dsp, "--metrics", "none", "--device", "cuda:1")
    assert alone.returncode == 2 and alone.stderr.strip() == (
        "codecarena: error: --device cuda:1: nothing in this run can use it (pcm and opus are not torch families; "
        "it computes no metrics); leave --device out to run on the CPU (a device serves the torch codec families and "
        f"the metrics {LEARNED})")
    # --metric-device is asked only of the metrics; --device with it given, only of the families.
    metrics = codecarena(*dsp, "--metrics", "stoi", "--metric-device", "cuda")
    assert metrics.returncode == 2 and metrics.stderr.strip() == (
        "codecarena: error: --metric-device cuda: nothing in this run can use it (stoi is computed on the CPU on any "
        f"device); leave --metric-device out to run on the CPU (a device serves the torch codec families and the "
        f"metrics {LEARNED})")
    codecs = codecarena(*dsp, "--metrics", "stoi", "--device", "mps", "--metric-device", "cpu")
    assert codecs.returncode == 2 and codecs.stderr.strip().startswith(
        "codecarena: error: --device mps: nothing in this run can use it (pcm and opus are not torch families); ")
    assert not out.exists()


def test_a_device_refusal_comes_before_the_set_is_read_or_a_metric_model_verified(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38 (7): with a torch metric, --device cuda was refused only after the set was read and the
    metric models verified (about 26 s), naming --metric-device, which the user had not typed."""
    import torch

    from codecarena import selection
    from codecarena.pipeline.prepare import Selection, prepare

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")

    def work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("work done before the device was checked")

    monkeypatch.setattr(selection, "evaluation_set", work)
    monkeypatch.setattr(selection, "scorer", work)
    monkeypatch.setattr(selection, "runtimes", work)
    chosen = Selection(codecs=("pcm:16",), input=tmp_path, metrics="stoi,distill_mos", device="cuda",
                       out=str(tmp_path / "run"))
    with pytest.raises(selection.SelectionError) as refused:
        prepare(chosen)
    assert str(refused.value).startswith(
        f"--device cuda: distill_mos (torch): cuda requested but the scoring environment's torch {torch.__version__} "
        "(a build without CUDA) sees no CUDA device; ask for --metric-device cpu")
    with pytest.raises(selection.SelectionError, match="^--metric-device cuda:0: distill_mos \\(torch\\)"):
        prepare(Selection(codecs=("pcm:16",), input=tmp_path, metrics="distill_mos", metric_device="cuda:0",
                          out=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()


def test_the_run_says_at_the_start_which_families_and_metrics_run_where(tmp_path: Path) -> None:
    """Issue 38 (7): one line before the first row, only when a device other than the CPU was asked for
    (no GPU here: the plan is assembled, not checked against this machine)."""
    from conftest import MIRROR, SHORT_CLIPS, need_mirror

    from codecarena.commands.run_view import opening
    from codecarena.console import console
    from codecarena.input_sets import load_input_dir
    from codecarena.pipeline.plan import assemble
    from codecarena.runtime.limits import StageLimits
    from codecarena.specs import parse_configuration

    need_mirror()
    (tmp_path / "in").mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    specs = tuple(parse_configuration(s) for s in ("encodec:1.5k", "pcm:16", "opus:12k"))

    def said(**plan: Any) -> list[str]:
        run = assemble(load_input_dir(tmp_path / "in"), specs, tmp_path / "run", StageLimits(1 << 30),
                       metrics=["stoi", "dnsmos"], **plan)
        with console.capture() as captured:
            opening(run)
        return [line for line in captured.get().splitlines() if line.startswith("devices:")]

    assert said(device="cuda", metric_device="cuda") == [
        "devices: on cuda: codecs encodec; metrics dnsmos; on the CPU: codecs pcm, opus (not torch families); metrics "
        "stoi (computed on the CPU on any device)"]
    assert said(device="cuda:0", metric_device="cpu") == [
        "devices: on cuda:0: codecs encodec; on the CPU: codecs pcm, opus (not torch families); metrics stoi, dnsmos"]
    assert said(device="cpu", metric_device="cpu") == []


def test_rows_and_plan_record_the_device_and_another_device_is_not_a_resume(tmp_path: Path,
                                                                            torch_codec: dict[str, str]) -> None:
    from conftest import codecarena, rows_of

    out = tmp_path / "run"
    args = ("run", "--input", tmp_path / "in", "--codec", "ttop8:q8", "--codec", "pcm:16", "--metrics", "none",
            "--out", out)
    run = codecarena(*args, env=torch_codec)
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads((out / "run.json").read_text())
    assert record["version"] == 10
    assert (record["plan"]["device"], record["plan"]["metric_device"]) == ("cpu", "cpu")
    rows = {r["family"]: r for r in rows_of(out)}
    torch_row, pcm_row = rows["ttop8"], rows["pcm"]
    assert torch_row["version"] == 11 and torch_row["status"] == "ok"
    assert torch_row["metric_devices"] == pcm_row["metric_devices"] == {}  # no metrics
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


def test_learned_metrics_on_cuda_are_refused_per_library_before_any_row(tmp_path: Path) -> None:
    """No GPU here: each learned metric's library, asked in the scoring environment, gives its own
    reason (CTranslate2's device count, onnxruntime's providers, torch's build), in one line."""
    import ctranslate2
    import onnxruntime
    import torch
    from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror

    if torch.cuda.is_available() or ctranslate2.get_cuda_device_count():
        pytest.skip("this machine has a CUDA device")
    need_mirror()
    (tmp_path / "in").mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    out = tmp_path / "run"
    run = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--metrics", "stoi,dnsmos,distill_mos,asr",
                     "--device", "cuda", "--out", out)
    assert run.returncode == 2
    providers = ", ".join(onnxruntime.get_available_providers())
    assert run.stderr.strip() == (  # the flag the user typed (issue 38, 7): --device, which chose the metric device
        "codecarena: error: --device cuda: "
        f"dnsmos (onnxruntime): onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider (available: "
        f"{providers}); distill_mos (torch): cuda requested but the scoring environment's torch {torch.__version__} "
        "(a build without CUDA) sees no CUDA device; "
        f"asr (faster-whisper/CTranslate2): CTranslate2 {ctranslate2.__version__} sees 0 CUDA devices "
        "(ctranslate2.get_cuda_device_count()); "
        "ask for --metric-device cpu (the codecs still run on --device) or leave these metrics out with --metrics")
    assert not out.exists()
    # MPS: torch would be asked; CTranslate2 and onnxruntime have no MPS backend at all.
    mps = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--metrics", "dnsmos,asr",
                     "--metric-device", "mps", "--out", out)
    assert mps.returncode == 2 and mps.stderr.strip() == (
        "codecarena: error: --metric-device mps: dnsmos (onnxruntime): onnxruntime has no MPS backend (torch metrics "
        "can use mps; this one cannot); asr (faster-whisper/CTranslate2): faster-whisper/CTranslate2 has no MPS "
        "backend (torch metrics can use mps; this one cannot); ask for --metric-device cpu (the codecs still run on "
        "--device) or leave these metrics out with --metrics")
    bad = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--device", "gpu", "--out", out)
    assert bad.returncode == 2 and bad.stderr.strip() == ("codecarena: error: --device 'gpu': not a device; accepted: "
                                                          "cpu, cuda, cuda:N (N = 0, 1, ...) or mps")
    score = codecarena("score", tmp_path / "in", tmp_path / "in", "--metrics", "distill_mos", "--device", "cuda:0")
    assert score.returncode == 2 and "error: --device cuda:0: distill_mos (torch): cuda:0 requested" in score.stderr
    assert not out.exists()


def test_compare_across_devices_counts_identical_payloads_and_how_far_metrics_moved(tmp_path: Path) -> None:
    """Two runs of one CPU run's rows, B's edited to say it ran on cuda:0 (no GPU here): compare says
    the devices differ, counts the byte-identical payloads and reports the metric movement (0 here)."""
    from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror

    from codecarena.results.compare import compare_runs

    need_mirror()
    (tmp_path / "in").mkdir()
    for clip in SHORT_CLIPS:
        shutil.copy(MIRROR / clip, tmp_path / "in" / clip)
    a = tmp_path / "a"
    run = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--metrics", "stoi", "--out", a)
    assert run.returncode == 0, run.stdout + run.stderr
    b = tmp_path / "b"
    shutil.copytree(a, b)
    rows = [json.loads(line) for line in (b / "rows.jsonl").read_text().splitlines()]
    for row in rows:
        row["device"]["device"] = "cuda:0"
    (b / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = compare_runs(a, b)
    (comparison,) = result["comparisons"]
    assert comparison["devices"] == {"a": "cpu", "b": "cuda:0", "pairs": 2, "payload_identical": 2,
                                     "metric_movement": [{"metric": "stoi", "n": 2, "mean_abs_diff": 0.0,
                                                          "max_abs_diff": 0.0}]}
    assert any("ran on cpu in A and cuda:0 in B" in note and "2 of 2 payloads byte-identical" in note
               for note in result["notes"])
    assert compare_runs(a, a)["comparisons"][0]["devices"] is None


def test_a_torch_adapter_puts_its_tensors_on_its_device() -> None:
    """Real torch on its `meta` device (no GPU here): use_device and to_device move what they are given."""
    torch = pytest.importorskip("torch")
    from codecarena.plugin.torch import TorchAdapter, rvq_encoded

    class Tiny(TorchAdapter):
        def encode(self, audio):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def decode(self, payload):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    adapter = Tiny.__new__(Tiny)
    assert adapter.device == torch.device("cpu")
    adapter.use_device("meta")
    assert adapter.to_device(torch.zeros(3)).device.type == "meta"
    assert adapter.to_device(torch.nn.Linear(2, 2).weight).device.type == "meta"
    # Codes come back to the CPU whatever device made them, their values and shape kept.
    codes = torch.arange(6, dtype=torch.int64).reshape(1, 2, 3)
    for made_on in (codes, CodesOnAGpu(codes)):
        encoded = rvq_encoded(made_on, 4)  # type: ignore[arg-type]
        (stream,) = encoded.streams
        assert (stream.name, stream.bit_width, stream.shape) == ("codes", 4, (2, 3))
        assert stream.values.tolist() == [0, 1, 2, 3, 4, 5]
        assert encoded.facts == {"frames": 3, "quantizers": 2}


class CodesOnAGpu:
    """FAKE: stands for an int64 code tensor on cuda:0 (no GPU here). As a real one, it indexes on its
    device and refuses `.numpy()` with torch's message; `.cpu()` gives the codes as a CPU tensor."""

    def __init__(self, codes: Any) -> None:
        self.codes = codes

    def __getitem__(self, index: int) -> CodesOnAGpu:
        return CodesOnAGpu(self.codes[index])

    def cpu(self) -> Any:
        return self.codes

    def numpy(self) -> Any:
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                        "to host memory first.")


class FakeCuda:
    """FAKE: stands for torch.cuda (no GPU here); records the calls the worker makes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def synchronize(self) -> None:
        self.calls.append("synchronize")

    def max_memory_allocated(self) -> int:
        return 123


def test_the_worker_synchronises_cuda_around_every_timed_call_and_reads_its_peak() -> None:
    from codecarena import worker

    assert worker.cuda_of("cpu") is None and worker.cuda_of("mps") is None
    fake = FakeCuda()
    times = {"compute_s": 0.0}
    assert worker._timed(lambda: fake.calls.append("call") or 7, times, "compute_s", fake) == 7
    assert fake.calls == ["synchronize", "call", "synchronize"]
    warm: list[float] = []
    worker._warm(lambda: fake.calls.append("call"), 2, warm, fake)
    assert fake.calls[3:] == ["synchronize", "call", "synchronize"] * 2 and len(warm) == 2
    assert worker._peak_device_memory(fake) == 123 and worker._peak_device_memory(None) is None


def test_a_family_that_is_not_torch_refuses_another_device() -> None:
    from codecarena import worker

    worker.use_device(object(), "opus", "cpu")
    with pytest.raises(ValueError, match="^opus is not a torch family: it runs on the CPU only, not on cuda:0$"):
        worker.use_device(object(), "opus", "cuda:0")


def test_a_version_6_row_reads_with_no_device_and_still_hashes_to_its_digest() -> None:
    from test_channel import _V5_ROW

    from codecarena.files import sha256_json
    from codecarena.results.schema import SchemaError, parse_row

    v6 = {**_V5_ROW, "version": 6, "channel": None}
    row = parse_row({**v6, "row_sha256": None}).to_dict()
    del row["device"], row["metric_devices"], row["condition"], row["input_metrics"], row["row_sha256"]
    parsed = parse_row({**v6, "row_sha256": sha256_json(row)})
    assert parsed.device is None and parsed.metric_devices is None and parsed.intact
    with pytest.raises(SchemaError, match="missing keys \\['device'\\]"):
        parse_row({**v6, "version": 7, "row_sha256": None})
    # Version 8 added metric_devices: a version 7 row reads with null there, a version 8 row must have it.
    v7 = {**v6, "version": 7, "device": None}
    row7 = parse_row({**v7, "row_sha256": None}).to_dict()
    del row7["metric_devices"], row7["condition"], row7["input_metrics"], row7["row_sha256"]
    assert parse_row({**v7, "row_sha256": sha256_json(row7)}).intact
    with pytest.raises(SchemaError, match="missing keys \\['metric_devices'\\]"):
        parse_row({**v7, "version": 8, "row_sha256": None})


def _as_made_on(out: Path, device: str) -> None:
    """Edit a CPU run of ttop8 and pcm to say it was made with --device DEVICE (no GPU here), resealed so
    that the plain audit still passes: the torch row ran there, the pcm row on the CPU."""
    from codecarena.results.record import parse_run_record
    from codecarena.results.schema import parse_row

    rows = []
    for line in (out / "rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        row["device"]["requested"] = device
        if row["device"]["applied"]:
            row["device"]["device"] = device
            row["device"]["info"] = {**row["device"]["info"], "device": device, "kind": device.split(":")[0]}
        rows.append(parse_row({**row, "row_sha256": None}).sealed().to_dict())
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = json.loads((out / "run.json").read_text())
    record["plan"]["device"] = device
    record["plan_sha256"] = parse_run_record(record).plan.sha256
    (out / "run.json").write_text(json.dumps(record))


def test_replay_and_stability_run_on_the_rows_device_or_are_refused(tmp_path: Path,
                                                                    torch_codec: dict[str, str]) -> None:
    import torch
    from conftest import codecarena

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "run"
    run = codecarena("run", "--input", tmp_path / "in", "--codec", "ttop8:q8", "--codec", "pcm:16", "--metrics",
                     "none", "--out", out, env=torch_codec)
    assert run.returncode == 0, run.stdout + run.stderr
    _as_made_on(out, "cuda:0")
    plain = codecarena("audit", out, env=torch_codec)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    refused = codecarena("audit", out, "--replay", env=torch_codec)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"codecarena: error: audit --replay: the rows of {out} were made on cuda:0 and their replay needs it: "
        f"{sys.executable}: cuda:0 requested but this runtime's torch {torch.__version__} (a build without CUDA) sees "
        "no CUDA device; pass --replay-device cpu to replay them on the CPU as a cross-device comparison"]
    crossed = codecarena("audit", out, "--replay", "--replay-device", "cpu", env=torch_codec)
    assert crossed.returncode == 0, crossed.stdout + crossed.stderr
    assert ("note: replay on cpu of 1 payload made on cuda:0: 1 decoded byte-identical to the run's audio, 0 "
            "differ (a cross-device comparison") in crossed.stdout
    elsewhere = codecarena("audit", out, "--replay", "--replay-device", "cuda:1", env=torch_codec)
    assert elsewhere.returncode == 2 and elsewhere.stderr.startswith("codecarena: error: --replay-device cuda:1: ")
    alone = codecarena("audit", out, "--replay-device", "cpu", env=torch_codec)
    assert alone.returncode == 2 and "--replay-device chooses where --replay decodes; add --replay" in alone.stderr

    stability = codecarena("ledger", out, "--stability", env=torch_codec)
    assert stability.returncode == 2
    assert stability.stderr.strip().splitlines() == [
        f"codecarena: error: ledger --stability: the rows of {out} were made on cuda:0 and their stability encodes "
        f"need it: {sys.executable}: cuda:0 requested but this runtime's torch {torch.__version__} (a build without "
        "CUDA) sees no CUDA device; stability compares new encodes with the rows' own payloads, so it is measured on "
        "the run's device only"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing written


def test_a_run_made_before_the_device_fields_resumes_on_the_cpu_and_is_refused_elsewhere(tmp_path: Path) -> None:
    """A run.json version 6 plan names no device and its version 6 rows none: all of it ran on the CPU,
    so the same command resumes it (keeping its rows), and another device is refused as one."""
    from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror, rows_of

    from codecarena.results.record import parse_run_record
    from codecarena.results.schema import parse_row

    need_mirror()
    (tmp_path / "in").mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    out = tmp_path / "run"
    args = ("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--metrics", "stoi", "--out", out)
    first = codecarena(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    # As the version before the device fields wrote it: no device in the plan or the rows.
    record = json.loads((out / "run.json").read_text())
    del record["plan"]["device"], record["plan"]["metric_device"]
    record["version"] = 6
    record["plan_sha256"] = parse_run_record(record).plan.sha256
    (out / "run.json").write_text(json.dumps(record))
    (row,) = rows_of(out)
    old = {k: v for k, v in row.items() if k not in ("device", "metric_devices")} | {"version": 6}
    old["row_sha256"] = parse_row({**old, "row_sha256": None}).content_sha256
    (out / "rows.jsonl").write_text(json.dumps(old) + "\n")
    assert codecarena("audit", out).returncode == 0

    # The same run on cuda (assembled: on this machine a device nothing of it uses is refused before the
    # directory is looked at, issue 38, 7) is refused as another configuration.
    from codecarena.input_sets import load_input_dir
    from codecarena.pipeline.plan import RunError, assemble
    from codecarena.pipeline.resume import follow
    from codecarena.runtime.limits import StageLimits
    from codecarena.specs import parse_configuration

    elsewhere = assemble(load_input_dir(tmp_path / "in"), (parse_configuration("pcm:16"),), out, StageLimits(1 << 30),
                         metrics=["stoi"], device="cuda", metric_device="cuda")
    with pytest.raises(RunError) as refused:
        follow(elsewhere)
    assert str(refused.value) == (f"{out}: holds a run with --device cpu, this command asks for cuda: another device "
                                  "is another configuration, never a resume; use a new --out directory")
    again = codecarena(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = json.loads((out / "run.json").read_text())
    assert resumed["version"] == 10 and (resumed["plan"]["device"], resumed["plan"]["metric_device"]) == ("cpu", "cpu")
    assert (resumed["execution"]["rows_resumed"], resumed["execution"]["rows_computed"]) == (1, 0)
    assert resumed["history"][-1]["plan_sha256"] == record["plan_sha256"]
    (kept,) = rows_of(out)
    assert kept["version"] == 6 and kept["row_sha256"] == old["row_sha256"]
    assert codecarena("audit", out).returncode == 0
