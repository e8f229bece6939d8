"""A comparison (`compare.compare_runs`) as readable text: rich tables rendered to a string, no
colour; and that text inside <pre> for the HTML report."""

from __future__ import annotations

import html
import io
import json
import re
from typing import Any

from codecarena.plural import counted
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.formatting import fmt_num, fmt_signed, language_label


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
    """The comparison as readable text (rich tables rendered to a string, no colour); with several
    languages, each language's table first, then the pooled one."""
    from codecarena.text import make_console

    buf = io.StringIO()
    con = make_console(file=buf, width=width, color_system=None, soft_wrap=False)
    s = result["settings"]
    con.print(f"compare A = {result['run_a']}")
    con.print(f"        B = {result['run_b']}")
    unit = "speakers (all their utterances together)" if s["by"] == "speaker" else "utterances"
    few = ("shown, flagged (--few-units)" if s.get("few_units")
           else "none, nor a reading (--few-units shows them, as descriptive)")
    con.print(f"difference = B - A; {int(s['level'] * 100)}% percentile bootstrap interval of the mean difference, "
              f"{s['resamples']} resamples of {unit}, seed {s['seed']}; on fewer than {MIN_UNITS}: {few}",
              soft_wrap=True)
    st = result["set"]
    def described(side: dict[str, Any]) -> str:
        return f"{side['set']} ({side['utterances']} utterances, manifest {str(side['manifest_sha256'])[:12]})"

    con.print(f"set: {described(st['a'])}" + ("" if st["same"] else f" vs {described(st['b'])}")
              + f"; {st['paired_utterances']} utterances paired")
    if result["pairing_overridden"]:
        for line in result["overrides"]:
            con.print(f"PAIRING OVERRIDDEN: {line}")
    for line in result["notes"]:
        con.print(f"note: {line}")
    um = result["unmatched_codecs"]
    if um["a"] or um["b"]:
        con.print(f"not compared: A {', '.join(um['a']) or '-'}; B {', '.join(um['b']) or '-'}")

    for comp in result["comparisons"]:
        con.print("")
        ident = comp["identity"]
        title = comp["codec_a"]
        if comp["codec_a"] != comp["codec_b"]:
            title = f"{comp['codec_a']} (A) vs {comp['codec_b']} (B)"
        con.print(f"== {title}: {comp['pairs']} pairs ({comp['pairing']}); identical payloads "
                  f"{ident['payload_identical']}/{ident['pairs']}, identical decoded audio "
                  f"{ident['decoded_identical']}/{ident['pairs']}")
        missing = comp["unpaired"]
        if missing["missing_in_a"] or missing["missing_in_b"]:
            con.print(f"unpaired: no row in A for {', '.join(missing['missing_in_a']) or '-'}; "
                      f"no row in B for {', '.join(missing['missing_in_b']) or '-'}")
        if ident["all_decoded_identical"]:
            con.print("identical decoded audio in every pair: metrics cannot differ, so no bootstrap was run")
        for part in comp["by_language"]:
            con.print(f"-- language {language_label(part['language'])}: {counted(part['pairs'], 'pair')}")
            _print_metrics(con, part["metrics"])
        if comp["by_language"]:
            con.print(f"-- all {len(comp['by_language'])} languages pooled: {counted(comp['pairs'], 'pair')}")
        _print_metrics(con, comp["metrics"])
        con.print("")
        _print_provenance(con, comp["provenance"], f"provenance of {title}")
    con.print("")
    _print_provenance(con, result["provenance"], "run provenance")
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _print_metrics(con: Any, metrics: list[dict[str, Any]]) -> None:
    """One table of metric differences, then why pairs were dropped and which intervals rest on too few
    units (flagged in the row too: `units` reads "3 (< 10)")."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_lines=False, title=None)
    for name, justify in (("metric", "left"), ("n", "right"), ("mean A", "right"), ("mean B", "right"),
                          ("B - A", "right"), ("95% CI", "right"), ("units", "right"), ("reading", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for m in metrics:
        ci = "-" if m["ci_low"] is None else f"[{fmt_signed(m['ci_low'])}, {fmt_signed(m['ci_high'])}]"
        units = "-" if m["units"] is None else str(m["units"]) + (f" (< {MIN_UNITS})" if m.get("warning") else "")
        table.add_row(m["metric"], f"{m['n']}/{m['pairs']}", fmt_num(m["mean_a"]), fmt_num(m["mean_b"]),
                      fmt_signed(m["mean_diff"]), ci, units, m["verdict"])
    con.print(table)
    # A reason every metric shares (a failed row) is said once, not once per metric.
    shared = {(reason, count) for reason, count in (metrics[0]["dropped"] if metrics else {}).items()
              if all(m["dropped"].get(reason) == count for m in metrics)}
    for reason, count in sorted(shared):
        con.print(f"every metric: {counted(count, 'pair')} dropped: {reason}")
    for m in metrics:
        for reason, count in m["dropped"].items():
            if (reason, count) not in shared:
                con.print(f"{m['metric']}: {counted(count, 'pair')} dropped: {reason}")
    warnings: dict[str, list[str]] = {}
    for m in metrics:
        if m.get("warning"):
            warnings.setdefault(m["warning"], []).append(m["metric"])
    for warning, names in warnings.items():
        con.print(f"warning ({', '.join(names)}): {warning}")


def _print_provenance(con: Any, prov: dict[str, Any], title: str) -> None:
    from rich import box
    from rich.table import Table

    from codecarena.results.spec_cell import Spec

    diffs = prov["differences"]
    table = Table(box=box.SIMPLE_HEAD, title=f"{title}: {len(diffs)} difference{'s' if len(diffs) != 1 else ''}",
                  title_justify="left")
    table.add_column("field")
    table.add_column("A", overflow="fold", ratio=1)
    table.add_column("B", overflow="fold", ratio=1)
    table.add_column("differs", justify="center")
    differing = {d["field"] for d in diffs}
    for key, value in prov["a"].items():
        a, b = _short(value), _short(prov["b"].get(key))
        if key == "codec":  # a configuration wraps only between its parts (spec_cell.Spec)
            table.add_row(key, Spec(a), Spec(b), "yes" if key in differing else "")
            continue
        table.add_row(key, a, b, "yes" if key in differing else "")
    for d in diffs:
        if d["field"] not in prov["a"]:
            table.add_row(d["field"], _short(d["a"]), _short(d["b"]), "yes")
    con.print(table)


def render_html(result: dict[str, Any]) -> str:
    """The text rendering inside <pre>, for the HTML report's comparison section."""
    return f"<pre class=\"compare\">{html.escape(render_text(result))}</pre>"
