"""dpkg-query's answers are cached by the state of dpkg's database (registry/dpkg.py): asked again,
they come from the cache, in this process and in the next; a changed database asks dpkg again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codecarena.registry import dpkg


@pytest.fixture
def fake_dpkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """A dpkg database of our own and a dpkg-query that records its calls and answers with them."""
    (tmp_path / "dpkg" / "info").mkdir(parents=True)
    (tmp_path / "dpkg" / "status").write_text("Package: a\n")
    monkeypatch.setattr(dpkg, "DPKG", str(tmp_path / "dpkg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(dpkg, "_loaded_for", [])
    monkeypatch.setattr(dpkg, "_answers", {})
    calls: list[tuple[str, ...]] = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(tuple(command[1:]))
        return subprocess.CompletedProcess(command, 0, f"answer {len(calls)}", "")

    monkeypatch.setattr(dpkg.subprocess, "run", run)
    return calls


def test_an_answer_is_asked_once_then_cached_in_this_process_and_on_disk(fake_dpkg: list[tuple[str, ...]]) -> None:
    assert dpkg.query("-W", "speex") == "answer 1"
    assert dpkg.query("-W", "speex") == "answer 1"
    dpkg._loaded_for.clear()  # a new process: only the cache file is left
    dpkg._answers.clear()
    assert dpkg.query("-W", "speex") == "answer 1"
    assert dpkg.query("-S", "/usr/bin/speexenc") == "answer 2"
    assert fake_dpkg == [("-W", "speex"), ("-S", "/usr/bin/speexenc")]


def test_a_changed_database_is_asked_again(fake_dpkg: list[tuple[str, ...]]) -> None:
    assert dpkg.query("-W", "speex") == "answer 1"
    status = Path(dpkg.DPKG) / "status"
    status.write_text("Package: a\nVersion: 2\n")  # an upgrade rewrites the status file
    assert dpkg.query("-W", "speex") == "answer 2"
    os.utime(Path(dpkg.DPKG) / "info", ns=(1, 1))  # and the info folder
    assert dpkg.query("-W", "speex") == "answer 3"


def test_an_unreadable_cache_file_is_replaced(fake_dpkg: list[tuple[str, ...]]) -> None:
    cache = dpkg._cache_file()
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    assert dpkg.query("-W", "speex") == "answer 1"
    dpkg._loaded_for.clear()
    dpkg._answers.clear()
    assert dpkg.query("-W", "speex") == "answer 1" and len(fake_dpkg) == 1
