"""Quality against channel impairment, per codec configuration (docs/channel.md): the curves the report
draws and the robustness summary in summary.json.

A curve joins a codec configuration's clean rows (rate 0) with its rows through every channel of one
kind (the same model, burst length, seed and policy; only the rate differs), one point per
configuration: the nominal rate, the share the channel actually lost or flipped (its realised rate),
and each metric's mean over ok values with how many there were. A metric's robustness is the rate at
which its mean has fallen by DROP from the clean channel (risen, for a metric where lower is better),
linearly interpolated between the two measured points around it; null with `beyond` when no measured
rate falls that far. Since summary version 4 the rates are the realised ones (a burst channel asked
for 10% may lose 15.6% of three short clips); before, the nominal ones. Since version 6 each point
also says what share of a token codec's tokens its flipped bits changed (channel/token_errors.py).
"""

from __future__ import annotations

import statistics
from typing import Any

from codecarena.channel.spec import parse_channel
from codecarena.metrics.outputs import LOWER_IS_BETTER
from codecarena.results.schema import Row

DROP = 0.5
#: Summary version from which the curves carry counts and robustness is read at the realised rates.
REALISED_FROM = 4
#: Summary version from which each point has `tokens_changed_fraction`.
TOKENS_FROM = 6
METHOD = (f"Robustness, per codec configuration and kind of channel: the realised rate (the share of packets "
          f"or frames lost, or of bits flipped) at which a metric's mean over ok values has fallen by {DROP} "
          f"from the clean channel's (risen, where lower is better), linearly interpolated between the measured "
          f"rates around it; null, with the highest rate measured as beyond, when none falls that far")
_METHOD_NOMINAL = (f"Robustness, per codec configuration and kind of channel: the rate at which a metric's mean over "
                   f"ok values has fallen by {DROP} from the clean channel's (risen, where lower is better), linearly "
                   f"interpolated between the measured rates around it; null, with the highest rate measured as "
                   f"beyond, when none falls that far")


def realised_key(curve: str) -> str:
    """The point field that holds a curve's realised rate: bits flipped for a bit-error channel, else
    packets (or frames) lost."""
    return "bit_error_fraction" if curve.startswith("ber") else "lost_fraction"


def _point(configuration: str, rate: float, rows: list[Row], version: int) -> dict[str, Any]:
    ok = [r for r in rows if r.status == "ok"]
    units = sum(r.channel["units"] for r in ok if r.channel)
    bits = sum(r.channel["bits"] for r in ok if r.channel)
    names = list(dict.fromkeys(name for r in ok for name in r.metrics))
    means, counts = {}, {}
    for name in names:
        values = [r.metrics[name]["value"] for r in ok if name in r.metrics and r.metrics[name]["status"] == "ok"]
        if values:
            means[name], counts[name] = statistics.fmean(values), len(values)
    return {"configuration": configuration, "rate": rate, "rows_ok": len(ok),
            "lost_fraction": sum(r.channel["lost"] for r in ok if r.channel) / units if units else 0.0,
            "bit_error_fraction": sum(r.channel["flipped_bits"] for r in ok if r.channel) / bits if bits else 0.0,
            **({"tokens_changed_fraction": _tokens_changed(ok)} if version >= TOKENS_FROM else {}),
            "metrics": means, **({"n": counts} if version >= REALISED_FROM else {})}


def _tokens_changed(ok: list[Row]) -> float | None:
    """The share of the rows' tokens their channels' flipped bits changed; None when no row counted
    tokens (a payload without tokens, no channel, or rows before version 11)."""
    counted = [r.channel for r in ok if r.channel and r.channel.get("tokens") is not None]
    tokens = sum(c["tokens"] for c in counted)
    return sum(c["tokens_changed"] for c in counted) / tokens if tokens else None


def realised_text(point: dict[str, Any], curve: str) -> str:
    """A point's nominal rate and what the channel did, as the console and the report give it:
    `10% (10.6% realised)`, `0.001 (0.00101 realised; 1.2% of tokens changed)`, `0` for the clean one."""
    text = rate_text(point["rate"], curve, 6)
    if not point["rate"]:
        return text
    tokens = point.get("tokens_changed_fraction")
    changed = f"; {tokens * 100:.3g}% of tokens changed" if tokens is not None and curve.startswith("ber") else ""
    return f"{text} ({rate_text(point[realised_key(curve)], curve)} realised{changed})"


def crossing(points: list[dict[str, Any]], name: str, at: str = "rate") -> dict[str, Any]:
    """Where `name`'s mean has fallen by DROP, reading each point's rate from its field `at` (`rate`, the
    nominal one, or the realised `lost_fraction` or `bit_error_fraction`). With a realised rate it also
    says how many impaired rates were measured (`impaired`) and the fewest ok values behind a mean
    (`n`), which the figure's precision rests on, and the two rates it was interpolated between."""
    clean = points[0]["metrics"].get(name) if points[0]["rate"] == 0 else None
    measured = [(p[at], p["metrics"][name]) for p in points if name in p["metrics"]]
    extra = ({"impaired": max(len(measured) - 1, 0),
              "n": min((p["n"][name] for p in points if name in p.get("n", {})), default=None)}
             if at != "rate" else {})
    if clean is None or len(measured) < 2:
        return {"clean": clean, "rate": None, "beyond": None, **extra}
    sign = -1 if name in LOWER_IS_BETTER else 1
    before_rate, before_drop = measured[0][0], 0.0
    for rate, value in measured[1:]:
        drop = sign * (clean - value)
        if drop >= DROP:
            share = (DROP - before_drop) / (drop - before_drop)
            between = {"between": [before_rate, rate]} if extra else {}
            return {"clean": clean, "rate": before_rate + share * (rate - before_rate), "beyond": None, **extra,
                    **between}
        before_rate, before_drop = rate, drop
    return {"clean": clean, "rate": None, "beyond": measured[-1][0], **extra}


def curves(rows: list[Row], version: int = TOKENS_FROM) -> list[dict[str, Any]]:
    """Every curve of the rows, in the order their configurations first appear (`version`: the summary
    version whose reading they follow)."""
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
        points = [_point(codec, 0.0, by_configuration[codec], version)] if codec in by_configuration else []
        points += [_point(c, rate, by_configuration[c], version) for rate, c in sorted(members)]
        names = list(dict.fromkeys(n for p in points for n in p["metrics"]))
        at = realised_key(curve) if version >= REALISED_FROM else "rate"
        out.append({"codec": codec, "curve": curve, "points": points,
                    "robustness": {name: crossing(points, name, at) for name in names}})
    return out


def summary(rows: list[Row], version: int = TOKENS_FROM) -> dict[str, Any]:
    """What summary.json holds under `channels` for a run with channel rows (in the reading of summary
    `version`: nominal rates before REALISED_FROM)."""
    return {"drop": DROP, "method": METHOD if version >= REALISED_FROM else _METHOD_NOMINAL,
            "curves": curves(rows, version)}


#: The metric a robustness line speaks of, when the run has it: the first of these, else any.
PREFERRED = ("pesq_wb", "stoi", "estoi", "visqol", "dnsmos_ovrl", "dwer", "dcer")


def rate_text(rate: float, curve: str, digits: int = 3) -> str:
    """A rate as a reader takes it: a share of packets as a percentage, a bit error rate as it is,
    with `digits` significant digits."""
    return f"{rate:.{digits}g}" if curve.startswith("ber") else f"{rate * 100:.{digits}g}%"


def crossing_text(curve: dict[str, Any], metric: str) -> str:
    """What a robustness figure says, with what it rests on: `falls by 0.5 at about 4% realised loss
    (interpolated between 0% and 10.6%; 1 impaired rate measured; n=10 utterances)`. One impaired rate
    gives one significant digit: the line between two points says no more."""
    found = curve["robustness"].get(metric, {})
    what = "bit errors" if curve["curve"].startswith("ber") else "loss"
    if found.get("clean") is None:
        return "no clean channel to compare with"
    impaired, n = found.get("impaired"), found.get("n")
    basis = (f"{impaired} impaired rate{'s' if impaired != 1 else ''} measured" if impaired is not None else "")
    basis += (f"; n={n} utterance{'s' if n != 1 else ''}" if n is not None else "")
    if found.get("rate") is not None:
        if impaired is None:  # a summary before version 4: the nominal rates, as it gave them
            return f"falls by {DROP} at {rate_text(found['rate'], curve['curve'])} (nominal, interpolated)"
        below, above = found["between"]
        digits = 1 if impaired == 1 else 2
        return (f"falls by {DROP} at about {rate_text(found['rate'], curve['curve'], digits)} realised {what} "
                f"(interpolated between {rate_text(below, curve['curve'])} and {rate_text(above, curve['curve'])}; "
                f"{basis})")
    if found.get("beyond") is not None:
        realised = "" if impaired is None else f" realised {what}"
        return (f"falls by less than {DROP} up to {rate_text(found['beyond'], curve['curve'])}{realised}"
                + (f" ({basis})" if basis else ""))
    return "too few points"


def text_lines(channels: dict[str, Any]) -> list[str]:
    """The robustness summary in plain lines, for the end of `codecarena run`."""
    curves = channels["curves"]
    present = list(dict.fromkeys(n for c in curves for n in c["robustness"]))
    metric = next((m for m in PREFERRED if m in present), present[0] if present else None)
    if metric is None:
        return ["channels: no metric was computed, so there is no robustness to report (see --metrics)"]
    lines = [f"quality against channel impairment ({metric}; the realised rate at which its mean falls by {DROP} "
             f"from the clean channel; every metric in summary.json under channels):"]
    for c in curves:
        means = ", ".join(f"{realised_text(p, c['curve'])}: {p['metrics'][metric]:.3f}" for p in c["points"]
                          if metric in p["metrics"])
        lines.append(f"  {c['codec']} {c['curve']}: {means}; {crossing_text(c, metric)}")
    return lines
