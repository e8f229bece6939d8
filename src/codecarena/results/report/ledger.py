"""The report's bitrate-ledger section: per run, the claimed vs measured rates with their overheads and
the achievable rate, then the token statistics and stability (summary.json's `ledger`, which the audit
derives again from the payload files; docs/ledger.md)."""

from __future__ import annotations

from typing import Any, Callable

from codecarena.results import leaderboard as lb
from codecarena.results import ledger_view as view
from codecarena.results.report.markup import esc, spec_html, weights_pill

Columns = tuple[tuple[str, Callable[[dict[str, Any]], str]], ...]


def _table(entries: list[dict[str, Any]], columns: Columns) -> str:
    head = "".join(f'<th class="l">{esc(header)}</th>' if header == "codec" else f"<th>{esc(header)}</th>"
                   for header, _ in columns if header != "weights")
    body = []
    for e in entries:
        cells = []
        for header, cell in columns:
            if header == "weights":
                continue
            if header == "codec":
                cells.append(f'<td class="l codec"><b>{spec_html(cell(e))}</b> '
                             f'{weights_pill(e["weights"], e.get("user_codec") or "", e.get("runtime") or "")}</td>')
            else:
                flag = (e.get("claim_check") or {}).get("flag") if header == "vs claim" else None
                cls = ' class="bad"' if flag in view.ALARMS else ' class="warn"' if flag in view.FLAGS and flag != "ok" else ""
                cells.append(f"<td{cls}>{esc(cell(e))}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<div class="scroll"><table class="ledger"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _markdown_table(entries: list[dict[str, Any]], columns: Columns) -> list[str]:
    lines = ["| " + " | ".join(header for header, _ in columns) + " |",
             "|" + "|".join("---" if header in ("codec", "weights") else "---:" for header, _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(e).replace("|", "\\|") for _, cell in columns) + " |" for e in entries]
    return lines


def _runs(board: lb.Leaderboard) -> list[tuple[lb.RunInfo, list[dict[str, Any]], str]]:
    """Per run its ledger's clean entries, labelled, and the note on the channel configurations left out."""
    out = []
    for run in board.runs:
        entries, left_out = view.clean(view.labelled(view.entries(run.run.summary), run.run.rows))
        out.append((run, entries, view.left_out_note(left_out)))
    return out


def ledger_html(board: lb.Leaderboard) -> str:
    parts = ['<h2 id="ledger">Bitrate ledger and tokens</h2>',
             '<p class="note">Claimed rates with their sources beside the rates measured from the payload files: '
             'representation (the codec\'s bits), payload (the whole file: the container\'s overhead), framing (a '
             'command-line bitstream\'s file format), order-0 achievable (every stream losslessly coded over the whole '
             'run by an order-0 adaptive arithmetic coder: each symbol coded from its own stream\'s counts so far, no '
             'context, so a coder that conditions on context can go lower) and the empirical entropy bound; a claim differing from the codec\'s '
             'measured rate (representation, less a command-line file format\'s framing) by more than its '
             'tolerance is marked. Token statistics are over the whole run, '
             'per codebook; stability: first codebook / all codebooks (<code>codecarena ledger RUN --stability'
             '</code>). Synthetic weights measure the pipeline, not the codec. Formulas and references: docs/ledger.md in the repository.</p>']
    for run, entries, left_out in _runs(board):
        parts.append(f"<h3>{esc(run.label)}</h3>")
        if not entries:
            parts.append('<p class="note">This run\'s summary.json has no ledger (a run made before it; '
                         '<code>codecarena ledger RUN --update</code> writes it).</p>')
            continue
        parts.append(_table(entries, view.RATE_COLUMNS))
        if any(e.get("codebooks") for e in entries):
            parts.append(_table([e for e in entries if e.get("codebooks")], view.TOKEN_COLUMNS))
        notes = [note for e in entries for note in view.notes(e)] + ([left_out] if left_out else [])
        if notes:
            parts.append('<ul class="note">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts)


def ledger_markdown(board: lb.Leaderboard) -> list[str]:
    lines = ["## Bitrate ledger and tokens", ""]
    for run, entries, left_out in _runs(board):
        lines += [f"Run {run.label}:", ""]
        if not entries:
            lines += ["No ledger in its summary.json (`codecarena ledger RUN --update` writes it).", ""]
            continue
        lines += _markdown_table(entries, view.RATE_COLUMNS) + [""]
        tokens = [e for e in entries if e.get("codebooks")]
        if tokens:
            lines += _markdown_table(tokens, view.TOKEN_COLUMNS) + [""]
        lines += [f"- {note}" for e in entries for note in view.notes(e)] + ([f"- {left_out}"] if left_out else [])
        lines += [""]
    return lines
