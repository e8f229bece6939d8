"""The smaller points of issue 30: the run-end quality table says which end of each metric is better
and keeps the catalogue's order after a resume; the RTF columns read in one order on every surface; the
terminal leaderboard fits 80 columns and hides the replay and checks columns last; a natural pairing of
two codecs is not an override; counts agree with their nouns."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from test_report import CODECS, make_run

from codecarena import console as console_module
from codecarena.commands import leaderboard as leaderboard_command
from codecarena.results import leaderboard as lb


def _stats(mean: float) -> dict[str, Any]:
    return {"mean": mean, "ci95": [mean - 0.1, mean + 0.1], "n_ok": 3, "n_failed": 0, "n_not_applicable": 0,
            "n_suspect": 0, "mean_with_suspect": mean, "failure_reasons": {}}


def _captured(monkeypatch: pytest.MonkeyPatch, width: int) -> io.StringIO:
    buffer = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=buffer, width=width, highlight=False, markup=False))
    return buffer


def test_the_quality_table_marks_the_better_end_in_the_catalogue_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # A resumed row's metric records come back sorted by name: dwer, pesq_wb, stoi.
    buffer = _captured(monkeypatch, 160)
    console_module.print_quality({"opus:6k": {"dwer": _stats(0.2), "pesq_wb": _stats(3.0), "stoi": _stats(0.9)}})
    rows = [line.split("│")[1].strip() for line in buffer.getvalue().splitlines()
            if line.startswith("│") and re.search(r"\d\.\d{3}", line)]
    assert rows == ["pesq_wb ^", "stoi ^", "dwer v"]
    assert "^ higher, v lower is better" in buffer.getvalue()


def _rtf_headers(text: str) -> list[str]:
    return re.findall(r"RTF (warm|cold)", text)


def test_the_rtf_columns_read_in_one_order_on_every_surface(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.results.report.audio import AudioStats
    from codecarena.results.report.context import ReportContext
    from codecarena.results.report.markdown import markdown_summary
    from codecarena.results.report.plots import family_styles
    from codecarena.results.report.sections import leaderboard_html

    run_dir = make_run(tmp_path, "a", CODECS, audio=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    buffer = _captured(monkeypatch, 400)
    console_module.print_summary(summary)
    run_table = buffer.getvalue().split("kbps: duration-weighted")[0]
    buffer.truncate(0)
    board = lb.compute([run_dir])
    leaderboard_command.print_table(board)
    leaderboard = buffer.getvalue().split("n: utterances with every stage ok")[0]
    ctx = ReportContext(board=board, audio_mode="none", audio=AudioStats(mode="none"),
                        styles=family_styles([e["family"] for e in board.entries]), out_dir=tmp_path)
    markdown = markdown_summary(ctx, tmp_path / "report.html", 0)
    html = re.sub(r"<[^>]+>", " ", leaderboard_html(board, board.groups[0], {}).split("</thead>", 1)[0])
    # Warm before cold, each encode/decode: the run's table, the leaderboard, report.md, the report.
    assert _rtf_headers(run_table) == _rtf_headers(leaderboard) == _rtf_headers(markdown) == ["warm", "cold"]
    assert "RTF warm enc/dec" in run_table and "RTF cold enc/dec" in markdown
    assert re.findall(r"RTF (warm|cold) (enc|dec)", html) == [("warm", "enc"), ("warm", "dec"), ("cold", "enc"),
                                                               ("cold", "dec")]
    # ... and each cell holds what its header says.
    codec = summary["codecs"][0]
    warm = f"{codec['encode']['warm_rtf_median']:.4f}/{codec['decode']['warm_rtf_median']:.4f}"
    assert warm in next(line for line in run_table.splitlines() if codec["codec"] in line)


def test_the_terminal_leaderboard_fits_80_columns_and_hides_replay_and_checks_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = make_run(tmp_path, "a", CODECS, audio=False,
                       cpu="A long processor name of the kind /proc/cpuinfo gives, Intel(R) Xeon(R) Platinum 8480+",
                       os_name="Linux-6.1.0-28-amd64-x86_64-with-glibc2.36")
    buffer = _captured(monkeypatch, 80)
    leaderboard_command.print_table(lb.compute([run_dir]), sort="pesq_wb")
    lines = buffer.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, "\n".join(line for line in lines if len(line.rstrip()) > 80)
    header = " ".join(line for line in lines[:12] if "replay" in line or "checks" in line)
    assert "replay" in header and "checks" in header
    hidden = " ".join(lines[[i for i, line in enumerate(lines) if line.startswith("hidden to fit")][0]:])
    assert "dec_model" in hidden and "replay" not in hidden.split(";")[0]


def test_a_dsp_codec_against_a_neural_one_is_a_note_not_an_override(tmp_path: Path) -> None:
    from test_compare import make_row, write_run

    from codecarena.results.compare import compare_runs
    from codecarena.results.compare_text import render_text

    utts = ("u1", "u2", "u3")
    run_a = write_run(tmp_path / "A", [make_row("opus:6k", u, {"pesq_wb": 3.0 + i / 10}) for i, u in enumerate(utts)])
    run_b = write_run(tmp_path / "B", [make_row("lyra:6000", u, {"pesq_wb": 3.2 + i / 7}, weights="real",
                                                decoded="b", sample_rate=16000) for i, u in enumerate(utts)])
    result = compare_runs(run_a, run_b, pair="opus:6k=lyra:6000", resamples=200)
    assert result["pairing_overridden"] is False and result["overrides"] == []
    notes = " ".join(result["notes"])
    assert "opus:6k vs lyra:6000: weights kinds differ (none vs real): two different codecs" in notes
    assert "OVERRIDDEN" not in render_text(result)
    # Synthetic weights measure the pipeline, not the codec: against real ones they stay an override.
    run_c = write_run(tmp_path / "C", [make_row("dac:16khz", u, {"pesq_wb": 2.0}, weights="synthetic", decoded="c")
                                       for u in utts])
    result = compare_runs(run_b, run_c, pair="lyra:6000=dac:16khz", resamples=200)
    assert result["pairing_overridden"] is True and "weights kinds differ (real vs synthetic)" in result["overrides"][0]
    assert "PAIRING OVERRIDDEN" in render_text(result)


def test_counts_agree_with_their_nouns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 30: "1 codec configurations".
    from codecarena import cli
    from codecarena.datasets import EvalSet, Utterance
    from codecarena.results.report import write_report

    run_dir = make_run(tmp_path, "a", CODECS[:1], audio=False, utterances=("utt_a", "utt_b"))
    with pytest.raises(SystemExit) as exited:
        cli.main(["leaderboard", str(run_dir), "--format", "csv", "--out", str(tmp_path / "lb.csv")])
    assert exited.value.code == 0
    assert "(1 codec configuration, 1 record, 1 group)" in capsys.readouterr().err
    html = write_report([run_dir], tmp_path / "report.html", audio="none").read_text()
    assert "1 codec configuration in 1 leaderboard." in html

    from codecarena.commands.run_view import describe_set  # the line that opens a run

    one = Utterance("clip", tmp_path / "clip.wav", "en", None, (), 16000, 16000, "0" * 64, "", "")
    assert describe_set(EvalSet("input:clip.wav", (one,), "1" * 64, "input /x/clip.wav"), 1, Path("runs/r")) == \
        "set input:clip.wav (1 utterance, input /x/clip.wav); 1 codec configuration; run directory runs/r"
    assert describe_set(EvalSet("smoke", (one, one), "1" * 64, "cache"), 5, Path("r")).startswith(
        "set smoke (2 utterances, cache); 5 codec configurations;")
