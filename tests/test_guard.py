"""Tests for codecarena.runtime.guard: the memory guard acts while a process runs, kills the whole
process group, leaves well-behaved processes alone, enforces the timeout, sees a peak that came and
went between two polls and judges the peak a stage records (cold and warm); and parse_size.

The child programs are plain Python (no numpy) so they start fast. Memory is touched with
`b"\\x01" * n`, which writes every byte: a zero-filled bytearray may come from untouched
calloc/mmap pages that never count as resident.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from codecarena.results.audit_rows import audit_stages
from codecarena.runtime.guard import run_guarded
from codecarena.rundir import StageFiles
from codecarena.runtime.limits import StageLimits, parse_size
from codecarena.runtime.persistent import PersistentWorker
from codecarena.runtime.protocol import PROTOCOL_VERSION, Job, StageReport
from codecarena.runtime.stages import Stage, run_stage, run_stage_warm

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


# --- peaks between polls (#28): the guard judges the peak the row records and the audit checks ------

needs_hwm = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                               reason="per-process peak RSS (VmHWM) and its reset are Linux /proc features")

# Touches 150 MiB, frees it at once and then lives on: a poll before and a poll after both see a
# small RSS, so only a high-water mark can tell the spike happened.
SPIKE_THEN_IDLE = "data = b'\\x01' * (150 * 1024 * 1024); del data; import time; time.sleep(3)"


@needs_hwm
def test_a_spike_between_two_polls_fires_the_guard_at_the_next_poll() -> None:
    limit = 100 * MiB
    result = run_guarded([sys.executable, "-c", SPIKE_THEN_IDLE], limit_bytes=limit, poll_s=1.0, timeout_s=30)
    assert result.guard.fired is True
    assert result.returncode == -signal.SIGKILL
    # Killed at the next poll (not left to sleep out its 3 s and exit 0), with the spike as its peak.
    assert 150 * MiB <= result.guard.peak_rss_bytes < 400 * MiB


def _fake_interpreter(tmp_path: Path, program: str) -> str:
    """An executable that stands in for a codec runtime's python: it runs `program` with the
    arguments run_stage or PersistentWorker pass (`-m codecarena.worker ...`)."""
    script = tmp_path / "fake_worker.py"
    script.write_text(program)
    launcher = tmp_path / "python"
    launcher.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


# A worker that answers a job like codecarena.worker does, after touching as many MiB as the job's
# `input` says and freeing them; its report carries its own VmHWM, as the real worker's does, and it
# leaves an output, as a successful stage does.
FAKE_WORKER = textwrap.dedent(
    """
    import json, sys

    TEMPLATE = json.loads({template!r})

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    def run(job_path):
        job = json.load(open(job_path))
        data = b"\\x01" * (int(job["input"]) * 1024 * 1024)
        del data
        report = dict(TEMPLATE, stage=job["stage"], maxrss_bytes=hwm())
        with open(job["output"], "wb") as f:  # the output a successful stage leaves
            f.write(b"x")
        with open(job["report"], "w") as f:
            json.dump(report, f)

    if sys.argv[-1] == "--persistent":
        for line in sys.stdin:
            run(line.strip())
            print(json.dumps({{"job": line.strip(), "exit": 0}}), flush=True)
    else:
        run(sys.argv[-1])
    """
)


def _fake_worker(tmp_path: Path) -> str:
    template = StageReport(version=PROTOCOL_VERSION, stage="encode", ok=True, error="", pid=0, started_at=time.time(),
                           imports_s=0.0, load_s=0.0, io_s=0.0, compute_s=0.001, warm_compute_s=[], maxrss_bytes=0,
                           peak_device_memory_bytes=None, audio_s=1.0, model={}, facts={}, runtime={}, device=None)
    return _fake_interpreter(tmp_path, FAKE_WORKER.format(template=json.dumps(asdict(template))))


def _spike_job(tmp_path: Path, name: str, mib: int) -> Job:
    return Job.encode(Path(str(mib)), tmp_path / f"{name}.ccap", tmp_path / f"{name}.report.json", "pcm")


def _audited(stage: Stage, limits: StageLimits) -> list[str]:
    """What the audit says about a row holding this one stage."""
    row = SimpleNamespace(stages=[stage], status="ok" if stage.ok else "failed", limits=limits)
    return audit_stages(row, "row")  # type: ignore[arg-type]


@needs_hwm
def test_a_worker_that_spikes_and_exits_before_the_next_poll_fails_its_stage(tmp_path: Path) -> None:
    # The case: a run that exits 0 and whose own audit then finds a peak over the limit. With
    # a 5 s poll the guard reads once, at the start; the spike and the exit come before the next poll.
    limits = StageLimits(64 * MiB, guard_poll_s=5.0, stage_timeout_s=30)
    stage, report = run_stage("encode", _spike_job(tmp_path, "spike", 120), limits, StageFiles.scratch(tmp_path, "encode"),
                              _fake_worker(tmp_path))
    assert report is not None and report.ok and stage.exit_status == 0
    assert report.maxrss_bytes >= 120 * MiB
    assert stage.ok is False
    assert "passed the memory limit 64.0 MiB" in stage.error
    # One peak: the row's, the guard's, and the one the audit judges.
    assert stage.peak_rss_bytes == stage.guard.peak_rss_bytes >= report.maxrss_bytes
    assert stage.guard.fired is True
    assert _audited(stage, limits) == []


@needs_hwm
def test_a_worker_under_its_limit_is_ok_and_audits_clean(tmp_path: Path) -> None:
    limits = StageLimits(256 * MiB, guard_poll_s=5.0, stage_timeout_s=30)
    stage, report = run_stage("encode", _spike_job(tmp_path, "small", 20), limits, StageFiles.scratch(tmp_path, "encode"),
                              _fake_worker(tmp_path))
    assert stage.ok is True and stage.error == ""
    assert report is not None and 20 * MiB <= stage.peak_rss_bytes == stage.guard.peak_rss_bytes < 256 * MiB
    assert stage.guard.fired is False
    assert _audited(stage, limits) == []


@needs_hwm
def test_a_warm_job_that_spikes_between_polls_fails_and_each_job_has_its_own_peak(tmp_path: Path) -> None:
    limits = StageLimits(100 * MiB, guard_poll_s=5.0, stage_timeout_s=30)
    worker = PersistentWorker(_fake_worker(tmp_path), limits.memory_limit_bytes, tmp_path / "worker.log",
                              limits.guard_poll_s, limits.stage_timeout_s)
    try:
        files = StageFiles.scratch(tmp_path, "encode")
        first, _ = run_stage_warm("encode", _spike_job(tmp_path, "a", 60), files, worker)
        second, _ = run_stage_warm("encode", _spike_job(tmp_path, "b", 0), files, worker)
        over, _ = run_stage_warm("encode", _spike_job(tmp_path, "c", 150), files, worker)
        after, _ = run_stage_warm("encode", _spike_job(tmp_path, "d", 0), files, worker)
    finally:
        worker.stop()
    assert first.ok and 60 * MiB <= first.peak_rss_bytes < 100 * MiB
    # The same process served the second job: its peak is its own, not the first job's 60 MiB.
    assert second.ok and second.peak_rss_bytes < 50 * MiB
    assert over.ok is False and "passed the limit 100.0 MiB" in over.error
    assert over.guard.fired is True and over.peak_rss_bytes == over.guard.peak_rss_bytes >= 150 * MiB
    assert after.ok and after.peak_rss_bytes < 50 * MiB
    assert worker.starts == 2  # one process for the first three jobs, a fresh one after the kill
    for stage in (first, second, over, after):
        assert _audited(stage, limits) == []
