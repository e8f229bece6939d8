"""Provenance for a comparison: what made each run and each codec configuration, set side by side.

A codec's provenance is read from its rows (family, configuration, registry entry, checkpoint, weights,
device, runtime) and the run record's runtime; a run's from its record and plan. `differences` lists
every field that differs; fields starting with `_` are compared but not shown. A path inside a run
reads as RUN_PATH: where a run was written is not what made it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codecarena.results.run import Run

#: What a path inside a run directory reads as in provenance: where a run was written is not what made it.
RUN_PATH = "<in the run directory>"


def distinct_value(values: Iterable[Any]) -> Any:
    seen: dict[str, Any] = {}
    for value in values:
        seen.setdefault(json.dumps(value, sort_keys=True, default=str), value)
    if len(seen) == 1:
        return next(iter(seen.values()))
    return {"mixed": list(seen.values())}


def packages_of(record: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (record or {}).get("packages") or []:
        name, _, version = str(item).partition("==")
        out[name.strip().lower()] = version.strip()
    return out


def packagedifferences(a: dict[str, str | None], b: dict[str, str | None]) -> list[dict[str, Any]]:
    return [{"package": name, "a": a.get(name), "b": b.get(name)}
            for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


def in_run(value: Any, roots: tuple[str, ...]) -> Any:
    """`value` with every string that is a path inside the run (`roots`: its directory as given and
    resolved) read as RUN_PATH: a worker's writable folders, its private folders (`model.confined`)
    name where the run was written, and two runs of byte-identical codecs differ there and nowhere else."""
    if isinstance(value, str):
        return RUN_PATH if any(value == root or value.startswith(root + "/") for root in roots) else value
    if isinstance(value, list):
        return [in_run(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: in_run(v, roots) for k, v in value.items()}
    return value


def codec_provenance(run: Run, codec: str) -> dict[str, Any]:
    roots = tuple(dict.fromkeys((str(run.path).rstrip("/"), str(Path(run.path).resolve()))))
    rows = list(run.by_codec[codec].values())
    registry = distinct_value(r.registry for r in rows)
    record = run.record.runtimes.get(registry) if isinstance(registry, str) else None
    return {
        "codec": codec,
        "family": distinct_value(r.family for r in rows),
        "config": distinct_value(r.config for r in rows),
        "registry": registry,
        "checkpoint": distinct_value(r.checkpoint for r in rows),
        "variant": distinct_value(r.variant for r in rows),
        "weights": distinct_value(r.weights for r in rows),
        "sample_rate": distinct_value(r.sample_rate for r in rows),
        # Rows before version 7 ran on the CPU: codecarena had no other device then.
        "device": distinct_value((r.device or {}).get("device", "cpu") for r in rows),
        "worker_runtime": distinct_value(r.runtime for r in rows),
        "model": distinct_value(in_run(r.model, roots) for r in rows),
        "runtime_environment": record.get("environment") if record else None,
        "runtime_interpreter": record.get("interpreter") if record else None,
        "runtime_packages_sha256": record.get("packages_sha256") if record else None,
        "_runtime_packages": packages_of(record) if record else None,
    }


def run_provenance(run: Run) -> dict[str, Any]:
    info, env, plan = run.record, run.record.environment, run.plan
    git = info.git
    metrics = {}
    for m in info.metrics:
        if isinstance(m, dict) and "name" in m:
            metrics[m["name"]] = {"versions": m.get("versions"),
                                  "model_files": [(f.get("name"), f.get("sha256")) if isinstance(f, dict) else f
                                                  for f in m.get("model_files") or []],
                                  "unusable_because": m.get("unusable_because")}
    return {
        "set": plan.set,
        "manifest_sha256": plan.manifest_sha256,
        "utterances": len(plan.utterances),
        "arena_rate": plan.arena_rate,
        "codecarena": info.codecarena,
        "git_revision": git.get("revision"),
        "git_dirty": git.get("dirty"),
        "python": env.get("python"),
        "os": env.get("os"),
        "cpu": env.get("cpu"),
        "cpu_count": env.get("cpu_count"),
        "metrics_planned": plan.metrics,
        "finished": info.finished,
        "_harness_packages": env.get("packages") or {},
        "_metric_declarations": metrics,
    }


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    diffs = [{"field": k, "a": a.get(k), "b": b.get(k)} for k in a if not k.startswith("_") and a.get(k) != b.get(k)]
    if "_runtime_packages" in a:
        pa, pb = a["_runtime_packages"], b["_runtime_packages"]
        if pa is not None and pb is not None:
            diffs += [{"field": f"runtime package {d['package']}", "a": d["a"], "b": d["b"]}
                      for d in packagedifferences(pa, pb)]
    if "_harness_packages" in a:
        diffs += [{"field": f"harness package {d['package']}", "a": d["a"], "b": d["b"]}
                  for d in packagedifferences(a["_harness_packages"], b["_harness_packages"])]
    if "_metric_declarations" in a:
        ma, mb = a["_metric_declarations"], b["_metric_declarations"]
        for name in sorted(set(ma) | set(mb)):
            if ma.get(name) != mb.get(name):
                diffs.append({"field": f"metric declaration {name}", "a": ma.get(name), "b": mb.get(name)})
    return diffs


def public(prov: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in prov.items() if not k.startswith("_")}


# ------------------------------------------------------------------------------------- statistics
