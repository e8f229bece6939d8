"""Tests for codecarena.runtime.guard: the memory guard acts while a process runs, kills the whole
process group, leaves well-behaved processes alone, enforces the timeout; and parse_size.

The child programs are plain Python (no numpy) so they start fast. Memory is touched with
`b"\\x01" * n`, which writes every byte: a zero-filled bytearray may come from untouched
calloc/mmap pages that never count as resident.
"""

from __future__ import annotations

import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from codecarena.runtime.guard import run_guarded
from codecarena.runtime.limits import parse_size

MiB = 1 << 20

# ~50 MB every 0.1 s up to 3 GB: about 6 s if nobody stops it.
HOG = textwrap.dedent(
    """
    import time
    chunks = []
    for _ in range(60):
        chunks.append(b"\\x01" * (50 * 1024 * 1024))
        time.sleep(0.1)
    """
)


def _gone(pid: int) -> bool:
    """Not running any more: no such pid, or a zombie waiting for whoever adopted it to reap it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return _gone(pid)


def test_guard_kills_a_growing_process_while_it_runs() -> None:
    limit = 300 * MiB
    result = run_guarded([sys.executable, "-c", HOG], limit_bytes=limit, poll_s=0.05, timeout_s=30)
    guard = result.guard
    assert guard.fired is True
    assert guard.timed_out is False
    assert result.returncode == -signal.SIGKILL
    assert guard.limit_bytes == limit
    assert guard.poll_s == 0.05
    # It saw the tree pass the limit, and stopped it long before 3 GB.
    assert guard.peak_rss_bytes > limit
    assert guard.peak_rss_bytes < 1024 * MiB
    # The child needs ~6 s to finish; being stopped well before proves the guard acts during the run.
    assert result.wall_s < 3.0
    assert guard.polls >= 2
    assert result.spawn_time <= time.time()


def test_group_kill_reaches_grandchildren(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # The child starts a grandchild that allocates, records its pid, and then only sleeps: the guard
    # must count the grandchild's memory (tree RSS) and the kill must reach it (process group).
    child = textwrap.dedent(
        f"""
        import subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", {HOG!r}])
        with open({str(pid_file)!r}, "w") as f:
            f.write(str(grandchild.pid))
        time.sleep(30)
        """
    )
    limit = 300 * MiB
    result = run_guarded([sys.executable, "-c", child], limit_bytes=limit, poll_s=0.05, timeout_s=30)
    assert pid_file.exists(), "the child never started its grandchild"
    grandchild = int(pid_file.read_text())
    try:
        assert result.guard.fired is True
        assert result.guard.timed_out is False
        assert result.returncode == -signal.SIGKILL
        assert limit < result.guard.peak_rss_bytes < 1024 * MiB
        assert result.wall_s < 3.0
        assert _wait_gone(grandchild), f"grandchild {grandchild} survived the group kill"
    finally:
        if not _gone(grandchild):  # never leave a 3 GB hog behind, even when the test fails
            psutil.Process(grandchild).kill()


def test_well_behaved_process_is_left_alone() -> None:
    child = "import time; data = b'\\x01' * (20 * 1024 * 1024); time.sleep(0.4)"
    limit = 1024 * MiB
    result = run_guarded([sys.executable, "-c", child], limit_bytes=limit, poll_s=0.05, timeout_s=30)
    assert result.guard.fired is False
    assert result.guard.timed_out is False
    assert result.returncode == 0
    assert result.guard.polls >= 1
    assert result.guard.peak_rss_bytes > 0
    # The 20 MiB it touched were seen, and they are far below the limit.
    assert 20 * MiB <= result.guard.peak_rss_bytes < limit


def test_exit_status_is_passed_through() -> None:
    result = run_guarded([sys.executable, "-c", "import sys; sys.exit(3)"], limit_bytes=1024 * MiB, poll_s=0.05)
    assert result.returncode == 3
    assert result.guard.fired is False


def test_log_path_captures_output(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    child = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"
    result = run_guarded([sys.executable, "-c", child], limit_bytes=1024 * MiB, poll_s=0.05, log_path=log)
    assert result.returncode == 0
    text = log.read_text()
    assert "to stdout" in text and "to stderr" in text


def test_timeout_kills_a_sleeping_process() -> None:
    result = run_guarded([sys.executable, "-c", "import time; time.sleep(30)"],
                         limit_bytes=1024 * MiB, poll_s=0.05, timeout_s=0.5)
    assert result.guard.timed_out is True
    assert result.guard.fired is False
    assert result.returncode == -signal.SIGKILL
    assert 0.5 <= result.wall_s < 5.0


@pytest.mark.parametrize(
    "text,expected",
    [
        ("512M", 512 * 1024 * 1024),  # 536870912
        ("2G", 2 * 1024 * 1024 * 1024),  # 2147483648
        ("1.5GiB", 1610612736),  # 1.5 * 2**30
        ("1000", 1000),
        ("512m", 536870912),
        ("64K", 65536),
        ("1T", 1099511627776),
        ("4GB", 4294967296),
        (" 2G ", 2147483648),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "GiB", "abc", "12X", "5MM", "-1M", "0", "0G", "M512", "1,5G"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("text", ["inf", "infinity", "0.5", "nan"])
def test_parse_size_rejects_non_finite_or_sub_byte(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)
