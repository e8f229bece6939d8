"""Compare two runs (or two codec configurations) with paired statistics.

Rows are paired by (codec configuration, utterance): the same utterance coded by codec A in run A
and by codec B in run B. For every metric output the mean paired difference (B - A) gets a
percentile bootstrap confidence interval that resamples utterances, or speakers with all their
utterances (`by="speaker"`). Pairs whose decoded audio is byte-identical short-circuit the
statistics: identical audio cannot score differently under the same metric. Provenance (codec,
registry entry, checkpoint, runtime packages, machine, codecarena revision) is set side by side
and every difference is listed. How to read the output: docs/compare.md.
"""

from __future__ import annotations

import argparse
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.results.schema import Row
from codecarena.files import write_json
from codecarena.results.store import load_rows, read_json
from codecarena.rundir import RUN

COMPARE_VERSION = 1
LEVEL = 0.95
FEW_UNITS = 20  # below this many resampling units the percentile interval is flagged as too narrow
IDENTICAL = "identical decoded audio: metrics cannot differ"
_CHUNK_DRAWS = 2_000_000  # resample indices drawn per chunk (bounds memory; fixed, so results stay deterministic)


class CompareError(ValueError):
    """Two runs that cannot be compared as asked; the message is one line."""


# ------------------------------------------------------------------------------------- bootstrap


def bootstrap_means(diffs: Sequence[float] | np.ndarray, groups: Sequence[Any] | None = None,
                    resamples: int = 10000, seed: int = 0) -> np.ndarray:
    """Bootstrap distribution of the mean of `diffs`.

    Without `groups` every value is its own resampling unit. With `groups` (one label per value)
    the units are the groups: each resample draws as many groups as there are, with replacement,
    takes every value of each drawn group, and the statistic is the mean over all values taken
    (sum of the drawn groups' sums / sum of their sizes). Units are ordered by sorted label, the
    draws come from numpy.random.default_rng(seed) in fixed-size chunks: the same data and seed
    always give the same array.
    """
    values = np.asarray(diffs, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise CompareError("bootstrap needs a non-empty 1-D array of differences")
    if not np.all(np.isfinite(values)):
        raise CompareError("bootstrap differences must be finite")
    if resamples < 1:
        raise CompareError(f"resamples must be >= 1, got {resamples}")
    if groups is None:
        sums, counts = values, np.ones_like(values)
    else:
        labels = np.asarray([str(g) for g in groups])
        if labels.shape != values.shape:
            raise CompareError("bootstrap: one group label per difference is needed")
        _, inverse = np.unique(labels, return_inverse=True)
        sums = np.bincount(inverse, weights=values)
        counts = np.bincount(inverse).astype(np.float64)
    units = sums.size
    rng = np.random.default_rng(seed)
    out = np.empty(resamples, dtype=np.float64)
    chunk = max(1, min(resamples, _CHUNK_DRAWS // units))
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        idx = rng.integers(0, units, size=(k, units))
        out[start:start + k] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return out


def percentile_interval(means: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The percentile-method interval: the (1-level)/2 and 1-(1-level)/2 quantiles (numpy's
    default linear interpolation) of the bootstrap distribution."""
    if not 0 < level < 1:
        raise CompareError(f"confidence level must be in (0, 1), got {level}")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_ci(diffs: Sequence[float] | np.ndarray, groups: Sequence[Any] | None = None,
                 resamples: int = 10000, seed: int = 0, level: float = LEVEL) -> tuple[float, float]:
    return percentile_interval(bootstrap_means(diffs, groups, resamples, seed), level)


# ------------------------------------------------------------------------------------- run loading


@dataclass
class _Run:
    path: Path
    info: dict[str, Any]
    rows: list[Row]
    torn: bool
    by_codec: dict[str, dict[str, Row]] = field(default_factory=dict)

    @property
    def plan(self) -> dict[str, Any]:
        return self.info.get("plan") or {}

    def codecs(self) -> list[str]:
        """Codec configurations in plan order, then any with rows but not in the plan."""
        planned = [c.get("codec") for c in self.plan.get("codecs", []) if isinstance(c, dict)]
        return list(dict.fromkeys([c for c in planned if c in self.by_codec] + list(self.by_codec)))

    def utterances(self) -> list[tuple[str, str]]:
        return [(str(u[0]), str(u[1])) for u in self.plan.get("utterances", [])]


def _load(path: Path, label: str) -> _Run:
    path = Path(path)
    if not path.is_dir():
        raise CompareError(f"run {label} {path}: not a run directory")
    info = read_json(path / RUN)
    if not isinstance(info, dict) or not isinstance(info.get("plan"), dict):
        raise CompareError(f"run {label} {path}: run.json has no plan")
    rows, torn = load_rows(path)
    if not rows:
        raise CompareError(f"run {label} {path}: no rows in rows.jsonl")
    run = _Run(path, info, rows, torn)
    for row in rows:
        slot = run.by_codec.setdefault(row.codec, {})
        if row.utterance in slot:
            raise CompareError(f"run {label} {path}: two rows for {row.codec} x {row.utterance}")
        slot[row.utterance] = row
    return run


# ------------------------------------------------------------------------------------- pairing


def _canonical(text: str) -> str:
    from codecarena.specs import SpecError, parse_spec

    try:
        return parse_spec(text).canonical
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


def _speakers(run_a: _Run, utterances: Iterable[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """utterance id -> speaker label, and notes on where the labels come from."""
    utterances = list(utterances)
    if run_a.plan.get("set") == "smoke":
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
            [(f"set {run_a.plan.get('set')!r} records no speakers: each utterance is treated as its own speaker "
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


def _codec_provenance(run: _Run, codec: str) -> dict[str, Any]:
    rows = list(run.by_codec[codec].values())
    registry = _distinct(r.registry for r in rows)
    runtimes = run.info.get("runtimes") or {}
    record = runtimes.get(registry) if isinstance(registry, str) else None
    return {
        "codec": codec,
        "family": _distinct(r.family for r in rows),
        "config": _distinct(r.config for r in rows),
        "registry": registry,
        "checkpoint": _distinct(r.checkpoint for r in rows),
        "variant": _distinct(r.variant for r in rows),
        "weights": _distinct(r.weights for r in rows),
        "sample_rate": _distinct(r.sample_rate for r in rows),
        "worker_runtime": _distinct(r.runtime for r in rows),
        "model": _distinct(r.model for r in rows),
        "runtime_environment": record.get("environment") if record else None,
        "runtime_interpreter": record.get("interpreter") if record else None,
        "runtime_packages_sha256": record.get("packages_sha256") if record else None,
        "_runtime_packages": _packages(record) if record else None,
    }


def _run_provenance(run: _Run) -> dict[str, Any]:
    info, env, plan = run.info, run.info.get("environment") or {}, run.plan
    git = info.get("git") or {}
    metrics = {}
    for m in info.get("metrics") or []:
        if isinstance(m, dict) and "name" in m:
            metrics[m["name"]] = {"versions": m.get("versions"),
                                  "model_files": [(f.get("name"), f.get("sha256")) if isinstance(f, dict) else f
                                                  for f in m.get("model_files") or []],
                                  "unusable_because": m.get("unusable_because")}
    return {
        "set": plan.get("set"),
        "manifest_sha256": plan.get("manifest_sha256"),
        "utterances": len(plan.get("utterances") or []),
        "arena_rate": plan.get("arena_rate"),
        "codecarena": info.get("codecarena"),
        "git_revision": git.get("revision"),
        "git_dirty": git.get("dirty"),
        "python": env.get("python"),
        "os": env.get("os"),
        "cpu": env.get("cpu"),
        "cpu_count": env.get("cpu_count"),
        "metrics_planned": plan.get("metrics"),
        "finished": info.get("finished"),
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
                  resamples: int, seed: int) -> dict[str, Any]:
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
    low, high = bootstrap_ci(diffs, labels, resamples=resamples, seed=seed, level=LEVEL)
    out.update(ci_low=low, ci_high=high, ci_width=high - low, includes_zero=bool(low <= 0.0 <= high))
    if out["includes_zero"]:
        out["verdict"] = f"interval includes 0 (width {high - low:.4g}): not shown to differ, not shown equal"
    else:
        out["verdict"] = f"B {'higher' if low > 0 else 'lower'} than A: interval excludes 0"
    if out["units"] < FEW_UNITS:
        out["warning"] = (f"only {out['units']} resampling units: the percentile interval is too narrow "
                          f"(it undercovers), read it as descriptive")
    return out


def _metric_names(run_a: _Run, rows_a: list[Row], rows_b: list[Row], wanted: list[str] | None) -> list[str]:
    present_a = {n for r in rows_a for n in r.metrics}
    present_b = {n for r in rows_b for n in r.metrics}
    declared = [o for m in run_a.info.get("metrics") or [] if isinstance(m, dict) for o in m.get("outputs") or []]
    order = list(dict.fromkeys(declared + sorted(present_a | present_b)))
    both = [n for n in order if n in present_a and n in present_b]
    for name in wanted or []:
        if name not in both:
            side = "A" if name not in present_a else "B"
            raise CompareError(f"metric {name!r} was not computed in run {side} for these codecs "
                               f"(both have: {', '.join(both) or 'none'})")
    return list(dict.fromkeys(wanted)) if wanted is not None else both


# ------------------------------------------------------------------------------------- compare


def compare_runs(run_a: Path, run_b: Path, metrics: list[str] | None = None, by: str = "utterance",
                 resamples: int = 10000, seed: int = 0, pair: str | Sequence[str] | None = None,
                 allow_different_sets: bool = False) -> dict[str, Any]:
    """Paired comparison of run B against run A (differences are B - A); JSON-serialisable.

    `pair` maps codec configurations explicitly ("A_SPEC=B_SPEC", several separated by ';' or as
    a list): only the named pairs are compared, and codec pairs whose weights kind or sample rate
    differ are allowed (flagged under `overrides`). Without it, codecs with the same canonical spec
    in both runs are paired and such pairs are refused. Runs of different evaluation sets are
    refused unless `allow_different_sets`, which pairs only utterances present in both plans with
    the same id and the same audio sha256 (also flagged under `overrides`).
    """
    if by not in ("utterance", "speaker"):
        raise CompareError(f"--by must be utterance or speaker, got {by!r}")
    if resamples < 1:
        raise CompareError(f"--resamples must be >= 1, got {resamples}")
    a, b = _load(Path(run_a), "A"), _load(Path(run_b), "B")
    overrides: list[str] = []
    notes: list[str] = []
    for run, label in ((a, "A"), (b, "B")):
        if run.torn:
            notes.append(f"run {label}: a torn final line of rows.jsonl (interrupted append) was ignored")
        if run.info.get("finished") is not True:
            notes.append(f"run {label} did not finish: missing rows leave utterances unpaired")

    # ---- the evaluation set
    utts_a, utts_b = a.utterances(), b.utterances()
    same_set = a.plan.get("manifest_sha256") == b.plan.get("manifest_sha256") and utts_a == utts_b
    if same_set:
        common = utts_a
    else:
        detail = (f"manifest {str(a.plan.get('manifest_sha256'))[:12]} ({len(utts_a)} utterances) vs "
                  f"{str(b.plan.get('manifest_sha256'))[:12]} ({len(utts_b)} utterances)")
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
    if a.plan.get("arena_rate") != b.plan.get("arena_rate"):
        if pair is None:
            raise CompareError(f"runs A and B ran at different sample rates ({a.plan.get('arena_rate')} vs "
                               f"{b.plan.get('arena_rate')} Hz); name the rows to pair with --pair-codecs A=B")
        overrides.append(f"arena sample rates differ ({a.plan.get('arena_rate')} vs {b.plan.get('arena_rate')} Hz); "
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
        pair_overrides = []
        for key, what in (("weights", "weights kinds"), ("sample_rate", "sample rates")):
            if prov_a[key] != prov_b[key]:
                if not explicit:
                    raise CompareError(f"{codec_a}: {what} differ between the runs ({prov_a[key]} vs {prov_b[key]}); "
                                       f"name the pair with --pair-codecs to compare anyway")
                pair_overrides.append(f"{codec_a} vs {codec_b}: {what} differ ({prov_a[key]} vs {prov_b[key]}); "
                                      f"compared because --pair-codecs named the pair")
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
        decoded_same = sum(1 for _, ra, rb in pairs if ra.decoded_sha256 and ra.decoded_sha256 == rb.decoded_sha256)
        identical = bool(pairs) and decoded_same == len(pairs)
        names = _metric_names(a, [p[1] for p in pairs], [p[2] for p in pairs], metrics)
        stats = [_metric_stats(n, pairs, speakers, identical, resamples, seed) for n in names]
        comparisons.append({
            "codec_a": codec_a,
            "codec_b": codec_b,
            "pairing": "named by --pair-codecs" if explicit else "same codec spec",
            "pairs": len(pairs),
            "unpaired": unpaired,
            "identity": {"pairs": len(pairs), "payload_identical": payload_same, "decoded_identical": decoded_same,
                         "all_decoded_identical": identical},
            "provenance": {"a": _public(prov_a), "b": _public(prov_b),
                           "differences": _differences(prov_a, prov_b)},
            "metrics": stats,
        })

    run_prov_a, run_prov_b = _run_provenance(a), _run_provenance(b)
    unit = "speakers with all their utterances" if by == "speaker" else "utterances"

    def set_of(run: _Run, utts: list[tuple[str, str]]) -> dict[str, Any]:
        return {"set": run.plan.get("set"), "manifest_sha256": run.plan.get("manifest_sha256"), "utterances": len(utts)}

    return {
        "version": COMPARE_VERSION,
        "run_a": str(a.path),
        "run_b": str(b.path),
        "settings": {"by": by, "resamples": resamples, "seed": seed, "level": LEVEL,
                     "metrics": list(metrics) if metrics is not None else None,
                     "pair": [f"{x}={y}" for x, y in mappings] if explicit else None,
                     "allow_different_sets": allow_different_sets,
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


# ------------------------------------------------------------------------------------- text


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _short(value: Any, limit: int = 160) -> str:
    """A cell: hashes cut to 16 hex digits, long values cut (the JSON output holds them whole)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict) and value and "mixed" not in value:
        text = " ".join(f"{k}={_short(v, limit)}" for k, v in sorted(value.items()))
    else:
        text = json.dumps(value, sort_keys=True, default=str)
    text = re.sub(r"\b([0-9a-f]{16})[0-9a-f]{48}\b", r"\1..", text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def render_text(result: dict[str, Any], width: int = 160) -> str:
    """The comparison as readable text (rich tables rendered to a string, no colour)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=width, highlight=False, color_system=None, soft_wrap=False)
    s = result["settings"]
    con.print(f"compare A = {result['run_a']}", markup=False)
    con.print(f"        B = {result['run_b']}", markup=False)
    unit = "speakers (all their utterances together)" if s["by"] == "speaker" else "utterances"
    con.print(f"difference = B - A; {int(s['level'] * 100)}% percentile bootstrap interval of the mean difference, "
              f"{s['resamples']} resamples of {unit}, seed {s['seed']}", markup=False)
    st = result["set"]
    def described(side: dict[str, Any]) -> str:
        return f"{side['set']} ({side['utterances']} utterances, manifest {str(side['manifest_sha256'])[:12]})"

    con.print(f"set: {described(st['a'])}" + ("" if st["same"] else f" vs {described(st['b'])}")
              + f"; {st['paired_utterances']} utterances paired", markup=False)
    if result["pairing_overridden"]:
        for line in result["overrides"]:
            con.print(f"PAIRING OVERRIDDEN: {line}", markup=False)
    for line in result["notes"]:
        con.print(f"note: {line}", markup=False)
    um = result["unmatched_codecs"]
    if um["a"] or um["b"]:
        con.print(f"not compared: A {', '.join(um['a']) or '-'}; B {', '.join(um['b']) or '-'}", markup=False)

    for comp in result["comparisons"]:
        con.print("")
        ident = comp["identity"]
        title = comp["codec_a"]
        if comp["codec_a"] != comp["codec_b"]:
            title = f"{comp['codec_a']} (A) vs {comp['codec_b']} (B)"
        con.print(f"== {title}: {comp['pairs']} pairs ({comp['pairing']}); identical payloads "
                  f"{ident['payload_identical']}/{ident['pairs']}, identical decoded audio "
                  f"{ident['decoded_identical']}/{ident['pairs']}", markup=False)
        missing = comp["unpaired"]
        if missing["missing_in_a"] or missing["missing_in_b"]:
            con.print(f"unpaired: no row in A for {', '.join(missing['missing_in_a']) or '-'}; "
                      f"no row in B for {', '.join(missing['missing_in_b']) or '-'}", markup=False)
        if ident["all_decoded_identical"]:
            con.print("identical decoded audio in every pair: metrics cannot differ, so no bootstrap was run",
                      markup=False)
        table = Table(box=box.SIMPLE_HEAD, show_lines=False, title=None)
        for name, justify in (("metric", "left"), ("n", "right"), ("mean A", "right"), ("mean B", "right"),
                              ("B - A", "right"), ("95% CI", "right"), ("units", "right"), ("reading", "left")):
            table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for m in comp["metrics"]:
            ci = "-" if m["ci_low"] is None else f"[{m['ci_low']:+.4f}, {m['ci_high']:+.4f}]"
            units = "-" if m["units"] is None else str(m["units"])
            table.add_row(m["metric"], f"{m['n']}/{m['pairs']}", _num(m["mean_a"]), _num(m["mean_b"]),
                          _num(m["mean_diff"], "+.4f"), ci, units, m["verdict"])
        con.print(table)
        for m in comp["metrics"]:
            for reason, count in m["dropped"].items():
                con.print(f"{m['metric']}: {count} pair(s) dropped: {reason}", markup=False)
        warnings: dict[str, list[str]] = {}
        for m in comp["metrics"]:
            if m.get("warning"):
                warnings.setdefault(m["warning"], []).append(m["metric"])
        for warning, names in warnings.items():
            con.print(f"warning ({', '.join(names)}): {warning}", markup=False)
        con.print("")
        _print_provenance(con, comp["provenance"], f"provenance of {title}")
    con.print("")
    _print_provenance(con, result["provenance"], "run provenance")
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _print_provenance(con: Any, prov: dict[str, Any], title: str) -> None:
    from rich import box
    from rich.table import Table

    diffs = prov["differences"]
    table = Table(box=box.SIMPLE_HEAD, title=f"{title}: {len(diffs)} difference{'s' if len(diffs) != 1 else ''}",
                  title_justify="left")
    table.add_column("field")
    table.add_column("A", overflow="fold", ratio=1)
    table.add_column("B", overflow="fold", ratio=1)
    table.add_column("differs", justify="center")
    differing = {d["field"] for d in diffs}
    for key, value in prov["a"].items():
        table.add_row(key, _short(value), _short(prov["b"].get(key)), "yes" if key in differing else "")
    for d in diffs:
        if d["field"] not in prov["a"]:
            table.add_row(d["field"], _short(d["a"]), _short(d["b"]), "yes")
    con.print(table)


# ------------------------------------------------------------------------------------- command line


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare",
                              help="paired comparison of two runs (or codec variants) with bootstrap intervals")
    p.add_argument("run_a", type=Path, help="run directory A (the baseline; differences are B - A)")
    p.add_argument("run_b", type=Path, help="run directory B (may be the same directory as A with --pair-codecs)")
    p.add_argument("--metric", action="append", dest="metrics", metavar="M",
                   help="metric output to compare, repeatable or comma-separated (default: every output in both)")
    p.add_argument("--by", choices=["utterance", "speaker"], default="utterance",
                   help="resampling unit of the bootstrap (speaker: all a speaker's utterances move together)")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed of numpy's default_rng for the bootstrap")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write the whole comparison as JSON here")
    p.add_argument("--pair-codecs", action="append", dest="pair", metavar="A_SPEC=B_SPEC",
                   help="compare codec A_SPEC of run A with B_SPEC of run B (repeatable); only named pairs are "
                        "compared, and differing weights kinds or sample rates are then allowed (flagged)")
    p.add_argument("--allow-different-sets", action="store_true",
                   help="compare runs of different sets on the utterances both hold with identical audio (flagged)")
    return p


def run(args: argparse.Namespace) -> int:
    from codecarena.console import console

    metrics = None
    if args.metrics:
        metrics = [m.strip() for item in args.metrics for m in item.split(",") if m.strip()]
    result = compare_runs(args.run_a, args.run_b, metrics=metrics, by=args.by, resamples=args.resamples,
                          seed=args.seed, pair=args.pair, allow_different_sets=args.allow_different_sets)
    console.print(render_text(result), markup=False, highlight=False, soft_wrap=True, end="")
    if args.json:
        write_json(args.json, result)
        console.print(f"comparison written to {args.json}", markup=False)
    return 0


def render_html(result: dict[str, Any]) -> str:
    """The text rendering inside <pre>, for the HTML report's comparison section."""
    import html

    return f"<pre class=\"compare\">{html.escape(render_text(result))}</pre>"
