"""Quality against channel impairment, per codec configuration (docs/channel.md): the curves the report
draws and the robustness summary in summary.json.

A curve joins a codec configuration's clean rows (rate 0) with its rows through every channel of one
kind (the same model, burst length, seed and policy; only the rate differs), one point per
configuration: the nominal rate, the share the channel actually lost or flipped, and each metric's mean
over ok values. A metric's robustness is the rate at which its mean has fallen by DROP from the clean
channel (risen, for a metric where lower is better), linearly interpolated between the two measured
points around it; null with `beyond` when no measured rate falls that far.
"""

from __future__ import annotations

import statistics
from typing import Any

from codecarena.channel.spec import parse_channel
from codecarena.metrics.outputs import LOWER_IS_BETTER
from codecarena.results.schema import Row

DROP = 0.5
METHOD = (f"Robustness, per codec configuration and kind of channel: the rate at which a metric's mean over "
          f"ok values has fallen by {DROP} from the clean channel's (risen, where lower is better), linearly interpolated "
          f"between the measured rates around it; null, with the highest rate measured as beyond, when none "
          f"falls that far")


def _point(configuration: str, rate: float, rows: list[Row]) -> dict[str, Any]:
    ok = [r for r in rows if r.status == "ok"]
    units = sum(r.channel["units"] for r in ok if r.channel)
    bits = sum(r.channel["bits"] for r in ok if r.channel)
    names = list(dict.fromkeys(name for r in ok for name in r.metrics))
    means = {}
    for name in names:
        values = [r.metrics[name]["value"] for r in ok if name in r.metrics and r.metrics[name]["status"] == "ok"]
        if values:
            means[name] = statistics.fmean(values)
    return {"configuration": configuration, "rate": rate, "rows_ok": len(ok),
            "lost_fraction": sum(r.channel["lost"] for r in ok if r.channel) / units if units else 0.0,
            "bit_error_fraction": sum(r.channel["flipped_bits"] for r in ok if r.channel) / bits if bits else 0.0,
            "metrics": means}


def crossing(points: list[dict[str, Any]], name: str) -> dict[str, Any]:
    clean = points[0]["metrics"].get(name) if points[0]["rate"] == 0 else None
    measured = [(p["rate"], p["metrics"][name]) for p in points if name in p["metrics"]]
    if clean is None or len(measured) < 2:
        return {"clean": clean, "rate": None, "beyond": None}
    sign = -1 if name in LOWER_IS_BETTER else 1
    before_rate, before_drop = 0.0, 0.0
    for rate, value in measured[1:]:
        drop = sign * (clean - value)
        if drop >= DROP:
            share = (DROP - before_drop) / (drop - before_drop)
            return {"clean": clean, "rate": before_rate + share * (rate - before_rate), "beyond": None}
        before_rate, before_drop = rate, drop
    return {"clean": clean, "rate": None, "beyond": measured[-1][0]}


def curves(rows: list[Row]) -> list[dict[str, Any]]:
    """Every curve of the rows, in the order their configurations first appear."""
    by_configuration: dict[str, list[Row]] = {}
    for row in rows:
        by_configuration.setdefault(row.codec, []).append(row)
    found: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for configuration in by_configuration:
        codec, _, text = configuration.partition("@")
        if text:
            channel = parse_channel(text)
            found.setdefault((codec, channel.curve), []).append((float(channel.rate), configuration))
    out = []
    for (codec, curve), members in found.items():
        points = [_point(codec, 0.0, by_configuration[codec])] if codec in by_configuration else []
        points += [_point(c, rate, by_configuration[c]) for rate, c in sorted(members)]
        names = list(dict.fromkeys(n for p in points for n in p["metrics"]))
        out.append({"codec": codec, "curve": curve, "points": points,
                    "robustness": {name: crossing(points, name) for name in names}})
    return out


def summary(rows: list[Row]) -> dict[str, Any]:
    """What summary.json holds under `channels` for a run with channel rows."""
    return {"drop": DROP, "method": METHOD, "curves": curves(rows)}


#: The metric a robustness line speaks of, when the run has it: the first of these, else any.
PREFERRED = ("pesq_wb", "stoi", "estoi", "visqol", "dnsmos_ovrl", "dwer")


def text_lines(channels: dict[str, Any]) -> list[str]:
    """The robustness summary in plain lines, for the end of `codecarena run`."""
    curves = channels["curves"]
    present = list(dict.fromkeys(n for c in curves for n in c["robustness"]))
    metric = next((m for m in PREFERRED if m in present), present[0] if present else None)
    if metric is None:
        return ["channels: no metric was computed, so there is no robustness to report (see --metrics)"]
    lines = [f"quality against channel impairment ({metric}; the rate at which its mean falls by {DROP} from "
             f"the clean channel; every metric in summary.json under channels):"]
    for c in curves:
        scale, unit = (1, "") if c["curve"].startswith("ber") else (100, "%")
        crossing = c["robustness"].get(metric, {})
        means = ", ".join(f"{p['rate'] * scale:g}{unit}: {p['metrics'][metric]:.3f}" for p in c["points"]
                          if metric in p["metrics"])
        if crossing.get("rate") is not None:
            verdict = f"falls by {DROP} at {crossing['rate'] * scale:.3g}{unit}"
        elif crossing.get("beyond") is not None:
            verdict = f"falls by less than {DROP} up to {crossing['beyond'] * scale:g}{unit}"
        else:
            verdict = "no clean channel to compare with" if crossing.get("clean") is None else "too few points"
        lines.append(f"  {c['codec']} {c['curve']}: {means}; {verdict}")
    return lines
