"""Terminal output: progress while a run goes, then one table per codec configuration. Every console
comes from `text.make_console` (markup off: values print as written).

A codec configuration in a table cell is a `Spec` (results/spec_cell.py), which wraps only between its
parts, and `fit_table` keeps such a column at least as wide as its widest part when Rich would narrow it
(issue 38).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from codecarena.metrics import outputs
from codecarena.plural import counted
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.formatting import (
    RTF_KINDS,
    fmt_kbps,
    fmt_mib,
    fmt_rtf,
    metric_ci_cell,
    weights_label,
)
from codecarena.results.spec_cell import Spec
from codecarena.text import make_console, printable


# Rich assumes 80 columns when stdout is not a terminal, which truncates the table in logs and CI;
# COLUMNS, when set, wins (rich reads it).
console = make_console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)


def fit_table(table: Table, width: int, on: Console | None = None) -> bool:
    """Fix the columns' widths so that `table` fits `width` columns without any going below its minimum
    (the widest word of a text, the widest part of a `Spec`): when a table is too wide, Rich narrows its
    widest columns first, whatever they hold, and a codec configuration then folds inside a `key=value`.
    False when even the minimums do not fit: the columns holding a `Spec` keep their minimum, and Rich
    folds the others (numbers) as it must."""
    on = on or console
    wide = on.options.update_width(10**5)
    ranges = [(max(m.minimum for m in found), max(m.maximum for m in found))
              for column in table.columns
              for found in [[Measurement.get(on, wide, cell) for cell in (column.header, *column.cells)]]]
    natural = Measurement.get(on, wide, table).maximum
    if natural <= width:
        return True
    room = width - (natural - sum(high for _, high in ranges)) - sum(low for low, _ in ranges)
    if room < 0:
        for column, (low, _) in zip(table.columns, ranges):
            if any(isinstance(cell, Spec) for cell in (column.header, *column.cells)):
                column.width = low
        return False
    wanted = sum(high - low for low, high in ranges)
    for column, (low, high) in zip(table.columns, ranges):
        column.width = low + (room * (high - low)) // wanted
    return True


def summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title="codecarena run", show_lines=False)
    for name, justify in [("codec", "left"), ("weights", "left"), ("rows ok", "right"), ("repr kbps", "right"),
                          ("payload kbps", "right"), *((f"RTF {kind} enc/dec", "right") for kind in RTF_KINDS),
                          ("peak RSS MiB", "right"),
                          ("replay identical", "right"), ("checks", "right")]:
        # Folded, never cut: a narrow terminal wraps a number instead of ending it with an ellipsis.
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for c in summary["codecs"]:
        peaks = [c[s]["peak_rss_bytes_max"] for s in ("encode", "decode") if c[s]["peak_rss_bytes_max"]]
        table.add_row(
            Spec(c["codec"]),
            weights_label(c["weights"], c.get("user_codec", ""), c.get("runtime", "")),
            f"{c['rows_ok']}/{c['rows']}",
            fmt_kbps(c["representation_bps"]),
            fmt_kbps(c["payload_bps"]),
            *(fmt_rtf(c, kind) for kind in RTF_KINDS),
            fmt_mib(max(peaks) if peaks else None),
            f"{c['replay_identical']}/{c['replay_sampled']}",
            f"{c['checks_passed']}/{c['rows']}",
        )
    return table


def print_summary(summary: dict[str, Any]) -> None:
    table = summary_table(summary)
    fit_table(table, console.width)
    console.print(table)
    console.print("kbps: duration-weighted aggregate over rows that completed; RTF: medians "
                  "(cold = process start + imports + load + I/O + compute; warm = compute only, over the n rows "
                  "of the warm sample)")
    for c in summary["codecs"]:
        for failure in c["failures"]:
            console.print(f"{c['codec']} {failure['utterance']}: {printable(failure['error'])}", style="red")


def _fitted(table: Table) -> Table:
    fit_table(table, console.width)
    return table


def print_quality(groups: dict[str, dict[str, Any]], title: str = "quality") -> None:
    """One row per metric output, one column per codec: the mean over ok values with its 95% interval
    [lo, hi] and the utterances it rests on (none below bootstrap.MIN_UNITS, saying so), then how many
    values were suspect, failed or did not apply."""
    # In the catalogue's order, whatever order the rows' records came in (a resumed row's are sorted).
    names = sorted(dict.fromkeys(name for stats in groups.values() for name in stats), key=outputs.sort_key)
    if not names:
        return
    # The heading is a line of its own: a table's title wraps to the table's width.
    console.print(f"{title}: mean of ok values, its 95% interval [lo, hi] and n=utterances resampled (no interval "
                  f"below {MIN_UNITS}: too few); suspect, failed, n/a counts", soft_wrap=True)
    def table_of(labels: list[str]) -> Table:
        table = Table()
        table.add_column("metric (^ higher, v lower is better)", overflow="fold")
        for label in labels:
            table.add_column(Spec(label), justify="right", overflow="fold")
        for name in names:
            scale = outputs.BY_NAME.get(name)
            arrow = "" if scale is None else " v" if scale.lower_is_better else " ^"
            table.add_row(name + arrow, *(metric_ci_cell(groups[label].get(name)) for label in labels))
        return table

    # Too many configurations for the width: several tables, each as many as fit whole.
    chunk: list[str] = []
    for label in groups:
        if chunk and not fit_table(table_of([*chunk, label]), console.width):
            console.print(_fitted(table_of(chunk)))
            chunk = []
        chunk.append(label)
    console.print(_fitted(table_of(chunk)))
    # One line per distinct reason, naming the metrics and codecs it hit, instead of one per cell.
    reasons: dict[str, tuple[int, list[str], list[str]]] = {}
    for label, stats in groups.items():
        for name, entry in stats.items():
            for reason, count in entry["failure_reasons"].items():
                total, metrics, labels = reasons.get(reason, (0, [], []))
                reasons[reason] = (total + count, metrics + [name] * (name not in metrics),
                                   labels + [label] * (label not in labels))
    for reason, (count, metrics, labels) in reasons.items():
        console.print(f"{counted(count, 'metric value')} failed ({', '.join(metrics)}; {', '.join(labels)}): {reason}",
                      style="yellow", soft_wrap=True)
    # Suspect values are kept out of the means; how many, and where, is said whichever rows are shown.
    suspect = [(label, name, entry["n_suspect"]) for label, stats in groups.items() for name, entry in stats.items()
               if entry.get("n_suspect")]
    if suspect:
        console.print(f"{sum(n for _, _, n in suspect)} metric values suspect, kept out of the means: "
                      + "; ".join(f"{label} {name} {n}" for label, name, n in suspect)
                      + " (their reasons: codecarena report, Failures)", style="yellow", soft_wrap=True)
