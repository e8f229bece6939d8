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
    assert "1 complete rows resumed" in stdout
    assert audit(run) == []
    assert sorted(p.name for p in (run / "reference_results").glob("*/*.json")) == \
        sorted(p.name for p in (original / "reference_results").glob("*/*.json"))
