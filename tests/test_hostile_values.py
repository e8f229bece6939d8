"""Issue 28, defect 9: what a run's files and the command line hold is printed as written (never
read as Rich markup)."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import signal
from pathlib import Path

import pytest
from conftest import SHORT_CLIPS, codecarena, need_mirror
from test_report import CODECS, make_run

from codecarena.cli import main
from codecarena.console import make_console, print_quality, print_summary
from codecarena.results.record import load_run
from codecarena.results.summary import summarize

MARKUP = "[bold]x[/bold] [/x]"  # swallowed by Rich markup, and then a closing tag it crashes on


def cli(*argv: str | Path) -> int:
    """The real command line, in this process; its exit status (any other exception fails the test)."""
    previous = signal.getsignal(signal.SIGTERM)  # main installs its own SIGTERM handler
    try:
        with pytest.raises(SystemExit) as exited:
            main([str(a) for a in argv])
    finally:
        signal.signal(signal.SIGTERM, previous)
    return int(exited.value.code)


# ------------------------------------------------------------------------------ 9: values as written


def test_a_console_prints_markup_like_values_literally() -> None:
    buf = io.StringIO()
    make_console(file=buf, width=200).print(f"value {MARKUP}", style="red")
    assert buf.getvalue() == f"value {MARKUP}\n"


def test_run_end_tables_print_a_markup_like_language_and_reason_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, "r", CODECS[:1], languages={"utt_a": "[/x]"}, fail=("opus:6k", "utt_b"))
    rows = load_run(run).rows
    rows[1] = dataclasses.replace(rows[1], error=f"decode: {MARKUP}")
    summary = summarize(rows)
    print_summary(summary)
    print_quality({c["codec"]: c["by_language"]["[/x]"]["metrics"] for c in summary["codecs"]},
                  title="quality, [/x] only")
    out = capsys.readouterr().out
    assert f"opus:6k utt_b: decode: {MARKUP}" in out
    assert "quality, [/x] only: mean of ok values" in out


def test_leaderboard_by_language_prints_a_markup_like_language(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, "r", CODECS[:2], languages={"utt_a": "[/x]", "utt_b": "[bold]x[/bold]"})
    assert cli("leaderboard", run, "--by", "language") == 0
    out = capsys.readouterr().out
    assert "language [/x]" in out and "language [bold]x[/bold]" in out
    table = tmp_path / "board.txt"
    assert cli("leaderboard", run, "--by", "language", "--out", table) == 0
    assert "language [/x]" in table.read_text()


def test_compare_prints_a_markup_like_provenance_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_run(tmp_path, "a", CODECS[:1], cpu=f"cpu {MARKUP}")
    b = make_run(tmp_path, "b", CODECS[:1], cpu="other cpu", seed=1)
    assert cli("compare", a, b, "--resamples", "100") == 0
    assert f"cpu {MARKUP}" in capsys.readouterr().out


def test_a_user_pin_from_a_markup_like_url_is_pinned_and_audited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"not a real checkpoint")
    assert cli("registry", "pin", "encodec", "--file", weights, "--url", "https://x/[/bad]") == 0
    assert "(from https://x/[/bad])" in capsys.readouterr().out
    assert cli("registry", "audit") == 0
    assert "weights.bin" in (out := capsys.readouterr().out) and "from https://x/[/bad]); pinned" in out


def test_codec_options_show_their_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("codecs") == 0
    assert "vbr=on [on|constrained|off]" in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_whose_manifest_language_looks_like_markup_prints_every_table(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for i, clip in enumerate(SHORT_CLIPS):
        shutil.copy(need_mirror() / clip, folder / f"clip{i}.wav")
    (folder / "manifest.json").write_text(json.dumps([{"file": "clip0.wav", "language": "[/x]"},
                                                      {"file": "clip1.wav", "language": "en"}]))
    out = tmp_path / "run"
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "si_sdr", "--workers", "1",
                        "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "quality, [/x] only (1 utterance)" in result.stdout and "run directory:" in result.stdout
    board = codecarena("leaderboard", out, "--by", "language")
    assert board.returncode == 0, board.stderr
    assert "language [/x]" in board.stdout
