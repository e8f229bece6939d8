"""What the report's sections share while the page is built: the leaderboard, the audio mode and
what was embedded, the plot styles, and the notes later sections and the Markdown summary repeat."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from codecarena.results import leaderboard as lb
from codecarena.results.formatting import fmt_mib
from codecarena.results.report.audio import AudioStats

# --listen's default: every utterance up to a bound, then a chosen few per configuration (listening.py).
AUTO = "auto"
Listen = int | Literal["auto"] | None  # a count taken in turn per language, AUTO, or None for every utterance


@dataclass
class ReportContext:
    board: lb.Leaderboard
    audio_mode: str
    audio: AudioStats
    styles: dict[str, tuple[str, str]]
    out_dir: Path  # the report's folder: links to files not embedded are relative to it
    skipped_plots: list[tuple[str, str, str]] = field(default_factory=list)  # (group, metric, why)
    comparison_notes: list[str] = field(default_factory=list)
    # (run A's label, run B's label, the comparison as text) for report.md, as the HTML shows it.
    comparisons: list[tuple[str, str, str]] = field(default_factory=list)
    # Utterances the listening section shows per group (None: all); the rest are linked, not embedded,
    # so a corpus-sized run makes a report of bounded size.
    listen: Listen = AUTO
    not_listened: int = 0  # utterances left out of the listening section, over all groups
    # Distinct utterances over all groups, so the section's heading counts what it shows.
    listening_shown: set[str] = field(default_factory=set)
    listening_total: set[str] = field(default_factory=set)


def listening_heading(ctx: ReportContext) -> str:
    shown, total = len(ctx.listening_shown), len(ctx.listening_total)
    if shown == total:
        return f"Listening: every utterance ({total}), reference and decoded versions"
    return f"Listening: {shown} of {total} utterances, reference and decoded versions"


def audio_note(ctx: ReportContext) -> str:
    a = ctx.audio
    chosen = "the default choice" if ctx.listen == AUTO else f"--listen {ctx.listen}"
    left_out = (f" {ctx.not_listened} utterances are not in the listening section ({chosen}; "
                "--listen all shows every one)." if ctx.not_listened else "")
    if ctx.audio_mode == "none":
        return "Audio: not embedded (--audio none); spectrograms only." + left_out
    how = ("FLAC (lossless, bit-exact with the 16-bit PCM WAV files; written with soundfile)" if ctx.audio_mode == "flac"
           else "the files' own bytes (WAV)")
    return (f"Audio: {a.files} files embedded as data: URIs, {a.flac} as FLAC, {a.original} as their own bytes; "
            f"{fmt_mib(a.bytes_embedded, 1)} MiB embedded for {fmt_mib(a.bytes_on_disk, 1)} MiB on disk. "
            f"Mode: {how}. No lossy re-encoding." + left_out)
