"""Guarded scoring: no metric can kill the harness (issue 15, defect 2).

The crashes are real process deaths caused from test-only code: a `sitecustomize.py` on the scoring
process's PYTHONPATH replaces `pesq.pesq` before any codecarena code runs, so production code has no
hook for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import psutil
import pytest
import soundfile as sf

from conftest import codecarena, rows_of
from codecarena.metrics.guarded import GuardedScorer
from codecarena.metrics.max_audio import PESQ_MAX_AUDIO_S
from codecarena.metrics.declarations import select
from codecarena.metrics.scorer import Scorer, UtteranceInfo, metrics_code_sha256
from codecarena.runtime.limits import StageLimits

SIGNAL = ("pesq_wb", "pesq_nb", "stoi", "estoi", "si_sdr", "lsd", "mel_distance")
PESQ_REFUSED = f"ValueError: PESQ is refused above {PESQ_MAX_AUDIO_S:g} s"


def broken_pesq(folder: Path, body: str) -> dict[str, str]:
    """An environment whose Python processes get `pesq.pesq` replaced by `body` (a function body)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import os, signal, time\nimport pesq\n\n\ndef _broken(*args, **kwargs):\n"
        + "".join(f"    {line}\n" for line in body.splitlines()) + "\n\npesq.pesq = _broken\n")
    return {"PYTHONPATH": str(folder)}


def info(name: str) -> UtteranceInfo:
    return UtteranceInfo(name, "en", None, ())


@pytest.fixture
def clips(speech_dir: Path) -> list[Path]:
    return sorted(speech_dir.glob("*.wav"))


def guarded(metrics: tuple[str, ...], tmp_path: Path, **limits: float) -> GuardedScorer:
    return GuardedScorer(metrics, {}, StageLimits(4 << 30, **limits), tmp_path / "scoring.log")


def test_guarded_scores_equal_in_process_scores(clips: list[Path], tmp_path: Path) -> None:
    noisy = tmp_path / "noisy.wav"
    audio, rate = sf.read(clips[0], dtype="float64")
    sf.write(noisy, audio + 0.01 * np.random.default_rng(3).standard_normal(audio.size), rate, subtype="PCM_16")
    pairs = [(clips[0], clips[0]), (clips[0], noisy), (clips[1], clips[1])]
    scorer = guarded(SIGNAL, tmp_path)
    try:
        got = [scorer.score_files(info("u"), ref, dec) for ref, dec in pairs]
    finally:
        scorer.close()
    # The scoring process runs its BLAS on one thread (guarded.THREAD_ENV); so does this comparison,
    # since a dot product summed on two threads may differ in the last bit.
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        expected = [Scorer(SIGNAL).score_files(info("u"), ref, dec) for ref, dec in pairs]
    assert json.dumps(got) == json.dumps(expected)  # same values, same records, same order
    assert scorer.starts == 1  # one process, kept across rows
    assert scorer.code_sha256 == metrics_code_sha256()


@pytest.mark.slow
def test_guarded_model_metrics_equal_in_process_ones(clips: list[Path], tmp_path: Path) -> None:
    metrics = select("all")
    utterances = [UtteranceInfo(clip.stem, "en", "NOT WHAT WAS SAID", (("number", "EIGHTEEN THIRTEEN"),))
                  for clip in clips]
    scorer = guarded(metrics, tmp_path)
    try:
        got = [scorer.score_files(utt, clip, clip) for utt, clip in zip(utterances, clips)]
    finally:
        scorer.close()
    # One BLAS thread here too, as in the scoring process (guarded.THREAD_ENV): Whisper's features are a
    # matrix product, and summed on two threads its no_speech_prob differed in the seventh digit.
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        in_process = Scorer(metrics)
        expected = [in_process.score_files(utt, clip, clip) for utt, clip in zip(utterances, clips)]
    assert json.dumps(got) == json.dumps(expected)
    # The transcript is not what was said, so the ASR's own check on the reference distrusts every
    # ASR value (kept, marked suspect with its reason); every other metric is ok.
    for scores in got:
        for name, record in scores.items():
            if record["status"] == "suspect":
                assert "the reference audio's own ASR has ref_wer" in record["error"], (name, record)
            else:
                assert record["status"] == "ok", (name, record)
    assert any(record["status"] == "suspect" for scores in got for record in scores.values())


@pytest.mark.parametrize("body, reason", [
    ("os.kill(os.getpid(), signal.SIGSEGV)", "scoring process killed by SIGSEGV while computing {}"),
    ("os.abort()", "scoring process killed by SIGABRT while computing {}"),
    ("os._exit(3)", "scoring process exited with status 3 while computing {} (see "),
])
def test_a_metric_that_kills_its_process_fails_alone(clips: list[Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, body: str, reason: str) -> None:
    for key, value in broken_pesq(tmp_path / "site", body).items():
        monkeypatch.setenv(key, value)
    scorer = guarded(("pesq_wb", "stoi", "pesq_nb"), tmp_path)
    try:
        for clip in clips:  # the next row gets a fresh process and the same treatment
            scores = scorer.score_files(info(clip.stem), clip, clip)
            assert list(scores) == ["pesq_wb", "pesq_nb", "stoi"]
            for name in ("pesq_wb", "pesq_nb"):
                assert scores[name]["status"] == "failed" and scores[name]["value"] is None
                assert scores[name]["error"].startswith(reason.format(name))
            assert scores["stoi"]["status"] == "ok" and scores["stoi"]["value"] > 0.99
    finally:
        scorer.close()
    assert scorer.starts == 2 * len(clips) + 1


def test_a_metric_past_its_timeout_is_killed_and_fails_alone(clips: list[Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in broken_pesq(tmp_path / "site", "time.sleep(3600)").items():
        monkeypatch.setenv(key, value)
    scorer = guarded(("pesq_wb", "stoi"), tmp_path, stage_timeout_s=3.0)
    try:
        scores = scorer.score_files(info("u"), clips[0], clips[0])
    finally:
        scorer.close()
    assert scores["pesq_wb"]["error"] == "scoring process killed after the 3 s metric timeout while computing pesq_wb"
    assert scores["stoi"]["status"] == "ok"


def test_a_metric_over_the_memory_limit_is_killed_and_fails_alone(clips: list[Path], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    hog = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))\n    time.sleep(0.01)"
    for key, value in broken_pesq(tmp_path / "site", hog).items():
        monkeypatch.setenv(key, value)
    scorer = GuardedScorer(("stoi", "pesq_wb"), {}, StageLimits(1 << 30, guard_poll_s=0.02), tmp_path / "log")
    try:
        scores = scorer.score_files(info("u"), clips[0], clips[0])
    finally:
        scorer.close()
    assert scores["pesq_wb"]["error"].startswith("scoring process killed by the memory guard while computing "
                                                 "pesq_wb: process tree RSS ")
    assert scores["pesq_wb"]["error"].endswith("passed the limit 1024 MiB")
    assert scores["stoi"]["status"] == "ok"


def test_a_scoring_process_killed_between_rows_is_replaced(clips: list[Path], tmp_path: Path) -> None:
    scorer = guarded(("stoi",), tmp_path)
    try:
        first = scorer.score_files(info("u"), clips[0], clips[0])
        (child,) = [p for p in psutil.Process().children() if "codecarena.metrics.scoring_process" in p.cmdline()]
        child.kill()
        child.wait(10)
        second = scorer.score_files(info("u"), clips[0], clips[0])
    finally:
        scorer.close()
    assert first == second and second["stoi"]["status"] == "ok" and scorer.starts == 2


def test_unreadable_audio_fails_every_metric_with_the_reason(clips: list[Path], tmp_path: Path) -> None:
    scorer = guarded(("pesq_wb", "stoi"), tmp_path)
    try:
        scores = scorer.score_files(info("u"), clips[0], tmp_path / "missing.wav")
        again = scorer.score_files(info("u"), clips[0], clips[0])
    finally:
        scorer.close()
    assert list(scores) == ["pesq_wb", "stoi"]  # a record for every metric: none dropped
    for record in scores.values():
        assert record["status"] == "failed" and record["error"].startswith("cannot read the audio to score: ")
        assert "missing.wav" in record["error"]
    assert again["stoi"]["value"] > 0.99 and scorer.starts == 1


def test_a_scoring_process_that_cannot_start_fails_the_metrics_not_the_row(clips: list[Path], tmp_path: Path) -> None:
    scorer = GuardedScorer(("pesq_wb", "stoi"), {}, StageLimits(4 << 30), None, python=str(tmp_path / "no-python"))
    scores = scorer.score_files(info("u"), clips[0], clips[0])
    assert list(scores) == ["pesq_wb", "stoi"]  # a record for every metric: none dropped
    for record in scores.values():
        assert record["status"] == "failed"
        assert record["error"].startswith("scoring process could not start: [Errno 2] No such file or directory")


def long_speech(speech_dir: Path, folder: Path, seconds: float) -> Path:
    """Real speech clips with 0.5 s pauses, repeated until `seconds` long: at 130 s, pesq 0.0.4 finds
    more speech segments than its tables hold and dies with SIGSEGV (without the pauses the clips
    run together into fewer segments, and it survives)."""
    pause = np.zeros(8000)
    unit = np.concatenate([part for path in sorted(speech_dir.glob("*.wav"))
                           for part in (sf.read(path, dtype="float64")[0], pause)])
    audio = np.resize(unit, int(seconds * 16000))
    folder.mkdir()
    sf.write(folder / "long.wav", audio, 16000, subtype="PCM_16")
    return folder


@pytest.mark.slow
def test_130_s_input_keeps_its_row_with_pesq_refused(speech_dir: Path, tmp_path: Path) -> None:
    folder = long_speech(speech_dir, tmp_path / "long", 130.0)
    out = tmp_path / "run"
    result = codecarena("run", "--input", folder, "--language", "en", "--codec", "pcm:16",
                        "--metrics", "pesq_wb,stoi", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = rows_of(out)
    assert row["status"] == "ok" and row["duration_s"] == 130.0
    assert row["metrics"]["pesq_wb"]["status"] == "failed"
    assert row["metrics"]["pesq_wb"]["error"].startswith(f"{PESQ_REFUSED} (this audio is 130.00 s)")
    assert row["metrics"]["stoi"]["status"] == "ok" and row["metrics"]["stoi"]["value"] > 0.99
    assert codecarena("audit", out, "--rescore", "all").returncode == 0


@pytest.mark.slow
def test_a_crashing_metric_leaves_the_harness_and_every_row_alive(speech_dir: Path, tmp_path: Path) -> None:
    env = broken_pesq(tmp_path / "site", "os.kill(os.getpid(), signal.SIGSEGV)")
    out = tmp_path / "run"
    result = codecarena("run", "--input", speech_dir, "--language", "en", "--codec", "pcm:16", "--codec", "opus:12k",
                        "--metrics", "pesq_wb,stoi", "--out", out, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = rows_of(out)
    assert len(rows) == 4
    for row in rows:
        assert row["status"] == "ok"
        assert row["metrics"]["pesq_wb"]["error"] == "scoring process killed by SIGSEGV while computing pesq_wb"
        assert row["metrics"]["stoi"]["status"] == "ok"
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(codec["codec"] for codec in summary["codecs"]) == ["opus:12k", "pcm:16"]
    for codec in summary["codecs"]:
        assert codec["metrics"]["pesq_wb"]["n_failed"] == 2 and codec["metrics"]["stoi"]["n_ok"] == 2
    assert codecarena("audit", out).returncode == 0
    assert list((out / "work" / "scoring").glob("scoring-*.log"))

