"""Links planted in a run directory (issue 28, high): a run directory restored from an archive, then
resumed or extended, may hold a symlink or a hard link at any name codecarena writes. Nothing outside
the run may change, and the run refuses with one line. The write primitives are tested on their own
too, since they are what keeps a link planted while a run is going from being written through."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from codecarena.files import LinkedFileError, exclusive_temp, open_unlinked, replace_text, write_json
from codecarena.rundir import RunDir, UnsafePathError
from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror

VICTIM_TEXT = b"precious data outside the run\n"


def _victim(tmp_path: Path, name: str = "victim.txt") -> Path:
    victim = tmp_path / "outside" / name
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_bytes(VICTIM_TEXT)
    return victim


def _tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ the primitives


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_replace_text_never_writes_through_a_planted_temporary_name(tmp_path: Path, kind: str) -> None:
    victim = _victim(tmp_path)
    target = tmp_path / "run" / "run.json"
    target.parent.mkdir()
    planted = target.with_name(".run.json.tmp")  # the fixed name replace_text used to write through
    planted.symlink_to(victim) if kind == "symlink" else os.link(victim, planted)
    write_json(target, {"a": 1})
    assert victim.read_bytes() == VICTIM_TEXT
    assert target.read_text() == '{\n "a": 1\n}\n'
    assert planted.is_symlink() if kind == "symlink" else planted.read_bytes() == VICTIM_TEXT


def test_replace_text_replaces_a_link_at_the_destination_not_its_target(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    target = tmp_path / "summary.json"
    target.symlink_to(victim)
    replace_text(target, "new\n")
    assert victim.read_bytes() == VICTIM_TEXT
    assert not target.is_symlink() and target.read_text() == "new\n"


def test_exclusive_temp_names_are_random_and_removed(tmp_path: Path) -> None:
    dest = tmp_path / "x.wav"
    with exclusive_temp(dest) as (_, first), exclusive_temp(dest) as (_, second):
        assert first != second and first.parent == tmp_path and first.name.startswith(".x.wav.")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("append", [False, True])
def test_open_unlinked_refuses_symlinks_and_hard_links_without_touching_them(tmp_path: Path, append: bool) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "sym.log").symlink_to(victim)
    os.link(victim, tmp_path / "hard.log")
    with pytest.raises(LinkedFileError, match="sym.log: is a symbolic link"):
        open_unlinked(tmp_path / "sym.log", append=append)
    with pytest.raises(LinkedFileError, match="hard.log: has 2 hard links"):
        open_unlinked(tmp_path / "hard.log", append=append)
    with pytest.raises(LinkedFileError, match="hard.log: has 2 hard links"):
        open_unlinked(tmp_path / "hard.log", truncate=False)
    assert victim.read_bytes() == VICTIM_TEXT


def test_open_unlinked_does_not_hang_on_a_planted_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "stage.log")
    with pytest.raises(OSError):
        open_unlinked(tmp_path / "stage.log")


def test_open_unlinked_truncates_only_its_own_file(tmp_path: Path) -> None:
    own = tmp_path / "encode.log"
    own.write_bytes(b"old log")
    os.close(open_unlinked(own))
    assert own.read_bytes() == b""
    lock = tmp_path / ".lock"
    lock.write_bytes(b"keep")
    os.close(open_unlinked(lock, truncate=False))
    assert lock.read_bytes() == b"keep"


def test_refuse_links_names_the_first_link_and_counts_the_rest(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    run = tmp_path / "run"
    (run / "work").mkdir(parents=True)
    (run / "rows.jsonl").write_text("")
    RunDir(run).refuse_links()
    (run / "work" / "a.log").symlink_to(victim)
    os.link(victim, run / "b.wav")
    with pytest.raises(UnsafePathError) as caught:
        RunDir(run).refuse_links()
    message = str(caught.value)
    assert "\n" not in message and "(and 1 more)" in message
    assert "'b.wav' has 2 hard links" in message or "'work/a.log' is a symbolic link" in message


# ------------------------------------------------------------------ whole runs


def _clip_folder(tmp_path: Path) -> Path:
    need_mirror()
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], folder / "clip0.wav")
    return folder


def _run(folder: Path, out: Path):  # type: ignore[no-untyped-def]
    return codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--out", out)


def test_the_minimal_case_a_lone_planted_temporary_file_is_refused(tmp_path: Path) -> None:
    """The issue's minimal case: an empty --out holding only `.run.json.tmp -> victim`."""
    victim = _victim(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / ".run.json.tmp").symlink_to(victim)
    result = _run(_clip_folder(tmp_path), out)
    assert result.returncode != 0
    assert victim.read_bytes() == VICTIM_TEXT
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and ".run.json.tmp" in lines[0] and "link" in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.slow
def test_links_planted_at_every_name_a_run_writes_leave_everything_outside_unchanged(tmp_path: Path) -> None:
    """A finished run, archived with links planted at every name codecarena writes (temporary files,
    logs, the lock, rows.jsonl, the reference cache), then resumed and extended with --add."""
    folder = _clip_folder(tmp_path)
    out = tmp_path / "run"
    assert _run(folder, out).returncode == 0
    outside = tmp_path / "outside"
    names = [".run.json.tmp", ".rows.jsonl.tmp", ".summary.json.tmp", "references/.clip0.wav.tmp",
             "decoded/pcm_16/.clip0.wav.tmp", "work/pcm_16/clip0/.encode.job.json.tmp"]
    for i, name in enumerate(names):
        (out / name).symlink_to(_victim(tmp_path, f"sym{i}.txt"))
    for name in ["work/pcm_16/clip0/encode.log", "work/pcm_16/clip0/decode.log", ".lock", "rows.jsonl"]:
        victim = _victim(tmp_path, name.replace("/", "_") + ".hard")
        victim.write_bytes((out / name).read_bytes())
        (out / name).unlink()
        os.link(victim, out / name)
    cache_target = outside / "refcache"
    cache_target.mkdir()
    (out / "reference_results").mkdir(exist_ok=True)
    (out / "reference_results" / ("0" * 64)).symlink_to(cache_target, target_is_directory=True)
    before = _tree_digest(outside)
    for extra in ([], ["--add"]):
        args = ["run", "--input", folder, "--codec", "pcm:16", "--codec", "opus:6k", "--metrics", "none",
                "--out", out, *extra]
        result = codecarena(*args) if extra else _run(folder, out)
        assert result.returncode != 0, result.stdout
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "link" in lines[0] and "Traceback" not in result.stderr, result.stderr
        assert _tree_digest(outside) == before
    assert sorted(p.name for p in cache_target.iterdir()) == []
