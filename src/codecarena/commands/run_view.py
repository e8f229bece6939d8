"""What `codecarena run` prints: the lines that open a run (what it adds to, the set, which families and
metrics run on which device, what of the input is skipped or converted), the progress of its rows (a
bar on a terminal, one log line per row when piped), and what closes it (the summary tables, the run
directory, the rows that failed)."""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from codecarena.arena import ARENA_RATE
from codecarena.text import printable

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID
    from rich.text import Text

    from codecarena.datasets import EvalSet
    from codecarena.pipeline.plan import RunPlan
    from codecarena.results.schema import Row


def input_notes(evalset: EvalSet) -> list[Text]:
    """What the console says about the inputs before the first row: everything of the input that is
    skipped (with why and what to do) and every conversion a reference will go through."""
    from rich.text import Text

    from codecarena.plural import counted, verb

    lines = []
    if evalset.skipped:
        n = len(evalset.skipped)
        lines.append(Text(f"{counted(n, 'file or folder', 'files or folders')} of the input {verb(n, 'is', 'are')} "
                          "skipped, each with why "
                          "(listed in run.json as skipped_inputs); to include one, repair, convert or rename it as its "
                          "reason says:", style="yellow"))
        lines += [Text(f"  {name}: {reason}", style="yellow") for name, reason in evalset.skipped]
    converted = [u for u in evalset.utterances if u.converted or u.sample_rate != ARENA_RATE]
    if converted:
        lines.append(Text(f"{len(converted)} of {counted(len(evalset.utterances), 'utterance')} "
                          f"{verb(len(converted), 'is', 'are')} converted before coding "
                          "(recorded in every row as reference_conversions):"))
        for u in converted:
            steps = [f"decode {u.source_format}"] if u.source_format else []
            if u.channel:
                steps.append({"mix": "downmix to mono"}.get(u.channel, f"take channel {u.channel}"))
            if u.sample_rate != ARENA_RATE:
                steps.append(f"resample {u.sample_rate} -> {ARENA_RATE} Hz (soxr VHQ)")
            lines.append(Text(f"  {u.id}: {'; '.join(steps)}"))
    return lines


def describe_set(evalset: EvalSet, configurations: int, out: Path) -> str:
    """The line that opens a run: the set, how many codec configurations, where it goes."""
    from codecarena.plural import counted

    return (f"set {evalset.name} ({counted(len(evalset.utterances), 'utterance')}, {evalset.source}); "
            f"{counted(configurations, 'codec configuration')}; run directory {out}")


def eta_s(elapsed_s: float, computed: int, remaining: int) -> float | None:
    """Seconds left at the pace of the rows computed in this session; resumed rows are read back in
    an instant and would make the pace look faster than it is. None before the first computed row."""
    if remaining == 0:
        return 0.0
    if computed == 0:
        return None
    return elapsed_s / computed * remaining


def eta_text(eta: float | None) -> str:
    return "unknown yet" if eta is None else f"{eta:.0f} s"


def one_line(text: str, limit: int = 200) -> str:
    """An error as one printable log line: whitespace runs collapsed, control characters written
    out (a row of an older run may hold a codec's escape sequences), cut at `limit` characters."""
    flat = printable(" ".join(text.split())) or "no error text"
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def opening(plan: RunPlan) -> None:
    """What is said before the first row: what --add adds to (and which user codecs it takes up pinned
    anew), the set, where its families and metrics run when a device other than the CPU was asked for,
    the input's notes."""
    from codecarena.console import console
    from codecarena.pipeline.placement import Placement
    from codecarena.plural import counted, verb

    if plan.add and plan.continued:
        had = len(plan.continued)
        added = [s.canonical for s in plan.codecs[had:]]
        console.print(f"adding {counted(len(added), 'codec configuration')} ({', '.join(added)}) to the {had} of "
                      f"the run in {plan.out}" if added else
                      f"no codec configuration to add: resuming the {had} of the run in {plan.out}")
    if plan.repinned:
        again = [s.canonical for s in plan.codecs if s.family in plan.repinned]
        n = len(plan.repinned)
        console.print(f"{'user codec' if n == 1 else 'user codecs'} {', '.join(plan.repinned)} "
                      f"{verb(n, 'was', 'were')} added again since the run: the rows of "
                      f"{', '.join(again)} ({counted(len(again) * len(plan.evalset.utterances), 'row')}) are computed "
                      "again with its new pin; every other row is kept", soft_wrap=True, markup=False)
    console.print(describe_set(plan.evalset, len(plan.codecs), plan.out))
    devices = Placement.of((s.family for s in plan.codecs), plan.plan.metrics, plan.device, plan.metric_device).line()
    if devices:
        console.print(devices, soft_wrap=True, markup=False)
    for line in input_notes(plan.evalset):
        console.print(line, soft_wrap=True)


class RowProgress:
    """The rows as they come: a progress bar on a terminal; piped to a file, where a bar shows nothing
    until the end, one log line per row instead."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from codecarena.console import console

        self.total, self.done, self.resumed = total, 0, 0
        self.started = time.monotonic()
        self.log_lines = not console.is_terminal
        # The description holds a codec spec and an utterance id: shown as written, never read as markup.
        self.progress: Progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                           MofNCompleteColumn(), TimeElapsedColumn(),
                                           TextColumn("eta {task.fields[eta]}"), console=console, transient=False,
                                           disable=self.log_lines)
        self.task: TaskID | None = None

    def __enter__(self) -> RowProgress:
        from codecarena.console import console

        if self.log_lines:
            console.print("preparing: loading models and references (the first row waits for them)...")
        self.progress.__enter__()
        self.task = self.progress.add_task("preparing references and starting workers (the first rows also load "
                                           "models)", total=self.total, eta="-")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.__exit__(kind, exc, tb)

    def on_row(self, row: Row, resumed: bool) -> None:
        from codecarena.console import console
        from codecarena.results.verdict import verdict

        assert self.task is not None
        tag = "resumed" if resumed else row.status
        self.resumed += resumed
        self.done += 1
        elapsed = time.monotonic() - self.started
        eta = eta_text(eta_s(elapsed, self.done - self.resumed, self.total - self.done))
        self.progress.update(self.task, advance=1, description=f"{row.codec} {row.utterance} ({tag})", eta=eta)
        if self.log_lines:
            problem = "" if resumed else verdict(row).reason
            failure = f": {one_line(problem)}" if problem else ""
            console.print(f"row {self.done}/{self.total} {row.codec} {row.utterance} {tag}; elapsed {elapsed:.0f} s, "
                          f"eta {eta}{failure}", soft_wrap=True, markup=False)


def closing(plan: RunPlan, rows: list[Row], resumed: int) -> int:
    """What is said after the last row, and the exit status: 1 when a row failed a stage or a check."""
    from codecarena.console import console, print_quality, print_summary
    from codecarena.plural import counted
    from codecarena.results.formatting import language_label
    from codecarena.results.summary import summarize
    from codecarena.results.verdict import verdict

    if resumed:
        console.print(f"{counted(resumed, 'complete row')} resumed from the earlier run (files verified); "
                      f"{len(rows) - resumed} computed now")
    summary = summarize(rows)
    print_summary(summary)
    if plan.plan.metrics:
        languages = sorted({lang for c in summary["codecs"] for lang in c["by_language"]})
        # A pooled mean hides a codec that fails one language: with two or more, each has its table,
        # first, as in `leaderboard` and the report, and the pooled one comes last, named as pooled.
        for language in languages if len(languages) > 1 else ():
            groups = {c["codec"]: c["by_language"][language] for c in summary["codecs"] if language in c["by_language"]}
            utterances = max(g["utterances"] for g in groups.values())
            print_quality({codec: g["metrics"] for codec, g in groups.items()}, title=f"quality, "
                          f"{language_label(language)} only ({counted(utterances, 'utterance')})")
        title = "quality" if len(languages) < 2 else \
            f"quality, all {len(languages)} languages pooled ({counted(len(plan.evalset.utterances), 'utterance')})"
        print_quality({c["codec"]: c["metrics"] for c in summary["codecs"]}, title=title)
    if "channels" in summary:
        from codecarena.results.robustness import text_lines

        for line in text_lines(summary["channels"]):
            console.print(line, soft_wrap=True, markup=False)
    if "conditions" in summary:
        from codecarena.results.condition_curves import text_lines as condition_lines

        for line in condition_lines(summary["conditions"]):
            console.print(line, soft_wrap=True, markup=False)
    failed = [r for r in rows if verdict(r).kind]
    console.print(f"run directory: {plan.out}")
    if failed:
        console.print(f"{len(failed)} of {counted(len(rows), 'row')} failed a stage or a check; see above and "
                      f"{plan.out / 'rows.jsonl'}", style="red")
        return 1
    return 0
