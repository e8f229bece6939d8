"""Issue 28: the audit ties a run to its plan and its own files. Forged references, transcripts, user
checkpoints, reference-side results or edited values fail `audit`; a resume never launders them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of
from codecarena.files import sha256_json
from codecarena.metrics.reference_results import FORMAT, VERSION, ReferenceResultError, ReferenceResults, parse_entry

REF = "a" * 64
IDENTITY = {"metric": "speaker_sim"}


def _entry(folder: Path, value: list[float]) -> Path:
    """A well-formed speaker-embedding entry for reference REF in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"speaker_embedding-{sha256_json(IDENTITY)}.json"
    path.write_text(json.dumps({"format": FORMAT, "version": VERSION, "reference_sha256": REF,
                                "kind": "speaker_embedding", "identity": IDENTITY,
                                "identity_sha256": sha256_json(IDENTITY), "value": value}))
    return path


def test_a_reference_result_that_is_a_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    outside = _entry(tmp_path / "outside" / REF, [0.5])
    root = tmp_path / "run" / "reference_results"
    (root / REF).mkdir(parents=True)
    linked = root / REF / outside.name
    linked.symlink_to(outside)
    with pytest.raises(ReferenceResultError, match="is a symbolic link"):
        parse_entry(linked)
    with pytest.raises(ReferenceResultError, match="is a symbolic link"):
        ReferenceResults(root).get("speaker_embedding", REF, IDENTITY, lambda: [0.25])
    # A folder that links out of the run: nothing is read from it, nothing written into it.
    shutil.rmtree(root / REF)
    (root / REF).symlink_to(outside.parent)
    before = sorted(outside.parent.iterdir())
    with pytest.raises(ReferenceResultError, match="is a symbolic link"):
        parse_entry(root / REF / outside.name)
    with pytest.raises(ReferenceResultError, match="is a symbolic link"):
        ReferenceResults(root).get("speaker_embedding", REF, {"other": 1}, lambda: [0.25])
    assert sorted(outside.parent.iterdir()) == before


def test_a_lock_file_that_links_out_of_the_run_creates_nothing_there(tmp_path: Path) -> None:
    root = tmp_path / "run" / "reference_results"
    (root / REF).mkdir(parents=True)
    target = tmp_path / "outside" / "created-by-the-lock"
    target.parent.mkdir()
    lock = root / REF / f".speaker_embedding-{sha256_json(IDENTITY)}.json.lock"
    lock.symlink_to(target)
    with pytest.raises(ReferenceResultError, match="cannot be opened as the run's own lock file"):
        ReferenceResults(root).get("speaker_embedding", REF, IDENTITY, lambda: [0.25])
    assert not target.exists()


def _run(folder: Path, out: Path, *codecs: str, metrics: str = "none", extra: tuple[str, ...] = ()) -> str:
    result = codecarena("run", "--input", folder, *(a for c in codecs for a in ("--codec", c)), "--metrics", metrics,
                        "--workers", "1", "--out", out, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def speaker_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(input folder, run) of pcm:16 and codec2:3200 on one short clip, scored with speaker_sim."""
    folder = tmp_path_factory.mktemp("speaker-in")
    shutil.copy(need_mirror() / SHORT_CLIPS[0], folder / "clip0.wav")
    out = tmp_path_factory.mktemp("speaker") / "run"
    _run(folder, out, "pcm:16", "codec2:3200", metrics="speaker_sim")
    return folder, out


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


@pytest.mark.slow
def test_an_edited_speaker_embedding_fails_the_plain_audit(speaker_run: tuple[Path, Path], tmp_path: Path) -> None:
    from codecarena.results.audit import audit

    run = _copy(speaker_run[1], tmp_path)
    assert audit(run) == []
    (entry,) = (run / "reference_results").glob("*/speaker_embedding-*.json")
    data = json.loads(entry.read_text())
    data["value"][0] += 0.5
    entry.write_text(json.dumps(data))
    problems = audit(run)
    assert len(problems) == 2 and all("scored against the reference's speaker embedding sha256 " in p
                                      for p in problems), problems


@pytest.mark.slow
def test_a_resume_rebuilds_deleted_reference_results(speaker_run: tuple[Path, Path], tmp_path: Path) -> None:
    from codecarena.results.audit import audit

    folder, original = speaker_run
    run = _copy(original, tmp_path)
    shutil.rmtree(run / "reference_results")
    assert any("speaker embedding is not in" in p for p in audit(run))
    # One row of the reference is computed again, which stores its embedding again; the other is kept.
    stdout = _run(folder, run, "pcm:16", "codec2:3200", metrics="speaker_sim")
    assert "1 complete row resumed" in stdout
    assert audit(run) == []
    assert sorted(p.name for p in (run / "reference_results").glob("*/*.json")) == \
        sorted(p.name for p in (original / "reference_results").glob("*/*.json"))


# ------------------------------------------------ rows tied to the plan (defect 3) and to themselves

def _seal(rows: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """What a forger who knows the recipe writes: each row's digest recomputed."""
    from codecarena.results.schema import parse_row

    return [parse_row({**row, "row_sha256": None}).sealed().to_dict() for row in rows]


def _rewrite(run: Path, rows: list[dict]) -> None:  # type: ignore[type-arg]
    """rows.jsonl as given, and a summary.json that agrees with it (what a resume used to write)."""
    from codecarena.results.run import Run
    from codecarena.results.summary import summarize

    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps(summarize(Run.open(run).rows)))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(input folder, run) of pcm:16 and codec2:3200 scored with STOI on clip0, a 16 kHz wav copied as
    it is, and clip1, the same speech at 44.1 kHz (converted), with transcripts and critical entities."""
    import soundfile as sf
    import soxr

    folder = tmp_path_factory.mktemp("in")
    mirror = need_mirror()
    shutil.copy(mirror / SHORT_CLIPS[0], folder / "clip0.wav")
    audio, rate = sf.read(mirror / SHORT_CLIPS[1], dtype="float64")
    sf.write(folder / "clip1.wav", soxr.resample(audio, rate, 44100), 44100, subtype="PCM_16")
    (folder / "manifest.json").write_text(json.dumps([
        {"file": "clip0.wav", "transcript": "IN EIGHTEEN THIRTEEN", "critical": [{"kind": "number", "text": "1813"}]},
        {"file": "clip1.wav", "transcript": "SOMETHING ELSE", "speaker": "LJ"}]))
    out = tmp_path_factory.mktemp("small") / "run"
    _run(folder, out, "pcm:16", "codec2:3200", metrics="stoi", extra=("--language", "en"))
    return folder, out


@pytest.mark.slow
@pytest.mark.parametrize("utterance", ["clip0", "clip1"])  # copied as it is; converted from 44.1 kHz
def test_a_replaced_reference_fails_the_plain_audit(small_run: tuple[Path, Path], tmp_path: Path,
                                                    utterance: str) -> None:
    """The issue's forgery: the reference replaced by Codec 2's output (so Codec 2 would score as
    transparent), every hash the rows hold updated, the summary rebuilt."""
    from codecarena.files import sha256_file
    from codecarena.results.audit import audit

    run = _copy(small_run[1], tmp_path)
    plan = json.loads((run / "run.json").read_text())["plan"]
    pinned = next(r["sha256"] for r in plan["references"] if r["id"] == utterance)
    reference = run / "references" / f"{utterance}.wav"
    assert sha256_file(reference) == pinned
    shutil.copy(run / "decoded" / "codec2_3200" / f"{utterance}.wav", reference)
    rows = rows_of(run)
    for row in rows:
        if row["utterance"] == utterance:
            row["reference_sha256"] = sha256_file(reference)
    _rewrite(run, _seal(rows))
    problems = audit(run)
    for codec in ("pcm:16", "codec2:3200"):
        assert f"{codec} {utterance}: reference_sha256 {sha256_file(reference)[:12]} is not the plan's {pinned[:12]} " \
               "for this utterance" in problems, problems
    assert f"pcm:16 {utterance}: the PCM control's decoded audio is not its reference quantised to 16 bits" in problems


@pytest.mark.slow
def test_a_forged_transcript_or_critical_entity_fails_the_plain_audit(small_run: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    from codecarena.results.audit import audit

    run = _copy(small_run[1], tmp_path)
    rows = rows_of(run)
    heard = {"hypothesis": "in eighteen thirteen", "reference_hypothesis": "in eighteen thirteen",
             "asr": {"settings_sha256": "0" * 64}}
    codec2 = next(r for r in rows if (r["codec"], r["utterance"]) == ("codec2:3200", "clip0"))
    codec2["metrics"]["wer"] = {"value": 0.0, "status": "ok", "error": None,
                                "details": {**heard, "transcript": "IN EIGHTEEN THIRTEEN"}}
    codec2["metrics"]["critical_survived"] = {"value": 1.0, "status": "ok", "error": None,
                                              "details": {**heard, "entities": [{"kind": "number", "text": "1813"}]}}
    _rewrite(run, _seal(rows))
    assert not [p for p in audit(run) if "transcript" in p and "plan" in p or "critical" in p]
    codec2["metrics"]["wer"]["details"]["transcript"] = "A FORGED TRANSCRIPT"
    codec2["metrics"]["critical_survived"]["details"]["entities"] = [{"kind": "number", "text": "1814"}]
    _rewrite(run, _seal(rows))
    problems = audit(run)
    assert "codec2:3200 clip0: wer was scored against the transcript 'A FORGED TRANSCRIPT', the plan's is " \
           "'IN EIGHTEEN THIRTEEN'" in problems, problems
    assert "codec2:3200 clip0: critical_survived was scored on the entities [['number', '1814']], the plan's are " \
           "[['number', '1813']]" in problems, problems


@pytest.mark.slow
def test_an_edited_metric_value_fails_the_plain_audit_and_a_resume_computes_it_again(
        small_run: tuple[Path, Path], tmp_path: Path) -> None:
    """Before: the edit passed the plain audit once summary.json agreed with it, and a resume wrote it
    into summary.json itself."""
    from codecarena.results.audit import audit

    folder, original = small_run
    run = _copy(original, tmp_path)
    rows = rows_of(run)
    row = next(r for r in rows if (r["codec"], r["utterance"]) == ("codec2:3200", "clip0"))
    stoi = row["metrics"]["stoi"]["value"]
    row["metrics"]["stoi"]["value"] = 0.99
    _rewrite(run, rows)
    assert audit(run) == ["codec2:3200 clip0: the row's content does not hash to its row_sha256 (edited after it was "
                          "computed?)"]
    stdout = _run(folder, run, "pcm:16", "codec2:3200", metrics="stoi", extra=("--language", "en"))
    assert "3 complete rows resumed" in stdout
    again = next(r for r in rows_of(run) if (r["codec"], r["utterance"]) == ("codec2:3200", "clip0"))
    assert again["metrics"]["stoi"]["value"] == stoi
    summary = json.loads((run / "summary.json").read_text())
    assert 0.99 not in [c["metrics"]["stoi"]["mean"] for c in summary["codecs"]]
    assert audit(run) == []


@pytest.mark.slow
def test_a_resume_computes_a_row_the_plan_does_not_pin_again(small_run: tuple[Path, Path], tmp_path: Path) -> None:
    folder, original = small_run
    run = _copy(original, tmp_path)
    rows = rows_of(run)
    rows[0]["speaker"] = "someone else"
    _rewrite(run, _seal(rows))
    stdout = _run(folder, run, "pcm:16", "codec2:3200", metrics="stoi", extra=("--language", "en"))
    assert "3 complete rows resumed" in stdout
    assert {r["speaker"] for r in rows_of(run)} == {"", "LJ"}


@pytest.mark.slow
def test_a_record_before_version_5_is_neither_audited_nor_resumed(small_run: tuple[Path, Path],
                                                                   tmp_path: Path) -> None:
    """A record without the plan's pins cannot be tied to what it was computed from; downgrading a
    record's version must not switch the checks off."""
    from codecarena.files import sha256_json
    from codecarena.results.audit import audit

    folder, original = small_run
    run = _copy(original, tmp_path)
    record = json.loads((run / "run.json").read_text())
    for key in ("references", "user_pins", "user_codecs", "device", "metric_device"):  # plan keys of versions 5-7
        del record["plan"][key]
    record.update(version=4, plan_sha256=sha256_json(record["plan"]))
    (run / "run.json").write_text(json.dumps(record))
    assert any("run.json version 4 predates plans that pin each reference, transcript and user checkpoint" in p
               for p in audit(run))
    resumed = codecarena("run", "--input", folder, "--codec", "pcm:16", "--codec", "codec2:3200", "--metrics", "stoi",
                         "--language", "en", "--out", run)
    assert resumed.returncode == 2
    assert resumed.stderr.strip() == f"codecarena: error: {run}: holds a run made before plans pinned references, " \
        "transcripts and user checkpoints (run.json version 4), whose rows cannot be tied to them; use another " \
        "--out directory"


# ------------------------------------------------------------------ user pins in the plan (defect 4)

class _NoWorkers:
    """An executor that starts no worker: every row fails at once (the plan is what these tests check)."""

    def describe(self) -> dict:  # type: ignore[type-arg]
        return {"executor": "none"}

    def rows(self, tasks, plan):  # type: ignore[no-untyped-def]
        from codecarena.pipeline.row import failed_row

        for task in tasks:
            yield failed_row(task, plan, "no worker in this test")


def _user_run(folder: Path, out: Path, *codecs: str, add: bool = False) -> None:
    from codecarena.input_sets import load_input_dir
    from codecarena.pipeline.execute import execute
    from codecarena.pipeline.plan import assemble
    from codecarena.registry.entries import entry_for_family
    from codecarena.runtime.limits import StageLimits
    from codecarena.specs import parse_spec

    specs = tuple(parse_spec(c) for c in codecs)
    info = {"codecarena": "test", "command": ["run"], "created_at": "now", "git": {}, "environment": {},
            "metrics": [], "runtimes": {}}
    plan = assemble(load_input_dir(folder), specs, out, StageLimits(1 << 30), invocation=info, add=add,
                    weights="user", runtimes=tuple((s.family, entry_for_family(s.family).id, "python") for s in specs))
    execute(plan, _NoWorkers())


@pytest.fixture
def pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(input folder, checkpoint file) with the file pinned for dac:16khz and dac:24khz."""
    from codecarena.registry import user_pins

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(need_mirror() / SHORT_CLIPS[0], folder / "clip0.wav")
    weights = tmp_path / "ft.pt"
    weights.write_bytes(b"epoch 10")
    user_pins.pin("dac", "", [weights])
    return folder, weights


def test_the_plan_pins_the_user_checkpoint_and_a_repin_is_refused(pinned: tuple[Path, Path], tmp_path: Path) -> None:
    from codecarena.pipeline.plan import RunError
    from codecarena.registry import user_pins

    folder, weights = pinned
    out = tmp_path / "run"
    _user_run(folder, out, "dac:16khz")
    plan = json.loads((out / "run.json").read_text())["plan"]
    assert plan["user_pins"] == [{"codec": "dac:16khz", "checkpoint": {
        "registry": "dac", "revision": "user", "ft.pt": user_pins.find("dac", "16khz").files[0].sha256,
        "pinned_by": "user"}}]
    _user_run(folder, out, "dac:16khz")  # the same pin resumes
    weights.write_bytes(b"epoch 11")  # continued training, pinned again
    user_pins.pin("dac", "", [weights])
    with pytest.raises(RunError, match=r"different plan \(user_pins\) \(a user pin changed since the run: pin the "
                                       r"run's files again, see its run.json\); use another --out directory"):
        _user_run(folder, out, "dac:16khz")
    with pytest.raises(RunError, match=r"--add: the user pin of dac:16khz changed since the run; pin the run's files "
                                       r"again \(see user_pins in its run.json\) or use another --out"):
        _user_run(folder, out, "dac:24khz", add=True)


def test_the_audit_refuses_two_checkpoints_in_one_configuration(pinned: tuple[Path, Path], tmp_path: Path) -> None:
    from codecarena.results.audit import audit

    folder, weights = pinned
    shutil.copy(folder / "clip0.wav", folder / "clip1.wav")
    out = tmp_path / "run"
    _user_run(folder, out, "dac:16khz")
    plan = json.loads((out / "run.json").read_text())["plan"]
    identity = plan["user_pins"][0]["checkpoint"]
    rows = rows_of(out)
    rows[0]["checkpoint"] = identity
    rows[1]["checkpoint"] = {**identity, "ft.pt": "f" * 64}  # a row made after a re-pin
    _rewrite(out, _seal(rows))
    problems = audit(out)
    assert f"dac:16khz clip1: its checkpoint {rows[1]['checkpoint']} is not the user pin the plan records for " \
           f"dac:16khz: {identity}" in problems, problems
    assert any(p.startswith("dac:16khz: its rows carry 2 different checkpoint identities") for p in problems), problems
