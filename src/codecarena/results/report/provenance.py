"""The provenance section: per run, where and how it ran (command, revision, machine, set, plan,
limits, packages); per codec its config, registry entry, checkpoint identity, weights, variant and
runtime; and the metric declarations."""

from __future__ import annotations

import shlex
from typing import Any

from codecarena.plural import counted
from codecarena.results import leaderboard as lb
from codecarena.results.formatting import fmt_mib
from codecarena.results.record import Plan
from codecarena.results.report.markup import code, esc, kv, short_sha, spec_html, weights_pill
from codecarena.results.schema import Row


def _model_file(f: dict[str, Any]) -> str:
    sha = f.get("sha256") or ""
    pinned = f.get("pinned_sha256")
    text = f"<br>{esc(f.get('file') or f.get('name') or f.get('path') or '')} {short_sha(sha)}"
    if pinned and pinned != sha:
        text += f' <span class="bad">differs from the pinned {short_sha(pinned)}</span>'
    return text


def _facts(data: Any, prefix: str = "") -> list[str]:
    """Nested facts as `key: value` lines (nested keys joined with dots)."""
    if not isinstance(data, dict):
        return [f"{prefix}: {data}"] if prefix else [str(data)]
    lines: list[str] = []
    for key in sorted(data):
        name = f"{prefix}.{key}" if prefix else str(key)
        value = data[key]
        if isinstance(value, dict) and value:
            lines += _facts(value, name)
        else:
            lines.append(f"{name}: {value}")
    return lines


def _facts_html(data: Any) -> str:
    return "<br>".join(esc(line) for line in _facts(data)) or '<span class="muted">-</span>'


def _limits_text(run: lb.RunInfo) -> str:
    """The limits the rows ran under (rows record them; a resumed run may mix several), or what an
    older run's plan said."""
    seen = sorted({(x.memory_limit_bytes, x.guard_poll_s, x.stage_timeout_s) for x in (r.limits for r in run.run.rows) if x})
    if not seen:
        legacy = run.plan.legacy_limits or {}
        seen = [(legacy.get("memory_limit_bytes"), legacy.get("guard_poll_s"), legacy.get("stage_timeout_s"))]
    return "; ".join(f"memory limit {fmt_mib(mem)} MiB, guard poll {esc(poll)} s, stage timeout {esc(timeout)} s"
                     for mem, poll, timeout in seen)


def _inputs_html(run: lb.RunInfo) -> str:
    """How each reference was made from its input file (conversions, grouped: the same chain once, with
    the utterances it made), and the input files the run skipped, each with why (run.json)."""
    made: dict[tuple[str, ...] | None, list[str]] = {}
    seen: set[str] = set()
    for row in run.run.rows:
        if row.utterance not in seen:
            seen.add(row.utterance)
            chain = None if row.reference_conversions is None else tuple(row.reference_conversions)
            made.setdefault(chain, []).append(row.utterance)
    body = []
    for chain, utterances in made.items():
        how = ("not recorded (rows before version 4)" if chain is None else
               "; ".join(chain) if chain else "the input file's own bytes, unchanged")
        shown = ", ".join(utterances[:12]) + (f" and {len(utterances) - 12} more" if len(utterances) > 12 else "")
        body.append(f'<tr><td class="wrap">{esc(how)}</td><td>{len(utterances)}</td>'
                    f'<td class="wrap mono">{esc(shown)}</td></tr>')
    skipped = run.run.record.skipped_inputs
    if skipped is None:
        skipped_html = '<p class="note">Skipped input files: not recorded (run.json before version 3).</p>'
    elif not skipped:
        skipped_html = '<p class="note">Skipped input files: none.</p>'
    else:
        skipped_html = (f'<div class="scroll"><table class="provenance skipped"><thead><tr><th class="l">skipped '
                        f'input ({len(skipped)})</th><th class="l">why</th></tr></thead><tbody>'
                        + "".join(f'<tr><td class="wrap mono">{esc(item.get("file"))}</td>'
                                  f'<td class="wrap">{esc(item.get("reason"))}</td></tr>' for item in skipped)
                        + "</tbody></table></div>")
    return ('<h4>Inputs: how each reference was made, and what was skipped</h4><div class="scroll">'
            '<table class="provenance inputs"><thead><tr><th class="l">how the reference was made from the input '
            'file</th><th>utterances</th><th class="l">which</th></tr></thead><tbody>' + "".join(body)
            + f"</tbody></table></div>{skipped_html}")


def provenance_html(board: lb.Leaderboard) -> str:
    parts = []
    for run in board.runs:
        r = run.run.record
        env = r.environment
        git = r.git
        plan = run.plan
        rev = git.get("revision") or "unknown"
        dirty = ' <span class="bad">(dirty working tree)</span>' if git.get("dirty") else ""
        mem = env.get("memory_bytes")
        pairs = [
            ("path", code(run.run.path.resolve())),
            ("created", esc(r.created_at)),
            ("finished", esc(r.finished)),
            ("command", code(shlex.join(r.command))),
            ("codecarena", f"{esc(r.codecarena)}, revision {code(rev)}{dirty}"),
            ("machine", esc(f"{env.get('cpu')} x{env.get('cpu_count')}, "
                            f"{mem / 2**30:.1f} GiB" if mem else f"{env.get('cpu')} x{env.get('cpu_count')}")),
            ("os", esc(env.get("os"))),
            ("python", f"{esc(env.get('python'))} {code(env.get('executable'))}"),
            ("evaluation set", f"{esc(plan.set)}, {counted(len(plan.utterances), 'utterance')}, "
                               f"manifest {short_sha(plan.manifest_sha256)}"),
            ("plan", f"sha256 {short_sha(r.plan_sha256)}; {esc(_warm_text(plan))}; "
                     f"metrics {esc(', '.join(plan.metrics) or 'none')}"),
            ("stage limits", _limits_text(run)),
        ]
        packages = env.get("packages") or {}
        pkg = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()))
        pairs.append(("packages", esc(pkg)))
        parts.append(f'<h3 id="prov-{run.index}">{esc(run.label)}</h3>{kv(pairs)}{_inputs_html(run)}')
        # codecs: spec, config, registry entry, checkpoint identity, variant, weights, runtime
        runtimes = r.runtimes
        codec_rows = []
        first_rows: dict[str, Row] = {}
        for row in run.run.rows:
            first_rows.setdefault(row.codec, row)
        configs = {c.codec: c.config for c in plan.codecs}
        for codec, row in first_rows.items():
            ck = row.checkpoint or {}
            if ck:
                files = "".join(f"<br>{esc(k)} {short_sha(v)}" for k, v in sorted(ck.items())
                                if k not in ("registry", "revision"))
                ck_html = f"{esc(ck.get('registry', ''))} @ {short_sha(ck.get('revision', ''))}{files}"
            else:
                ck_html = '<span class="muted">none (DSP)</span>'
            rt = runtimes.get(row.registry)
            if rt and rt.get("weights_license"):
                flag = ' <span class="pill bad">non-commercial</span>' if rt.get("weights_non_commercial") else ""
                ck_html += f'<br><span class="muted">weights licence:</span> {esc(rt["weights_license"])}{flag}'
            if rt:
                pk = rt.get("packages") or []
                rt_html = (f"{esc(rt.get('environment'))} {code(rt.get('interpreter'))}<br>packages "
                           f"{short_sha(rt.get('packages_sha256'))} ({len(pk)})"
                           f"<details><summary>list</summary><span class=\"mono\">{esc(', '.join(pk))}</span></details>")
            else:
                rt_html = '<span class="muted">not recorded in run.json</span>'
            worker = row.runtime or {}
            model = {k: v for k, v in (row.model or {}).items() if k not in ("checkpoint",)}
            codec_rows.append(
                f'<tr><td class="l"><b>{spec_html(codec)}</b></td><td class="wrap mono">{_facts_html(configs.get(codec) or row.config)}</td>'
                f'<td class="l">{esc(row.registry)}</td><td class="wrap">{ck_html}</td>'
                f'<td class="l">{weights_pill(row.weights, row.user_codec, "external" if row.external_runtime else "")}</td><td class="l">{esc(row.variant or "-")}</td>'
                f'<td class="wrap">{rt_html}<br><span class="muted">worker: python {esc(worker.get("python"))}, '
                f'numpy {esc(worker.get("numpy"))}</span></td><td class="wrap mono">{_facts_html(model)}</td></tr>')
        parts.append('<h4>Codecs, registry entries, checkpoints and runtimes</h4><div class="scroll"><table class="provenance">'
                     '<thead><tr><th class="l">codec</th><th class="l">config</th><th class="l">registry</th>'
                     '<th class="l">checkpoint identity</th><th class="l">weights</th><th class="l">variant</th>'
                     '<th class="l">runtime</th><th class="l">model facts</th></tr></thead><tbody>'
                     + "".join(codec_rows) + "</tbody></table></div>")
        if r.metrics:
            parts.append(_metrics_html(r.metrics))
    return "".join(parts)


def _metrics_html(decls: list[dict[str, Any]]) -> str:
    """A run's metric declarations (run.json `metrics`): outputs, versions, how each is computed and its
    model files."""
    mrows = []
    for d in decls:
        versions = ", ".join(f"{k} {v}" for k, v in (d.get("versions") or {}).items())
        files = "".join(_model_file(f) for f in d.get("model_files") or [] if isinstance(f, dict))
        mrows.append(f'<tr><td class="l">{esc(d.get("name"))}</td><td class="wrap">{esc(", ".join(d.get("outputs") or []))}</td>'
                     f'<td class="wrap">{esc(versions)}</td><td class="wrap">{esc(d.get("description"))}{files}</td></tr>')
    return ('<h4>Metrics</h4><div class="scroll"><table class="provenance"><thead><tr><th class="l">metric</th>'
            '<th class="l">outputs</th><th class="l">versions</th><th class="l">how</th></tr></thead><tbody>'
            + "".join(mrows) + "</tbody></table></div>")


def _warm_text(plan: Plan) -> str:
    """The plan's warm repeats and the rows that make them (--warm-repeats, --warm-sample)."""
    if plan.warm_repeats == 0:
        return "no warm repeats"
    rows = "every cold row" if plan.warm_sample is None else f"the first {counted(plan.warm_sample, 'cold row')}"
    return f"{counted(plan.warm_repeats, 'warm repeat')} in {rows} of each configuration"
