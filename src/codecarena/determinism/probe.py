"""The determinism probe: runs inside a codec family's runtime (`python -m codecarena.determinism.probe JOB.json`).

Mode `load` only loads the model (the doctor runs it first, so a synthetic checkpoint is built
outside the probed processes). Mode `controls` loads the model once and runs the in-process controls on one short input, with a
layer-hash tracer on every encode; mode `single` does one encode in this fresh process (the doctor
starts two of them for the cross-process control); mode `switch` does a cold and a warm encode, traced,
under the job's switches (determinism/switches.py), which every mode applies before the model loads.
Each writes a JSON result; the doctor compares. The model runs on the job's device.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from codecarena.determinism.probe_job import CUBLAS_WORKSPACE, PROBE_VERSION, ProbeJob, read_job


def set_jit_fusion(mode: str) -> dict[str, Any]:
    """`on` turns on TorchScript CPU fusion with the tensor-expression fuser; builds without LLVM
    (like the CPU wheel here) need `te_must_use_llvm_cpu(False)` so the fuser runs through its
    interpreter instead of failing. `off` leaves torch's defaults."""
    import torch

    if mode == "on":
        torch._C._jit_override_can_fuse_on_cpu(True)
        torch._C._jit_set_texpr_fuser_enabled(True)
        torch._C._jit_set_te_must_use_llvm_cpu(False)
    elif mode != "off":
        raise ValueError(f"jit fusion {mode!r}: expected on or off")
    return {"jit_fusion": mode, "can_fuse_on_cpu": bool(torch._C._jit_can_fuse_on_cpu()),
            "texpr_fuser_enabled": bool(torch._C._jit_texpr_fuser_enabled()),
            "te_must_use_llvm_cpu": bool(torch._C._jit_get_te_must_use_llvm_cpu()),
            "llvm_enabled": bool(torch._C._llvm_enabled()),
            "graph_executor_optimize": bool(torch._C._get_graph_executor_optimize()),
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def set_gpu_fuser(on: bool) -> dict[str, Any]:
    """The TorchScript GPU fuser on or off, as far as this torch allows: what was set, read back."""
    import torch

    torch._C._jit_override_can_fuse_on_gpu(on)
    torch._C._jit_set_texpr_fuser_enabled(on)
    applied: dict[str, Any] = {"can_fuse_on_gpu": bool(torch._C._jit_can_fuse_on_gpu()),
                               "texpr_fuser_enabled": bool(torch._C._jit_texpr_fuser_enabled())}
    nvfuser = getattr(torch._C, "_jit_set_nvfuser_enabled", None)
    if nvfuser is None:
        applied["nvfuser"] = f"absent in torch {torch.__version__}"
    else:
        try:
            nvfuser(on)
            applied["nvfuser"] = "on" if on else "off"
        except RuntimeError as exc:  # builds that list it but refuse it
            applied["nvfuser"] = f"not set: {str(exc).splitlines()[0]}"
    return applied


def apply_switches(switches: tuple[str, ...]) -> dict[str, Any]:
    """Seed, then set each named switch's torch settings (a variant switch is applied to the model
    later, as a variant); returns what was set, read back from torch."""
    import random

    import numpy as np
    import torch

    applied: dict[str, Any] = {}
    if not switches:
        return applied
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)  # seeds every CUDA device too
    applied["seeds"] = {"random": 0, "numpy": 0, "torch": 0}
    for name in switches:
        if name == "cudnn_deterministic":
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            applied[name] = {"cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
                             "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}
        elif name == "deterministic_algorithms":
            torch.use_deterministic_algorithms(True)
            applied[name] = {"deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
                             "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}
        elif name == "tf32_off":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            applied[name] = {"matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                             "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}
        elif name in ("jit_fusion_on", "jit_fusion_off"):
            applied[name] = set_gpu_fuser(name == "jit_fusion_on")
        elif name in ("seeds_only", "eager_snake_v1"):
            applied[name] = {}  # the seeds above; the variant is applied to the loaded model
        else:
            raise ValueError(f"unknown switch {name!r}")
    return applied


def parameter_hashes(model: Any) -> dict[str, str]:
    from codecarena.determinism.trace import hash_tensor

    return {name: hash_tensor(tensor) for name, tensor in model.state_dict().items()}


def read_input(job: ProbeJob, input_rate: int) -> tuple[Any, int, int]:
    import numpy as np
    import soundfile as sf
    import soxr

    audio, rate = sf.read(job.input, dtype="float64", always_2d=False)
    if audio.ndim != 1:
        raise ValueError(f"{job.input}: expected mono audio")
    start, count = round(job.start_s * rate), round(job.seconds * rate)
    if count < 1 or start + count > len(audio):
        raise ValueError(f"{job.input}: {job.seconds} s from {job.start_s} s is outside its {len(audio) / rate:.2f} s")
    clip = np.ascontiguousarray(audio[start:start + count])
    if input_rate != rate:
        clip = soxr.resample(clip, rate, input_rate, quality="HQ")
    return clip, rate, count


class Encoder:
    """One model, encoded repeatedly; each encode's latent (the adapter's `latent_module` output)
    and codes are hashed, optionally with a layer trace."""

    def __init__(self, adapter: Any, model: Any, audio: Any, inject: str) -> None:
        self.adapter, self.model, self.audio = adapter, model, audio
        self._latent: Any = None
        latent = model.get_submodule(adapter.latent_module)
        latent.register_forward_hook(self._capture)
        self._inject_pending = bool(inject)
        if inject:
            model.get_submodule(inject).register_forward_hook(self._perturb)

    def _capture(self, module: Any, args: Any, output: Any) -> None:
        self._latent = getattr(output, "latents", output)

    def _perturb(self, module: Any, args: Any, output: Any) -> Any:
        import torch

        if not self._inject_pending or not isinstance(output, torch.Tensor):
            return None
        self._inject_pending = False
        # The smallest change that survives: one float32 ulp on one element.
        flat = output.detach().clone().reshape(-1)
        flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf"), dtype=flat.dtype))
        return flat.reshape(output.shape)

    def encode(self) -> dict[str, Any]:
        from codecarena.determinism.trace import hash_tensor

        encoded = self.adapter.encode(self.audio)
        codes = [int(v) for stream in encoded.streams for v in stream.values]
        self.last = encoded
        return {"latent_sha256": hash_tensor(self._latent), "codes_sha256": _json_hash(codes), "codes": codes}


def _json_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def _uses_sdpa(encoder: Encoder) -> bool:
    """Whether an encode calls scaled_dot_product_attention, seen through a TorchFunctionMode (no patching)."""
    import torch
    from torch.overrides import TorchFunctionMode

    seen = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.nn.functional.scaled_dot_product_attention:
                seen.append(1)
            return func(*args, **(kwargs or {}))

    with Watch():
        encoder.adapter.encode(encoder.audio)
    return bool(seen)


def traced_encodes(model: Any, encoder: Encoder, count: int) -> tuple[list[Any], list[list[dict[str, Any]]]]:
    """`count` consecutive encodes, each with its module-by-module trace."""
    from codecarena.determinism.trace import LayerTracer

    tracer = LayerTracer(model)
    calls = []
    for _ in range(count):
        tracer.start()
        calls.append(encoder.encode())
        tracer.stop()
    tracer.remove()
    return calls, [[asdict(r) for r in call] for call in tracer.calls]


def run(job: ProbeJob) -> dict[str, Any]:
    # "load" only loads the model (building a synthetic checkpoint if none is cached) without the
    # fusion settings, in its own process: generating a checkpoint runs the encoder, which would
    # warm up the TorchScript functions of the process that is meant to show a cold encode.
    settings = set_jit_fusion(job.jit_fusion if job.mode != "load" else "off")
    switched = apply_switches(job.switches)
    import torch

    from codecarena.codecs.loading import adapter_module
    from codecarena.device_probe import device_info
    from codecarena.specs import parse_spec
    from codecarena.worker import apply_variant, make_payload

    spec = parse_spec(job.codec)
    # The one loading path a worker takes: a user codec is refused here, outside its sandbox.
    module, _ = adapter_module(spec.family)
    adapter = module.ADAPTER(spec, job.weights)
    if job.device != "cpu":  # adapters start on the CPU
        adapter.use_device(job.device)
    facts = adapter.load()
    model = adapter.torch_model()
    if model is None:
        raise ValueError(f"{spec.canonical} is not a torch model; the determinism probe needs one")
    variant = apply_variant(adapter, job.variant) if job.variant else {"name": ""}
    settings["threads"] = torch.get_num_threads()
    audio, rate, count = read_input(job, adapter.input_rate)
    settings["pytorch_jit"] = os.environ.get("PYTORCH_JIT", "")
    result: dict[str, Any] = {"version": PROBE_VERSION, "mode": job.mode, "settings": settings,
                              "checkpoint": facts.get("checkpoint", {}), "variant": variant,
                              "input_samples": count, "modules": sum(1 for _ in model.modules()),
                              "switches": switched, "device": device_info(job.device).to_dict()}
    before = parameter_hashes(model)
    if job.inject and job.mode == "controls":
        result["injected"] = job.inject
    encoder = Encoder(adapter, model, audio, job.inject if job.mode == "controls" else "")
    if job.mode == "load":
        pass
    elif job.mode == "single":
        result["encode"] = encoder.encode()
    elif job.mode == "switch":
        result["calls"], result["trace"] = traced_encodes(model, encoder, 2)
    elif job.mode == "controls":
        result["calls"], result["trace"] = traced_encodes(model, encoder, 3)
        payload = make_payload(spec, encoder.last, facts, job.variant, rate, count, adapter.input_rate)
        adapter.decode(payload)
        result["after_decode"] = encoder.encode()
        result["uses_sdpa"] = _uses_sdpa(encoder)
        if result["uses_sdpa"]:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel([SDPBackend.MATH]):
                result["sdpa_math"] = encoder.encode()
            result["sdpa_default"] = encoder.encode()
    else:
        raise ValueError(f"unknown probe mode {job.mode!r}")
    after = parameter_hashes(model)
    result["parameters"] = {"tensors": len(before), "changed": sorted(k for k in before if before[k] != after.get(k)),
                            "sha256_before": _json_hash(sorted(before.items())),
                            "sha256_after": _json_hash(sorted(after.items()))}
    return result


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: python -m codecarena.determinism.probe JOB.json", file=sys.stderr)
        sys.exit(64)
    job = read_job(Path(sys.argv[1]))
    if job.jit == "disabled":
        # Read when torch is first imported, which has not happened yet in this process.
        os.environ["PYTORCH_JIT"] = "0"
    elif job.jit != "default":
        raise SystemExit(f"{sys.argv[1]}: jit {job.jit!r}: expected default or disabled")
    if "deterministic_algorithms" in job.switches:
        # cuBLAS reads it when its first handle is made: set before torch is imported.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    try:
        result = run(job)
    except Exception as exc:  # the doctor reports the one-line reason
        result = {"version": PROBE_VERSION, "mode": job.mode, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    with contextlib.suppress(FileNotFoundError):
        Path(job.output).unlink()
    Path(job.output).write_text(json.dumps(result, sort_keys=True), encoding="utf-8")
    sys.exit(0 if "error" not in result else 2)


if __name__ == "__main__":
    main()
