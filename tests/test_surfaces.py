"""What the reporting surfaces show a new user (issue 38): the content score in each language's own
unit, suspect values counted where they are seen, codec specs that wrap only between their parts,
honest robustness figures, channel rows kept apart from the clean ones, the ledger's labels and
claims, and compare's refusal to give a verdict on too few units.

Run directories are made by hand (`test_report.make_run`: schema-valid rows, codecarena's own
summary, real WAV files); the expected values come from the rows written, never from the code under
test.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_report import CODECS, _terminal, make_run

from codecarena.commands import leaderboard as leaderboard_command
from codecarena.results import report

SUSPECT_LOOP = "CER 12.06 is above 3: the recogniser looped (a repetition loop), not the codec"
UTTERANCES = ("utt_a", "utt_b", "utt_c", "utt_d")
BILINGUAL = {"utt_a": "en", "utt_b": "en", "utt_c": "zh", "utt_d": "zh"}


def _content(codec: str, utt: str, language: str, metrics: dict[str, Any]) -> None:
    """English rows: dWER and dCER; Mandarin rows: dCER only (dWER not applicable), and one of opus:6k's a
    Whisper repetition loop flagged suspect."""
    if language == "zh":
        metrics["dwer"] = {"value": None, "status": "not_applicable", "error": "a language written without spaces",
                           "details": {}}
    value = 0.1 + 0.01 * len(codec) + 0.001 * int(utt == "utt_d")
    metrics["dcer"] = {"value": value, "status": "ok", "error": None, "details": {}}
    if (codec, utt) == ("opus:6k", "utt_c"):
        metrics["dcer"] = {"value": 12.06, "status": "suspect", "error": SUSPECT_LOOP, "details": {}}


def _bilingual(tmp_path: Path) -> Path:
    return make_run(tmp_path, "two", CODECS, utterances=UTTERANCES, languages=BILINGUAL, metrics_hook=_content)


def _leaderboard(run_dirs: list[Path], capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    parser = argparse.ArgumentParser()
    leaderboard_command.add_parser(parser.add_subparsers(dest="command"))
    assert leaderboard_command.run(parser.parse_args(["leaderboard", *map(str, run_dirs), *extra])) == 0
    return capsys.readouterr().out


def _plain(page: str) -> str:
    """The report's HTML with each codec configuration as plain text (without the <wbr> break points)."""
    return re.sub(r'<span class="spec">(.*?)</span>', lambda m: m.group(1).replace("<wbr>", ""), page)


def _sections(text: str) -> dict[str, str]:
    """The terminal leaderboard's text per section heading ("language en", "all 2 languages pooled")."""
    parts = re.split(r"^G1: .* - (.*?); sorted by .*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


# ------------------------------------------------------------------------------------------------
# 1. The content score is the language's own, and suspect values are counted without flags


def test_the_leaderboard_shows_each_language_its_own_content_score_and_counts_suspects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _bilingual(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    sections = _sections(_leaderboard([run_dir], capsys))
    assert set(sections) == {"language en", "language zh", "all 2 languages pooled"}
    heads = {what: text[:text.index("\u2500")] for what, text in sections.items()}  # the header, above the rule
    assert "dWER v" in heads["language en"] and "dCER" not in heads["language en"]
    assert "dCER v" in heads["language zh"] and "dWER" not in heads["language zh"]
    # Mandarin's mean leaves the suspect value out: opus:6k's dCER is its one ok value, utt_d's.
    zh_opus = next(line for line in sections["language zh"].splitlines() if line.lstrip().startswith("opus:6k"))
    assert f"{0.1 + 0.01 * len('opus:6k') + 0.001:.3f}" in zh_opus
    # No error rate is pooled over two languages, so the pooled table has no content column.
    assert "PESQ-WB" in heads["all 2 languages pooled"]
    assert "dWER" not in heads["all 2 languages pooled"] and "dCER" not in heads["all 2 languages pooled"]
    text = "".join(sections.values())
    assert "opus:6k: 1 dCER value suspect, kept out of the mean (utt_c): " + SUSPECT_LOOP in text.replace("\n", " ")


def test_report_md_and_html_show_dcer_for_mandarin_and_count_suspect_values(tmp_path: Path) -> None:
    run_dir = _bilingual(tmp_path)
    out = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    md = out.with_suffix(".md").read_text()
    zh = md[md.index("### Language zh"):md.index("### All 2 languages pooled")]
    en = md[md.index("### Language en"):md.index("### Language zh")]
    assert "| dCER (lower better) |" in zh.splitlines()[2] and "dWER" not in zh
    assert "| dWER (lower better) |" in en.splitlines()[2]
    assert "Suspect values (1, kept out of the means):" in md
    assert "- opus:6k: 1 dCER value suspect, kept out of the mean (utt_c): " + SUSPECT_LOOP in md
    page = out.read_text()
    # The plots use each language's own score; none says a computed score was not computed.
    assert page.count('<figure data-metric="dcer" data-language="zh"') == 1
    assert page.count('<figure data-metric="dwer" data-language="en"') == 1
    assert not re.search(r"d[WC]ER \(the metric was not computed", page)
    # The badge counts suspect values apart from failures (none failed here).
    nav = page[page.index('<nav class="toc">'):page.index("</nav>")]
    assert ">Failures (0)</a>" in nav and ">Suspect values (1)</a>" in nav
    assert 'id="suspect"' in page
    # A listening card of a Mandarin row names its dCER, not a dWER that does not apply.
    card = page[page.index('data-utterance="utt_d"'):]
    card = card[:card.index("</div></div>")]
    assert "dCER" in card and "dWER" not in card


def test_the_run_console_counts_suspect_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.console import print_quality

    run_dir = _bilingual(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    buffer = _terminal(monkeypatch)
    print_quality({c["codec"]: c["by_language"]["zh"]["metrics"] for c in summary["codecs"]}, title="quality, zh")
    text = buffer.getvalue()
    assert "1 metric values suspect, kept out of the means: opus:6k dcer 1" in text.replace("\n", " ")


def test_headline_outputs_follow_the_language() -> None:
    from codecarena.metrics import outputs

    assert outputs.content_output(["en"]) == "dwer" and outputs.content_output(["en-US", "en"]) == "dwer"
    assert outputs.content_output(["zh"]) == "dcer" and outputs.content_output(["ja"]) == "dcer"
    assert outputs.content_output(["en", "zh"]) is None
    assert outputs.headline(["zh"]) == ("pesq_wb", "stoi", "dcer", "dnsmos_ovrl", "speaker_sim")
    assert outputs.headline(["en", "zh"]) == ("pesq_wb", "stoi", "dnsmos_ovrl", "speaker_sim")


# ------------------------------------------------------------------------------------------------
# 9. The ledger labels a user codec as every other table does


USER_SOURCE = "4f" * 32


def _user_codec(row: dict[str, Any]) -> None:
    if row["codec"] == "adpcm:16k":
        row["registry"] = "user-adpcm"
        row["model"] = {**row["model"], "user_codec": {"source_sha256": USER_SOURCE}}


def test_the_ledger_labels_a_user_codec_as_every_other_table_does(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.commands import ledger as ledger_command
    from codecarena.files import write_json
    from codecarena.results import ledger
    from codecarena.results.run import Run

    codecs = [("adpcm:16k", "adpcm", "none", 16.0), ("opus:6k", "opus", "none", 6.0)]
    run_dir = make_run(tmp_path, "user", codecs, row_hook=_user_codec)
    loaded = Run.open(run_dir)
    write_json(run_dir / "summary.json", {**loaded.summary, "ledger": ledger.build(loaded.rows, loaded.dir)})
    label = f"user codec {USER_SOURCE[:12]}"
    # The leaderboard's label, the reference for every table.
    summary = json.loads((run_dir / "summary.json").read_text())
    assert next(c for c in summary["codecs"] if c["codec"] == "adpcm:16k")["user_codec"] == USER_SOURCE[:12]
    out = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    md = out.with_suffix(".md").read_text()
    ledger_md = md[md.index("## Bitrate ledger"):]
    assert f"| adpcm:16k | {label} |" in ledger_md and "| adpcm:16k | none |" not in ledger_md
    page = _plain(out.read_text())
    ledger_html = page[page.index('id="ledger"'):page.index('id="listening"')]
    assert f"<b>adpcm:16k</b> <span class=\"pill user-codec\">{label}</span>" in ledger_html
    buffer = _terminal(monkeypatch)
    parser = argparse.ArgumentParser()
    ledger_command.add_parser(parser.add_subparsers(dest="command"))
    ledger_command.run(parser.parse_args(["ledger", str(run_dir)]))
    rows = [line for line in buffer.getvalue().splitlines() if "adpcm:16k" in line and line.startswith("\u2502")]
    assert rows and all(label in line for line in rows), rows


# ------------------------------------------------------------------------------------------------
# 3. A codec configuration wraps only before its channel (`@`) or after a `,`, never in a key=value


CHANNEL_SPECS = ["opus:24k,fec=10", "opus:24k,fec=10@loss=10%", "opus:24k,fec=10@burst=10%,len=3",
                 "opus:12k@burst=10%,len=3", "codec2:3200@ber=0.001"]


def _cells(lines: list[str], bar: str) -> list[list[str]]:
    """The stripped text of each column, line by line, of a Rich table's lines drawn with `bar`."""
    return [[cell.strip() for cell in line.split(bar)[1:-1]] for line in lines if line.startswith(bar)]


def _whole_breaks(fragments: list[str], specs: list[str]) -> None:
    """The fragments a spec was wrapped into make the spec, and each break is before an `@` or after a `,`."""
    assert "".join(fragments) in specs, fragments
    for before, after in zip(fragments, fragments[1:]):
        assert before.endswith(",") or after.startswith("@"), fragments


def _summary(specs: list[str]) -> dict[str, Any]:
    stats = {"mean": 3.2, "ci95": [3.0, 3.4], "ci_unit": "utterance", "ci_units": 10, "n_ok": 10, "n_failed": 0,
             "n_not_applicable": 0, "n_suspect": 0, "mean_with_suspect": 3.2, "failure_reasons": {}}
    stage = {"cold_rtf_median": 0.123, "warm_rtf_median": 0.0265, "peak_rss_bytes_max": 80 * 2**20}
    return {"codecs": [{"codec": spec, "weights": "none", "rows_ok": 10, "rows": 10, "representation_bps": 22353.0,
                        "payload_bps": 23374.0, "encode": stage, "decode": stage, "replay_identical": 10,
                        "replay_sampled": 10, "checks_passed": 10, "failures": [],
                        "metrics": {"pesq_wb": stats, "stoi": stats}} for spec in specs]}


@pytest.mark.parametrize("width", [80, 100, 120, 160])
def test_a_channel_configuration_wraps_only_between_its_parts(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.console import print_quality, print_summary

    summary = _summary(CHANNEL_SPECS)
    buffer = _terminal(monkeypatch, width)
    print_summary(summary)
    lines = buffer.getvalue().splitlines()
    rows: list[list[str]] = []
    for cells in _cells(lines, "\u2502"):  # the body: a row starts where its weights cell is written
        if cells[1]:
            rows.append([])
        rows[-1].append(cells[0])
    assert len(rows) == len(CHANNEL_SPECS)
    for fragments in rows:
        _whole_breaks([f for f in fragments if f], CHANNEL_SPECS)
    buffer = _terminal(monkeypatch, width)
    print_quality({c["codec"]: c["metrics"] for c in summary["codecs"]})
    text = buffer.getvalue()
    headers = [block.split("\u2521")[0].splitlines() for block in text.split("\u250f")[1:]]
    found = []
    for header in headers:  # the header of each table (several when they do not fit side by side)
        columns = list(zip(*_cells(header, "\u2503")))[1:]
        found += ["".join(column) for column in columns]
        for column in columns:
            _whole_breaks([f for f in column if f], CHANNEL_SPECS)
    assert sorted(found) == sorted(CHANNEL_SPECS)


# ------------------------------------------------------------------------------------------------
# 11. compare: no reading below the bound unless asked; where a run was written is no difference


def test_compare_gives_no_reading_below_the_bound_unless_asked(tmp_path: Path) -> None:
    from codecarena.results.compare import compare_runs
    from codecarena.results.compare_text import render_text

    def other_audio(row: dict[str, Any]) -> None:
        row["decoded_sha256"] = row["replay_sha256"] = "b" * 64

    a = make_run(tmp_path, "a", CODECS[:1], seed=1)  # three utterances
    b = make_run(tmp_path, "b", CODECS[:1], seed=2, row_hook=other_audio)
    result = compare_runs(a, b, resamples=500)
    for m in result["comparisons"][0]["metrics"]:
        assert 2 <= m["units"] < 10 and m["ci_low"] is None and m["ci_high"] is None and m["includes_zero"] is None
        assert "better" not in m["verdict"] and "worse" not in m["verdict"] and "interval" not in m["verdict"][:9]
        assert m["verdict"].startswith("fewer than 10 units: no interval, no reading"), m["verdict"]
    text = render_text(result)
    assert "better than A" not in text and "worse than A" not in text and "excludes 0" not in text
    assert "on fewer than 10: none, nor a reading (--few-units shows them, as descriptive)" in text
    asked = compare_runs(a, b, resamples=500, few_units=True)
    pesq = next(m for m in asked["comparisons"][0]["metrics"] if m["metric"] == "pesq_wb")
    assert pesq["ci_low"] is not None and pesq["warning"].startswith("only 3 utterances, fewer than 10")
    assert asked["settings"]["few_units"] is True and result["settings"]["few_units"] is False


def _confined(run_dir: Path) -> Any:
    def hook(row: dict[str, Any]) -> None:
        folder = run_dir / "work" / row["codec"].replace(":", "_") / row["utterance"]
        row["model"] = {**row["model"], "confined": {"landlock_abi": 7, "writable": [str(folder), str(run_dir)]}}
    return hook


def test_compare_does_not_count_where_a_run_was_written_as_a_difference(tmp_path: Path) -> None:
    from codecarena.results import compare_provenance as compare
    from codecarena.results.compare import compare_runs

    runs = [make_run(tmp_path, name, CODECS[:1], row_hook=_confined(tmp_path / name)) for name in ("a", "b")]
    result = compare_runs(*runs, resamples=500)
    (comparison,) = result["comparisons"]
    assert comparison["identity"]["all_decoded_identical"] is True  # byte-identical codecs
    assert comparison["provenance"]["differences"] == []
    confined = comparison["provenance"]["a"]["model"]["confined"]
    assert confined == {"landlock_abi": 7, "writable": [compare.RUN_PATH, compare.RUN_PATH]}
    # A path outside the run still counts.
    other = make_run(tmp_path, "c", CODECS[:1], row_hook=_confined(tmp_path / "elsewhere"))
    differences = compare_runs(runs[0], other, resamples=500)["comparisons"][0]["provenance"]["differences"]
    assert [d["field"] for d in differences] == ["model"]


# ------------------------------------------------------------------------------------------------
# 5. Robustness figures: realised rates, n, "interpolated", digits as measured, intervals where n allows


def _channel_rows(utterances: int, lost: int) -> list[Any]:
    """Rows as robustness.py reads them: opus:12k clean (PESQ-WB about 4.0) and through loss=10%, whose
    channel lost `lost` of every clip's 100 packets (PESQ-WB about 3.0)."""
    from types import SimpleNamespace

    rows = []
    for i in range(utterances):
        wobble = 0.01 * (i % 3)
        for codec, value, channel in (("opus:12k", 4.0 + wobble, None),
                                      ("opus:12k@loss=10%", 3.0 + wobble,
                                       {"units": 100, "lost": lost, "bits": 80_000, "flipped_bits": 0})):
            rows.append(SimpleNamespace(codec=codec, utterance=f"u{i:02d}", status="ok", channel=channel,
                                        language="en", metrics={"pesq_wb": {"value": value, "status": "ok"}}))
    return rows


def test_robustness_reads_the_realised_rate_and_says_what_it_rests_on() -> None:
    from codecarena.results import robustness

    # Asked for 10%, the channel lost 15 of every 100 packets: the drop of 0.5 (half of 4.0 -> 3.0) is at
    # half the realised rate, 7.5%, not at half the nominal one.
    channels = robustness.summary(_channel_rows(12, 15))  # type: ignore[arg-type]
    (curve,) = channels["curves"]
    found = curve["robustness"]["pesq_wb"]
    assert found["rate"] == pytest.approx(0.075)
    assert (found["impaired"], found["n"], found["between"]) == (1, 12, [0.0, 0.15])
    (_, line) = robustness.text_lines(channels)
    # One impaired rate measured: one significant digit, the two rates it lies between, n, and "interpolated".
    assert line.endswith("falls by 0.5 at about 8% realised loss (interpolated between 0% and 15%; 1 impaired "
                         "rate measured; n=12 utterances)"), line
    assert "10% (15% realised): 3.010" in line


def test_channel_plots_draw_intervals_where_n_allows(tmp_path: Path) -> None:
    from codecarena.results import robustness
    from codecarena.results.report.channel import curve_plot

    styles = {"opus": ("o", "#1f77b4")}
    for utterances, bars in ((12, 2), (5, 0)):
        rows = _channel_rows(utterances, 15)
        curves = robustness.curves(rows)  # type: ignore[arg-type]
        png, drawn, without = curve_plot(curves, "pesq_wb", styles, rows)  # type: ignore[arg-type]
        assert png.startswith(b"\x89PNG") and (drawn, without) == (bars, 2 - bars)


# ------------------------------------------------------------------------------------------------
# 10. Channel configurations stay out of the clean plots and tables, and report.md has the channel and
# comparison sections


def _section(page: str, name: str) -> str:
    """The HTML of a report section, from its heading to the next one."""
    start = page.index(f'<h2 id="{name}">')
    return page[start:page.index("<h2", start + 4)]


WITH_CHANNEL = [("opus:6k", "opus", "none", 6.0), ("opus:6k@loss=10%", "opus", "none", 6.0),
                ("codec2:3200", "codec2", "none", 3.2)]


def test_channel_configurations_are_kept_apart_from_the_clean_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from codecarena.files import write_json
    from codecarena.results import ledger
    from codecarena.results.report import plots, sections
    from codecarena.results.run import Run

    def clean_config(row: dict[str, Any]) -> None:  # a channel row's config is its clean configuration's
        row["config"] = {"config": row["codec"].partition("@")[0].split(":")[-1]}

    runs = [make_run(tmp_path, name, WITH_CHANNEL, seed=seed, row_hook=clean_config)
            for name, seed in (("a", 1), ("b", 2))]
    for run_dir in runs:
        loaded = Run.open(run_dir)
        write_json(run_dir / "summary.json", {**loaded.summary, "ledger": ledger.build(loaded.rows, loaded.dir)})
    # A plot cached by an earlier run of this test would not be drawn again (report/plot_cache.py).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    drawn: list[list[str]] = []
    pareto, cost = plots.pareto_plot, plots.cost_plot
    monkeypatch.setattr(sections, "pareto_plot", lambda entries, *a: (drawn.append([e["codec"] for e in entries]),
                                                                      pareto(entries, *a))[1])
    monkeypatch.setattr(sections, "cost_plot", lambda entries, *a: (drawn.append([e["codec"] for e in entries]),
                                                                    cost(entries, *a))[1])
    out = report.write_report(runs, tmp_path / "report.html", audio="none")
    assert drawn and all("opus:6k@loss=10%" not in codecs and "opus:6k" in codecs for codecs in drawn)
    page = _plain(out.read_text())
    leaderboards, channel, ledger_html = (_section(page, name) for name in ("leaderboard", "channel", "ledger"))
    assert 'data-codec="opus:6k@loss=10%"' not in leaderboards and 'data-codec="opus:6k"' in leaderboards
    assert 'data-channel=""' in channel and 'data-codec="opus:6k@loss=10%"' in channel
    assert "<b>opus:6k@loss=10%</b>" not in ledger_html and "<b>opus:6k</b>" in ledger_html
    assert "1 configuration through a channel left out (opus:6k@loss=10%)" in ledger_html
    md = out.with_suffix(".md").read_text()
    clean_tables = md[:md.index("## Bitrate ledger")]
    assert "| opus:6k@loss=10% |" not in clean_tables and "| opus:6k |" in clean_tables
    ledger_md = md[md.index("## Bitrate ledger"):md.index("## Quality against channel impairment")]
    assert "| opus:6k@loss=10% |" not in ledger_md
    channel_md = md[md.index("## Quality against channel impairment"):md.index("## Comparison")]
    assert "| opus:6k | loss=R% |" in channel_md and "| opus:6k@loss=10% |" in channel_md
    comparison_md = md[md.index("## Comparison of consecutive comparable runs"):]
    assert "### a -> b" in comparison_md and "== opus:6k@loss=10%: 3 pairs" in comparison_md
    # The terminal leaderboard ranks the clean configurations, then shows those through a channel apart.
    monkeypatch.setenv("COLUMNS", "250")
    text = _leaderboard(runs[:1], capsys)
    clean, _, through = text.partition("through a channel")
    assert "opus:6k@loss=10%" not in clean and "opus:6k@loss=10%" in through
    header = through.split("lowest first")[1].split("\u2500")[0]
    assert "kbps" not in header and "RTF" not in header  # no rate or cost columns: they are the clean one's


def test_the_channel_section_draws_plcmos_beside_the_headline_metric(tmp_path: Path) -> None:
    """PLCMOS judges concealment: where a run has it, the channel section draws and tabulates it too
    (issue 41), after the headline metric; a run without it gets the headline metric alone."""
    def with_plcmos(codec: str, utterance: str, language: str, metrics: dict[str, Any]) -> None:
        metrics["plcmos"] = {"value": 2.5 if "@" in codec else 4.0, "status": "ok", "error": None, "details": {}}

    run = make_run(tmp_path, "with", WITH_CHANNEL, metrics_hook=with_plcmos)
    out = report.write_report([run], tmp_path / "with.html", audio="none")
    channel = _section(_plain(out.read_text()), "channel")
    assert channel.index('data-metric="pesq_wb" data-channel="loss=R%"') \
        < channel.index('data-metric="plcmos" data-channel="loss=R%"')
    assert "<h4>PLCMOS</h4>" in channel and "falls by 0.5 at" in channel
    md = out.with_suffix(".md").read_text()
    channel_md = md[md.index("## Quality against channel impairment"):]
    assert "(PESQ-WB):" in channel_md and "(PLCMOS):" in channel_md
    assert "| opus:6k | loss=R% | 4.000 |" in channel_md[channel_md.index("(PLCMOS):"):]
    plain = make_run(tmp_path, "without", WITH_CHANNEL)
    out = report.write_report([plain], tmp_path / "without.html", audio="none")
    channel = _section(_plain(out.read_text()), "channel")
    assert 'data-metric="pesq_wb"' in channel and 'data-metric="plcmos"' not in channel
    assert "<h4>PESQ-WB</h4>" not in channel  # one metric: no heading per metric


# ------------------------------------------------------------------------------------------------
# 12. A VBR configuration's claim is a target: a declared tolerance, a miss said, never an alarm


def _opus_options(vbr: str) -> Any:
    def hook(row: dict[str, Any]) -> None:
        if row["family"] == "opus":
            row["config"] = {"config": "6k", "vbr": vbr, "complexity": 10, "frame_ms": 20.0, "application": "voip",
                             "bandwidth": "auto", "fec": 0}
    return hook


@pytest.mark.parametrize(("vbr", "kbps", "flag", "shown", "css"), [
    ("on", 5.426, "ok", "-9.6% ok (vbr=on: a target)", ""),  # the smoke run's opus:6k
    ("constrained", 4.0, "under_target", "-33.3% below target (vbr=constrained: a target)", ' class="warn"'),
    ("off", 5.426, "under", "-9.6% UNDER", ' class="bad"')])
def test_a_variable_rate_claim_is_a_target(tmp_path: Path, vbr: str, kbps: float, flag: str, shown: str,
                                           css: str) -> None:
    from codecarena.files import write_json
    from codecarena.results import ledger, ledger_view
    from codecarena.results.run import Run

    run_dir = make_run(tmp_path, "vbr", [("opus:6k", "opus", "none", kbps)], row_hook=_opus_options(vbr))
    loaded = Run.open(run_dir)
    built = ledger.build(loaded.rows, loaded.dir)
    (entry,) = built["codecs"]
    assert entry["claim_check"]["flag"] == flag and ledger_view.check(entry) == shown
    write_json(run_dir / "summary.json", {**loaded.summary, "ledger": built})
    page = report.write_report([run_dir], tmp_path / "report.html", audio="none").read_text()
    assert f"<td{css}>{shown}</td>" in page
    # The ledger a run wrote before targets (version 1) still re-derives as it was written.
    old = ledger.build(loaded.rows, loaded.dir, version=1)
    assert old["codecs"][0]["claim_check"]["flag"] == "under" and "variable" not in old["codecs"][0]["claim_check"]
    assert ledger.ledger_problems({"ledger": json.loads(json.dumps(old))}, loaded.rows, loaded.dir) == []


def test_a_variable_rate_declaration_is_parsed_strictly() -> None:
    from codecarena.registry.catalog import FAMILIES, parse_declaration
    from codecarena.registry.strict import RegistryError

    assert FAMILIES["opus"].variable_rate is not None and FAMILIES["opus"].variable_rate.values == ("on", "constrained")
    head = ('api_version = 1\nname = "toy"\ndescription = "d"\nconfigs = ["8"]\ndefault_config = "8"\n'
            '[[options]]\nname = "mode"\nkind = "str"\ndefault = "cbr"\nhelp = "h"\nchoices = ["cbr", "vbr"]\n'
            '[variable_rate]\n')
    good = 'option = "mode"\nvalues = ["vbr"]\ntolerance = 0.2\nreference = "the toy manual"\n'
    assert parse_declaration(head + good, "toy.toml", "toy").variable_rate.tolerance == 0.2  # type: ignore[union-attr]
    for bad, says in ((good + 'extra = 1\n', "unknown key 'extra'"),
                      (good.replace('"mode"', '"speed"'), "option names 'speed', which is not an option"),
                      (good.replace('["vbr"]', '["abr"]'), "values names 'abr', which mode does not take"),
                      (good.replace("0.2", "0"), "tolerance must be a relative difference in (0, 1]"),
                      (good.replace('reference = "the toy manual"\n', ""), "missing key 'reference'")):
        with pytest.raises(RegistryError, match=re.escape(says)):
            parse_declaration(head + bad, "toy.toml", "toy")


# ------------------------------------------------------------------------------------------------
# 18. The achievable rate is an order-0 adaptive coder's, and every surface showing it says so


def test_every_surface_that_shows_the_achievable_rate_says_it_is_order_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from codecarena.commands import ledger as ledger_command
    from codecarena.files import write_json
    from codecarena.results import ledger
    from codecarena.results.run import Run

    run_dir = make_run(tmp_path, "o0", CODECS)
    loaded = Run.open(run_dir)
    write_json(run_dir / "summary.json", {**loaded.summary, "ledger": ledger.build(loaded.rows, loaded.dir)})
    out = report.write_report([run_dir], tmp_path / "report.html", audio="none")
    assert "<th>order-0 achievable kbps</th>" in out.read_text()
    assert "| order-0 achievable kbps |" in out.with_suffix(".md").read_text()
    buffer = _terminal(monkeypatch, 250)
    parser = argparse.ArgumentParser()
    ledger_command.add_parser(parser.add_subparsers(dest="command"))
    ledger_command.run(parser.parse_args(["ledger", str(run_dir)]))
    assert "order-0 achievable kbps" in buffer.getvalue() and "order-0 achievable: every stream" in buffer.getvalue()
    buffer = _terminal(monkeypatch, 250)
    _leaderboard([run_dir], capsys, "--columns", "kbps,achievable_kbps")
    header = buffer.getvalue()[:buffer.getvalue().index("\u2500")]
    assert "achievable" in header and "order-0" in header


# ------------------------------------------------------------------------------------------------
# 15. The HTML report at 1,400 and 390 px (headless Chromium), and plot labels inside their axes


MORE_METRICS = ("pesq_nb", "visqol", "estoi", "si_sdr", "lsd", "mel_distance", "mcd", "dnsmos_ovrl", "speaker_sim")
LONG_SPEC = "opus:24k,fec=10@burst=10%,len=3"
SIX = tuple(f"utt_{i}" for i in range(6))


def _more_metrics(codec: str, utt: str, language: str, metrics: dict[str, Any]) -> None:
    for k, name in enumerate(MORE_METRICS):
        metrics[name] = {"value": 1.0 + 0.1 * k + 0.01 * len(utt), "status": "ok", "error": None, "details": {}}


# Each .spec element's text, line by line as the browser laid it out (one Range per character).
_SPEC_LINES = """els => els.map(el => {
  const lines = []; let top = null;
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    for (let i = 0; i < t.length; i++) {
      const r = document.createRange(); r.setStart(t, i); r.setEnd(t, i + 1);
      const rect = r.getClientRects()[0]; if (!rect) continue;
      if (top === null || Math.abs(rect.top - top) > 2) { lines.push(''); top = rect.top; }
      lines[lines.length - 1] += t.data[i];
    }
  }
  return lines; })"""


def _assert_specs_whole(page: Any) -> None:
    """Every codec configuration of a table (leaderboard, ledger, provenance) breaks, if at all, before an
    `@` or after a `,`."""
    cells = page.locator("td.codec b, table.provenance tbody td:first-child b")
    assert cells.count() > 0
    for lines in cells.evaluate_all(_SPEC_LINES):
        for before, after in zip(lines, lines[1:]):
            assert before.endswith(",") or after.startswith("@"), lines


def _layout_report(tmp_path: Path) -> Path:
    codecs = [*CODECS, (LONG_SPEC, "opus", "none", 24.0), ("opus:24k,fec=10", "opus", "none", 24.0)]
    run_dir = make_run(tmp_path, "layout", codecs, utterances=SIX, metrics_hook=_more_metrics)
    return report.write_report([run_dir], tmp_path / "report.html", audio="none")


def _in_chromium(tmp_path: Path, width: int, check: Any) -> None:
    """`check(page)` on the layout report in headless Chromium at `width` px, then a screenshot; no console
    error and no request leaves the file."""
    from test_report import CHROMIUM, _artifacts, _chromium_page

    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM} missing; Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    out = _layout_report(tmp_path)
    messages: list[str] = []
    outside: list[str] = []
    with sync_playwright() as pw:
        context, page = _chromium_page(pw, tmp_path / "chromium-profile", messages, outside)
        try:
            page.set_viewport_size({"width": width, "height": 1000})
            page.goto(out.as_uri(), wait_until="load")
            check(page)
            page.screenshot(path=str(_artifacts(tmp_path) / f"report-{width}.png"), full_page=True)
        finally:
            context.close()
    assert messages == [] and outside == []


@pytest.mark.slow
def test_report_layout_in_headless_chromium_at_1400_px(tmp_path: Path) -> None:
    def check(page: Any) -> None:
        table = page.locator("table.leaderboard").first
        box = table.locator("xpath=..").bounding_box()
        metrics = table.locator("th[data-col-group='quality'], th[data-col-group='content']")
        visible = [r for r in metrics.evaluate_all("ts => ts.map(t => t.getBoundingClientRect().right)")
                   if r <= box["x"] + box["width"] + 1]
        # Most metric columns fit beside the identity and rate columns (the issue saw 2 or 3): the reason
        # a mean has no interval is said once per table, not in every cell.
        assert metrics.count() == len(MORE_METRICS) + 3 and len(visible) >= 8, (len(visible), metrics.count())
        assert set(table.locator("span.sub.ci.none").all_inner_texts()) == {"n=6", "n=5"}
        assert page.locator("p.ci-note").count() == page.locator("table.leaderboard").count()
        assert page.locator("p.ci-note").first.inner_text().startswith(
            "No interval under a mean on fewer than 10 utterances (n=5, n=6 here)")
        _assert_specs_whole(page)
    _in_chromium(tmp_path, 1400, check)


@pytest.mark.slow
def test_report_layout_in_headless_chromium_at_390_px(tmp_path: Path) -> None:
    def check(page: Any) -> None:
        # Nothing widens the page: every table wider than its box scrolls inside it, to its last column.
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        for table in page.locator("main table").all():
            if not table.is_visible():
                continue
            parent = table.locator("xpath=..")
            sizes = parent.evaluate("d => [d.scrollWidth, d.clientWidth, getComputedStyle(d).overflowX]")
            if sizes[0] > sizes[1] + 1:
                assert sizes[2] == "auto", sizes
                parent.evaluate("d => { d.scrollLeft = d.scrollWidth; }")
                last = table.locator("thead th").last.bounding_box()
                frame = parent.bounding_box()
                assert last["x"] + last["width"] <= frame["x"] + frame["width"] + 1
        # The codec column wraps a long configuration between its parts, never inside a key=value.
        _assert_specs_whole(page)
        codec = page.locator("table.leaderboard td.codec").first.bounding_box()
        assert codec["width"] < 150, codec
    _in_chromium(tmp_path, 390, check)


def test_plot_labels_stay_inside_their_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.results.report import plots

    drawn: list[Any] = []
    monkeypatch.setattr(plots, "_png", lambda fig: drawn.append(fig) or b"")
    entries = []
    for i, (codec, family, kbps, value) in enumerate([("codec2:700C", "codec2", 0.7, 1.4), ("codec2:3200", "codec2", 3.2, 1.7),
                                                      ("opus:6k", "opus", 5.6, 2.2), ("opus:12k", "opus", 11.3, 3.95),
                                                      ("pcm:16", "pcm", 256.0, 4.64)]):
        stats = {"mean": value, "ci95": None, "ci_unit": "utterance", "ci_units": 6, "n_ok": 6, "n_failed": 0,
                 "n_not_applicable": 0, "n_suspect": 0}
        entries.append({"codec": codec, "family": family, "weights": "none", "variant": "", "run_index": 0,
                        "run_label": "smoke", "representation_bps": kbps * 1000, "metrics": {"pesq_wb": stats}})
    styles = plots.family_styles([e["family"] for e in entries])
    plots.pareto_plot(entries, "pesq_wb", styles, with_run=True)
    (fig,) = drawn
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    (ax,) = fig.axes
    frame = ax.get_window_extent(renderer)
    labels = [t for t in ax.texts if t.get_text()]
    assert len(labels) == len(entries)
    for label in labels:
        extent = label.get_window_extent(renderer)
        assert frame.x0 - 1 <= extent.x0 and extent.x1 <= frame.x1 + 1, (label.get_text(), extent, frame)
        assert frame.y0 - 1 <= extent.y0 and extent.y1 <= frame.y1 + 1, (label.get_text(), extent, frame)
