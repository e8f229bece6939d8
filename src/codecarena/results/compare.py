"""Compare two runs (or two codec configurations) with paired statistics.

Rows are paired by (codec configuration, utterance): the same utterance coded by codec A in run A
and by codec B in run B. For every metric output the mean paired difference (B - A) gets a
percentile bootstrap confidence interval (`bootstrap.py`) that resamples utterances, or speakers
with all their utterances (`by="speaker"`). Pairs whose decoded audio is byte-identical short-circuit the
statistics: identical audio cannot score differently under the same metric. Provenance (codec,
registry entry, checkpoint, runtime packages, machine, codecarena revision) is set side by side
and every difference is listed (`compare_provenance.py`; the statistics in `compare_stats.py`). The
result is a JSON-serialisable dict; `compare_text.py` renders it. How to read the output: docs/compare.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecarena.metrics import outputs
from codecarena.plural import counted
from codecarena.results.bootstrap import LEVEL
from codecarena.results.compare_provenance import codec_provenance, differences, public, run_provenance
from codecarena.results.compare_stats import CompareError, decoded_same, device_movement, metric_stats, speaker_units
from codecarena.results.record import RunLoadError
from codecarena.results.run import Run
from codecarena.results.schema import Row

# 2: `by_language` in every comparison, and the flag of an interval on fewer than MIN_UNITS units
# (bootstrap.py: the one bound of every surface) in `warning`. 3: below that bound no interval and no
# reading unless `settings.few_units` asked for them; provenance paths inside a run read as RUN_PATH.
COMPARE_VERSION = 3


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
    same_set, common = _common_utterances(a, b, allow_different_sets, overrides)
    if a.plan.arena_rate != b.plan.arena_rate:
        if pair is None:
            raise CompareError(f"runs A and B ran at different sample rates ({a.plan.arena_rate} vs "
                               f"{b.plan.arena_rate} Hz); name the rows to pair with --pair-codecs A=B")
        overrides.append(f"arena sample rates differ ({a.plan.arena_rate} vs {b.plan.arena_rate} Hz); "
                         f"compared because --pair-codecs named the pairs")
    codecs_a, codecs_b = a.codecs(), b.codecs()
    explicit = pair is not None
    mappings = _mappings(pair, codecs_a, codecs_b, b)
    speakers = None
    if by == "speaker":
        speakers, speaker_notes = speaker_units(a, common)
        notes.extend(speaker_notes)
    settings = _Settings(metrics, speakers, resamples, seed, few_units, explicit)
    comparisons = [_compare_pair(a, b, codec_a, codec_b, [u for u, _ in common], settings, overrides, notes)
                   for codec_a, codec_b in mappings]
    used_a, used_b = {m[0] for m in mappings}, {m[1] for m in mappings}
    run_prov_a, run_prov_b = run_provenance(a), run_provenance(b)
    unit = "speakers with all their utterances" if by == "speaker" else "utterances"

    def set_of(run: Run) -> dict[str, Any]:
        return {"set": run.plan.set, "manifest_sha256": run.plan.manifest_sha256, "utterances": len(run.utterances())}

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
        "set": {"same": same_set, "paired_utterances": len(common), "a": set_of(a), "b": set_of(b)},
        "pairing_overridden": bool(overrides),
        "overrides": overrides,
        "notes": notes,
        "unmatched_codecs": {"a": [c for c in codecs_a if c not in used_a],
                             "b": [c for c in codecs_b if c not in used_b]},
        "provenance": {"a": public(run_prov_a), "b": public(run_prov_b),
                       "differences": differences(run_prov_a, run_prov_b)},
        "comparisons": comparisons,
    }


def _common_utterances(a: Run, b: Run, allow_different_sets: bool,
                       overrides: list[str]) -> tuple[bool, list[tuple[str, str]]]:
    """Whether the runs evaluate the same set, and the (utterance, sha256) pairs both hold: all of
    them for one set; for different sets (only with `allow_different_sets`, flagged in `overrides`)
    those with the same id and the same audio."""
    utts_a, utts_b = a.utterances(), b.utterances()
    if a.plan.manifest_sha256 == b.plan.manifest_sha256 and utts_a == utts_b:
        return True, utts_a
    detail = (f"manifest {a.plan.manifest_sha256[:12]} ({len(utts_a)} utterances) vs "
              f"{b.plan.manifest_sha256[:12]} ({len(utts_b)} utterances)")
    if not allow_different_sets:
        raise CompareError(f"runs A and B evaluate different sets ({detail}); pass --allow-different-sets "
                           f"to pair only the utterances both hold with identical audio")
    shas_b = dict(utts_b)
    common = [(u, s) for u, s in utts_a if shas_b.get(u) == s]
    ids_b = {u for u, _ in utts_b}
    clash = [u for u, s in utts_a if u in shas_b and shas_b[u] != s]
    overrides.append(f"sets differ ({detail}): --allow-different-sets pairs the "
                     f"{counted(len(common), 'utterance')} "
                     f"with the same id and audio sha256; {len([u for u, _ in utts_a if u not in ids_b])} "
                     f"only in A, {len([u for u in ids_b if u not in dict(utts_a)])} only in B, "
                     f"{len(clash)} with the same id but different audio (never paired)")
    if not common:
        raise CompareError(f"runs A and B share no utterance with identical audio ({detail})")
    return False, common


def _mappings(pair: str | Sequence[str] | None, codecs_a: list[str], codecs_b: list[str],
              b: Run) -> list[tuple[str, str]]:
    """The codec pairs to compare: those `pair` names, else every configuration both runs hold."""
    if pair is not None:
        return parse_pairs(pair, codecs_a, codecs_b)
    mappings = [(c, c) for c in codecs_a if c in b.by_codec]
    if not mappings:
        raise CompareError(f"no codec configuration is in both runs (A: {', '.join(codecs_a)}; "
                           f"B: {', '.join(codecs_b)}); name the pairs with --pair-codecs A_SPEC=B_SPEC")
    return mappings


@dataclass(frozen=True)
class _Settings:
    """What every codec pair of one comparison is compared with."""

    metrics: list[str] | None
    speakers: dict[str, str] | None
    resamples: int
    seed: int
    few_units: bool
    explicit: bool


def _pair_provenance(codec_a: str, codec_b: str, prov_a: dict[str, Any], prov_b: dict[str, Any],
                     explicit: bool, overrides: list[str], notes: list[str]) -> None:
    """Refuse (or, for a named pair, flag) a pair whose weights kinds or sample rates differ; note an
    external runtime."""
    for side, codec, prov in (("A", codec_a, prov_a), ("B", codec_b, prov_b)):
        if prov["runtime_environment"] == "external":
            notes.append(f"{codec} of run {side} ran in an external runtime ({prov['runtime_interpreter']}), "
                         "not its pinned runtime")
    for key, what in (("weights", "weights kinds"), ("sample_rate", "sample rates")):
        if prov_a[key] == prov_b[key]:
            continue
        if not explicit:
            raise CompareError(f"{codec_a}: {what} differ between the runs ({prov_a[key]} vs {prov_b[key]}); "
                               f"name the pair with --pair-codecs to compare anyway")
        differ = f"{codec_a} vs {codec_b}: {what} differ ({prov_a[key]} vs {prov_b[key]})"
        if _two_codecs_as_they_are(codec_a, codec_b, key, prov_a[key], prov_b[key]):
            notes.append(f"{differ}: two different codecs, compared as --pair-codecs named them")
        else:
            overrides.append(f"{differ}; compared because --pair-codecs named the pair")


def _pair_rows(rows_a: dict[str, Row], rows_b: dict[str, Row], common_ids: list[str], label: str,
               notes: list[str]) -> tuple[list[tuple[str, Row, Row]], dict[str, list[str]]]:
    """(utterance, row A, row B) for every utterance both codecs coded from the same reference, and
    the utterances one side lacks."""
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
        notes.append(f"{label}: {counted(len(ref_differs), 'utterance')} not paired because the rows' "
                     f"reference sha256 differ: {', '.join(ref_differs)}")
    return pairs, unpaired


def _pooled_names(names: list[str], pairs: list[tuple[str, Row, Row]], label: str, wanted: list[str] | None,
                  notes: list[str]) -> list[str]:
    """`names` less the error rates that cannot be pooled over the pairs' languages (refused when the
    user asked for one)."""
    languages = sorted({ra.language for _, ra, _ in pairs})
    # An error rate counts each language's own words or characters: no mean difference is formed
    # over several languages, nor a word error rate for a language written without spaces.
    unpooled = [n for n in names if pairs and not outputs.summarised(n, languages)]
    if not unpooled:
        return names
    why = (f"{', '.join(unpooled)} not compared over the languages {', '.join(map(repr, languages))}: an "
           "error rate counts each language's own words or characters, and a language written without "
           "spaces has no word error rate")
    if wanted is not None:
        raise CompareError(f"{label}: {why}")
    notes.append(f"{label}: {why}")
    return [n for n in names if n not in unpooled]


def _compare_pair(a: Run, b: Run, codec_a: str, codec_b: str, common_ids: list[str], settings: _Settings,
                  overrides: list[str], notes: list[str]) -> dict[str, Any]:
    """One codec pair's comparison: pairing, identity, devices, provenance and each metric's statistics,
    pooled and per language."""
    label = f"{codec_a} vs {codec_b}"
    prov_a, prov_b = codec_provenance(a, codec_a), codec_provenance(b, codec_b)
    _pair_provenance(codec_a, codec_b, prov_a, prov_b, settings.explicit, overrides, notes)
    pairs, unpaired = _pair_rows(a.by_codec[codec_a], b.by_codec[codec_b], common_ids, label, notes)
    payload_same = sum(1 for _, ra, rb in pairs if ra.payload_sha256 and ra.payload_sha256 == rb.payload_sha256)
    decoded = decoded_same(pairs)
    identical = bool(pairs) and decoded == len(pairs)
    names = _metric_names(a, [p[1] for p in pairs], [p[2] for p in pairs], settings.metrics)
    names = _pooled_names(names, pairs, label, settings.metrics, notes)

    def stats(part: list[tuple[str, Row, Row]], same: bool) -> list[dict[str, Any]]:
        return [metric_stats(n, part, settings.speakers, same, settings.resamples, settings.seed, settings.few_units)
                for n in names]

    devices = None
    if prov_a["device"] != prov_b["device"]:
        devices = {"a": prov_a["device"], "b": prov_b["device"], "pairs": len(pairs),
                   "payload_identical": payload_same, "metric_movement": device_movement(names, pairs)}
        notes.append(f"{label}: ran on {prov_a['device']} in A and {prov_b['device']} in B (another "
                     f"device is another configuration): {payload_same} of {len(pairs)} payloads byte-identical"
                     + "".join(f"; {m['metric']} moved by {m['mean_abs_diff']:.4g} on average, at most "
                               f"{m['max_abs_diff']:.4g}" for m in devices["metric_movement"] if m["n"]))
    # Per language first: a pooled mean can hide a codec that fails one language (and pools word with
    # character error rates), so each language of the pairs gets its own statistics.
    languages = sorted({ra.language for _, ra, _ in pairs})
    by_language = []
    for language in languages if len(languages) > 1 else ():
        part = [p for p in pairs if p[1].language == language]
        by_language.append({"language": language, "pairs": len(part),
                            "metrics": stats(part, bool(part) and decoded_same(part) == len(part))})
    return {
        "codec_a": codec_a,
        "codec_b": codec_b,
        "pairing": "named by --pair-codecs" if settings.explicit else "same codec spec",
        "pairs": len(pairs),
        "unpaired": unpaired,
        "identity": {"pairs": len(pairs), "payload_identical": payload_same, "decoded_identical": decoded,
                     "all_decoded_identical": identical},
        "devices": devices,  # None when both ran on one device
        "provenance": {"a": public(prov_a), "b": public(prov_b), "differences": differences(prov_a, prov_b)},
        "metrics": stats(pairs, identical),
        "by_language": by_language,
    }
