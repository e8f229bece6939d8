"""One row verdict (results/verdict.py): the status the pipeline writes is the one the audit re-derives
from the row's stages, outcome, replay and checks. Issue 36, defect 15: a status forged to "failed"
passed the audit; defect 19: a decoder that is not deterministic left its rows ok and the plain audit
passing, although docs/plugins.md promises a second decode that matches byte for byte."""

from __future__ import annotations

import dataclasses
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror, rows_of

# A 16-bit PCM codec whose decoder adds noise seeded by the clock: no two decodes give the same bytes.
NOISY = textwrap.dedent('''
    import time

    import numpy as np

    from codecarena.plugin import Adapter, CodeStream, Decoded, Encoded, Payload, from_int16, to_int16


    class Noisy(Adapter):
        input_rate = 16000

        def load(self):
            return {"parameters": 0}

        def encode(self, audio):
            codes = to_int16(audio).astype(np.int64) + 32768
            return Encoded(streams=(CodeStream("codes", 16, (len(codes),), codes.astype(np.uint64)),), side_info={})

        def decode(self, payload: Payload):
            values = payload.code_stream("codes").values.astype(np.int64) - 32768
            noise = np.random.default_rng(time.time_ns()).integers(-2, 3, len(values))
            return Decoded(from_int16(np.clip(values + noise, -32768, 32767).astype(np.int16)), self.input_rate)


    ADAPTER = Noisy
''')

DECLARATION = '''api_version = 1
name = "noisy"
description = "a decoder that is not deterministic"
configs = ["q16"]
default_config = "q16"
supported_weights = "none"
'''


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path, Path]:
    """(environment with the user codec added, input folder, run) of noisy:q16 and pcm:16 on one clip."""
    need_mirror()
    root = tmp_path_factory.mktemp("verdict")
    env = {"XDG_DATA_HOME": str(root / "data")}
    codec = root / "codec"
    codec.mkdir()
    (codec / "noisy.py").write_text(NOISY)
    (codec / "noisy.toml").write_text(DECLARATION)
    added = codecarena("codec", "add", "noisy", "--module", codec / "noisy.py", env=env)
    assert added.returncode == 0, added.stdout + added.stderr
    folder = root / "in"
    folder.mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], folder / "clip0.wav")
    out = root / "run"
    run = _run(env, folder, out)
    assert run.returncode == 1, run.stdout + run.stderr  # a row failed
    return env, folder, out


def _run(env: dict[str, str], folder: Path, out: Path):  # type: ignore[no-untyped-def]
    return codecarena("run", "--input", folder, "--codec", "noisy:q16", "--codec", "pcm:16", "--metrics", "none",
                      "--out", out, env=env)


def _row(run: Path, codec: str) -> dict:  # type: ignore[type-arg]
    return next(r for r in rows_of(run) if r["codec"] == codec)


def _forge(run: Path, codec: str, **changes: object) -> None:
    """What a forger who knows every recipe writes: the row changed and resealed (its row_sha256
    recomputed), rows.jsonl rewritten, summary.json and its ledger derived again from the rows."""
    from codecarena.files import write_json
    from codecarena.results import ledger
    from codecarena.results.run import Run
    from codecarena.results.schema import parse_row
    from codecarena.results.store import rewrite_rows
    from codecarena.results.summary import summarize
    from codecarena.rundir import RunDir

    rows = [parse_row({**r, **(changes if r["codec"] == codec else {}), "row_sha256": None}).sealed()
            for r in rows_of(run)]
    rewrite_rows(RunDir(run), rows)
    # The run summarises its rows in plan order, whatever order they finished in.
    rows = Run.open(run).rows
    write_json(run / "summary.json", {**summarize(rows), "ledger": ledger.build(rows, RunDir(run))})


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


def test_a_decoder_that_is_not_deterministic_fails_its_rows_with_both_hashes(
        noisy_run: tuple[dict[str, str], Path, Path], tmp_path: Path) -> None:
    """Defect 19: before, the row stayed ok with replay_identical false and the plain audit passed."""
    env, _, run = noisy_run
    row = _row(run, "noisy:q16")
    assert row["replay_sampled"] and row["replay_identical"] is False
    assert row["status"] == "failed" and row["checks_passed"] is False
    assert row["error"] == (f"the second fresh decode differed from the first (sha256 {row['decoded_sha256'][:12]} "
                            f"then, {row['replay_sha256'][:12]} in the replay): the decoder is not deterministic")
    assert _row(run, "pcm:16")["status"] == "ok"
    summary = json.loads((run / "summary.json").read_text())
    noisy = next(c for c in summary["codecs"] if c["codec"] == "noisy:q16")
    assert (noisy["rows_ok"], noisy["rows_failed"]) == (0, 1)
    # A failed row is an honest result: the run re-derives from its files.
    assert codecarena("audit", run, env=env).returncode == 0
    # The report lists it with the replay, once.
    made = codecarena("report", run, "--audio", "none", "--out", tmp_path / "r.html", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Failures: 0 failed rows, 0 failed checks, 1 replays not identical" in (tmp_path / "r.md").read_text()


def test_the_audit_fails_an_ok_row_whose_replay_differed(noisy_run: tuple[dict[str, str], Path, Path],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 19: the row as codecarena wrote it before (ok, no error), resealed: before, audit passed."""
    env, _, original = noisy_run
    monkeypatch.setenv("XDG_DATA_HOME", env["XDG_DATA_HOME"])  # where the user codec the audit checks is kept
    run = _copy(original, tmp_path)
    _forge(run, "noisy:q16", status="ok", error="", checks_passed=True)
    from codecarena.results.audit import audit

    row = _row(run, "noisy:q16")
    assert audit(run) == [f"noisy:q16 clip0: status is ok, but the row failed: the second fresh decode differed from "
                          f"the first (sha256 {row['decoded_sha256'][:12]} then, {row['replay_sha256'][:12]} in the "
                          "replay): the decoder is not deterministic"]


def test_a_resume_computes_an_ok_row_whose_replay_differed_again(noisy_run: tuple[dict[str, str], Path, Path],
                                                                 tmp_path: Path) -> None:
    env, folder, original = noisy_run
    run = _copy(original, tmp_path)
    _forge(run, "noisy:q16", status="ok", error="", checks_passed=True)
    resumed = _run(env, folder, run)
    assert resumed.returncode == 1 and "1 complete row resumed" in resumed.stdout, resumed.stdout + resumed.stderr
    assert _row(run, "noisy:q16")["status"] == "failed"


def test_a_status_forged_to_failed_fails_the_audit(noisy_run: tuple[dict[str, str], Path, Path],
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 15: a good row made to look failed (out of the rates, costs and ledger), files intact,
    resealed: before, `audit`, `--rescore all` and `--replay` all passed."""
    env, _, original = noisy_run
    monkeypatch.setenv("XDG_DATA_HOME", env["XDG_DATA_HOME"])
    run = _copy(original, tmp_path)
    _forge(run, "pcm:16", status="failed", error="decode: worker exited with status 1", checks_passed=False)
    expected = ("pcm:16 clip0: status is failed, but its stages, files named and replay show no failure (was the "
                "status edited after it was computed?)")
    from codecarena.results.audit import audit

    assert audit(run) == [expected]
    audited = codecarena("audit", run, "--rescore", "all", "--replay", env=env)
    assert audited.returncode == 1 and expected in audited.stdout, audited.stdout + audited.stderr


def test_the_verdict_reads_each_failure_from_the_row(noisy_run: tuple[dict[str, str], Path, Path]) -> None:
    from codecarena.results.schema import parse_row
    from codecarena.results.verdict import Verdict, verdict

    _, _, run = noisy_run
    good = parse_row(_row(run, "pcm:16"))
    assert verdict(good) == Verdict("ok", "", "")
    silent = dataclasses.replace(good, silent=True, checks_passed=False, error="")
    assert verdict(silent) == Verdict("ok", "checks", "checks failed: decoded audio is silent")
    stage = dataclasses.replace(good.stages[1], ok=False, error="decode worker exited with status 1")
    broken = dataclasses.replace(good, stages=[good.stages[0], stage, *good.stages[2:]])
    assert verdict(broken) == Verdict("failed", "failed", "decode: decode worker exited with status 1")
    assert verdict(dataclasses.replace(broken, error="the row's own reason")).reason == "the row's own reason"
    short = dataclasses.replace(good, decoded_samples=good.num_samples - 1)
    assert verdict(short).status == "failed"
    assert verdict(dataclasses.replace(good, padded_samples=(good.length_tolerance or 0) + 1)).status == "failed"
    # Issue 38 (16): "off by 1 samples".
    assert verdict(dataclasses.replace(good, padded_samples=1, length_tolerance=0)).reason == \
        "decoded length was off by 1 sample before restoration, beyond the codec's tolerance of 0"
    assert verdict(dataclasses.replace(good, decoded=None)).reason == "no decoded audio was written"
    assert verdict(dataclasses.replace(good, payload=None)).reason == "no payload was written"
    assert verdict(dataclasses.replace(good, replay_sha256=None, replay_identical=None)).kind == "replay"
    differs = dataclasses.replace(good, replay_sha256="0" * 64, replay_identical=False)
    assert verdict(differs).kind == "replay" and verdict(differs).status == "failed"
    # Outside the replay sample there is no second decode to differ.
    assert verdict(dataclasses.replace(good, replay_sampled=False, replay_sha256=None, replay_identical=None)) == \
        Verdict("ok", "", "")
