"""Run a command under an active memory guard.

The guard polls the resident set size of the whole process tree while it runs and kills the process
group as soon as the sum passes the limit, so a runaway worker is stopped, not merely reported.
"""

from __future__ import annotations

import ctypes
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
    fired: bool
    peak_rss_bytes: int  # highest polled RSS of the process tree
    polls: int
    timed_out: bool


@dataclass(frozen=True)
class GuardedResult:
    returncode: int
    spawn_time: float  # time.time() just before the process was started
    wall_s: float
    guard: GuardRecord


def tree_rss(proc: psutil.Process) -> int:
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            continue
    return total


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
        ps = psutil.Process(proc.pid)
        state = {"peak": 0, "polls": 0, "fired": False, "timed_out": False}
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                rss = tree_rss(ps)
                state["polls"] += 1
                state["peak"] = max(state["peak"], rss)
                if rss > limit_bytes:
                    state["fired"] = True
                    _kill_group(proc.pid)
                    return
                stop.wait(poll_s)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        # The timeout is enforced here, to the millisecond, not at the next memory poll.
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            state["timed_out"] = True
            _kill_group(proc.pid)
            returncode = proc.wait()
        wall = time.perf_counter() - start
        stop.set()
        watcher.join()
        # Grandchildren that outlived the worker must not keep running on our budget.
        _kill_group(proc.pid)
    finally:
        if log_path:
            log.close()  # type: ignore[union-attr]
    return GuardedResult(
        returncode=returncode,
        spawn_time=spawn_time,
        wall_s=wall,
        guard=GuardRecord(
            limit_bytes=limit_bytes,
            poll_s=poll_s,
            fired=bool(state["fired"]),
            peak_rss_bytes=int(state["peak"]),
            polls=int(state["polls"]),
            timed_out=bool(state["timed_out"]),
        ),
    )
