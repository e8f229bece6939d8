"""Compare two runs (or two codec configurations) with paired statistics.

Rows are paired by (codec configuration, utterance): the same utterance coded by codec A in run A
and by codec B in run B. For every metric output the mean paired difference (B - A) gets a
percentile bootstrap confidence interval (`bootstrap.py`) that resamples utterances, or speakers
with all their utterances (`by="speaker"`). Pairs whose decoded audio is byte-identical short-circuit the
statistics: identical audio cannot score differently under the same metric. Provenance (codec,
registry entry, checkpoint, runtime packages, machine, codecarena revision) is set side by side
and every difference is listed. The result is a JSON-serialisable dict; `compare_text.py` renders
it. How to read the output: docs/compare.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.metrics import outputs
from codecarena.results.bootstrap import LEVEL, MIN_UNITS, bootstrap_ci, few_units_warning
from codecarena.results.record import RunLoadError
from codecarena.results.run import Run
from codecarena.results.schema import Row

# 2: `by_language` in every comparison, and the flag of an interval on fewer than MIN_UNITS units
# (bootstrap.py: the one bound of every surface) in `warning`. 3: below that bound no interval and no
# reading unless `settings.few_units` asked for them; provenance paths inside a run read as RUN_PATH.
COMPARE_VERSION = 3
#: What a path inside a run directory reads as in provenance: where a run was written is not what made it.
RUN_PATH = "<in the run directory>"
IDENTICAL = "identical decoded audio: metrics cannot differ"


class CompareError(ValueError):
    """Two runs that cannot be compared as asked; the message is one line."""


# ------------------------------------------------------------------------------------- run loading


def _load(run: Path | Run, label: str) -> Run:
    """The run (opened here when given as a path), refused when it has no rows or two rows of one key."""
    if not isinstance(run, Run):
        path = Path(run)
        if not path.is_dir():
            raise CompareError(f"run {label} {path}: not a run directory")
        try:
            run = Run.open(path)
        except RunLoadError as exc:
            raise CompareError(f"run {label}: {exc}") from None
    if not run.rows:
        raise CompareError(f"run {label} {run.path}: no rows in rows.jsonl")
    seen: set[tuple[str, str]] = set()
    for row in run.rows:
        if row.key in seen:
            raise CompareError(f"run {label} {run.path}: two rows for {row.codec} x {row.utterance}")
        seen.add(row.key)
    return run


# ------------------------------------------------------------------------------------- pairing


def _canonical(text: str) -> str:
    from codecarena.specs import SpecError, parse_configuration

    try:
        return parse_configuration(text).canonical
    except SpecError:
        return text.strip()


def parse_pairs(pair: str | Sequence[str] | None, codecs_a: Sequence[str],
                codecs_b: Sequence[str]) -> list[tuple[str, str]]:
    """`A_SPEC=B_SPEC` mappings (several separated by ';', or a list) -> (codec in A, codec in B).

    Codec specs contain '=' themselves (`dac:16khz,variant=x`), so every '=' is tried as the
    separator; the mapping must split in exactly one way into a codec of run A and one of run B.
    """
    if pair is None:
        return []
    items = [pair] if isinstance(pair, str) else list(pair)
    texts = [t.strip() for item in items for t in item.split(";") if t.strip()]
    if not texts:
        raise CompareError("--pair-codecs: empty mapping; expected A_SPEC=B_SPEC")
    known_a, known_b = set(codecs_a), set(codecs_b)
    out: list[tuple[str, str]] = []
    for text in texts:
        splits = set()
        for i, ch in enumerate(text):
            if ch != "=":
                continue
            left, right = text[:i].strip(), text[i + 1:].strip()
            if not left or not right:
                continue
            a = left if left in known_a else _canonical(left)
            b = right if right in known_b else _canonical(right)
            if a in known_a and b in known_b:
                splits.add((a, b))
        if len(splits) != 1:
            why = "is ambiguous" if splits else "names no codec of run A = codec of run B"
            raise CompareError(f"--pair-codecs {text!r} {why} (run A has {', '.join(codecs_a)}; "
                               f"run B has {', '.join(codecs_b)})")
        mapping = splits.pop()
        if mapping in out:
            raise CompareError(f"--pair-codecs {text!r}: the same mapping is given twice")
        out.append(mapping)
    return out


def _speakers(run_a: Run, utterances: Iterable[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """utterance id -> speaker label, and notes on where the labels come from: the rows (version 4
    records the speaker), else the smoke manifest."""
    utterances = list(utterances)
    recorded = {row.utterance: row.speaker for row in run_a.rows if row.speaker}
    if recorded:
        mapping = {utt: f"speaker:{recorded[utt]}" if utt in recorded else f"utterance:{utt}" for utt, _ in utterances}
        own = [utt for utt, _ in utterances if utt not in recorded]
        notes = ["speakers as run A's rows record them"]
        if own:
            notes.append(f"{len(own)} utterance(s) without a recorded speaker, each treated as its own speaker: "
                         f"{', '.join(own)}")
        return mapping, notes
    if run_a.plan.set == "smoke":
        from codecarena.datasets import DatasetError, smoke_manifest

        try:
            entries = {e["id"]: e for e in smoke_manifest()["utterances"]}
        except DatasetError as exc:
            raise CompareError(f"--by speaker: cannot read the smoke manifest ({exc})") from None
        mapping, own = {}, []
        for utt, sha in utterances:
            entry = entries.get(utt)
            if entry and entry["speaker"] and entry["sha256"] == sha:
                mapping[utt] = f"speaker:{entry['speaker']}"
            else:
                mapping[utt] = f"utterance:{utt}"
                own.append(utt)
        notes = ["speakers from the smoke manifest (codecarena.datasets.smoke_manifest)"]
        if own:
            notes.append(f"{len(own)} utterance(s) not in the smoke manifest with the same sha256 or without a "
                         f"speaker, each treated as its own speaker: {', '.join(own)}")
        return mapping, notes
    return ({utt: f"utterance:{utt}" for utt, _ in utterances},
            [(f"set {run_a.plan.set!r} records no speakers: each utterance is treated as its own speaker "
              f"(the same as --by utterance)")])


# ------------------------------------------------------------------------------------- provenance


def _distinct(values: Iterable[Any]) -> Any:
    seen: dict[str, Any] = {}
    for value in values:
        seen.setdefault(json.dumps(value, sort_keys=True, default=str), value)
    if len(seen) == 1:
        return next(iter(seen.values()))
    return {"mixed": list(seen.values())}


def _packages(record: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (record or {}).get("packages") or []:
        name, _, version = str(item).partition("==")
        out[name.strip().lower()] = version.strip()
    return out


def _package_differences(a: dict[str, str | None], b: dict[str, str | None]) -> list[dict[str, Any]]:
    return [{"package": name, "a": a.get(name), "b": b.get(name)}
            for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


def _in_run(value: Any, roots: tuple[str, ...]) -> Any:
    """`value` with every string that is a path inside the run (`roots`: its directory as given and
    resolved) read as RUN_PATH: a worker's writable folders, its private folders (`model.confined`)
    name where the run was written, and two runs of byte-identical codecs differ there and nowhere else."""
    if isinstance(value, str):
        return RUN_PATH if any(value == root or value.startswith(root + "/") for root in roots) else value
    if isinstance(value, list):
        return [_in_run(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: _in_run(v, roots) for k, v in value.items()}
    return value


def _codec_provenance(run: Run, codec: str) -> dict[str, Any]:
    roots = tuple(dict.fromkeys((str(run.path).rstrip("/"), str(Path(run.path).resolve()))))
    rows = list(run.by_codec[codec].values())
    registry = _distinct(r.registry for r in rows)
    record = run.record.runtimes.get(registry) if isinstance(registry, str) else None
    return {
        "codec": codec,
        "family": _distinct(r.family for r in rows),
        "config": _distinct(r.config for r in rows),
        "registry": registry,
        "checkpoint": _distinct(r.checkpoint for r in rows),
        "variant": _distinct(r.variant for r in rows),
        "weights": _distinct(r.weights for r in rows),
        "sample_rate": _distinct(r.sample_rate for r in rows),
        # Rows before version 7 ran on the CPU: codecarena had no other device then.
        "device": _distinct((r.device or {}).get("device", "cpu") for r in rows),
        "worker_runtime": _distinct(r.runtime for r in rows),
        "model": _distinct(_in_run(r.model, roots) for r in rows),
        "runtime_environment": record.get("environment") if record else None,
        "runtime_interpreter": record.get("interpreter") if record else None,
        "runtime_packages_sha256": record.get("packages_sha256") if record else None,
        "_runtime_packages": _packages(record) if record else None,
    }


def _run_provenance(run: Run) -> dict[str, Any]:
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


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    diffs = [{"field": k, "a": a.get(k), "b": b.get(k)} for k in a if not k.startswith("_") and a.get(k) != b.get(k)]
    if "_runtime_packages" in a:
        pa, pb = a["_runtime_packages"], b["_runtime_packages"]
        if pa is not None and pb is not None:
            diffs += [{"field": f"runtime package {d['package']}", "a": d["a"], "b": d["b"]}
                      for d in _package_differences(pa, pb)]
    if "_harness_packages" in a:
        diffs += [{"field": f"harness package {d['package']}", "a": d["a"], "b": d["b"]}
                  for d in _package_differences(a["_harness_packages"], b["_harness_packages"])]
    if "_metric_declarations" in a:
        ma, mb = a["_metric_declarations"], b["_metric_declarations"]
        for name in sorted(set(ma) | set(mb)):
            if ma.get(name) != mb.get(name):
                diffs.append({"field": f"metric declaration {name}", "a": ma.get(name), "b": mb.get(name)})
    return diffs


def _public(prov: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in prov.items() if not k.startswith("_")}


# ------------------------------------------------------------------------------------- statistics


def _metric_record(row: Row, name: str) -> tuple[float | None, str | None]:
    """(value, None) for an ok metric, else (None, why it does not count)."""
    if row.status != "ok":
        return None, f"row failed ({row.error or 'no reason recorded'})"
    record = row.metrics.get(name)
    if record is None:
        return None, "not computed"
    if record["status"] != "ok":
        return None, f"{record['status']} ({record['error']})"
    return float(record["value"]), None


def _metric_stats(name: str, pairs: list[tuple[str, Row, Row]], units: dict[str, str] | None, identical: bool,
                  resamples: int, seed: int, few_units: bool = False) -> dict[str, Any]:
    used: list[tuple[str, float, float]] = []
    dropped: dict[str, int] = {}
    for utt, ra, rb in pairs:
        va, why_a = _metric_record(ra, name)
        vb, why_b = _metric_record(rb, name)
        if why_a or why_b:
            reason = "; ".join(f"{side}: {why}" for side, why in (("A", why_a), ("B", why_b)) if why)
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        used.append((utt, va, vb))  # type: ignore[arg-type]
    out: dict[str, Any] = {"metric": name, "pairs": len(pairs), "n": len(used), "dropped": dropped,
                           "mean_a": None, "mean_b": None, "mean_diff": None, "ci_low": None, "ci_high": None,
                           "ci_width": None, "includes_zero": None, "units": None, "verdict": "", "warning": None}
    if not used:
        out["verdict"] = "no pair with an ok value on both sides"
        return out
    a = np.array([u[1] for u in used])
    b = np.array([u[2] for u in used])
    out["mean_a"], out["mean_b"] = float(a.mean()), float(b.mean())
    if identical:
        disagree = int(np.count_nonzero(a != b))
        out["values_disagree"] = disagree
        out["verdict"] = IDENTICAL
        if disagree:
            out["verdict"] += (f"; but {disagree} pair(s) carry different recorded values: the metric itself "
                               f"differs between the runs (see the metric declarations in provenance)")
        return out
    diffs = b - a
    out["mean_diff"] = float(diffs.mean())
    labels = [units[u[0]] for u in used] if units is not None else None
    out["units"] = len(set(labels)) if labels is not None else len(used)
    if out["units"] < 2:
        out["verdict"] = f"one resampling unit: no interval (mean difference {out['mean_diff']:+.4g})"
        return out
    unit = "speaker" if units is not None else "utterance"
    if out["units"] < MIN_UNITS and not few_units:
        # Every other surface withholds an interval here; a reading resting on one would claim more.
        out["verdict"] = (f"fewer than {MIN_UNITS} units: no interval, no reading (mean difference "
                          f"{out['mean_diff']:+.4g}; --few-units shows them, as descriptive)")
        out["warning"] = few_units_warning(out["units"], unit) + ", so none is given, nor a reading"
        return out
    low, high = bootstrap_ci(diffs, labels, resamples=resamples, seed=seed, level=LEVEL)
    out.update(ci_low=low, ci_high=high, ci_width=high - low, includes_zero=bool(low <= 0.0 <= high))
    if out["includes_zero"]:
        out["verdict"] = f"interval includes 0 (width {high - low:.4g}): not shown to differ, not shown equal"
    else:
        out["verdict"] = f"B {'higher' if low > 0 else 'lower'} than A: interval excludes 0"
        scale = outputs.BY_NAME.get(name)
        if scale is not None:
            better = (low > 0) != scale.lower_is_better
            out["verdict"] = (f"B {'better' if better else 'worse'} than A ({scale.better} is better): interval "
                              "excludes 0")
    if out["units"] < MIN_UNITS:
        out["warning"] = few_units_warning(out["units"], unit) + ": read it as descriptive"
    return out


def device_movement(names: list[str], pairs: list[tuple[str, Row, Row]]) -> list[dict[str, Any]]:
    """How far each metric moved between two devices: over the pairs with an ok value on both sides,
    the mean and the largest absolute difference."""
    moved = []
    for name in names:
        values = [(_metric_record(ra, name)[0], _metric_record(rb, name)[0]) for _, ra, rb in pairs]
        diffs = np.array([abs(b - a) for a, b in values if a is not None and b is not None])
        moved.append({"metric": name, "n": int(diffs.size),
                      "mean_abs_diff": float(diffs.mean()) if diffs.size else None,
                      "max_abs_diff": float(diffs.max()) if diffs.size else None})
    return moved


def _decoded_same(pairs: list[tuple[str, Row, Row]]) -> int:
    return sum(1 for _, ra, rb in pairs if ra.decoded_sha256 and ra.decoded_sha256 == rb.decoded_sha256)


def _metric_names(run_a: Run, rows_a: list[Row], rows_b: list[Row], wanted: list[str] | None) -> list[str]:
    present_a = {n for r in rows_a for n in r.metrics}
    present_b = {n for r in rows_b for n in r.metrics}
    declared = [o for m in run_a.record.metrics if isinstance(m, dict) for o in m.get("outputs") or []]
    order = list(dict.fromkeys(declared + sorted(present_a | present_b)))
    both = [n for n in order if n in present_a and n in present_b]
    for name in wanted or []:
        if name not in both:
            side = "A" if name not in present_a else "B"
            raise CompareError(f"metric {name!r} was not computed in run {side} for these codecs "
                               f"(both have: {', '.join(both) or 'none'})")
    if wanted is not None:
        return list(dict.fromkeys(wanted))
    # The reference's own ASR score is the same whichever codec ran: comparing it says nothing.
    return [n for n in both if not (n in outputs.BY_NAME and outputs.BY_NAME[n].codec_independent)]


# ------------------------------------------------------------------------------------- compare


def _two_codecs_as_they_are(codec_a: str, codec_b: str, key: str, a: Any, b: Any) -> bool:
    """Whether a difference between a named pair is simply what comparing two different codecs means
    (a DSP codec against one with real weights, each at its own sample rate), not a pairing forced
    past a refusal: synthetic weights measure the pipeline, never the codec, so they always are one."""
    if codec_a == codec_b or any(isinstance(v, dict) for v in (a, b)):
        return False
    return key == "sample_rate" or "synthetic" not in (a, b)


def compare_runs(run_a: Path | Run, run_b: Path | Run, metrics: list[str] | None = None, by: str = "utterance",
                 resamples: int = 10000, seed: int = 0, pair: str | Sequence[str] | None = None,
                 allow_different_sets: bool = False, few_units: bool = False) -> dict[str, Any]:
    """Paired comparison of run B against run A (differences are B - A); JSON-serialisable.

    `pair` maps codec configurations explicitly ("A_SPEC=B_SPEC", several separated by ';' or as
    a list): only the named pairs are compared, and codec pairs whose weights kind or sample rate
    differ are allowed (flagged under `overrides`). Without it, codecs with the same canonical spec
    in both runs are paired and such pairs are refused. Runs of different evaluation sets are
    refused unless `allow_different_sets`, which pairs only utterances present in both plans with
    the same id and the same audio sha256 (also flagged under `overrides`). Below bootstrap.MIN_UNITS
    resampling units a metric gets no interval and no reading unless `few_units`.
    """
    if by not in ("utterance", "speaker"):
        raise CompareError(f"--by must be utterance or speaker, got {by!r}")
    if resamples < 1:
        raise CompareError(f"--resamples must be >= 1, got {resamples}")
    a = _load(run_a, "A")
    b = a if run_b is run_a or (isinstance(run_b, Path) and run_b == run_a) else _load(run_b, "B")
    overrides: list[str] = []
    notes: list[str] = []
    for run, label in ((a, "A"), (b, "B")):
        if run.torn:
            notes.append(f"run {label}: a torn final line of rows.jsonl (interrupted append) was ignored")
        if not run.record.finished:
            notes.append(f"run {label} did not finish: missing rows leave utterances unpaired")

    # ---- the evaluation set
    utts_a, utts_b = a.utterances(), b.utterances()
    same_set = a.plan.manifest_sha256 == b.plan.manifest_sha256 and utts_a == utts_b
    if same_set:
        common = utts_a
    else:
        detail = (f"manifest {a.plan.manifest_sha256[:12]} ({len(utts_a)} utterances) vs "
                  f"{b.plan.manifest_sha256[:12]} ({len(utts_b)} utterances)")
        if not allow_different_sets:
            raise CompareError(f"runs A and B evaluate different sets ({detail}); pass --allow-different-sets "
                               f"to pair only the utterances both hold with identical audio")
        shas_b = dict(utts_b)
        common = [(u, s) for u, s in utts_a if shas_b.get(u) == s]
        ids_b = {u for u, _ in utts_b}
        clash = [u for u, s in utts_a if u in shas_b and shas_b[u] != s]
        overrides.append(f"sets differ ({detail}): --allow-different-sets pairs the {len(common)} utterance(s) "
                         f"with the same id and audio sha256; {len([u for u, _ in utts_a if u not in ids_b])} "
                         f"only in A, {len([u for u in ids_b if u not in dict(utts_a)])} only in B, "
                         f"{len(clash)} with the same id but different audio (never paired)")
        if not common:
            raise CompareError(f"runs A and B share no utterance with identical audio ({detail})")
    if a.plan.arena_rate != b.plan.arena_rate:
        if pair is None:
            raise CompareError(f"runs A and B ran at different sample rates ({a.plan.arena_rate} vs "
                               f"{b.plan.arena_rate} Hz); name the rows to pair with --pair-codecs A=B")
        overrides.append(f"arena sample rates differ ({a.plan.arena_rate} vs {b.plan.arena_rate} Hz); "
                         f"compared because --pair-codecs named the pairs")

    # ---- the codec pairs
    codecs_a, codecs_b = a.codecs(), b.codecs()
    explicit = pair is not None
    if explicit:
        mappings = parse_pairs(pair, codecs_a, codecs_b)
    else:
        mappings = [(c, c) for c in codecs_a if c in b.by_codec]
        if not mappings:
            raise CompareError(f"no codec configuration is in both runs (A: {', '.join(codecs_a)}; "
                               f"B: {', '.join(codecs_b)}); name the pairs with --pair-codecs A_SPEC=B_SPEC")
    used_a, used_b = {m[0] for m in mappings}, {m[1] for m in mappings}

    speakers = None
    if by == "speaker":
        speakers, speaker_notes = _speakers(a, common)
        notes.extend(speaker_notes)

    common_ids = [u for u, _ in common]
    comparisons = []
    for codec_a, codec_b in mappings:
        rows_a, rows_b = a.by_codec[codec_a], b.by_codec[codec_b]
        prov_a, prov_b = _codec_provenance(a, codec_a), _codec_provenance(b, codec_b)
        for side, codec, prov in (("A", codec_a, prov_a), ("B", codec_b, prov_b)):
            if prov["runtime_environment"] == "external":
                notes.append(f"{codec} of run {side} ran in an external runtime ({prov['runtime_interpreter']}), "
                             "not its pinned runtime")
        pair_overrides = []
        for key, what in (("weights", "weights kinds"), ("sample_rate", "sample rates")):
            if prov_a[key] != prov_b[key]:
                if not explicit:
                    raise CompareError(f"{codec_a}: {what} differ between the runs ({prov_a[key]} vs {prov_b[key]}); "
                                       f"name the pair with --pair-codecs to compare anyway")
                differ = f"{codec_a} vs {codec_b}: {what} differ ({prov_a[key]} vs {prov_b[key]})"
                if _two_codecs_as_they_are(codec_a, codec_b, key, prov_a[key], prov_b[key]):
                    notes.append(f"{differ}: two different codecs, compared as --pair-codecs named them")
                else:
                    pair_overrides.append(f"{differ}; compared because --pair-codecs named the pair")
        overrides.extend(pair_overrides)
        pairs, unpaired, ref_differs = [], {"missing_in_a": [], "missing_in_b": []}, []
        for utt in sorted(common_ids):
            ra, rb = rows_a.get(utt), rows_b.get(utt)
            if ra is None or rb is None:
                if ra is None:
                    unpaired["missing_in_a"].append(utt)
                if rb is None:
                    unpaired["missing_in_b"].append(utt)
                continue
            if ra.reference_sha256 != rb.reference_sha256:
                ref_differs.append(utt)
                continue
            pairs.append((utt, ra, rb))
        if ref_differs:
            notes.append(f"{codec_a} vs {codec_b}: {len(ref_differs)} utterance(s) not paired because the rows' "
                         f"reference sha256 differ: {', '.join(ref_differs)}")
        payload_same = sum(1 for _, ra, rb in pairs if ra.payload_sha256 and ra.payload_sha256 == rb.payload_sha256)
        decoded_same = _decoded_same(pairs)
        identical = bool(pairs) and decoded_same == len(pairs)
        names = _metric_names(a, [p[1] for p in pairs], [p[2] for p in pairs], metrics)
        languages = sorted({ra.language for _, ra, _ in pairs})
        # An error rate counts each language's own words or characters: no mean difference is formed
        # over several languages, nor a word error rate for a language written without spaces.
        unpooled = [n for n in names if pairs and not outputs.summarised(n, languages)]
        if unpooled:
            why = (f"{', '.join(unpooled)} not compared over the languages {', '.join(map(repr, languages))}: an "
                   "error rate counts each language's own words or characters, and a language written without "
                   "spaces has no word error rate")
            if metrics is not None:
                raise CompareError(f"{codec_a} vs {codec_b}: {why}")
            notes.append(f"{codec_a} vs {codec_b}: {why}")
            names = [n for n in names if n not in unpooled]
        stats = [_metric_stats(n, pairs, speakers, identical, resamples, seed, few_units) for n in names]
        devices = None
        if prov_a["device"] != prov_b["device"]:
            devices = {"a": prov_a["device"], "b": prov_b["device"], "pairs": len(pairs),
                       "payload_identical": payload_same, "metric_movement": device_movement(names, pairs)}
            notes.append(f"{codec_a} vs {codec_b}: ran on {prov_a['device']} in A and {prov_b['device']} in B (another "
                         f"device is another configuration): {payload_same} of {len(pairs)} payloads byte-identical"
                         + "".join(f"; {m['metric']} moved by {m['mean_abs_diff']:.4g} on average, at most "
                                   f"{m['max_abs_diff']:.4g}" for m in devices["metric_movement"] if m["n"]))
        # Per language first: a pooled mean can hide a codec that fails one language (and pools word with
        # character error rates), so each language of the pairs gets its own statistics.
        languages = sorted({ra.language for _, ra, _ in pairs})
        by_language = []
        for language in languages if len(languages) > 1 else ():
            part = [p for p in pairs if p[1].language == language]
            same = bool(part) and _decoded_same(part) == len(part)
            by_language.append({"language": language, "pairs": len(part),
                                "metrics": [_metric_stats(n, part, speakers, same, resamples, seed, few_units)
                                            for n in names]})
        comparisons.append({
            "codec_a": codec_a,
            "codec_b": codec_b,
            "pairing": "named by --pair-codecs" if explicit else "same codec spec",
            "pairs": len(pairs),
            "unpaired": unpaired,
            "identity": {"pairs": len(pairs), "payload_identical": payload_same, "decoded_identical": decoded_same,
                         "all_decoded_identical": identical},
            "devices": devices,  # None when both ran on one device
            "provenance": {"a": _public(prov_a), "b": _public(prov_b),
                           "differences": _differences(prov_a, prov_b)},
            "metrics": stats,
            "by_language": by_language,
        })

    run_prov_a, run_prov_b = _run_provenance(a), _run_provenance(b)
    unit = "speakers with all their utterances" if by == "speaker" else "utterances"

    def set_of(run: Run, utts: list[tuple[str, str]]) -> dict[str, Any]:
        return {"set": run.plan.set, "manifest_sha256": run.plan.manifest_sha256, "utterances": len(utts)}

    return {
        "version": COMPARE_VERSION,
        "run_a": str(a.path),
        "run_b": str(b.path),
        "settings": {"by": by, "resamples": resamples, "seed": seed, "level": LEVEL,
                     "metrics": list(metrics) if metrics is not None else None,
                     "pair": [f"{x}={y}" for x, y in mappings] if explicit else None,
                     "allow_different_sets": allow_different_sets, "few_units": few_units,
                     "method": "mean paired difference B - A; percentile bootstrap (numpy default_rng(seed)), "
                               f"resampling {unit}"},
        "set": {"same": same_set, "paired_utterances": len(common),
                "a": set_of(a, utts_a), "b": set_of(b, utts_b)},
        "pairing_overridden": bool(overrides),
        "overrides": overrides,
        "notes": notes,
        "unmatched_codecs": {"a": [c for c in codecs_a if c not in used_a],
                             "b": [c for c in codecs_b if c not in used_b]},
        "provenance": {"a": _public(run_prov_a), "b": _public(run_prov_b),
                       "differences": _differences(run_prov_a, run_prov_b)},
        "comparisons": comparisons,
    }
