"""The command line's contract for bad input: one line naming the file and the problem, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import soundfile as sf

from conftest import SHORT_CLIPS, codecarena, need_mirror


def _one_line_error(result, *needles: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("codecarena: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_codecs_lists_every_family_with_options() -> None:
    result = codecarena("codecs", check=True)
    for text in ("opus", "codec2", "pcm", "700C", "vbr=on", "complexity=10", "frame_ms=20.0", "application=voip"):
        assert text in result.stdout


def test_unknown_codec_is_one_line(tmp_path: Path) -> None:
    _one_line_error(codecarena("run", "--codec", "opus:6k,vbr=maybe", "--out", tmp_path / "r"),
                    "opus:6k,vbr=maybe", "vbr")


def test_damaged_wavs_in_an_input_folder_are_listed_and_skipped(tmp_path: Path) -> None:
    mirror = need_mirror()
    folder = tmp_path / "in"
    folder.mkdir()
    data = (mirror / SHORT_CLIPS[0]).read_bytes()
    (folder / "cut.wav").write_bytes(data[: len(data) // 2])
    (folder / "noise.wav").write_bytes(bytes(range(256)) * 16)
    shutil.copy(mirror / SHORT_CLIPS[1], folder / "good.wav")
    out = tmp_path / "r"
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 files or folders of the input are skipped, each with why (listed in run.json as skipped_inputs)" \
        in result.stdout
    assert "  cut.wav: truncated: data chunk declares" in result.stdout
    assert "  noise.wav: unreadable audio (libsndfile:" in result.stdout
    assert "set input:in (1 utterance," in result.stdout
    skipped = json.loads((out / "run.json").read_text())["skipped_inputs"]
    assert [s["file"] for s in skipped] == ["cut.wav", "noise.wav"]
    assert skipped[0]["reason"].startswith("truncated: data chunk declares")
    assert skipped[1]["reason"].startswith("unreadable audio (libsndfile:")
    assert codecarena("audit", out).returncode == 0


def test_a_damaged_wav_given_alone_is_an_error_naming_it(tmp_path: Path) -> None:
    mirror = need_mirror()
    data = (mirror / SHORT_CLIPS[0]).read_bytes()
    (tmp_path / "cut.wav").write_bytes(data[: len(data) // 2])
    result = codecarena("run", "--input", tmp_path / "cut.wav", "--codec", "pcm:16", "--out", tmp_path / "r")
    _one_line_error(result, "cut.wav")
    assert not (tmp_path / "r").exists()


def test_tampered_mirror_file_names_the_file(tmp_path: Path) -> None:
    mirror = need_mirror()
    copy = tmp_path / "mirror"
    shutil.copytree(mirror, copy, ignore=shutil.ignore_patterns("original"))
    victim = copy / "zh_aishell1_BAC009S0002W0123.wav"
    data = bytearray(victim.read_bytes())
    data[1000] ^= 1
    victim.chmod(0o644)
    victim.write_bytes(bytes(data))
    result = codecarena("run", "--data-dir", copy, "--codec", "pcm:16", "--out", tmp_path / "r")
    _one_line_error(result, "zh_aishell1_BAC009S0002W0123.wav", "sha256")


def test_eta_counts_only_rows_computed_in_this_session() -> None:
    from codecarena.commands.run_view import eta_s, eta_text

    # `run --add` over 41 resumed rows: 20 s spent, 2 rows computed at 10 s each, 8 left -> 80 s,
    # whatever the resumed rows were (counting them would say 20/43*8, about 4 s).
    assert eta_s(20.0, computed=2, remaining=8) == pytest.approx(80.0)
    assert eta_s(3.0, computed=0, remaining=8) is None  # only resumed rows so far: no pace yet
    assert eta_s(20.0, computed=0, remaining=0) == 0.0
    assert eta_text(None) == "unknown yet" and eta_text(79.6) == "80 s"


def test_a_failed_row_is_one_log_line_with_its_error() -> None:
    from codecarena.commands.run_view import one_line

    assert one_line("encode failed:\n  Traceback\tline 3") == "encode failed: Traceback line 3"
    long = one_line("x" * 500)
    assert len(long) == 200 and long.endswith("...")
    assert one_line("") == "no error text"


def test_audit_of_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    _one_line_error(codecarena("audit", tmp_path / "nope"), "nope")


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign"])
def test_decode_worker_rejects_a_bad_payload_with_its_path(tmp_path: Path, damage: str) -> None:
    """A fresh decoder handed a damaged payload fails with a one-line reason naming the file."""
    import subprocess
    import sys

    from codecarena.runtime.protocol import Job, read_report, write_job

    mirror = need_mirror()
    audio = tmp_path / "ref.wav"
    shutil.copy(mirror / SHORT_CLIPS[0], audio)
    payload = tmp_path / "p.ccap"
    enc = Job.encode(audio, payload, tmp_path / "e.json", "codec2:3200")
    write_job(tmp_path / "e.job.json", enc)
    subprocess.run([sys.executable, "-m", "codecarena.worker", str(tmp_path / "e.job.json")], check=True,
                   capture_output=True)
    data = bytearray(payload.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 40]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x10
    else:
        data = bytearray(audio.read_bytes())
    payload.write_bytes(bytes(data))
    dec = Job.decode(payload, tmp_path / "d.wav", tmp_path / "d.json")
    write_job(tmp_path / "d.job.json", dec)
    proc = subprocess.run([sys.executable, "-m", "codecarena.worker", str(tmp_path / "d.job.json")],
                          capture_output=True)
    assert proc.returncode == 2
    report = read_report(tmp_path / "d.json")
    assert not report.ok and "\n" not in report.error and str(payload) in report.error
    expected = {"truncate": "truncated", "flip": "corrupted", "foreign": "not a codecarena payload"}[damage]
    assert expected in report.error
    assert not (tmp_path / "d.wav").exists()


def test_wrong_sample_rate_reference_is_refused_by_the_encoder(tmp_path: Path) -> None:
    import subprocess
    import sys

    import numpy as np

    from codecarena.runtime.protocol import Job, read_report, write_job

    audio = tmp_path / "ref8k.wav"
    sf.write(audio, np.zeros(8000, dtype=np.int16), 8000, subtype="PCM_16")
    job = Job.encode(audio, tmp_path / "p.ccap", tmp_path / "e.json", "pcm:16")
    write_job(tmp_path / "e.job.json", job)
    proc = subprocess.run([sys.executable, "-m", "codecarena.worker", str(tmp_path / "e.job.json")],
                          capture_output=True)
    assert proc.returncode == 2
    report = read_report(tmp_path / "e.json")
    assert "ref8k.wav" in report.error and "8000 Hz" in report.error
    assert not (tmp_path / "p.ccap").exists()


def test_a_full_disk_outside_a_run_names_the_destination_and_no_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    from codecarena import cli
    from codecarena.commands import COMMANDS

    def full(args: object) -> int:
        # A copy onto a full disk: the error names the source first and the destination second.
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "usb" / "w.pth"), None,
                      str(tmp_path / "cache" / "w.pth.part"))

    monkeypatch.setattr(COMMANDS["fetch"], "run", full)
    with pytest.raises(SystemExit) as exited:
        cli.main(["fetch", "dac"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"codecarena: error: {tmp_path / 'cache' / 'w.pth.part'}: no space left on device (")
    assert line.endswith("free some space there and rerun the same command") and "resume" not in line


@pytest.mark.parametrize("out, needle", [
    ("", "--out '': no run directory named"),
    ("taken", "--out taken: exists and is not a directory"),
    ("taken/run", "--out taken/run: {tmp}/taken is not a directory, so the run directory cannot be made there"),
    ("/proc/codecarena-run", "/proc/codecarena-run: "),
])
def test_an_out_that_cannot_be_a_run_directory_is_one_line_before_any_work(
        speech_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        out: str, needle: str) -> None:
    # Issue 28: a file or an unwritable path gave a traceback; '' ran in the current directory.
    from codecarena import cli

    (tmp_path / "taken").write_text("someone's notes\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--input", str(speech_dir), "--codec", "pcm:16", "--metrics", "none", "--workers", "1",
                  "--out", out])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("codecarena: error: ") and needle.format(tmp=tmp_path) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["speech", "taken"]
    assert (tmp_path / "taken").read_text() == "someone's notes\n"


@pytest.mark.slow
def test_a_run_on_one_audio_file_audits(speech_dir: Path, tmp_path: Path) -> None:
    # Issue 30: `--input FILE` was refused with "input folder does not exist" although the file exists.
    out = tmp_path / "r"
    result = codecarena("run", "--input", speech_dir / "clip0.wav", "--codec", "pcm:16", "--metrics", "none",
                        "--workers", "1", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "set input:clip0.wav (1 utterance, input " in result.stdout and "1 codec configuration;" in result.stdout
    assert [json.loads(line)["utterance"] for line in (out / "rows.jsonl").read_text().splitlines()] == ["clip0"]
    assert codecarena("audit", out).returncode == 0
