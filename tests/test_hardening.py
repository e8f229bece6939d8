"""Hostile input to the run pipeline: ids that are paths, run directories with escaping links, audio
files that libsndfile reads "fine" although they are not what they claim, bad limits, and rows the
audit must reject rather than crash on. Each test names the defect of issue 15 it guards against."""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from codecarena import datasets
from codecarena.audio_input import AudioInputError, check_audio_file
from codecarena.corpora import load_corpus
from codecarena.datasets import DatasetError
from codecarena.input_sets import load_input_dir
from codecarena.results.audit import audit
from codecarena.rundir import RunDir, UnsafePathError, check_id
from codecarena.runtime.guard import run_guarded
from codecarena.runtime.limits import LimitError, StageLimits, parse_limits
from conftest import codecarena, rows_of


def _speech(n: int = 16000, rate: int = 16000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.2 * rng.standard_normal(n))).astype(np.float32)


def _wav(path: Path, n: int = 16000, rate: int = 16000, subtype: str = "PCM_16") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, _speech(n, rate), rate, subtype=subtype)
    return path


# ------------------------------------------------------------------ 1: ids are file names in the run


@pytest.mark.parametrize("bad", ["../../escape", "/tmp/abs", ".hidden", "a/b", "", "x" * 129, "tab\tid", "é"])
def test_unsafe_ids_are_refused(bad: str) -> None:
    with pytest.raises(UnsafePathError, match="manifest.json: utterance id"):
        check_id(bad, "manifest.json")


def test_run_dir_paths_never_leave_the_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    (tmp_path / "run").mkdir()
    assert run.payload("opus_12k", "u1") == run.root / "payloads" / "opus_12k" / "u1.ccap"
    for component in ("..", "/etc", "a/../../b", ""):
        with pytest.raises(UnsafePathError):
            run.path("payloads", component)
    for stored in ("/etc/passwd", "../x.wav", "payloads/../../x.wav", "decoded\\..\\x"):
        with pytest.raises(UnsafePathError, match="not inside the run directory"):
            run.resolve(stored)
    # A link inside the run that points out of it is caught after resolving it.
    (tmp_path / "outside").mkdir()
    (run.root / "payloads").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafePathError, match="outside the run directory"):
        run.payload("opus_12k", "u1")
    with pytest.raises(UnsafePathError, match="outside the run directory"):
        run.resolve("payloads/opus_12k/u1.ccap")
    with pytest.raises(UnsafePathError):
        run.relative(tmp_path / "outside" / "x")


def test_input_manifest_id_that_climbs_is_refused_naming_file_and_id(tmp_path: Path) -> None:
    _wav(tmp_path / "in" / "a.wav")
    (tmp_path / "in" / "manifest.json").write_text(json.dumps([{"file": "a.wav", "id": "../../victim"}]))
    with pytest.raises(DatasetError, match=r"manifest\.json \(entry for a\.wav\): utterance id '\.\./\.\./victim'"):
        load_input_dir(tmp_path / "in")


def test_file_name_that_makes_an_unsafe_id_is_skipped_with_the_fix(tmp_path: Path) -> None:
    _wav(tmp_path / "in" / "my clip.wav")
    _wav(tmp_path / "in" / "good.wav")
    s = load_input_dir(tmp_path / "in")
    assert [u.id for u in s.utterances] == ["good"]
    assert s.skipped == (("my clip.wav", "utterance id 'my clip' is not a safe id (letters, digits, '.', '_' and '-', "
                                         "not starting with a dot, at most 128 characters); rename the file or give "
                                         "it an 'id' in manifest.json"),)
    # Given a safe id in manifest.json, the file is read under it.
    (tmp_path / "in" / "manifest.json").write_text(json.dumps([{"file": "my clip.wav", "id": "my_clip"}]))
    s = load_input_dir(tmp_path / "in")
    assert [u.id for u in s.utterances] == ["good", "my_clip"] and s.skipped == ()


def test_kaldi_key_that_is_a_path_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "kaldi"
    _wav(root / "a.wav")
    (root / "wav.scp").write_text(f"/tmp/victim {root / 'a.wav'}\n")
    (root / "text").write_text("/tmp/victim HELLO\n")
    with pytest.raises(DatasetError, match=r"wav\.scp: utterance id '/tmp/victim' is not a safe id"):
        load_corpus(root)


def test_smoke_manifest_with_an_unsafe_id_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.loads(datasets._smoke_manifest_bytes())
    doc["utterances"][0]["id"] = "../escape"
    monkeypatch.setattr(datasets, "_smoke_manifest_bytes", lambda: json.dumps(doc).encode())
    with pytest.raises(DatasetError, match=r"smoke\.json: utterances\[0\]\.id: utterance id '\.\./escape'"):
        datasets.smoke_manifest()


def _small_run(tmp_path: Path, speech_dir: Path, *extra: str) -> Path:
    out = tmp_path / "run"
    result = codecarena("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "none", "--workers", "1",
                        "--out", out, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_a_link_out_of_the_run_directory_writes_nothing_outside(tmp_path: Path, speech_dir: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    out = tmp_path / "run"
    out.mkdir()
    (out / "decoded").symlink_to(outside)
    result = codecarena("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "none", "--workers", "1",
                        "--out", out)
    # Refused before any row (issue 28 made a link anywhere in the run a refusal, not failed rows).
    assert result.returncode == 2
    assert "'decoded' is a symbolic link" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert (outside / "keep.txt").read_text() == "precious"
    assert not (out / "rows.jsonl").exists()


def test_what_is_not_a_file_where_a_row_writes_fails_the_row_saying_what_to_do(tmp_path: Path) -> None:
    # Issue 28: a directory at a payload's path failed the row on every rerun with IsADirectoryError.
    # It is never deleted (it may hold someone's files); the row fails, saying what to do.
    from codecarena.pipeline.plan import assemble
    from codecarena.pipeline.row import Task, run_row
    from codecarena.references import prepare_reference
    from codecarena.specs import parse_spec

    _wav(tmp_path / "in" / "u0.wav")
    evalset = load_corpus(tmp_path / "in")
    utterance = evalset.utterances[0]
    # No worker may start: the row must fail before one is needed.
    plan = assemble(evalset, (parse_spec("pcm:16"),), tmp_path / "run", StageLimits(1 << 30),
                    python=str(tmp_path / "no-python"))
    spec, run = plan.codecs[0], plan.run
    ref = prepare_reference(utterance, run)
    payload = run.payload(spec.slug, "u0")
    (payload / "notes").mkdir(parents=True)
    (payload / "notes" / "keep.txt").write_text("precious")
    row = run_row(Task(spec, ref, "cold", True, True), plan)
    assert (row.status, row.stages, row.payload) == ("failed", [], None)
    assert row.error == (f"payloads/{spec.slug}/u0.ccap is a directory, where this row writes its payload; move or "
                         "remove it, then rerun the same command to resume")
    assert (payload / "notes" / "keep.txt").read_text() == "precious"
    shutil.rmtree(payload)
    run.decoded(spec.slug, "u0").parent.mkdir(parents=True)
    os.mkfifo(run.decoded(spec.slug, "u0"))
    row = run_row(Task(spec, ref, "cold", True, True), plan)
    assert row.error.startswith(f"decoded/{spec.slug}/u0.wav is not a regular file, where this row writes its "
                                "decoded audio; move or remove it")


def test_rows_store_run_relative_paths_and_the_reference_lives_in_the_run(tmp_path: Path, speech_dir: Path) -> None:
    out = _small_run(tmp_path, speech_dir)
    rows = rows_of(out)
    assert len(rows) == 2  # pcm:16 on the two clips
    for row in rows:
        for key in ("reference", "payload", "decoded"):
            assert not Path(row[key]).is_absolute() and ".." not in Path(row[key]).parts
        assert row["reference"] == f"references/{row['utterance']}.wav"
        assert (out / row["reference"]).read_bytes() == (speech_dir / f"{row['utterance']}.wav").read_bytes()
        assert row["limits"]["stage_timeout_s"] == 600.0
    assert audit(out) == []


def _rewrite(run: Path, edit) -> None:  # type: ignore[no-untyped-def]
    rows = rows_of(run)
    edit(rows)
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("field", ["payload", "decoded", "reference"])
def test_audit_fails_a_row_whose_path_leaves_the_run(tmp_path: Path, speech_dir: Path, field: str) -> None:
    out = _small_run(tmp_path, speech_dir)
    row = rows_of(out)[0]
    # The same bytes outside the run: every hash still matches, only the location is wrong.
    escaped = tmp_path / f"escaped{Path(row[field]).suffix}"
    shutil.copy(out / row[field], escaped)

    def edit(rows: list[dict]) -> None:  # type: ignore[type-arg]
        rows[0][field] = os.path.relpath(escaped, out)

    _rewrite(out, edit)
    problems = audit(out)
    assert any(f"{field} path" in p and "not inside the run directory" in p for p in problems), problems
    _rewrite(out, lambda rows: rows[0].update({field: str(escaped)}))
    assert any(f"{field} path" in p for p in audit(out))


def test_audit_survives_rows_it_can_read_but_not_re_derive(tmp_path: Path, speech_dir: Path) -> None:
    out = _small_run(tmp_path, speech_dir)
    original = (out / "rows.jsonl").read_text()
    edits = [
        lambda r: r.update(num_samples=0), lambda r: r.update(sample_rate=0), lambda r: r.update(duration_s=0.0),
        lambda r: r.update(representation_bits=-1), lambda r: r.update(payload_bytes=0),
        lambda r: r.update(decoded="references"), lambda r: r.update(payload="rows.jsonl"),
        lambda r: r.update(stages=[]), lambda r: r["stages"][0].update(wall_s=1e308),
        lambda r: r.update(metrics={"pesq_wb": {"value": 9.0, "status": "ok", "error": None, "details": {}}}),
    ]
    for edit in edits:
        (out / "rows.jsonl").write_text(original)
        _rewrite(out, lambda rows: edit(rows[0]))  # noqa: B023
        problems = audit(out)
        assert problems and all(isinstance(p, str) for p in problems)
    (out / "rows.jsonl").write_text(original.replace('"duration_s": ', '"duration_s": NaN, "x": ', 1))
    assert "is not a valid row" in audit(out)[0]


# ----------------------------------------- 8, 9, 14, 16: audio that libsndfile reads "fine"


def test_non_finite_samples_are_refused(tmp_path: Path) -> None:
    for value, name in ((np.nan, "nan.wav"), (np.inf, "inf.wav"), (-np.inf, "neginf.wav")):
        audio = _speech()
        audio[100] = value
        sf.write(tmp_path / name, audio, 16000, subtype="FLOAT")
        with pytest.raises(AudioInputError, match=rf"{name}: 1 sample is NaN or infinite"):
            check_audio_file(tmp_path / name)
    with pytest.raises(DatasetError, match=r"inf\.wav: 1 sample is NaN"):
        load_input_dir(tmp_path)


def test_inputs_shorter_than_the_minimum_are_refused(tmp_path: Path) -> None:
    sf.write(tmp_path / "one.wav", np.array([0.1], dtype=np.float32), 48000)
    with pytest.raises(DatasetError, match=r"one\.wav: 1 sample at 48000 Hz is shorter than the 0\.1 s minimum"):
        load_input_dir(tmp_path)


def test_an_implausible_header_rate_is_refused(tmp_path: Path) -> None:
    sf.write(tmp_path / "eight_hz.wav", _speech(16), 8)
    with pytest.raises(AudioInputError, match=r"eight_hz\.wav: sample rate 8 Hz is outside the 8000-384000 Hz"):
        check_audio_file(tmp_path / "eight_hz.wav")


@pytest.mark.parametrize("fmt,subtype", [("MP3", "MPEG_LAYER_III"), ("OGG", "VORBIS")])
def test_compressed_content_named_wav_is_decoded_as_what_it_is_and_says_so(tmp_path: Path, fmt: str,
                                                                            subtype: str) -> None:
    from codecarena.references import prepare_reference
    from codecarena.rundir import RunDir

    disguised = tmp_path / "in" / "speech.wav"
    disguised.parent.mkdir()
    sf.write(disguised, _speech(32000), 16000, format=fmt, subtype=subtype)
    (utt,) = load_input_dir(disguised.parent).utterances
    assert utt.converted and utt.source_format.endswith(f"its content is {fmt}, not the .wav its name says")
    # Never copied as if it were a wav: the run's reference is the decoded audio, written as PCM.
    ref = prepare_reference(utt, RunDir(tmp_path / "run"))
    info = sf.info(str(ref.path))
    assert (info.format, info.subtype, info.samplerate) == ("WAV", "PCM_16", 16000)
    assert ref.sha256 != utt.sha256 and ref.conversions[0].startswith(f"decoded {fmt}")


def _streamed_header(path: Path) -> None:
    """Rewrite the RIFF and data sizes as a recorder does that did not know the length yet."""
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 0xFFFFFFFF)
    pos = data.index(b"data")
    data[pos + 4:pos + 8] = struct.pack("<I", 0xFFFFFFFF)
    path.write_bytes(bytes(data))


def test_a_streamed_wav_header_is_read_as_what_the_file_holds(tmp_path: Path) -> None:
    path = _wav(tmp_path / "streamed.wav", 8000)
    _streamed_header(path)
    facts = check_audio_file(path)
    assert (facts.num_samples, facts.streamed_header) == (8000, True)
    assert check_audio_file(_wav(tmp_path / "plain.wav", 8000)).streamed_header is False


def test_the_same_file_listed_twice_in_a_manifest_is_refused(tmp_path: Path) -> None:
    _wav(tmp_path / "a.wav")
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "a.wav", "transcript": "one"},
                                                        {"file": "a.wav", "transcript": "two"}]))
    with pytest.raises(DatasetError, match=r"manifest\.json: entry 1: 'a\.wav' is already listed by entry 0"):
        load_input_dir(tmp_path)


def test_a_second_transcript_line_for_one_utterance_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "libri" / "84" / "121123"
    _wav(root / "84-121123-0000.wav")
    (root / "84-121123.trans.txt").write_text("84-121123-0000 GO\n84-121123-0000 STOP\n")
    with pytest.raises(DatasetError, match=r"84-121123\.trans\.txt:2: a second transcript for '84-121123-0000'"):
        load_corpus(tmp_path / "libri")


# ------------------------------------------------------------------------------- 15, 19: limits


@pytest.mark.parametrize("option,value", [("--stage-timeout", "-1"), ("--stage-timeout", "nan"),
                                          ("--stage-timeout", "inf"), ("--guard-poll", "nan"),
                                          ("--guard-poll", "0"), ("--memory-limit", "1K")])
def test_bad_limits_are_refused_in_one_line_before_anything_runs(tmp_path: Path, option: str, value: str) -> None:
    result = codecarena("run", "--codec", "pcm:16", "--no-download", "--out", tmp_path / "run", option, value)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"codecarena: error: {option} ") and "expected" in line
    assert not (tmp_path / "run").exists()


def test_limits_parse_in_one_place() -> None:
    assert parse_limits("1G", "0.5", "30") == StageLimits(1 << 30, 0.5, 30.0)
    with pytest.raises(LimitError):
        StageLimits(1 << 30, float("nan"), 30.0)


def test_a_memory_limit_no_worker_could_reach_is_refused() -> None:
    # Issue 28: 99999999999999999999G was accepted, a guard that could never act.
    import psutil

    physical = psutil.virtual_memory().total
    assert parse_limits(str(physical)).memory_limit_bytes == physical
    for text in (str(physical + 1), "99999999999999999999G"):
        with pytest.raises(LimitError, match=rf"--memory-limit '{text}': expected at most this machine's physical"):
            parse_limits(text)
    # A row recorded on a larger machine still parses; a size past any machine does not.
    assert StageLimits(physical * 4).memory_limit_bytes == physical * 4
    with pytest.raises(LimitError, match="at most 1 PiB"):
        StageLimits((1 << 50) + 1)


def test_the_stage_timeout_is_enforced_at_its_deadline_not_at_the_next_poll() -> None:
    # Polling every 5 s used to let a 0.3 s timeout run until the next poll.
    result = run_guarded([sys.executable, "-c", "import time; time.sleep(30)"], limit_bytes=1 << 30,
                         poll_s=5.0, timeout_s=0.3)
    assert result.guard.timed_out is True
    assert result.wall_s < 2.5


def test_audit_checks_stage_wall_time_against_the_timeout(tmp_path: Path, speech_dir: Path) -> None:
    out = _small_run(tmp_path, speech_dir, "--stage-timeout", "30")
    _rewrite(out, lambda rows: rows[0]["stages"][1].update(wall_s=45.0))
    assert any("past its 30 s stage timeout, without being killed" in p for p in audit(out))


def test_limits_are_not_part_of_the_plan(tmp_path: Path, speech_dir: Path) -> None:
    out = _small_run(tmp_path, speech_dir, "--memory-limit", "2G")
    first = (out / "rows.jsonl").read_text()
    result = codecarena("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "none", "--workers", "1",
                        "--out", out, "--memory-limit", "3G", "--stage-timeout", "100")
    assert result.returncode == 0, result.stderr
    assert "resumed" in result.stdout and (out / "rows.jsonl").read_text() == first
    assert "memory_limit_bytes" not in json.loads((out / "run.json").read_text())["plan"]
    assert audit(out) == []


# ----------------------------------------------------------------------------------- 12: full disk


def test_a_full_disk_during_an_append_leaves_rows_jsonl_as_it_was(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.diskspace import DiskFullError
    from codecarena.results import store

    (tmp_path / "rows.jsonl").write_text('{"complete": "row"}\n')
    real_write = os.write

    def half_then_enospc(fd: int, data: bytes) -> int:  # what a nearly full disk does
        if len(data) > 10:
            return real_write(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    row = type("FakeRow", (), {"to_dict": lambda self: {"x": "y" * 100}})()
    with pytest.raises(DiskFullError, match=r"rows\.jsonl: no space left on device \(.* free, about 0\.0 MiB needed\)"):
        store.append_row(RunDir(tmp_path), row)  # type: ignore[arg-type]
    assert (tmp_path / "rows.jsonl").read_text() == '{"complete": "row"}\n'


def test_a_full_disk_during_an_atomic_write_removes_the_temporary_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.diskspace import DiskFullError
    from codecarena.files import write_json

    target = tmp_path / "summary.json"
    target.write_text("{}\n")

    def enospc(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(DiskFullError, match=r"summary\.json: no space left on device"):
        write_json(target, {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    assert target.read_text() == "{}\n"


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 600 KiB tmpfs: room for the references and a couple of rows of 1.5 s clips, not for four."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = __import__("subprocess").run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)],
                                        capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip()}); the unit tests above cover the writes")
    try:
        yield mount
    finally:
        __import__("subprocess").run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_in_one_line_and_keeps_completed_rows(small_disk: Path, speech_dir: Path) -> None:
    import subprocess

    for i in range(2):
        shutil.copy(speech_dir / f"clip{i}.wav", speech_dir / f"clip{i + 2}.wav")
    out = small_disk / "run"
    args = ("run", "--input", speech_dir, "--codec", "pcm:16", "--metrics", "none", "--workers", "1", "--out", out)
    result = codecarena(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"codecarena: error: {out}: no space left on device (") and "needed" in line
    assert "Traceback" not in result.stdout + result.stderr
    kept = rows_of(out)
    assert 1 <= len(kept) < 4 and all(row["status"] == "ok" for row in kept)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_disk)], check=True)
    result = codecarena(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(rows_of(out)) == 4 and "resumed" in result.stdout
    assert audit(out) == []


def test_a_stream_of_the_wrong_kind_is_a_payload_error_not_an_assertion() -> None:
    from codecarena.codecs.opus.adapter import ADAPTER
    from codecarena.payload import CodeStream, Payload, PayloadError
    from codecarena.specs import parse_spec

    spec = parse_spec("opus:12k")
    forged = Payload(codec=spec.canonical, family="opus", config=spec.config_dict(), variant="", checkpoint={},
                     sample_rate=16000, num_samples=320, channels=1, codec_sample_rate=48000,
                     streams=(CodeStream("opus", 8, (3,), np.array([1, 2, 3])),), side_info={})
    adapter = ADAPTER(spec, "real")
    adapter.load()
    with pytest.raises(PayloadError, match="stream 'opus' holds codes, this codec expects packets"):
        adapter.decode(forged)


# ------------------------------------------------------- 20: the durability docs/results.md promises


def test_rows_are_appended_without_fsync_and_rewritten_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.results import store

    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd)))
    row = type("FakeRow", (), {"to_dict": lambda self: {"x": 1}})()
    store.append_row(RunDir(tmp_path), row)  # type: ignore[arg-type]
    assert calls == []
    store.rewrite_rows(RunDir(tmp_path), [row])  # type: ignore[list-item]
    assert len(calls) == 1
    doc = (Path(__file__).resolve().parent.parent / "docs" / "results.md").read_text()
    line = next(line for line in doc.splitlines() if line.startswith("| `rows.jsonl` |"))
    assert "not fsynced per row" in line and "fsynced and then renamed" in line
