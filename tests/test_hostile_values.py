"""Issue 28, defects 9 and 10: what a run's files and the command line hold is printed as written
(never read as Rich markup), and a hostile `rows.jsonl` line (nesting or numbers no reader survives)
is refused as "not a valid row", named by its line, by every command that reads it."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import signal
from pathlib import Path

import pytest
from conftest import SHORT_CLIPS, codecarena, need_mirror
from test_report import CODECS, make_run

from codecarena.cli import main
from codecarena.console import make_console, print_quality, print_summary
from codecarena.files import MAX_JSON_DEPTH, JSONFileError, parse_json, read_json
from codecarena.metrics.reference_results import ReferenceResultError, parse_entry
from codecarena.results.run import Run
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
    rows = Run.open(run).rows
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


def test_a_manifest_language_that_looks_like_markup_is_refused_as_written(tmp_path: Path) -> None:
    """A manifest's language names a language (docs/security.md; #36): `[/x]` is refused before any
    row, printed as written. (Runs holding such a language, written before, print it as written: above.)"""
    folder = tmp_path / "in"
    folder.mkdir()
    for i, clip in enumerate(SHORT_CLIPS):
        shutil.copy(need_mirror() / clip, folder / f"clip{i}.wav")
    (folder / "manifest.json").write_text(json.dumps([{"file": "clip0.wav", "language": "[/x]"},
                                                      {"file": "clip1.wav", "language": "en"}]))
    out = tmp_path / "run"
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "si_sdr", "--workers", "1",
                        "--out", out)
    assert result.returncode == 2 and not out.exists(), result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "manifest.json: entry 0: language '[/x]' is not a language tag codecarena knows" in line


# ------------------------------------------------------------------------------ 10: hostile rows

DEEP = "[" * 50_000 + "]" * 50_000
HUGE = "9" * 4000


def _hostile(line: str, kind: str) -> str:
    """Line `line` of rows.jsonl with a 50,000-deep array in `codec_facts`, or a 4,000-digit integer
    as `num_samples` or as an ok metric's value (where it overflows every conversion to float)."""
    row = json.loads(line)
    placeholder = "HOSTILE"
    if kind == "deep":
        row["codec_facts"]["x"] = placeholder
    elif kind == "huge num_samples":
        row["num_samples"] = placeholder
    else:
        next(m for m in row["metrics"].values() if m["status"] == "ok")["value"] = placeholder
    return json.dumps(row, sort_keys=True).replace(f'"{placeholder}"', DEEP if kind == "deep" else HUGE)


HOSTILE = ["deep", "huge num_samples", "huge metric value"]


def _hostile_run(tmp_path: Path, kind: str, name: str = "r") -> Path:
    run = make_run(tmp_path, name, CODECS[:1])
    lines = (run / "rows.jsonl").read_text().splitlines()
    lines[1] = _hostile(lines[1], kind)
    (run / "rows.jsonl").write_text("".join(line + "\n" for line in lines))
    return run


def _names_line_2(text: str, run: Path) -> None:
    assert f"{run / 'rows.jsonl'}: line 2 is not a valid row (" in text, text
    assert "Traceback" not in text


@pytest.mark.parametrize("kind", HOSTILE)
def test_audit_names_a_hostile_row(tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = _hostile_run(tmp_path, kind)
    assert cli("audit", run) == 1
    captured = capsys.readouterr()
    _names_line_2(captured.out, run)
    assert "audit failed" in captured.out


@pytest.mark.parametrize("command", ["leaderboard", "report", "compare"])
@pytest.mark.parametrize("kind", HOSTILE)
def test_readers_refuse_a_hostile_row_in_one_line(tmp_path: Path, kind: str, command: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = _hostile_run(tmp_path, kind)
    argv = {"leaderboard": [run], "report": [run, "--out", tmp_path / "report.html", "--audio", "none"],
            "compare": [run, make_run(tmp_path, "other", CODECS[:1], seed=1)]}[command]
    assert cli(command, *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("codecarena: error: ") and err.count("\n") == 1
    _names_line_2(err, run)
    assert not (tmp_path / "report.html").exists()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("in")
    for i, clip in enumerate(SHORT_CLIPS):
        shutil.copy(need_mirror() / clip, folder / f"clip{i}.wav")
    out = tmp_path_factory.mktemp("resume") / "run"
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--workers", "1",
                        "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return folder, out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["deep", "huge num_samples"])
def test_a_resume_refuses_a_hostile_row_and_keeps_every_row(finished_run: tuple[Path, Path], tmp_path: Path,
                                                           kind: str) -> None:
    folder, finished = finished_run
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    lines = (run / "rows.jsonl").read_text().splitlines()
    lines[1] = _hostile(lines[1], kind)
    before = "".join(line + "\n" for line in lines)
    (run / "rows.jsonl").write_text(before)
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--workers", "1",
                        "--out", run)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("codecarena: error: ") and result.stderr.count("\n") == 1
    _names_line_2(result.stderr, run)
    assert (run / "rows.jsonl").read_text() == before


@pytest.mark.parametrize("name", ["run.json", "summary.json"])
def test_a_hostile_run_record_or_summary_is_refused_naming_the_file(tmp_path: Path, name: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, "r", CODECS[:1])
    (run / name).write_text((run / name).read_text().replace("{", f'{{"x": {DEEP}, ', 1))
    assert cli("leaderboard", run) == 2
    assert capsys.readouterr().err == (f"codecarena: error: {run / name}: not valid JSON "
                                       f"(nested deeper than {MAX_JSON_DEPTH} levels)\n")


def test_parse_json_bounds_what_a_reader_meets(tmp_path: Path) -> None:
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    deepest: list = []  # type: ignore[type-arg]
    for _ in range(MAX_JSON_DEPTH - 1):
        deepest = [deepest]
    assert parse_json(nested) == deepest
    assert parse_json('{"n": 9007199254740992, "m": -9007199254740992, "x": 1e100}')["n"] == 2**53
    for text, reason in [("[" + nested + "]", f"nested deeper than {MAX_JSON_DEPTH} levels"),
                         (DEEP, f"nested deeper than {MAX_JSON_DEPTH} levels"),
                         ("9007199254740993", "integer 9007199254740993 is beyond +-2**53"),
                         (HUGE, "integer 999999999999... (4000 digits) is beyond +-2**53"),
                         ("-1e101", "number -1e101 is beyond"), ("1e400", "number 1e400 is beyond"),
                         ("NaN", "NaN is not a number"), ("[-Infinity]", "-Infinity is not a number")]:
        with pytest.raises(ValueError, match=f"^{re.escape(reason)}"):
            parse_json(text)
    (tmp_path / "run.json").write_text(f'{{"version": {HUGE}}}')
    with pytest.raises(JSONFileError, match=r"run\.json: not valid JSON \(integer 9+\.\.\. \(4000 digits\)"):
        read_json(tmp_path / "run.json")


def test_metric_values_whose_sum_overflows_are_not_valid_rows(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, "r", CODECS[:1])
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    for row in rows[1:]:
        row["metrics"]["stoi"]["value"] = 1e308  # finite, but two of them overflow the sum of a mean
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli("audit", run) == 1
    _names_line_2(capsys.readouterr().out, run)


def test_a_hostile_reference_result_is_an_error_naming_its_file(tmp_path: Path) -> None:
    path = tmp_path / "reference_results" / ("a" * 64) / f"asr_transcript-{'b' * 64}.json"
    path.parent.mkdir(parents=True)
    path.write_text(DEEP)
    with pytest.raises(ReferenceResultError, match=f"^{re.escape(str(path))}: not a readable JSON file"):
        parse_entry(path)


def test_a_hostile_manifest_in_an_input_folder_is_refused_naming_it(tmp_path: Path) -> None:
    """An input folder's manifest.json goes through the same bounded parser as the run's own files:
    a 50,000-deep array used to crash `run` with a RecursionError."""
    from codecarena.datasets import DatasetError
    from codecarena.input_sets import load_input_dir

    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(need_mirror() / SHORT_CLIPS[0], folder / "a.wav")
    (folder / "manifest.json").write_text("[" * 50_000 + "]" * 50_000)
    with pytest.raises(DatasetError, match=r"manifest\.json: not valid JSON \(nested deeper than"):
        load_input_dir(folder)
