"""Run a command under an active memory guard.

The guard polls the process tree while it runs and kills the process group as soon as the sum of its
members' peak RSS passes the limit, so a runaway worker is stopped, not merely reported. Each
member's peak is the kernel's high-water mark (Linux's VmHWM), not its RSS at the moment of the poll:
a spike that comes and goes between two polls still shows at the next one. A peak known only after
the last poll (a worker's own VmHWM in its report) is judged the same way (`with_final_peak`), so the
guard's verdict is always on the peak the row records.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from codecarena.files import open_unlinked


@dataclass(frozen=True)
class GuardRecord:
    limit_bytes: int
    poll_s: float
    fired: bool  # the peak passed the limit: the guard killed the tree, or found it after the exit (with_final_peak)
    peak_rss_bytes: int  # the tree's peak RSS (tree_peak_rss), the value judged against the limit
    polls: int
    timed_out: bool


@dataclass(frozen=True)
class GuardedResult:
    returncode: int
    spawn_time: float  # time.time() just before the process was started
    wall_s: float
    guard: GuardRecord


def _members(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for member in _members(proc):
        try:
            total += member.memory_info().rss
        except psutil.Error:
            continue
    return total


def _high_water_mark(pid: int) -> int | None:
    """The process's peak RSS since it started (or since `reset_peaks`); None where /proc has no VmHWM
    (another system, a process already exited)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def tree_peak_rss(proc: psutil.Process) -> int:
    """The sum over the live members of the tree of each one's high-water mark (its RSS now where the
    system keeps none). It is at least the tree's RSS now and at least every live member's own peak;
    for a one-process worker it is that process's peak exactly, and for a tree it may exceed the
    simultaneous peak (members peaking at different times), never fall short of it."""
    total = 0
    for member in _members(proc):
        mark = _high_water_mark(member.pid)
        if mark is None:
            try:
                mark = member.memory_info().rss
            except psutil.Error:
                continue
        total += mark
    return total


def reset_peaks(proc: psutil.Process) -> None:
    """Start every member's high-water mark afresh from its RSS now (Linux: 5 to /proc/PID/clear_refs),
    so that a long-lived worker's next readings cover its next job only. Where that is refused the
    marks keep an earlier job's peak: the next job's peak is overstated, not missed (and an earlier
    peak over the limit already had the worker killed)."""
    for member in _members(proc):
        try:
            with open(f"/proc/{member.pid}/clear_refs", "w", encoding="ascii") as clear_refs:
                clear_refs.write("5")
        except OSError:
            continue


def with_final_peak(record: GuardRecord, peak_bytes: int) -> GuardRecord:
    """The record once a peak measured after the last poll is known (the worker's own VmHWM from its
    report). The guard's verdict is taken on the same peak the row records and the audit checks: over
    the limit, the guard fires even though the process already exited and nothing was left to kill."""
    peak = max(record.peak_rss_bytes, peak_bytes)
    return dataclasses.replace(record, peak_rss_bytes=peak, fired=record.fired or peak > record.limit_bytes)


# prctl(2) option: the signal this process gets when the thread that started it exits.
_PR_SET_PDEATHSIG = 1
# Resolved once in the parent: the child calls it between fork and exec, where loading a library could deadlock.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies, even by SIGKILL (Linux only; elsewhere a no-op).

    The kernel ties the signal to the parent *thread* that started this process, so start
    long-lived children only from a thread that lives as long as they should. A parent that died
    before the request took effect is caught by the pid check: then this process dies at once."""
    if _prctl is None:
        return
    if _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def parent_death_preexec() -> Callable[[], None]:
    """A Popen `preexec_fn` that makes the child die with this process."""
    return functools.partial(die_with_parent, os.getpid())


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def lifeline() -> Callable[[], None] | None:
    """How a long-lived child (a persistent worker, a template) dies with this process. The kernel's
    parent-death signal follows the thread that started the child, so it is asked for only from the
    main thread, which lives as long as the process (a row runner's; the service's first worker). A
    child started from another thread relies on its pipe or socket to this process instead: when this
    process dies it closes, and the child exits once the job it holds is done."""
    return parent_death_preexec() if threading.current_thread() is threading.main_thread() else None


def guard_process(pid: int, wait: Callable[[float | None], int | None], *, limit_bytes: int, poll_s: float,
                  timeout_s: float | None, shared_bytes: int = 0) -> tuple[int, GuardRecord]:
    """Guard the running process `pid` (the leader of its own process group) until `wait(timeout)`
    gives its exit status (None: still running after `timeout`); its exit status and guard record.
    The tree's peak is its high-water marks less `shared_bytes`, the pages a process forked from a
    template held at the fork (runtime/templates.py; 0 for a process started with exec)."""
    try:
        ps: psutil.Process | None = psutil.Process(pid)
    except psutil.Error:  # already gone: its exit status still comes from `wait`
        ps = None
    state = {"peak": 0, "polls": 0, "fired": False, "timed_out": False}
    stop = threading.Event()

    def watch() -> None:
        while ps is not None and not stop.is_set():
            peak = max(0, tree_peak_rss(ps) - shared_bytes)
            state["polls"] += 1
            state["peak"] = max(state["peak"], peak)
            if peak > limit_bytes:
                state["fired"] = True
                _kill_group(pid)
                return
            stop.wait(poll_s)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # The timeout is enforced here, to the millisecond, not at the next memory poll.
        returncode = wait(timeout_s)
        if returncode is None:
            state["timed_out"] = True
            _kill_group(pid)
            returncode = wait(None)
            assert returncode is not None
    finally:
        stop.set()
        watcher.join()
    # Grandchildren that outlived the worker must not keep running on our budget.
    _kill_group(pid)
    return returncode, GuardRecord(limit_bytes=limit_bytes, poll_s=poll_s, fired=bool(state["fired"]),
                                   peak_rss_bytes=int(state["peak"]), polls=int(state["polls"]),
                                   timed_out=bool(state["timed_out"]))


def _waiter(proc: subprocess.Popen[bytes]) -> Callable[[float | None], int | None]:
    def wait(timeout: float | None) -> int | None:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    return wait


def run_guarded(
    cmd: list[str],
    *,
    limit_bytes: int,
    poll_s: float = 0.25,
    timeout_s: float | None = None,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
) -> GuardedResult:
    log = open(open_unlinked(log_path), "wb") if log_path else subprocess.DEVNULL
    try:
        spawn_time = time.time()
        start = time.perf_counter()
        # A new session makes the worker the leader of its own process group, so one killpg
        # takes down anything it spawned too.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env, preexec_fn=parent_death_preexec())
        returncode, guard = guard_process(proc.pid, _waiter(proc), limit_bytes=limit_bytes, poll_s=poll_s,
                                          timeout_s=timeout_s)
        wall = time.perf_counter() - start
    finally:
        if log_path:
            log.close()  # type: ignore[union-attr]
    return GuardedResult(returncode=returncode, spawn_time=spawn_time, wall_s=wall, guard=guard)
