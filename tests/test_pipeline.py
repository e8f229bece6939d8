"""The row pipeline end to end, through the real command line and fresh worker processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from conftest import codecarena, need_mirror

from codecarena.results.record import parse_run_record
from codecarena.results.schema import SchemaError

pytestmark = pytest.mark.slow


def rows_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def input_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirror = need_mirror()
    folder = tmp_path_factory.mktemp("unseen")
    for i, name in enumerate(("en_ljspeech_LJ002-0020.wav", "en_ljspeech_LJ002-0035.wav",
                              "en_librispeech_1089-134686-0001.wav")):
        shutil.copy(mirror / name, folder / f"utt{i}.wav")
    out = tmp_path_factory.mktemp("run") / "r"
    result = codecarena("run", "--input", folder, "--codec", "codec2:3200", "--codec", "opus:12k",
                        "--codec", "pcm:16", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_every_row_replays_identically_with_exact_length_and_guard(input_run: Path) -> None:
    rows = rows_of(input_run)
    assert len(rows) == 9
    for row in rows:
        assert row["status"] == "ok", row["error"]
        assert row["replay_identical"] is True
        assert row["decoded_samples"] == row["num_samples"]
        info = sf.info(input_run / row["decoded"])
        assert (info.frames, info.samplerate) == (row["num_samples"], 16000)
        assert [s["name"] for s in row["stages"]] == ["encode", "decode", "replay"]
        for stage in row["stages"]:
            assert stage["guard"]["limit_bytes"] > 0 and stage["guard"]["polls"] >= 1
            assert stage["guard"]["fired"] is False
            assert 0 < stage["peak_rss_bytes"] <= stage["guard"]["limit_bytes"]
            assert stage["cold_rtf"] > 0 and stage["warm_rtf"] > 0


def test_codec2_3200_aggregates_to_3200_bps_up_to_partial_frames(input_run: Path) -> None:
    rows = [r for r in rows_of(input_run) if r["codec"] == "codec2:3200"]
    assert len(rows) == 3
    bits = seconds = 0.0
    for row in rows:
        # Independent of the adapter: 16 -> 8 kHz halves the samples; 160-sample frames of 64 bits.
        frames = math.ceil(math.ceil(row["num_samples"] / 2) / 160)
        assert row["representation_bits"] == frames * 64
        bits += row["representation_bits"]
        seconds += row["num_samples"] / 16000
    summary = json.loads((input_run / "summary.json").read_text())
    codec2 = next(c for c in summary["codecs"] if c["codec"] == "codec2:3200")
    assert codec2["representation_bps"] == pytest.approx(bits / seconds, rel=1e-12)
    # At most one partial frame (20 ms = 64 bits) per utterance on top of 3200 bps.
    assert 3200 <= codec2["representation_bps"] <= 3200 + 64 * len(rows) / seconds


def test_pcm_control_is_bit_exact_at_256_kbps(input_run: Path) -> None:
    rows = [r for r in rows_of(input_run) if r["codec"] == "pcm:16"]
    assert len(rows) == 3
    for row in rows:
        reference, _ = sf.read(input_run / row["reference"], dtype="int16")
        decoded, _ = sf.read(input_run / row["decoded"], dtype="int16")
        assert np.array_equal(reference, decoded)
        assert row["representation_bps"] == 256000.0
        assert row["payload_bps"] > 256000.0  # the container header is counted, never hidden


def test_audit_passes_on_a_fresh_run_including_fresh_replay(input_run: Path) -> None:
    result = codecarena("audit", input_run, "--replay")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "audit passed" in result.stdout


def _tampered(input_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "tampered"
    shutil.copytree(input_run, copy)
    return copy


def _edit_first_row(run_dir: Path, edit) -> None:  # type: ignore[no-untyped-def]
    rows = rows_of(run_dir)
    edit(rows[0])
    (run_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _audit_fails(run_dir: Path, *needles: str) -> None:
    result = codecarena("audit", run_dir)
    assert result.returncode == 1, result.stdout
    for needle in needles:
        assert needle in result.stdout, result.stdout


def test_audit_catches_an_edited_number(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)
    _edit_first_row(run, lambda r: r.update(representation_bits=r["representation_bits"] + 8))
    _audit_fails(run, "representation bits")


def test_audit_catches_an_edited_summary(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    summary["codecs"][0]["representation_bps"] *= 0.9
    (run / "summary.json").write_text(json.dumps(summary))
    _audit_fails(run, "summary.codecs[0].representation_bps")


def test_audit_catches_swapped_payloads(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)
    rows = [r for r in rows_of(run) if r["codec"] == "opus:12k"]
    a, b = run / rows[0]["payload"], run / rows[1]["payload"]
    tmp = a.with_suffix(".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    _audit_fails(run, "sha256 differs", rows[0]["utterance"], rows[1]["utterance"])


def test_audit_catches_a_deleted_decoded_file(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)
    row = rows_of(run)[0]
    (run / row["decoded"]).unlink()
    _audit_fails(run, "is missing", row["utterance"])


def test_audit_catches_a_peak_over_its_limit(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)

    def over(row: dict) -> None:
        stage = row["stages"][1]
        stage["peak_rss_bytes"] = stage["guard"]["limit_bytes"] + 1

    _edit_first_row(run, over)
    _audit_fails(run, "over its limit")


def test_audit_catches_a_missing_guard_record(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)
    _edit_first_row(run, lambda r: r["stages"][0].pop("guard"))
    _audit_fails(run, "guard")


def test_audit_catches_a_missing_row(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)
    lines = (run / "rows.jsonl").read_text().splitlines(keepends=True)
    (run / "rows.jsonl").write_text("".join(lines[1:]))
    _audit_fails(run, "planned row is missing")


def test_memory_guard_fails_the_row_and_says_why(speech_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "guarded"
    # A new interpreter with numpy and PyAV loaded needs far more than 20 MiB. (A child forked from a
    # template may not: the pages it shares with the template are left out of its peak.)
    result = codecarena("run", "--input", speech_dir, "--codec", "opus:12k", "--out", out,
                        "--memory-limit", "20M", "--guard-poll", "0.02", "--fresh-interpreter")
    assert result.returncode == 1
    rows = rows_of(out)
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "failed"
        assert "memory guard killed the encode worker" in row["error"]
        stage = row["stages"][0]
        assert stage["guard"]["fired"] is True and stage["exit_status"] == -signal.SIGKILL
        assert row["payload"] is None
    # Output to a pipe: the wait before the first row is announced, and each failure's reason is logged.
    assert result.stdout.startswith("preparing: loading models and references") or "\npreparing: " in result.stdout
    failed_lines = [line for line in result.stdout.splitlines() if line.startswith("row ")]
    assert len(failed_lines) == 2
    assert all(" failed; elapsed " in line and "memory guard killed the encode worker" in line for line in failed_lines)
    assert codecarena("audit", out).returncode == 0
    # Limits are not the plan: the same run, given room, completes in the same directory.
    result = codecarena("run", "--input", speech_dir, "--codec", "opus:12k", "--out", out, "--memory-limit", "2G")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [row["status"] for row in rows_of(out)] == ["ok", "ok"]
    assert {row["limits"]["memory_limit_bytes"] for row in rows_of(out)} == {2 << 30}
    assert codecarena("audit", out).returncode == 0


def test_resume_after_sigkill_loses_no_written_row(speech_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "resumable"
    args = ["run", "--input", str(speech_dir), "--codec", "pcm:16", "--codec", "codec2:3200",
            "--codec", "opus:12k", "--codec", "codec2:1200", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "codecarena", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    rows_file = out / "rows.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if rows_file.exists() and len(rows_file.read_bytes().splitlines()) >= 3:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = rows_file.read_text().splitlines()
    assert 3 <= len(before) < 8, "the run was not interrupted part-way"
    assert codecarena("audit", out).returncode == 1  # unfinished runs never audit clean

    result = codecarena(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    after = rows_file.read_text().splitlines()
    assert len(after) == 8
    # Complete rows written before the kill are kept byte for byte, not recomputed.
    complete_before = [line for line in before if json.loads(line)["status"] == "ok"]
    assert complete_before and all(line in after for line in complete_before)
    assert "resumed" in result.stdout
    assert codecarena("audit", out).returncode == 0


def test_rerun_into_a_directory_with_another_plan_is_refused(input_run: Path, tmp_path: Path) -> None:
    run = _tampered(input_run, tmp_path)
    result = codecarena("run", "--input", tmp_path, "--codec", "pcm:16", "--out", run)
    assert result.returncode == 2
    assert "different plan" in result.stderr


def test_a_codec_is_added_to_an_existing_run_and_the_whole_run_audits(speech_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = codecarena("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "stoi", "--out", out)
    assert first.returncode == 0, first.stdout + first.stderr
    kept = {r["utterance"]: r["decoded_sha256"] for r in rows_of(out)}
    first_record = json.loads((out / "run.json").read_text())
    assert first_record["history"] == []
    # A version 3 record (no history, no plan pins) still reads, as not recorded; a current one must have them.
    v3 = {k: v for k, v in first_record.items() if k != "history"}
    later = ("references", "user_pins", "user_codecs", "device", "metric_device")  # plan keys of versions 5 to 7
    unpinned = {k: v for k, v in v3["plan"].items() if k not in later}
    assert parse_run_record({**v3, "version": 3, "plan": unpinned}).history is None
    with pytest.raises(SchemaError, match="missing keys \\['history'\\]"):
        parse_run_record(v3)
    with pytest.raises(SchemaError, match="unexpected keys \\['references', 'user_pins', 'user_codecs', 'device', "
                                          "'metric_device'\\]"):
        parse_run_record({**first_record, "version": 3})
    plain = codecarena("run", "--input", speech_dir, "--codec", "codec2:3200", "--metrics", "stoi", "--out", out)
    assert plain.returncode == 2 and "different plan (codecs, runtimes) (to add codec configurations to it, rerun " \
                                     "with --add)" in plain.stderr
    other = codecarena("run", "--input", speech_dir, "--codec", "codec2:3200", "--metrics", "pesq_wb", "--out", out,
                       "--add")
    assert other.returncode == 2 and "--add adds codec configurations only, but the run differs in metrics" in other.stderr
    assert other.stdout == ""  # issue 28: it printed "adding 1 codec configurations" before refusing
    added = codecarena("run", "--input", speech_dir, "--codec", "codec2:3200", "--metrics", "stoi", "--out", out,
                       "--add")
    assert added.returncode == 0, added.stdout + added.stderr
    assert "adding 1 codec configuration (codec2:3200) to the 1 of the run" in added.stdout
    # Resumed rows are read back first and give no pace: the time left waits for a computed row.
    logged = [line for line in added.stdout.splitlines() if line.startswith("row ")]
    assert [("resumed" in line, "eta unknown yet" in line) for line in logged[:len(kept)]] == [(True, True)] * len(kept)
    assert logged[-1].startswith(f"row {2 * len(kept)}/{2 * len(kept)} codec2:3200") and logged[-1].endswith("eta 0 s")
    rows = rows_of(out)
    assert sorted({r["codec"] for r in rows}) == ["codec2:3200", "pcm:16"] and len(rows) == 2 * len(kept)
    assert {r["utterance"]: r["decoded_sha256"] for r in rows if r["codec"] == "pcm:16"} == kept  # not recomputed
    record = json.loads((out / "run.json").read_text())
    assert [c["codec"] for c in record["plan"]["codecs"]] == ["pcm:16", "codec2:3200"]
    # The first invocation is kept in the history; the refused ones above never rewrote run.json.
    assert record["history"] == [{"command": first_record["command"], "created_at": first_record["created_at"],
                                  "plan_sha256": first_record["plan_sha256"], "codecs": ["pcm:16"],
                                  "user_codecs": []}]
    assert "codec2:3200" not in first_record["command"] and "--add" in record["command"]
    assert record["plan_sha256"] != first_record["plan_sha256"]
    assert codecarena("audit", out).returncode == 0
    # Issue 28: the command that made the run names only some of its codecs now; the refusal says so
    # and how to resume it, and --add with nothing new resumes the whole run.
    original = ("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "stoi", "--out", out)
    again = codecarena(*original)
    assert again.returncode == 2 and again.stdout == ""
    assert "it has the codec configurations pcm:16, codec2:3200 and this command names only some of them; to " \
           "resume the whole run, rerun this command with --add" in again.stderr
    resumed = codecarena(*original, "--add")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "no codec configuration to add: resuming the 2 of the run" in resumed.stdout
    assert f"{len(rows)} complete rows resumed" in resumed.stdout and "0 computed now" in resumed.stdout
    assert codecarena("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "stoi", "--add").returncode == 2


def test_reference_at_another_rate_is_resampled_and_recorded(tmp_path: Path) -> None:
    need_mirror()
    from conftest import MIRROR

    audio, rate = sf.read(MIRROR / "en_ljspeech_LJ002-0020.wav", dtype="float64")
    folder = tmp_path / "in"
    folder.mkdir()
    sf.write(folder / "at48k.wav", soxr.resample(audio, rate, 48000), 48000, subtype="PCM_16")
    out = tmp_path / "out"
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = rows_of(out)
    assert row["reference_resampled_from"] == 48000
    assert row["reference"].startswith("references/")
    assert sf.info(out / row["reference"]).samplerate == 16000
