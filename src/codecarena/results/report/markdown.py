"""The Markdown summary written beside the HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codecarena.plural import counted
from codecarena.results.listening.board import cell_lines, column_header
from codecarena.results.listening.board import columns as listening_columns
from codecarena.results import leaderboard as lb
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.formatting import (
    RTF_KINDS,
    fmt_kbps,
    fmt_mib,
    fmt_rtf,
    language_label,
    metric_ci_text,
    suspect_lines,
    weights_label,
)
from codecarena.results.report.context import ReportContext, audio_note
from codecarena.results.report.channel import channel_markdown
from codecarena.results.report.conditions import conditions_markdown
from codecarena.results.report.ledger import ledger_markdown
from codecarena.results.report.mushra import listening_markdown
from codecarena.results.report.plots import pareto_metrics
from codecarena.results.verdict import verdict


def _table(entries: list[dict[str, Any]], multi: bool) -> list[str]:
    """One leaderboard as Markdown lines (the headline metrics of these entries' languages that they
    have), and a blank line."""
    names = [n for n in pareto_metrics(entries) if any(n in e["metrics"] for e in entries)]
    listening = listening_columns(entries)
    head = (["run"] if multi else []) + ["codec", "weights", "variant", "repr kbps", "payload kbps"]
    head += [lb.metric_label(n) + (" (lower better)" if n in lb.LOWER_IS_BETTER else "") for n in names]
    head += [column_header(key) for key in listening]
    head += [f"RTF {kind} enc/dec" for kind in RTF_KINDS] + ["peak RSS MiB", "dec model MiB", "replay", "checks"]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i < (3 + multi) else "---:" for i in range(len(head))) + "|"]
    for e in entries:
        cells = ([e["run_label"]] if multi else []) + [e["codec"], weights_label(e["weights"], e.get("user_codec") or "", e.get("runtime") or ""),
                                                       e["variant"] or "-", fmt_kbps(e["representation_bps"]),
                                                       fmt_kbps(e["payload_bps"])]
        cells += [metric_ci_text(e["metrics"].get(n)) for n in names]
        cells += [" ".join(cell_lines(e.get("listening", {}).get(key))) for key in listening]
        cells += [fmt_rtf(e, kind, " ") for kind in RTF_KINDS]
        cells += [fmt_mib(e["peak_rss_bytes_max"]), fmt_mib(e["decoder_model_bytes"], 2),
                  f"{e['replay_identical']}/{e['replay_sampled']}", f"{e['checks_passed']}/{e['rows']}"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines + [""]


def markdown_summary(ctx: ReportContext, out_html: Path, failure_count: int) -> str:
    """The Markdown summary beside the HTML report: runs, one leaderboard table per group, counts."""
    board = ctx.board
    lines = ["# codecarena report", "",
             f"Full report (plots, audio, spectrograms, provenance): `{out_html.name}`.", ""]
    lines.append("Runs:")
    for run in board.runs:
        lines.append(f"- {run.label}: `{run.run.path}` (set {run.set_name}, {counted(len(run.run.rows), 'row')}, "
                     f"{lb.machine_text(run.machine)}, codecarena {run.run.record.codecarena} "
                     f"{run.run.record.git.get('revision') or ''})")
    lines.append("")
    for group in board.groups:
        lines += _group_markdown(board, group)
    lines.append(f"Metrics: mean over successful values, its 95% bootstrap interval [lo, hi] and n, the utterances "
                 f"it resampled; with fewer than {MIN_UNITS} no interval is given (too few: a percentile bootstrap "
                 "interval on so few is too narrow). Failed and not-applicable values are counted, never "
                 "replaced. kbps: total bits / total seconds of completed rows. RTF: medians. All metric outputs "
                 "are in the HTML report and in `codecarena leaderboard --format csv`.")
    lines.append("")
    if board.listening:
        lines.append(f"MUSHRA: mean rating (0-100) of the listeners post-screening kept, its 95% interval resampling "
                     f"listeners and utterances (none below {MIN_UNITS} of either), n, the listeners, and the ratings; the "
                     "listening tests follow.")
        lines.append("")
        lines += listening_markdown(board.listening)
    lines += ledger_markdown(board)
    lines += channel_markdown(ctx)
    lines += conditions_markdown(ctx)
    for group in board.groups:
        through = board.group_entries(group.id, channel=True)
        if through:
            lines += [f"Configurations through a channel, {group.id}:", ""] + _table(through, len(group.runs) > 1)
        conditioned = board.group_entries(group.id, condition=True)
        if conditioned:
            lines += [f"Configurations with an input condition, {group.id} (metrics against the clean reference):",
                      ""] + _table(conditioned, len(group.runs) > 1)
    if ctx.comparisons or ctx.comparison_notes:
        lines += ["## Comparison of consecutive comparable runs", ""]
        for label_a, label_b, text in ctx.comparisons:
            lines += [f"### {label_a} -> {label_b}", "", "```text", text.rstrip("\n"), "```", ""]
    if ctx.skipped_plots:
        lines.append("Plots skipped: " + "; ".join(f"{g} {lb.metric_label(m)} ({why})" for g, m, why in ctx.skipped_plots))
        lines.append("")
    kinds = [verdict(r).kind for run in board.runs for r in run.run.rows]
    fails, checks, replay = kinds.count("failed"), kinds.count("checks"), kinds.count("replay")
    mfail = sum(p["n"] for p in board.metric_problems if p["status"] == "failed")
    mna = sum(p["n"] for p in board.metric_problems if p["status"] == "not_applicable")
    msus = sum(p["n"] for p in board.metric_problems if p["status"] == "suspect")
    lines.append(f"Failures: {fails} failed rows, {checks} failed checks, {replay} replays not identical, "
                 f"{mfail} failed, {msus} suspect and {mna} not-applicable metric values (each with its reason in the "
                 f"HTML report).")
    suspects = suspect_lines(board.metric_problems, [run.label for run in board.runs])
    if suspects:
        lines += ["", f"Suspect values ({msus}, kept out of the means):"] + [f"- {line}" for line in suspects]
    for note in ctx.comparison_notes:
        lines.append(f"Comparison: {note}.")
    lines.append("")
    lines.append(audio_note(ctx))
    return "\n".join(lines) + "\n"


def _group_markdown(board: lb.Leaderboard, group: lb.Group) -> list[str]:
    """A group's section: why it stands apart, each language's table, the pooled one, what it leaves out."""
    lines = [f"## {group.id}: {group.title}", ""]
    for reason in group.reasons:
        lines.append(f"- {reason}")
    if group.reasons:
        lines.append("")
    # Per language first, then the pooled table (the only one when the group has one language).
    languages = board.group_languages(group.id)
    for language in languages if len(languages) > 1 else ():
        entries = board.group_entries(group.id, language, channel=False)
        utterances = max(e["rows"] for e in entries)
        lines += [f"### Language {language_label(language)}: {counted(utterances, 'utterance')}", ""]
        lines += _table(entries, len(group.runs) > 1)
    if len(languages) > 1:
        lines += [f"### All {len(languages)} languages pooled", ""]
    lines += _table(board.group_entries(group.id, channel=False), len(group.runs) > 1)
    through = board.group_entries(group.id, channel=True)
    if through:
        lines += [f"In \"Quality against channel impairment\" below: {counted(len(through), 'configuration')} "
                  "through a channel (`SPEC@CHANNEL`), whose rates and costs are their clean configuration's.", ""]
    conditioned = board.group_entries(group.id, condition=True)
    if conditioned:
        lines += [f"In \"Quality against input conditions\" below: {counted(len(conditioned), 'configuration')} "
                  "whose input went through a condition (`SPEC%CONDITION`), ranked apart.", ""]
    return lines
