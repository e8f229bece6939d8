"""The report's listening-test sections (HTML and report.md): for each test of the runs, who listened
and who post-screening excluded, every condition's MUSHRA mean with its intervals (the hidden
reference and the anchors too) and a plot of them, or an A/B pair's preference, and "which metric
predicts your listeners": every objective metric's correlation with the ratings and the ranking that
follows (results/listening/correlation.py). The leaderboards' MUSHRA column is `mushra_td`."""

from __future__ import annotations

from typing import Any

from codecarena.results.listening.board import cell_lines
from codecarena.results.listening.correlation import COEFFICIENTS
from codecarena.results.listening.results import TestResults
from codecarena.results.bootstrap import MIN_UNITS
from codecarena.results.formatting import fmt_interval, fmt_num, language_label
from codecarena.results.report.markup import data_uri, esc, num_td

COEFFICIENT_LABELS = {"pearson": "Pearson r", "spearman": "Spearman rho", "kendall": "Kendall tau"}


def mushra_td(stats: dict[str, Any] | None) -> str:
    """A leaderboard cell: the mean, under it the interval (or that there is none), the listeners and ratings."""
    if not stats:
        return '<td data-v="">-</td>'
    lines = cell_lines(stats)
    under = " ".join(lines[1:]) if not stats["ci95"] else f"{lines[0].partition(' ')[2]} {lines[1]}"
    title = stats["ci_note"] or "95% interval, listeners and utterances resampled"
    sub = f'<span class="sub ci{"" if stats["ci95"] else " none"}" title="{esc(title)}">{esc(under)}</span>'
    return num_td(stats["mean"], f"{stats['mean']:.1f}", sub)


def _plot(conditions: list[dict[str, Any]]) -> bytes | None:
    from codecarena.results.report.plots import _figure, _png

    rated = [c for c in conditions if "mean" in c]
    if not rated:
        return None
    fig = _figure(7.0, 0.45 * len(rated) + 1.2)
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(rated)))[::-1]
    for y, c in zip(ys, rated):
        color = "#7f7f7f" if c["role"] != "codec" else "#1f77b4"
        ax.plot([c["mean"]], [y], "o", color=color)
        if c["ci95"]:
            ax.plot(c["ci95"], [y, y], "-", color=color, linewidth=2)
    ax.set_yticks(ys)
    ax.set_yticklabels([c["label"] for c in rated])
    ax.set_xlim(0, 100)
    for edge, word in zip(range(0, 100, 20), ("Bad", "Poor", "Fair", "Good", "Excellent")):
        ax.axvline(edge, color="#dddddd", linewidth=0.8, zorder=0)
        ax.text(edge + 10, len(rated) - 0.4, word, ha="center", va="bottom", fontsize=8, color="#666666")
    ax.set_xlabel("MUSHRA score (mean of the included listeners; bars: 95% interval, listeners and utterances)")
    return _png(fig)


def _listeners_html(doc: dict[str, Any]) -> str:
    rows = "".join(f'<tr data-listener="{esc(s["listener"])}" data-status="{esc(s["status"])}"><td class="l">'
                   f'{esc(s["listener"])}</td><td class="l">{esc(s["status"])}</td><td>{s["trials_done"]}/{s["trials"]}'
                   f'</td><td class="l">{esc("; ".join(s["reasons"]))}</td></tr>' for s in doc["listeners"])
    return (f'<table class="listeners"><thead><tr><th class="l">listener</th><th class="l">status</th><th>trials</th>'
            f'<th class="l">why</th></tr></thead><tbody>{rows}</tbody></table>')


def _conditions_html(doc: dict[str, Any]) -> str:
    languages = sorted({lang for c in doc["conditions"] for lang in c.get("by_language", {})})
    head = "".join(f"<th>{esc(language_label(lang))}</th>" for lang in languages)
    rows = []
    for c in doc["conditions"]:
        if "mean" not in c:
            rows.append(f'<tr><td class="l">{esc(c["label"])}</td><td colspan="{4 + len(languages)}">no included '
                        "listener</td></tr>")
            continue
        t = fmt_interval(c["ci95_t"], 1) if c["ci95_t"] else "-"
        per_language = "".join(mushra_td(c["by_language"].get(lang)) for lang in languages)
        rows.append(f'<tr data-condition="{esc(c["condition"])}" data-role="{esc(c["role"])}"><td class="l">'
                    f'{esc(c["label"])}</td>{mushra_td(c)}<td>{esc(t)}</td><td>{c["n_listeners"]}</td>'
                    f'<td>{c["n_ratings"]}</td>{per_language}</tr>')
    return (f'<table class="mushra sortable"><thead><tr><th class="l">condition</th><th>MUSHRA</th>'
            '<th title="BS.1534-3: mean +- t s/sqrt(N), ratings taken as independent">t-interval</th><th>listeners</th>'
            f'<th>ratings</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _coefficient(entry: dict[str, Any]) -> str:
    if entry["agreement"] is None:
        return f'<td data-v="" title="{esc(entry["note"])}">-</td>'
    sub = (f'<span class="sub ci">{esc(fmt_interval(entry["ci95"]))}</span>' if entry["ci95"] else
           f'<span class="sub ci none" title="{esc(entry["note"])}">no interval</span>')
    return num_td(entry["agreement"], fmt_num(entry["agreement"]), sub)


def correlations_html(doc: dict[str, Any]) -> str:
    corr = doc["correlations"]
    if not corr["metrics"]:
        return '<p class="note">No metric to correlate: no included listener, or no codec condition with metric values.</p>'
    by_name = {m["metric"]: m for m in corr["metrics"]}
    head = "".join(f"<th>{level} {esc(COEFFICIENT_LABELS[k])}</th>" for level in ("stimulus", "system")
                   for k in COEFFICIENTS)
    rows = []
    for rank, name in enumerate(corr["ranking"], start=1):
        m = by_name[name]
        cells = "".join(_coefficient(m[level][k]) for level in ("stimulus", "system") for k in COEFFICIENTS)
        rows.append(f'<tr data-metric="{esc(name)}"><td>{rank}</td><td class="l">{esc(m["label"])}'
                    f'{" (lower is better)" if m["lower_is_better"] else ""}</td><td>{m["stimulus"]["n"]}</td>'
                    f'<td>{m["system"]["n"]}</td>{cells}</tr>')
    return (f'<table class="correlations"><thead><tr><th>rank</th><th class="l">metric</th><th>stimuli</th>'
            f'<th>systems</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<p class="note">Agreement with the listeners: each coefficient of the metric against the MUSHRA ratings, '
            f'its sign turned for a metric where lower is better, so that positive always means agreement. Stimulus '
            f'level: one point per codec condition and utterance (the mean rating of the included listeners); system '
            f'level: one per codec condition (its MUSHRA mean against the metric\'s mean over the same utterances). '
            f'95% intervals from Fisher\'s z, none on fewer than {MIN_UNITS} points. Ranked by '
            f'{esc(corr["ranked_by"])}. The anchors and the hidden reference have no metric values and take no '
            'part.</p>')


def _ab_html(doc: dict[str, Any]) -> str:
    ab = doc["ab"]
    ci = fmt_interval(ab["ci95"]) if ab["ci95"] else ab["ci_note"]
    return (f'<table class="ab"><thead><tr><th class="l">A</th><th class="l">B</th><th>A chosen</th><th>B chosen</th>'
            f'<th>no preference</th><th>share of A (decided)</th><th>exact 95% interval</th><th>p (binomial, 50%)</th>'
            f'</tr></thead><tbody><tr><td class="l">{esc(ab["a_label"])}</td><td class="l">{esc(ab["b_label"])}</td>'
            f'<td>{ab["a"]}</td><td>{ab["b"]}</td><td>{ab["no_preference"]}</td><td>{esc(fmt_num(ab["share_a"]))}</td>'
            f'<td>{esc(ci)}</td><td>{esc(fmt_num(ab["p_value"]))}</td></tr></tbody></table>'
            '<p class="note">Every answer of every included listener counted as independent, which they are not '
            "within one listener: read the interval and p as optimistic.</p>")


def listening_tests_html(tests: list[TestResults]) -> str:
    """The section: one part per test ("" without tests)."""
    if not tests:
        return ""
    parts = []
    for results in tests:
        doc, test = results.document, results.test
        intro = (f'<p class="note">Test <b>{esc(test.name)}</b> ({esc(test.kind.upper() if test.kind == "ab" else "MUSHRA")}, '
                 f'in {esc(results.home.root)}; sha256 <span class="mono">{esc(test.test_sha256[:12])}</span>, seed '
                 f'{test.seed}): {len(test.trials)} trials (utterances), every stimulus tied to its sha256. '
                 f'Post-screening: {esc(doc["screening"])}. Only complete listeners who pass it are in the results. '
                 f'{"; ".join(esc(n) for n in doc["notes"])}</p>')
        body = [_listeners_html(doc)]
        if test.kind == "ab":
            body.append(_ab_html(doc))
        else:
            png = _plot(doc["conditions"])
            if png is not None:
                body.append(f'<figure><img class="plot mushra-plot" alt="MUSHRA means" src="{data_uri(png, "image/png")}">'
                            "<figcaption>MUSHRA means of every condition, the hidden reference and the anchors (grey) "
                            "included.</figcaption></figure>")
            body.append(_conditions_html(doc))
            body.append(f'<h4>Which metric predicts your listeners</h4>{correlations_html(doc)}')
        parts.append(f'<section class="listening-test" data-test="{esc(test.name)}"><h3>{esc(test.name)}</h3>'
                     f'{intro}{"".join(body)}</section>')
    return ('<h2 id="listening-tests">Listening tests</h2><p class="note">Ratings of the runs\' own decoded audio '
            "(codecarena listen, docs/listening.md).</p>" + "".join(parts))


def listening_markdown(tests: list[TestResults]) -> list[str]:
    """report.md's lines of the listening tests, and "which metric predicts your listeners"."""
    lines: list[str] = []
    for results in tests:
        doc, test = results.document, results.test
        included = sum(1 for s in doc["listeners"] if s["status"] == "included")
        lines += [f"## Listening test {test.name}", "",
                  f"{test.kind.upper() if test.kind == 'ab' else 'MUSHRA'}, {len(test.trials)} trials, "
                  f"{included} of {len(doc['listeners'])} listeners included (post-screening: {doc['screening']}).", ""]
        lines += [f"- {s['listener']}: {s['status']}" + (f" ({'; '.join(s['reasons'])})" if s["reasons"] else "")
                  for s in doc["listeners"]] + [""]
        if test.kind == "ab":
            ab = doc["ab"]
            lines += [f"A = {ab['a_label']}: {ab['a']}, B = {ab['b_label']}: {ab['b']}, no preference: "
                      f"{ab['no_preference']}; share of A {fmt_num(ab['share_a'])}, p = {fmt_num(ab['p_value'])}.", ""]
            continue
        lines += ["| condition | MUSHRA | 95% interval (listeners x utterances) | t-interval | listeners | ratings |",
                  "|---|---:|---|---|---:|---:|"]
        for c in doc["conditions"]:
            if "mean" in c:
                ci = fmt_interval(c["ci95"], 1) if c["ci95"] else c["ci_note"]
                t = fmt_interval(c["ci95_t"], 1) if c["ci95_t"] else "-"
                lines.append(f"| {c['label']} | {c['mean']:.1f} | {ci} | {t} | {c['n_listeners']} | {c['n_ratings']} |")
        lines += ["", "### Which metric predicts your listeners", "",
                  "Agreement (sign turned where lower is better); stimulus level / system level; "
                  f"ranked by {doc['correlations']['ranked_by']}.", "",
                  "| rank | metric | stimuli | " + " | ".join(f"stimulus {COEFFICIENT_LABELS[k]}" for k in COEFFICIENTS)
                  + " | systems | " + " | ".join(f"system {COEFFICIENT_LABELS[k]}" for k in COEFFICIENTS) + " |",
                  "|---:|---|---:|" + "---:|" * 3 + "---:|" + "---:|" * 3]
        by_name = {m["metric"]: m for m in doc["correlations"]["metrics"]}
        for rank, name in enumerate(doc["correlations"]["ranking"], start=1):
            m = by_name[name]

            def cell(entry: dict[str, Any]) -> str:
                if entry["agreement"] is None:
                    return "-"
                return fmt_num(entry["agreement"]) + (f" {fmt_interval(entry['ci95'])}" if entry["ci95"] else "")

            lines.append(f"| {rank} | {m['label']} | {m['stimulus']['n']} | "
                         + " | ".join(cell(m["stimulus"][k]) for k in COEFFICIENTS) + f" | {m['system']['n']} | "
                         + " | ".join(cell(m["system"][k]) for k in COEFFICIENTS) + " |")
        lines.append("")
    return lines
