"""Learned metrics on the metric device (metrics/engines.py). This machine has no GPU: the CPU path runs
for real and is recorded; CUDA is refused by each library's own answer; onnxruntime's silent fallback is
caught both for real (its CUDA provider is absent here) and through a labelled fake session."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from codecarena.metrics.engines import (ENGINE_OF, MetricDeviceError, answer, devices_of, onnx_providers,
                                        parse_answer, require_providers)


class FallenBackSession:
    """FAKE: an onnxruntime InferenceSession asked for CUDA whose CUDA provider failed to load (a missing
    cuDNN, say), so onnxruntime made it on the CPU with a warning only."""

    def get_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]


class CudaSession:
    """FAKE: a session that did get the CUDA provider (onnxruntime lists CPU after it for unsupported nodes)."""

    def get_providers(self) -> list[str]:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_a_session_that_fell_back_to_the_cpu_is_refused() -> None:
    with pytest.raises(MetricDeviceError, match=r"^DNSMOS model m\.onnx: onnxruntime created the session with "
                                                r"CPUExecutionProvider, not CUDAExecutionProvider: it would run on "
                                                r"another device than cuda:1$"):
        require_providers(FallenBackSession(), "cuda:1", "DNSMOS model m.onnx")
    session = CudaSession()
    assert require_providers(session, "cuda:1", "m") is session
    assert onnx_providers("cuda:1") == [("CUDAExecutionProvider", {"device_id": 1})]
    assert onnx_providers("cuda") == [("CUDAExecutionProvider", {"device_id": 0})]
    with pytest.raises(MetricDeviceError, match="onnxruntime has no MPS backend"):
        onnx_providers("mps")


def test_dnsmos_on_cuda_without_the_provider_is_refused_not_run_on_the_cpu() -> None:
    """The real onnxruntime here has no CUDA provider: asked for one, it warns and makes a CPU session."""
    onnxruntime = pytest.importorskip("onnxruntime")
    from codecarena.metrics.dnsmos import Dnsmos

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider")
    assert Dnsmos("cpu")._p835.get_providers() == ["CPUExecutionProvider"]  # type: ignore[attr-defined]
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"), \
            pytest.raises(MetricDeviceError, match="created the session with CPUExecutionProvider, not CUDA"):
        Dnsmos("cuda:0")


def test_plcmos_on_cuda_without_the_provider_is_refused_not_run_on_the_cpu() -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("speechmos")
    from codecarena.metrics.plcmos import Plcmos

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider")
    assert Plcmos("cpu")._session.get_providers() == ["CPUExecutionProvider"]  # type: ignore[attr-defined]
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"), \
            pytest.raises(MetricDeviceError, match="^PLCMOS model plcmos_v2.onnx: onnxruntime created the session "
                                                   "with CPUExecutionProvider, not CUDA"):
        Plcmos("cuda:0")


def test_devices_of_puts_only_the_learned_metrics_on_the_metric_device() -> None:
    assert devices_of(("stoi", "visqol", "pitch", "mcd", "warp_q", "dnsmos", "plcmos", "asr", "distill_mos",
                       "speaker_sim"), "cuda:1") == {
        "stoi": "cpu", "visqol": "cpu", "pitch": "cpu", "mcd": "cpu", "warp_q": "cpu", "dnsmos": "cuda:1",
        "plcmos": "cuda:1", "asr": "cuda:1", "distill_mos": "cuda:1", "speaker_sim": "cuda:1"}
    assert set(devices_of(ENGINE_OF, "cpu").values()) == {"cpu"}


def test_the_library_answers_in_this_environment() -> None:
    """What the probe subprocess prints, asked here: the CPU is always usable, CUDA per library."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    torch = pytest.importorskip("torch")
    assert answer("cpu", ["ctranslate2", "onnxruntime", "torch"])["answers"] == {
        "ctranslate2": "", "onnxruntime": "", "torch": ""}
    if torch.cuda.is_available() or ctranslate2.get_cuda_device_count():
        pytest.skip("this machine has a CUDA device")
    got = answer("cuda:3", ["ctranslate2", "torch"])
    assert got["answers"]["ctranslate2"] == (f"CTranslate2 {ctranslate2.__version__} sees 0 CUDA devices "
                                             "(ctranslate2.get_cuda_device_count())")
    assert got["answers"]["torch"].startswith("cuda:3 requested but the scoring environment's torch")
    assert parse_answer(json.dumps(got), "cuda:3", ["torch", "ctranslate2"]) == got["answers"]
    for bad in ("", "{}", json.dumps({**got, "version": 2}), json.dumps({**got, "device": "cuda"}),
                json.dumps({**got, "answers": {"torch": ""}})):
        with pytest.raises(MetricDeviceError, match="gave no answer of version 1"):
            parse_answer(bad, "cuda:3", ["torch", "ctranslate2"])


def test_torch_metrics_put_their_models_on_the_metric_device() -> None:
    """Real torch on its `meta` device (no GPU here): Distill-MOS and the speaker encoder move there."""
    if importlib.util.find_spec("distillmos") is None or importlib.util.find_spec("resemblyzer") is None:
        pytest.skip("the metrics extra is not installed")  # distillmos imports only through codecarena's loader
    from codecarena.metrics.distill_mos import DistillMos
    from codecarena.metrics.speaker import SpeakerSimilarity

    assert next(DistillMos("meta")._model.parameters()).device.type == "meta"
    assert next(SpeakerSimilarity("meta")._encoder.parameters()).device.type == "meta"
    assert next(SpeakerSimilarity("cpu")._encoder.parameters()).device.type == "cpu"


def test_whisper_records_its_device_and_cuda_is_ctranslate2s_own_refusal() -> None:
    ctranslate2 = pytest.importorskip("ctranslate2")
    from test_content import need_model

    from codecarena.metrics.transcriber import Transcriber

    cpu = Transcriber(need_model())
    assert (cpu.identity["device"], cpu.identity["compute_type"]) == ("cpu", "float32")
    if ctranslate2.get_cuda_device_count():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(RuntimeError, match="CUDA"):
        Transcriber(need_model(), device="cuda:0")
    with pytest.raises(MetricDeviceError, match="CTranslate2 runs on the CPU or CUDA, not on mps"):
        Transcriber(need_model(), device="mps")


def test_the_scoring_config_carries_the_metric_device_strictly() -> None:
    from codecarena.metrics.guarded import ScoringProtocolError, WorkerConfig, decode_config, encode

    config = WorkerConfig(("stoi", "dnsmos"), (("en", "tiny.en"),), "", "cuda:0")
    assert decode_config(encode(config)) == config
    data = json.loads(encode(config))
    for bad in ({**data, "metric_device": "gpu"}, {k: v for k, v in data.items() if k != "metric_device"},
                {**data, "extra": 1}):
        with pytest.raises(ScoringProtocolError):
            decode_config(json.dumps(bad))


def test_a_run_records_the_device_of_every_metric_and_the_audit_checks_it(tmp_path: Path) -> None:
    from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror, rows_of

    from codecarena.results.schema import SchemaError, parse_row

    need_mirror()
    (tmp_path / "in").mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    out = tmp_path / "run"
    run = codecarena("run", "--input", tmp_path / "in", "--codec", "pcm:16", "--metrics", "stoi,dnsmos", "--out", out)
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = rows_of(out)
    assert row["version"] == 11 and row["metric_devices"] == {"stoi": "cpu", "dnsmos": "cpu"}
    assert row["metrics"]["dnsmos_ovrl"]["status"] == "ok"
    assert codecarena("audit", out).returncode == 0
    with pytest.raises(SchemaError, match="metric_devices.dnsmos: 'cuda:00' is not spelled canonically"):
        parse_row({**row, "metric_devices": {"dnsmos": "cuda:00"}})
    # A row that says it was scored elsewhere than the plan puts it (resealed, so only the device is wrong).
    moved = parse_row({**row, "metric_devices": {"stoi": "cpu", "dnsmos": "cuda:0"}, "row_sha256": None}).sealed()
    (out / "rows.jsonl").write_text(json.dumps(moved.to_dict()) + "\n")
    audit = codecarena("audit", out)
    assert audit.returncode == 1
    assert "its metrics dnsmos were computed on cuda:0; the plan's metric device cpu puts them on cpu" in audit.stdout
