"""Quality against input conditions, per codec configuration (docs/conditions.md): what summary.json holds
under `conditions`, which `run` prints and the report draws.

A curve joins the configurations of one codec whose conditions differ only in the swept value (the SNR of
one noise with one seed, the RT60 of one room, the level, the generation), ordered from the mildest to the
harshest, with the clean configuration beside them. Each point has, per metric, the mean over ok values
with n and its 95% interval where n allows, twice, never mixed: `vs_clean`, against the clean reference
(end to end: the condition's effect and the codec's; for content metrics against the transcript), and
`vs_input`, against the conditioned input (the codec's alone); and the same per language; what the
condition achieved (`realised`: the SNR measured, the RT60 measured, the level reached), clipping, and for a
generation the share of units its payloads kept from the generation before. A `pcm:16` curve is the
condition's own effect. The robustness of a curve is, per metric and reference, the swept value at which
the mean has fallen by DROP from the clean configuration's, linearly interpolated between the two measured
points around it (never extrapolated: beyond the harshest point it says so; before the mildest, for an
SNR, it says the fall happened between the clean input and that point). Levels have no direction that is
worse, so no robustness figure. Tandems and measured responses are single points (`points`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from codecarena.conditions.spec import Condition, parse_condition
from codecarena.metrics.outputs import LOWER_IS_BETTER
from codecarena.results.schema import Row

DROP = 0.5
METHOD = (f"Per codec configuration and kind of condition: each metric's mean over ok values (n, and a 95% "
          f"bootstrap interval where n allows) against the clean reference (vs_clean, end to end) and against "
          f"the conditioned input (vs_input, the codec alone), never mixed; robustness is the swept value at "
          f"which the mean has fallen by {DROP} from the clean configuration's, linearly interpolated between "
          f"the measured points around it, never extrapolated")
REFERENCES = {"vs_clean": "against the clean reference (and the transcript): end to end",
              "vs_input": "against the conditioned input the encoder got: what the codec did with it"}
UNITS = {"noise": "dB SNR", "rt60": "s RT60", "level": "dBov", "gen": "generation"}
# Which way the swept value gets harsher: a lower SNR, a longer RT60, a later generation.
HARSHER = {"noise": -1, "rt60": 1, "gen": 1}

Interval = Callable[[list[float]], list[float] | None]


def _condition(configuration: str) -> tuple[str, Condition] | None:
    head, at, channel = configuration.partition("@")
    codec, percent, text = head.partition("%")
    if not percent:
        return None
    return codec + (f"@{channel}" if at else ""), parse_condition(text)


def _group(rows: list[Row], interval: Interval, field: str) -> dict[str, Any]:
    ok = sorted((r for r in rows if r.status == "ok"), key=lambda r: r.utterance)
    groups = [(getattr(r, field) or {}) for r in ok]
    names = list(dict.fromkeys(name for metrics in groups for name in metrics))
    out = {}
    for name in names:
        values = [m[name]["value"] for m in groups if name in m and m[name]["status"] == "ok"]
        if values:
            out[name] = {"mean": statistics.fmean(values), "n": len(values), "ci95": interval(values)}
    return out


def _means(rows: list[Row], field: str) -> dict[str, Any]:
    """Per metric {mean, n} over ok values (per language: no interval, the n is too small to trust one)."""
    out: dict[str, Any] = {}
    for name, stats in _group(rows, lambda values: None, field).items():
        out[name] = {"mean": stats["mean"], "n": stats["n"]}
    return out


def _point(configuration: str, condition: Condition | None, rows: list[Row], interval: Interval) -> dict[str, Any]:
    ok = [r for r in rows if r.status == "ok"]
    realised = [r.condition["realised"] for r in ok if r.condition and r.condition.get("realised") is not None]
    agreements = [r.condition["agreement"] for r in ok if r.condition and r.condition.get("agreement")]
    compared = sum(a["compared"] for a in agreements)
    languages = sorted({r.language for r in rows})
    point: dict[str, Any] = {
        "configuration": configuration, "condition": condition.canonical if condition else "",
        "value": condition.value if condition else None, "rows_ok": len(ok),
        "realised": statistics.fmean(realised) if realised else None,
        "clipped_samples": sum(r.condition["clipped_samples"] for r in ok if r.condition),
        "vs_clean": _group(rows, interval, "metrics"),
        "vs_input": _group(rows, interval, "input_metrics") if condition else _group(rows, interval, "metrics"),
        "by_language": {lang: {"vs_clean": _means(sub, "metrics"),
                               "vs_input": _means(sub, "input_metrics" if condition else "metrics")}
                        for lang in languages for sub in [[r for r in rows if r.language == lang]]},
    }
    if condition is not None and condition.model == "gen":
        point["agreement"] = {"unit": agreements[0]["unit"] if agreements else None, "compared": compared,
                              "equal": sum(a["equal"] for a in agreements),
                              "fraction": sum(a["equal"] for a in agreements) / compared if compared else None}
    if condition is not None and condition.model == "tandem":
        point["hops_bps"] = [statistics.fmean(r.condition["hops"][k]["representation_bps"] for r in ok)
                             for k in range(len(ok[0].condition["hops"]))] if ok and ok[0].condition else []
        point["representation_bps"] = statistics.fmean(r.representation_bps or 0.0 for r in ok) if ok else None
    return point


def crossing(clean: dict[str, Any] | None, points: list[dict[str, Any]], name: str, reference: str,
             model: str) -> dict[str, Any]:
    """Where `name`'s mean (against `reference`) has fallen by DROP from the clean configuration's, walking
    from the mildest point to the harshest (module docstring)."""
    base = (clean or {}).get("vs_clean", {}).get(name, {}).get("mean")
    measured = [(p["value"], p[reference][name]["mean"], p[reference][name]["n"]) for p in points
                if name in p[reference]]
    found: dict[str, Any] = {"clean": base, "value": None, "between": None, "beyond": None, "points": len(measured),
                             "n": min((n for _, _, n in measured), default=None)}
    if base is None or not measured:
        return found
    sign = -1 if name in LOWER_IS_BETTER else 1
    before: tuple[float | None, float] = (1.0 if model == "gen" else 0.0 if model == "rt60" else None, 0.0)
    for value, mean, _ in measured:
        drop = sign * (base - mean)
        if drop >= DROP:
            if before[0] is None:  # an SNR: between the clean input (no noise) and the mildest point
                return {**found, "between": [None, value]}
            share = (DROP - before[1]) / (drop - before[1])
            return {**found, "value": before[0] + share * (value - before[0]), "between": [before[0], value]}
        before = (value, drop)
    return {**found, "beyond": measured[-1][0]}


def summary(rows: list[Row], interval: Interval) -> dict[str, Any]:
    """What summary.json holds under `conditions` for a run with conditioned rows."""
    by_configuration: dict[str, list[Row]] = {}
    for row in rows:
        by_configuration.setdefault(row.codec, []).append(row)
    kinds: dict[tuple[str, str], list[tuple[str, Condition]]] = {}
    singles: list[tuple[str, str, Condition]] = []
    for configuration in by_configuration:
        found = _condition(configuration)
        if found is None:
            continue
        codec, condition = found
        if condition.curve:
            kinds.setdefault((codec, condition.curve), []).append((configuration, condition))
        else:
            singles.append((codec, configuration, condition))
    curves = []
    for (codec, curve), members in kinds.items():
        model = members[0][1].model
        order = HARSHER.get(model, 1)
        members.sort(key=lambda m: order * (m[1].value or 0.0))
        clean = _point(codec, None, by_configuration[codec], interval) if codec in by_configuration else None
        points = [_point(c, condition, by_configuration[c], interval) for c, condition in members]
        names = list(dict.fromkeys(n for p in points for n in p["vs_clean"]))
        robustness = ({reference: {name: crossing(clean, points, name, reference, model) for name in names}
                       for reference in REFERENCES} if model in HARSHER else None)
        curves.append({"codec": codec, "curve": curve, "model": model, "unit": UNITS[model], "clean": clean,
                       "points": points, "robustness": robustness})
    return {"drop": DROP, "method": METHOD, "references": REFERENCES, "curves": curves,
            "points": [{"codec": codec, "model": condition.model,
                        "clean": _point(codec, None, by_configuration[codec], interval) if codec in by_configuration
                        else None, **_point(configuration, condition, by_configuration[configuration], interval)}
                       for codec, configuration, condition in singles]}


#: The metric the printed lines speak of, when the run has it: the first of these, else any.
PREFERRED = ("pesq_wb", "stoi", "estoi", "visqol", "si_sdr", "dnsmos_ovrl", "dwer", "dcer")


def value_text(value: float | None, model: str) -> str:
    if value is None:
        return "-"
    return {"noise": f"{value:g} dB", "rt60": f"{value:g} s", "level": f"{value:g} dBov",
            "gen": f"generation {value:g}"}.get(model, f"{value:g}")


def crossing_text(found: dict[str, Any], model: str) -> str:
    """What a robustness figure says, with what it rests on."""
    basis = f"{found['points']} point{'s' if found['points'] != 1 else ''} measured; n={found['n']}"
    if found["clean"] is None:
        return "no clean configuration to compare with"
    if found["value"] is not None:
        low, high = found["between"]
        return (f"falls by {DROP} at about {value_text(round(found['value'], 2), model)} (interpolated between "
                f"{value_text(low, model)} and {value_text(high, model)}; {basis})")
    if found["between"] is not None:
        return f"falls by {DROP} already at {value_text(found['between'][1], model)}, the mildest measured ({basis})"
    if found["beyond"] is not None:
        return f"falls by less than {DROP} up to {value_text(found['beyond'], model)} ({basis})"
    return "too few points"


def text_lines(conditions: dict[str, Any]) -> list[str]:
    """The curves in plain lines, for the end of `codecarena run`."""
    present = list(dict.fromkeys(n for c in conditions["curves"] + conditions["points"]
                                 for p in c.get("points", [c]) for n in p["vs_clean"]))
    metric = next((m for m in PREFERRED if m in present), present[0] if present else None)
    if metric is None:
        return ["conditions: no metric was computed, so there is no quality to report (see --metrics)"]
    lines = [f"quality against input conditions ({metric}; vs clean = against the clean reference, end to end; "
             f"vs input = against the conditioned input, the codec alone; every metric in summary.json under "
             f"conditions):"]
    for c in conditions["curves"]:
        clean = c["clean"]["vs_clean"].get(metric, {}).get("mean") if c["clean"] else None
        means = ", ".join(f"{value_text(p['value'], c['model'])}: {_pair(p, metric)}" for p in c["points"])
        lines.append(f"  {c['codec']} {c['curve']}: clean {clean:.3f}; {means}" if clean is not None
                     else f"  {c['codec']} {c['curve']}: {means}")
        if c["robustness"] is not None:
            for reference in REFERENCES:
                found = c["robustness"][reference].get(metric)
                if found is not None:
                    lines.append(f"    {reference.replace('_', ' ')}: {crossing_text(found, c['model'])}")
    for p in conditions["points"]:
        lines.append(f"  {p['configuration']}: {_pair(p, metric)}")
    return lines


def _pair(point: dict[str, Any], metric: str) -> str:
    clean = point["vs_clean"].get(metric, {}).get("mean")
    given = point["vs_input"].get(metric, {}).get("mean")
    return (f"{clean:.3f} vs clean" if clean is not None else "- vs clean") + \
        (f" / {given:.3f} vs input" if given is not None else "")
