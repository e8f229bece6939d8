"""Where learned metrics run (`--metric-device`): which library runs each one's model, whether that
library can use a device, and the device every metric's values are computed on.

Five metrics run a model through a library that can use a GPU: `asr` (Whisper through
faster-whisper/CTranslate2), `dnsmos` and `plcmos` (onnxruntime), `distill_mos` and `speaker_sim`
(torch). They run on the metric device. Every other metric runs on the CPU whatever the metric
device: the signal metrics, MCD and WARP-Q compute with NumPy/SciPy/SPTK/librosa, ViSQOL's lattice
mapper runs on LiteRT's CPU interpreter, and SwiftF0 (`pitch`) creates its own onnxruntime session
with the CPU provider only.

Before any row, `probe` asks each library of the selected metrics, in the interpreter the scoring
process runs (`python -m codecarena.metrics.engines DEVICE ENGINE...`), whether it can use the
device, and a library that cannot stops the command in one line: no metric ever falls back to the
CPU silently. The harness itself never imports these libraries for this.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from codecarena.devices import DeviceError, device_kind, parse_device
from codecarena.plural import counted

# metric -> the library that runs its model on the metric device; a metric not named runs on the CPU.
ENGINE_OF = {"asr": "ctranslate2", "dnsmos": "onnxruntime", "plcmos": "onnxruntime", "distill_mos": "torch",
             "speaker_sim": "torch"}
ENGINE_LABELS = {"ctranslate2": "faster-whisper/CTranslate2", "onnxruntime": "onnxruntime", "torch": "torch"}
PROBE_VERSION = 1
PROBE_TIMEOUT_S = 120.0
# Whisper's compute type on every device: float32, as on the CPU. float16 or int8 would change
# transcripts, and an ASR value is compared exactly (docs/metrics.md, "Rescoring").
ASR_COMPUTE_TYPE = "float32"


class MetricDeviceError(ValueError):
    """A metric library that cannot use the metric device, or a session that left it (one line)."""


def devices_of(metrics: Iterable[str], metric_device: str) -> dict[str, str]:
    """metric -> the device its values are computed on: the metric device for the five learned metrics
    above, the CPU for every other one."""
    return {name: metric_device if name in ENGINE_OF else "cpu" for name in metrics}


def device_index(device: str) -> int:
    """The CUDA device index CTranslate2 and onnxruntime take (`cuda` is device 0 for them, as it is
    torch's current device unless CUDA_VISIBLE_DEVICES says otherwise)."""
    return int(device.split(":")[1]) if ":" in device else 0


def check(engine: str, device: str) -> None:
    """MetricDeviceError with the library's own answer when `engine` cannot run on `device`."""
    kind = device_kind(device)
    if kind == "cpu":
        return
    if engine == "torch":
        from codecarena.device_probe import check_usable

        try:
            check_usable(device)
        except DeviceError as exc:
            raise MetricDeviceError(str(exc).replace("this runtime's torch", "the scoring environment's torch")) from None
        return
    if kind == "mps":
        raise MetricDeviceError(f"{ENGINE_LABELS[engine]} has no MPS backend (torch metrics can use mps; "
                                "this one cannot)")
    if engine == "ctranslate2":
        import ctranslate2

        count = ctranslate2.get_cuda_device_count()
        if device_index(device) >= count:
            raise MetricDeviceError(f"CTranslate2 {ctranslate2.__version__} sees {counted(count, 'CUDA device')} "
                                    "(ctranslate2.get_cuda_device_count())")
        try:
            types = ctranslate2.get_supported_compute_types("cuda", device_index(device))
        except (RuntimeError, ValueError) as exc:
            raise MetricDeviceError(f"CTranslate2 {ctranslate2.__version__} cannot use {device}: "
                                    f"{str(exc).splitlines()[0]}") from None
        if ASR_COMPUTE_TYPE not in types:
            raise MetricDeviceError(f"CTranslate2 {ctranslate2.__version__} offers no {ASR_COMPUTE_TYPE} on {device} "
                                    f"(only {', '.join(sorted(types))})")
    elif engine == "onnxruntime":
        import onnxruntime

        available = onnxruntime.get_available_providers()
        if "CUDAExecutionProvider" not in available:
            raise MetricDeviceError(f"onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider "
                                    f"(available: {', '.join(available)})")
    else:
        raise MetricDeviceError(f"unknown metric engine {engine!r}")


def onnx_providers(device: str) -> list[Any]:
    """The providers an onnxruntime session on `device` is created with: only the one of that device."""
    if device_kind(device) == "cpu":
        return ["CPUExecutionProvider"]
    if device_kind(device) == "cuda":
        return [("CUDAExecutionProvider", {"device_id": device_index(device)})]
    raise MetricDeviceError(f"onnxruntime has no MPS backend; it cannot run on {device}")


def require_providers(session: Any, device: str, what: str) -> Any:
    """The session, if it really runs on `device`. onnxruntime creates a session whose CUDA provider
    failed to load (a missing cuDNN, say) on the CPU with a warning only: that is refused here."""
    providers = list(session.get_providers())
    wanted = "CPUExecutionProvider" if device_kind(device) == "cpu" else "CUDAExecutionProvider"
    if wanted not in providers:
        raise MetricDeviceError(f"{what}: onnxruntime created the session with {', '.join(providers) or 'no providers'}, "
                                f"not {wanted}: it would run on another device than {device}")
    return session


def answer(device: str, engines: Iterable[str]) -> dict[str, Any]:
    """What the probe prints: engine -> "" (usable) or the library's reason."""
    answers = {}
    for engine in engines:
        try:
            check(engine, device)
            answers[engine] = ""
        except ImportError as exc:
            answers[engine] = f"{ENGINE_LABELS.get(engine, engine)} is not installed ({exc})"
        except MetricDeviceError as exc:
            answers[engine] = str(exc)
    return {"version": PROBE_VERSION, "device": device, "answers": answers}


def parse_answer(text: str, device: str, engines: list[str]) -> dict[str, str]:
    try:
        data = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or set(data) != {"version", "device", "answers"} \
            or data["version"] != PROBE_VERSION or data["device"] != device \
            or not isinstance(data["answers"], dict) or sorted(data["answers"]) != sorted(engines) \
            or not all(isinstance(v, str) for v in data["answers"].values()):
        raise MetricDeviceError(f"the metric device probe for {device} gave no answer of version {PROBE_VERSION}")
    return data["answers"]


def probe(metrics: Iterable[str], metric_device: str, python: str = sys.executable,
          option: str = "--metric-device") -> None:
    """Before any row: MetricDeviceError (one line naming `option`, the flag that chose the metric
    device, each metric that cannot run there, its library's reason and `--metric-device cpu`) unless
    every selected learned metric's library, in the scoring process's interpreter `python`, can use it.
    On the CPU nothing is asked."""
    metric_device = parse_device(metric_device, option)
    learned = {name: ENGINE_OF[name] for name in metrics if name in ENGINE_OF}
    if metric_device == "cpu" or not learned:
        return
    engines = sorted(set(learned.values()))
    try:
        done = subprocess.run([python, "-m", "codecarena.metrics.engines", metric_device, *engines],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
        answers = parse_answer(done.stdout, metric_device, engines)
    except subprocess.TimeoutExpired:
        answers = dict.fromkeys(engines, f"the probe did not answer within {PROBE_TIMEOUT_S:g} s")
    except OSError as exc:
        answers = dict.fromkeys(engines, f"cannot run {python} ({exc.strerror or exc})")
    refused = [f"{name} ({ENGINE_LABELS[engine]}): {answers[engine]}" for name, engine in learned.items()
               if answers[engine]]
    if refused:
        raise MetricDeviceError(f"{option} {metric_device}: {'; '.join(refused)}; ask for --metric-device cpu "
                                "(the codecs still run on --device) or leave these metrics out with --metrics")


def main() -> None:
    if len(sys.argv) < 3:
        print("usage: python -m codecarena.metrics.engines DEVICE ENGINE...", file=sys.stderr)
        sys.exit(64)
    # Libraries that print would corrupt the answer: everything else goes to stderr.
    out, sys.stdout = sys.stdout, sys.stderr
    reply = answer(parse_device(sys.argv[1]), sys.argv[2:])
    out.write(json.dumps(reply) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
