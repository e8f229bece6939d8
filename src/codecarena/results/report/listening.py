"""The listening section: for every utterance the reference and every decoded version side by
side, each a card with its spectrogram, its player and its headline numbers. Which utterances are
embedded and which only linked: docs/report.md."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from codecarena.choices import LISTEN_ALL_UP_TO, LISTEN_SAMPLE
from codecarena.metrics import outputs
from codecarena.plural import counted
from codecarena.results import leaderboard as lb
from codecarena.results.formatting import fmt_kbps, fmt_num, language_label
from codecarena.results.report.audio import embed_audio, read_audio, spectrogram_db, spectrogram_png
from codecarena.results.report.context import AUTO, ReportContext
from codecarena.results.report.markup import data_uri, esc
from codecarena.results.schema import Row
from codecarena.results.verdict import verdict
from codecarena.rundir import UnsafePathError

LISTEN_SEED = 0
# The default's ranking metric: the first of these with a successful value in the group.
RANKING_METRICS = ("pesq_wb", "visqol", "stoi")


def _rows_by_key(board: lb.Leaderboard) -> dict[tuple[int, str, str], Row]:
    return {(run.index, row.codec, row.utterance): row for run in board.runs for row in run.run.rows}


def _audio_file(run: lb.RunInfo, path: str) -> Path | None:
    """A row's stored file inside its run; None for one that is missing or leaves the run (never
    read into a report)."""
    try:
        resolved = run.run.dir.resolve(path)
    except UnsafePathError:
        return None
    return resolved if resolved.is_file() else None


def _row_metric_line(row: Row) -> str:
    parts = []
    for name in outputs.headline([row.language]):
        rec = row.metrics.get(name)
        if rec is None:
            continue
        label = lb.metric_label(name)
        if rec["status"] == "ok":
            parts.append(f"{label} {fmt_num(rec['value'])}")
        elif rec["status"] == "failed":
            parts.append(f'<span class="bad" title="{esc(rec["error"])}">{esc(label)} failed</span>')
        elif rec["status"] == "suspect":
            parts.append(f'<span class="warn" title="{esc(rec["error"])}">{esc(label)} {fmt_num(rec["value"])} suspect</span>')
        else:
            parts.append(f'<span title="{esc(rec["error"])}">{esc(label)} n/a</span>')
    bits = [f"{fmt_kbps(row.representation_bps, 2)} kbps"] if row.representation_bps else []
    return " · ".join(bits + [p if p.startswith("<") else esc(p) for p in parts])


def _asr_texts(row: Row) -> dict[str, str]:
    """What the recogniser heard, as the row's ASR records hold it (every one holds both transcripts of
    the utterance, and the transcript when one was scored against): hypothesis, reference_hypothesis,
    transcript; {} without ASR."""
    for rec in row.metrics.values():
        details = rec.get("details") or {}
        if isinstance(details.get("hypothesis"), str):
            return {k: details[k] for k in ("hypothesis", "reference_hypothesis", "transcript")
                    if isinstance(details.get(k), str)}
    return {}


def _said_html(pairs: list[tuple[str, str]]) -> str:
    """Texts on a card (transcripts, what a conversion did), each under its label; long ones scroll."""
    if not pairs:
        return ""
    return '<dl class="said">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs) + "</dl>"


def _reference_texts(run: lb.RunInfo, row: Row) -> list[tuple[str, str]]:
    """The reference card's story: how the reference was made from the input file, the transcript (the
    plan's pin, else what the ASR records were scored against) and what the recogniser heard in it."""
    conversions = row.reference_conversions
    pairs = [("input", "not recorded (a row before version 4)" if conversions is None else
              "; ".join(conversions) if conversions else "the input file's own bytes, unchanged")]
    texts = _asr_texts(row)
    pinned = {r.id: r.transcript for r in run.plan.references or ()}.get(row.utterance)
    transcript = pinned if pinned is not None else texts.get("transcript")
    if texts or transcript is not None:
        pairs.append(("transcript", "none declared" if transcript is None else transcript))
    if "reference_hypothesis" in texts:
        pairs.append(("recognised in the reference", texts["reference_hypothesis"]))
    return pairs


def listening_html(ctx: ReportContext, group: lb.Group) -> str:
    board = ctx.board
    rows = _rows_by_key(board)
    entries = board.group_entries(group.id)
    multi_run = len(group.runs) > 1
    first = board.runs[group.runs[0]]
    utterances = [u[0] for u in first.plan.utterances]
    for run_index in group.runs:
        for row in board.runs[run_index].run.rows:
            if row.utterance not in utterances:
                utterances.append(row.utterance)
    group_rows = [r for key, r in rows.items() if key[0] in group.runs]
    if ctx.listen == AUTO:
        metric = next((m for m in RANKING_METRICS
                       if any(r.metrics.get(m, {}).get("status") == "ok" for r in group_rows)), None)
        values: dict[tuple[int, str], dict[str, float]] = {}
        for (run_index, codec, utt), r in rows.items():
            rec = r.metrics.get(metric or "")
            if run_index in group.runs and rec is not None and rec["status"] == "ok":
                values.setdefault((run_index, codec), {})[utt] = rec["value"]
        shown = ranked_selection(utterances, list(values.values()), metric in lb.LOWER_IS_BETTER)
        how = (f"more than {LISTEN_ALL_UP_TO}, so each configuration's worst, median and best by "
               f"{lb.metric_label(metric) if metric else '(no ranking metric was computed)'} and {LISTEN_SAMPLE} "
               f"more drawn at random (seed {LISTEN_SEED}); --listen N takes N in turn from each language")
    else:
        shown = listened(utterances, {r.utterance: r.language for r in group_rows}, ctx.listen)
        how = f"taken in turn from each language in plan order (--listen {ctx.listen})"
    ctx.listening_shown.update(shown)
    ctx.listening_total.update(utterances)
    out = []
    if len(shown) < len(utterances):
        ctx.not_listened += len(utterances) - len(shown)
        out.append(f'<p class="note">{len(shown)} of {len(utterances)} utterances are shown here, {esc(how)}; '
                   "--listen all embeds every one, which makes the file grow with the corpus. The others are "
                   "linked below to their files in the run folder. Every row's numbers are in the leaderboard, the "
                   "failures and rows.jsonl.</p>")
    for utt in shown:
        versions = [(e, rows.get((e["run_index"], e["codec"], utt))) for e in entries]
        versions = [(e, r) for e, r in versions if r is not None]
        if not versions:
            continue
        cards = _utterance_cards(ctx, versions, multi_run)
        lang = versions[0][1].language
        out.append(f'<div class="utt" data-utterance="{esc(utt)}"><h4>{esc(utt)} '
                   f'<span class="muted">({esc(language_label(lang))}, {fmt_num(versions[0][1].duration_s, 2)} s)'
                   f'</span></h4><div class="cards">{"".join(cards)}</div></div>')
    embedded = set(shown)
    linked = [u for u in utterances if u not in embedded]
    if linked:
        out.append(_links_html(ctx, entries, rows, linked))
    return "".join(out)


def _utterance_cards(ctx: ReportContext, versions: list[tuple[dict[str, Any], Row]], multi_run: bool) -> list[str]:
    """One utterance's cards: its reference (once per distinct reference sha256: runs of one group share
    the set), then each configuration's decoded version, on the reference's colour scale."""
    board = ctx.board
    cards = []
    refs: dict[str, tuple[lb.RunInfo, Row]] = {}
    for e, r in versions:
        refs.setdefault(r.reference_sha256, (board.runs[e["run_index"]], r))
    top_db: float | None = None
    for sha, (run, r) in refs.items():
        path = _audio_file(run, r.reference)
        if path is None:
            cards.append(_failed_card("card ref failed", "reference",
                                      f"reference not found in the run at {r.reference}"))
            continue
        db = spectrogram_db(*read_audio(path))
        top_db = float(db.max()) if top_db is None else top_db
        cards.append(_card(ctx, "reference", f"{fmt_num(r.duration_s, 2)} s · {esc(language_label(r.language))} · "
                           f'<span class="mono" title="{esc(sha)}">{esc(sha[:10])}</span>', db, top_db,
                           path, "ref", _said_html(_reference_texts(run, r))))
    for e, r in versions:
        title = e["codec"] + (f" @{e['run_label']}" if multi_run else "")
        said = verdict(r)
        # A row whose replay differed has its decoded audio to hear; it is flagged, below.
        if r.decoded is None or said.kind == "failed":
            cards.append(_failed_card("card failed", title, f"{said.status}: {said.reason or 'no decoded audio'}"))
            continue
        path = _audio_file(board.runs[e["run_index"]], r.decoded)
        if path is None:
            cards.append(_failed_card("card failed", title, f"decoded file missing in the run: {r.decoded}"))
            continue
        db = spectrogram_db(*read_audio(path))
        if top_db is None:
            top_db = float(db.max())
        flags = []
        if said.kind == "replay":
            flags.append('<span class="bad">replay differs</span>')
        elif said.kind == "checks":
            flags.append(f'<span class="bad">checks failed: {esc(said.reason)}</span>')
        meta = _row_metric_line(r) + ("<br>" + " ".join(flags) if flags else "")
        heard = _asr_texts(r).get("hypothesis")
        said = _said_html([("recognised", heard)] if heard is not None else [])
        cards.append(_card(ctx, title, meta, db, top_db, path, "dec", said))
    return cards


def _links_html(ctx: ReportContext, entries: list[dict[str, Any]], rows: dict[tuple[int, str, str], Row],
                utterances: list[str]) -> str:
    """The utterances not embedded, each with relative links to its reference and decoded files (valid
    while the report stays where it was written, beside the run folders it names)."""
    board = ctx.board

    def link(run: lb.RunInfo, stored: str | None, text: str) -> str:
        path = _audio_file(run, stored) if stored else None
        if path is None:
            return f'<span class="muted">{esc(text)}: no file</span>'
        return f'<a href="{esc(quote(os.path.relpath(path, ctx.out_dir)))}">{esc(text)}</a>'

    items = []
    for utt in utterances:
        versions = [(e, rows.get((e["run_index"], e["codec"], utt))) for e in entries]
        present = [(board.runs[e["run_index"]], e["codec"], r) for e, r in versions if r is not None]
        if not present:
            continue
        first_run, _, first_row = present[0]
        links = [link(first_run, first_row.reference, "reference")]
        links += [link(run, r.decoded, codec) for run, codec, r in present]
        items.append(f'<li data-utterance="{esc(utt)}">{esc(utt)} <span class="muted">({esc(language_label(first_row.language))})'
                     f'</span>: {" · ".join(links)}</li>')
    return (f'<details class="not-listened"><summary>{counted(len(items), "utterance")} not embedded: their files '
            f'in the run folder</summary><ul>{"".join(items)}</ul></details>')


def ranked_selection(utterances: list[str], values: list[dict[str, float]], lower_is_better: bool,
                     seed: int = LISTEN_SEED) -> list[str]:
    """--listen's default: every utterance when there are at most LISTEN_ALL_UP_TO; else, for each
    configuration (`values`: one utterance -> metric value map per configuration), its worst, median
    and best utterance, plus LISTEN_SAMPLE of the others drawn with `seed`; in plan order."""
    if len(utterances) <= LISTEN_ALL_UP_TO:
        return utterances
    order = {u: i for i, u in enumerate(utterances)}
    chosen: set[str] = set()
    for by_utt in values:
        # worst first; ties in plan order, so the choice never depends on the order rows were read
        ranked = sorted((u for u in by_utt if u in order),
                        key=lambda u: (-by_utt[u] if lower_is_better else by_utt[u], order[u]))
        if ranked:
            chosen.update((ranked[0], ranked[(len(ranked) - 1) // 2], ranked[-1]))
    rest = [u for u in utterances if u not in chosen]
    chosen.update(random.Random(seed).sample(rest, min(LISTEN_SAMPLE, len(rest))))
    return [u for u in utterances if u in chosen]


def listened(utterances: list[str], language: dict[str, str], limit: int | None) -> list[str]:
    """At most `limit` utterances, taken in turn from each language (in order of first appearance),
    each language's in plan order; all of them when `limit` is None."""
    if limit is None or len(utterances) <= limit:
        return utterances
    queues: dict[str, list[str]] = {}
    for utt in utterances:
        queues.setdefault(language.get(utt, ""), []).append(utt)
    chosen: set[str] = set()
    while len(chosen) < limit:
        for queue in queues.values():
            if queue and len(chosen) < limit:
                chosen.add(queue.pop(0))
    return [u for u in utterances if u in chosen]


def _failed_card(cls: str, title: str, why: str) -> str:
    return f'<div class="{cls}"><h5>{esc(title)}</h5><div class="m bad">{esc(why)}</div></div>'


def _card(ctx: ReportContext, title: str, meta_html: str, db: np.ndarray, top_db: float, path: Path,
          kind: str, said_html: str = "") -> str:
    png = spectrogram_png(db, top_db)
    player = ""
    if ctx.audio_mode != "none":
        player = (f'<audio controls preload="metadata" class="{kind}" data-file="{esc(path.name)}" '
                  f'src="{embed_audio(path, ctx.audio_mode, ctx.audio)}"></audio>')
    cls = "card ref" if kind == "ref" else "card"
    return (f'<div class="{cls}"><h5>{esc(title)}</h5><div class="m">{meta_html}</div>'
            f'<img class="spec" alt="spectrogram of {esc(title)}" src="{data_uri(png, "image/png")}">{player}'
            f'{said_html}</div>')
