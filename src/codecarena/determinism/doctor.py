"""The determinism doctor, harness side: start probe processes in the codec's runtime, compare their
encodes control by control, locate the first divergent module, and write the evidence file.

Controls (each compares the latent hash and the codes of two encodes of the same input):
- cold_vs_warm, warm_vs_warm: three consecutive encodes in one process;
- encode_after_decode: an encode after a decode against the last warm encode;
- jit_disabled_vs_cold, jit_disabled_vs_warm: the reference of docs/determinism.md, an encode in a fresh
  process with PYTORCH_JIT=0 (scripted functions run as plain Python), against encodes 1 and 3;
- fresh_processes: two encodes, each the only one in a fresh process;
- fresh_vs_in_process_cold: a fresh process's encode against the controls process's first one;
- sdpa_math_vs_default: math-only against the default scaled-dot-product-attention backend, when the
  model calls it.

Switches (determinism/switches.py, `--switches`): each one probed in two fresh processes on the same
device, one with a cold and a warm encode (traced), one with a single encode; per switch the evidence
says whether cold vs warm and cross-process agree under it, i.e. which switches remove a divergence,
and names the first divergent module. A switch that cannot apply (a CUDA setting on the CPU, a variant
the family does not declare) is listed with the reason, never dropped.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from codecarena import variants
from codecarena.plural import counted
from codecarena.registry.catalog import FAMILIES
from codecarena.determinism.probe_job import PROBE_VERSION, ProbeJob
from codecarena.determinism.divergence import Record, first_divergence
from codecarena.determinism.switches import BY_NAME, not_applicable
from codecarena.files import write_json
from codecarena.runtime.guard import run_guarded
from codecarena.specs import CodecSpec

EVIDENCE_VERSION = 2
PACKAGE = Path(__file__).resolve().parent.parent


class DoctorError(RuntimeError):
    """A probe could not run; the message names the process and its reason."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_hashes(spec: CodecSpec, variant: str) -> dict[str, str]:
    """sha256 of the files whose code produced the evidence: the probe (its job, the worker functions
    and the loading path it calls), tracer and doctor, the family's adapter and the variant (found
    without importing any of them here)."""
    files = [PACKAGE / "determinism" / name for name in ("probe.py", "probe_job.py", "trace.py", "divergence.py",
                                                           "doctor.py")]
    files += [PACKAGE / "worker.py", PACKAGE / "codecs" / "loading.py"]
    found = importlib.util.find_spec(FAMILIES[spec.family].module)
    if found is not None and found.origin:
        files.append(Path(found.origin))
    if variant:
        files.append(variants.source_path(variant))
    return {str(path.relative_to(PACKAGE.parent)): _sha256(path) for path in files}


def loudest_window(path: Path, seconds: float) -> float:
    """Start (s) of the window of this length with the most energy."""
    import numpy as np
    import soundfile as sf

    audio, rate = sf.read(path, dtype="float64", always_2d=False)
    count = round(seconds * rate)
    if audio.ndim != 1 or count < 1 or count > len(audio):
        raise DoctorError(f"{path}: cannot take {seconds} s of mono audio from it")
    energy = np.convolve(np.square(audio), np.ones(count), mode="valid")
    return int(np.argmax(energy)) / rate


def _probe(job: ProbeJob, python: str, folder: Path, name: str, limit_bytes: int, timeout_s: float) -> dict[str, Any]:
    job_path = folder / f"{name}.job.json"
    write_json(job_path, asdict(job))
    log = folder / f"{name}.log"
    result = run_guarded([python, "-m", "codecarena.determinism.probe", str(job_path)], limit_bytes=limit_bytes,
                         timeout_s=timeout_s, log_path=log)
    try:
        data = json.loads(Path(job.output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        why = ("killed by the memory guard" if result.guard.fired else
               "timed out" if result.guard.timed_out else f"exit status {result.returncode}")
        raise DoctorError(f"probe {name}: {why}, no result (log: {log})") from None
    if "error" in data:
        raise DoctorError(f"probe {name}: {data['error']} (log: {log})")
    data["wall_s"] = result.wall_s
    data["peak_rss_bytes"] = result.guard.peak_rss_bytes
    return data


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    codes_a, codes_b = a["codes"], b["codes"]
    differ = sum(x != y for x, y in zip(codes_a, codes_b)) + abs(len(codes_a) - len(codes_b))
    return {"latent_equal": a["latent_sha256"] == b["latent_sha256"], "codes_equal": codes_a == codes_b,
            "codes_differ": differ, "codes_total": max(len(codes_a), len(codes_b)),
            "latent_sha256": [a["latent_sha256"], b["latent_sha256"]],
            "codes_sha256": [a["codes_sha256"], b["codes_sha256"]]}


def controls_of(main: dict[str, Any], fresh: list[dict[str, Any]], reference: dict[str, Any]) -> dict[str, dict[str, Any]]:
    calls = main["calls"]
    pairs = {
        "cold_vs_warm": (calls[0], calls[1], "encode 1 against encode 2 in one process"),
        "warm_vs_warm": (calls[1], calls[2], "encode 2 against encode 3 in one process"),
        "encode_after_decode": (calls[2], main["after_decode"], "encode 3 against an encode after a decode"),
        "jit_disabled_vs_cold": (reference["encode"], calls[0], "PYTORCH_JIT=0 reference against encode 1"),
        "jit_disabled_vs_warm": (reference["encode"], calls[2], "PYTORCH_JIT=0 reference against encode 3"),
        "fresh_processes": (fresh[0]["encode"], fresh[1]["encode"], "two encodes, each alone in a fresh process"),
        "fresh_vs_in_process_cold": (fresh[0]["encode"], calls[0], "a fresh process against encode 1"),
    }
    if main["uses_sdpa"]:
        pairs["sdpa_math_vs_default"] = (main["sdpa_math"], main["sdpa_default"],
                                         "math-only against the default scaled-dot-product-attention backend")
    out = {}
    for name, (a, b, what) in pairs.items():
        out[name] = {"what": what, **compare(a, b)}
        out[name]["agree"] = out[name]["latent_equal"] and out[name]["codes_equal"]
    return out


def trace_of(main: dict[str, Any]) -> dict[str, Any] | None:
    """The first divergent module between the first two consecutive encodes that differ."""
    calls = [[Record(**r) for r in call] for call in main["trace"]]
    for i, j in zip(range(len(calls)), range(1, len(calls))):
        found = first_divergence(calls[i], calls[j])
        if found is not None:
            return {"calls": [i + 1, j + 1], "modules_traced": len(calls[i]), **found}
    return None


def switch_result(name: str, probed: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """One switch's evidence from its two processes."""
    cold_vs_warm = compare(probed["calls"][0], probed["calls"][1])
    cross = compare(probed["calls"][0], fresh["encode"])
    agree = {key: c["latent_equal"] and c["codes_equal"] for key, c in (("cold_vs_warm", cold_vs_warm),
                                                                         ("cross_process", cross))}
    return {"sets": BY_NAME[name].sets, "applicable": True, "reason": "",
            "applied": probed["switches"], "device_settings": probed["device"]["settings"],
            "controls": {"cold_vs_warm": {**cold_vs_warm, "agree": agree["cold_vs_warm"]},
                         "cross_process": {**cross, "agree": agree["cross_process"]}},
            "agree": all(agree.values()), "first_divergence": trace_of(probed)}


def diagnose(spec: CodecSpec, *, weights: str, variant: str, jit_fusion: str, input_path: Path, start_s: float,
             seconds: float, python: str, out: Path, limit_bytes: int, timeout_s: float = 1800.0,
             inject: str = "", device: str = "cpu", switches: tuple[str, ...] = (),
             runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "probes"
    work.mkdir(exist_ok=True)

    def job(mode: str, name: str, inject_into: str = "", jit: str = "default", switch: str = "") -> ProbeJob:
        return ProbeJob(version=PROBE_VERSION, mode=mode, codec=spec.canonical, weights=weights,
                        variant=BY_NAME[switch].variant or variant if switch else variant,
                        jit_fusion=jit_fusion, input=str(input_path), start_s=start_s, seconds=seconds,
                        output=str(work / f"{name}.result.json"), jit=jit, inject=inject_into, device=device,
                        switches=(switch,) if switch else ())

    started = time.time()
    _probe(job("load", "load"), python, work, "load", limit_bytes, timeout_s)
    main = _probe(job("controls", "controls", inject), python, work, "controls", limit_bytes, timeout_s)
    fresh = [_probe(job("single", f"fresh{i}"), python, work, f"fresh{i}", limit_bytes, timeout_s) for i in (1, 2)]
    reference = _probe(job("single", "jit_disabled", jit="disabled"), python, work, "jit_disabled", limit_bytes,
                       timeout_s)
    controls = controls_of(main, fresh, reference)
    switched: dict[str, dict[str, Any]] = {}
    for name in switches:
        reason = not_applicable(BY_NAME[name], spec, device)
        if reason:
            switched[name] = {"sets": BY_NAME[name].sets, "applicable": False, "reason": reason}
            continue
        probed = _probe(job("switch", f"switch_{name}", switch=name), python, work, f"switch_{name}", limit_bytes,
                        timeout_s)
        alone = _probe(job("single", f"switch_{name}_fresh", switch=name), python, work, f"switch_{name}_fresh",
                       limit_bytes, timeout_s)
        switched[name] = switch_result(name, probed, alone)
    divergent = sorted(name for name, c in controls.items() if not c["agree"])
    params = main["parameters"]
    evidence = {
        "version": EVIDENCE_VERSION,
        "codec": spec.canonical,
        "weights": "synthetic" if weights.startswith("synthetic") else weights,
        "weights_spec": weights,
        "checkpoint": main["checkpoint"],
        "variant": {**variants.provenance(variant), "replaced_modules": main["variant"].get("replaced_modules", 0)},
        "injected_divergence": main.get("injected", ""),
        "settings": main["settings"],
        "fresh_settings": [f["settings"] for f in fresh],
        "input": {"file": str(input_path), "sha256": _sha256(input_path), "start_s": start_s, "seconds": seconds,
                  "samples": main["input_samples"]},
        "controls": controls,
        "divergent_controls": divergent,
        "verdict": "divergent" if divergent else "deterministic",
        "first_divergence": trace_of(main),
        "device": main["device"],
        "runtime": {"environment": (runtime or {}).get("environment", ""), "interpreter": python},
        "switches": switched,
        "switches_agreeing": [name for name, r in switched.items() if r["applicable"] and r["agree"]],
        "switches_differing": [name for name, r in switched.items() if r["applicable"] and not r["agree"]],
        "parameters": {"tensors": params["tensors"], "changed": params["changed"],
                       "unchanged": not params["changed"] and params["sha256_before"] == params["sha256_after"],
                       "sha256_before": params["sha256_before"], "sha256_after": params["sha256_after"]},
        "sources_sha256": source_hashes(spec, variant),
        "python": python,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine()},
        "wall_s": time.time() - started,
    }
    write_json(out / "evidence.json", evidence)
    (out / "summary.txt").write_text(summary_text(evidence), encoding="utf-8")
    return evidence


def summary_text(evidence: dict[str, Any]) -> str:
    variant = evidence["variant"]["name"] or "none (upstream numerics)"
    lines = [f"determinism of {evidence['codec']} (weights: {evidence['weights']}, variant: {variant}, "
             f"TorchScript CPU fusion: {evidence['settings']['jit_fusion']}, torch {evidence['settings']['torch']}, "
             f"{evidence['settings']['threads']} threads)",
             f"input: {evidence['input']['seconds']} s of {Path(evidence['input']['file']).name} "
             f"from {evidence['input']['start_s']} s ({counted(evidence['input']['samples'], 'sample')})"]
    if evidence["variant"]["name"]:
        lines.append(f"variant {evidence['variant']['name']} replaced {evidence['variant']['replaced_modules']} modules "
                     f"(source sha256 {evidence['variant']['source_sha256'][:12]})")
    if evidence["injected_divergence"]:
        lines.append(f"SELF-CHECK: a one-ulp divergence was injected at {evidence['injected_divergence']} "
                     "on the first encode; these results test the detector, not the codec")
    for name, c in evidence["controls"].items():
        state = "agree" if c["agree"] else "DIFFER"
        lines.append(f"  {name:<26} {state:<6} latent {'=' if c['latent_equal'] else '!='}  "
                     f"codes {c['codes_differ']}/{c['codes_total']} differ   ({c['what']})")
    found = evidence["first_divergence"]
    if found:
        lines.append(f"first divergence (encode {found['calls'][0]} vs {found['calls'][1]}, {found['modules_traced']} "
                     f"module calls traced): {found['module'] or '-'} ({found['kind'] or '-'}): {found['reason']}; "
                     f"{found['modules_diverging_after']} module outputs diverge after it")
    params = evidence["parameters"]
    lines.append(f"parameters: {params['tensors']} tensors, "
                 + ("unchanged by the controls" if params["unchanged"] else f"CHANGED: {params['changed'][:5]}"))
    if evidence["switches"]:
        lines.append(f"switches on {evidence['device']['device']} ({evidence['device']['name']}), each in two fresh "
                     f"processes after seeding (cold vs warm, cross-process):")
    for name, r in evidence["switches"].items():
        if not r["applicable"]:
            lines.append(f"  {name:<26} -      {r['reason']}")
            continue
        c = r["controls"]
        state = "agree" if r["agree"] else "DIFFER"
        where = r["first_divergence"]
        lines.append(f"  {name:<26} {state:<6} cold/warm {'=' if c['cold_vs_warm']['agree'] else '!='}  "
                     f"cross-process {'=' if c['cross_process']['agree'] else '!='}"
                     + (f"  first divergent module {where['module'] or '-'}" if where else ""))
    lines.append(f"verdict: {evidence['verdict']}"
                 + (f" ({', '.join(evidence['divergent_controls'])})" if evidence["divergent_controls"] else ""))
    return "\n".join(lines) + "\n"
