"""Stopping a run: SIGINT/SIGTERM stop the pool in order and keep every finished row; SIGKILL of
the harness leaves no pool process or codec worker behind (Linux: parent-death signals)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from codecarena.input_sets import load_input_dir
from codecarena.executors import local
from codecarena.pipeline.execute import plan_tasks
from codecarena.pipeline.plan import assemble
from codecarena.references import prepare_reference
from codecarena.runtime.limits import parse_limits
from codecarena.specs import parse_spec
from conftest import codecarena

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="parent-death signals are Linux-only")

# Enough rows that work is still queued when the first row arrives (2 pool processes).
UTTERANCES = 20


def _dead(process: psutil.Process) -> bool:
    try:
        # A killed orphan may stay a zombie until init reaps it; it runs nothing.
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _survivors(processes: list[psutil.Process], within_s: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + within_s
    alive = processes
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if not _dead(p)]
        time.sleep(0.1)
    return alive


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _using(out: Path) -> list[psutil.Process]:
    """Live processes whose command line names the run directory (one-shot codec workers do)."""
    return [p for p in psutil.process_iter() if str(out) in _cmdline(p) and not _dead(p)]


def _lines(out: Path) -> list[str]:
    rows = out / "rows.jsonl"
    return rows.read_text().splitlines() if rows.exists() else []


def _many_utterances(speech_dir: Path, folder: Path) -> Path:
    folder.mkdir()
    clips = sorted(speech_dir.glob("*.wav"))
    for i in range(UTTERANCES):
        shutil.copy(clips[i % len(clips)], folder / f"u{i:02d}.wav")
    return folder


def _start_run(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as sink:
        # Its own session, as a shell job would be, so a group signal reaches only the run; SIGINT at
        # its default, as in a terminal (a test suite started as a background job inherits it ignored).
        return subprocess.Popen([sys.executable, "-m", "codecarena", *args], stdout=sink, stderr=sink,
                                start_new_session=True, env={**os.environ, "COLUMNS": "200"},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _run_until_mid_row(proc: subprocess.Popen[bytes], out: Path) -> list[psutil.Process]:
    """Wait until a row is written and a codec worker is running; every descendant seen on the way."""
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        tree = _descendants(proc.pid)
        seen.update((p.pid, p) for p in tree)
        if _lines(out) and any("codecarena.worker" in _cmdline(p) for p in tree):
            return list(seen.values())
        time.sleep(0.02)
    raise AssertionError("no row was written within 120 s")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "whole_group", "code"), [
    (signal.SIGINT, True, 130),  # a terminal's Ctrl-C: the harness's whole process group
    (signal.SIGTERM, False, 143),  # `kill PID`
])
def test_interrupt_cancels_queued_rows_keeps_finished_ones_and_resumes(
        speech_dir: Path, tmp_path: Path, signum: int, whole_group: bool, code: int) -> None:
    out = tmp_path / "run"
    args = ["run", "--input", str(_many_utterances(speech_dir, tmp_path / "many")), "--codec", "pcm:16",
            "--metrics", "none", "--workers", "2", "--out", str(out)]
    proc = _start_run(args, tmp_path / "first.log")
    seen = _run_until_mid_row(proc, out)
    before = _lines(out)
    if whole_group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    try:
        returncode = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the run did not stop within 15 s of the signal") from None
    log = (tmp_path / "first.log").read_text()
    assert returncode == code, log
    assert "interrupted; rerun the same command to resume" in log and "Traceback" not in log
    # Nothing keeps running: not the pool, not a codec worker.
    assert not _survivors(seen), "processes outlived the interrupted run"
    assert not _using(out)
    # Rows written before the signal are still there, byte for byte; queued rows never started.
    after = _lines(out)
    assert before and all(line in after for line in before)
    started = len(list(out.rglob("encode.job.json")))
    assert len(after) <= started < UTTERANCES, f"{started} of {UTTERANCES} rows were started"
    assert json.loads((out / "run.json").read_text())["finished"] is False

    rerun = codecarena(*args)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"{len(after)} complete rows resumed" in rerun.stdout
    assert len(_lines(out)) == UTTERANCES
    audit = codecarena("audit", out)
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.slow
def test_sigkill_of_the_harness_takes_the_pool_and_codec_workers_with_it(speech_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "--input", str(_many_utterances(speech_dir, tmp_path / "many")), "--codec", "pcm:16",
            "--metrics", "none", "--workers", "2", "--out", str(out)]
    proc = _start_run(args, tmp_path / "run.log")
    seen = _run_until_mid_row(proc, out)
    seen += _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    survivors = _survivors(seen)
    assert not survivors, [_cmdline(p) for p in survivors]
    assert not _using(out)


def _hanging_python(tmp_path: Path) -> Path:
    """An 'interpreter' that ignores its arguments and sleeps in a child: a codec stage that hangs,
    with a process of its own (killed only through its group)."""
    script = tmp_path / "hanging-python"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def terminal_sigint():  # type: ignore[no-untyped-def]
    """SIGINT raising KeyboardInterrupt in this process, as in a terminal: a test suite started as a
    background job inherits SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("terminal_sigint")
def test_rows_still_running_after_the_grace_are_killed(speech_dir: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "INTERRUPT_GRACE_S", 0.5)
    hanging = _hanging_python(tmp_path)
    out = tmp_path / "run"
    evalset = load_input_dir(_many_utterances(speech_dir, tmp_path / "many"))
    plan = assemble(evalset, (parse_spec("pcm:16"),), out, parse_limits(None), python=str(hanging))
    tasks = plan_tasks(plan, (), lambda utt: prepare_reference(utt, plan.run))
    seen: list[psutil.Process] = []

    def interrupt_once_both_stages_hang() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # This process's own resource tracker lives as long as it does.
            tree = [p for p in _descendants(os.getpid()) if "resource_tracker" not in _cmdline(p)]
            if sum(str(hanging) in _cmdline(p) for p in tree) == 2:
                seen.extend(tree)
                break
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_both_stages_hang)
    watcher.start()
    with pytest.raises(KeyboardInterrupt):
        list(local.LocalExecutor(workers=2).rows(tasks, plan))
    watcher.join()
    assert seen, "the stages did not start"
    assert not _survivors(seen), [_cmdline(p) for p in _survivors(seen)]
    # Only the two rows that were running ever started; the queued ones were stopped.
    assert len(list(out.rglob("encode.job.json"))) == 2


def _intermediate(code: str) -> subprocess.Popen[bytes]:
    """A Python process running `code` (which starts one child and then waits)."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], start_new_session=True)


def _only_child(parent: subprocess.Popen[bytes]) -> psutil.Process:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = _descendants(parent.pid)
        if children:
            return children[0]
        time.sleep(0.02)
    parent.kill()
    raise AssertionError("the child was not started within 30 s")


def _assert_child_dies_with_parent(parent: subprocess.Popen[bytes]) -> None:
    child = _only_child(parent)
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert not _survivors([child]), f"{_cmdline(child)} outlived its parent"
    finally:
        if not _dead(child):
            child.kill()


def test_a_guarded_worker_dies_when_its_parent_is_killed() -> None:
    parent = _intermediate("""
        from codecarena.runtime.guard import run_guarded
        run_guarded(["sleep", "60"], limit_bytes=1 << 30)
    """)
    _assert_child_dies_with_parent(parent)


def test_a_busy_persistent_worker_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    # An interpreter that never reads its stdin stands for a worker busy with a long job: the closed
    # pipe cannot stop it, only the parent-death signal can.
    busy = tmp_path / "busy-python"
    busy.write_text("#!/bin/sh\nexec sleep 60\n")
    busy.chmod(0o755)
    parent = _intermediate(f"""
        from pathlib import Path
        from codecarena.runtime.persistent import PersistentWorker
        from codecarena.runtime.protocol import Job
        work = Path({str(tmp_path)!r})
        job = Job.decode(work / "in.ccap", work / "out.wav", work / "report.json")
        PersistentWorker({str(busy)!r}, 1 << 30, work / "worker.log").submit(job, work / "job.json")
    """)
    _assert_child_dies_with_parent(parent)
