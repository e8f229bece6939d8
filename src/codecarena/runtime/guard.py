"""Run a command under an active memory guard.

The guard polls the resident set size of the whole process tree while it runs and kills the process
group as soon as the sum passes the limit, so a runaway worker is stopped, not merely reported.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil


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


def default_memory_limit() -> int:
    """Half of physical memory: room for the harness and one more worker on the same machine."""
    return psutil.virtual_memory().total // 2


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
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    try:
        spawn_time = time.time()
        start = time.perf_counter()
        # A new session makes the worker the leader of its own process group, so one killpg
        # takes down anything it spawned too.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
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
                if timeout_s is not None and time.perf_counter() - start > timeout_s:
                    state["timed_out"] = True
                    _kill_group(proc.pid)
                    return
                stop.wait(poll_s)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
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


def parse_size(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1000000' -> bytes (binary multiples)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    number = raw.rstrip("KMGT")
    unit = raw[len(number):]
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"memory size {text!r} is not a number with an optional K/M/G/T unit") from None
    if unit not in units or not math.isfinite(value) or int(value * units[unit]) < 1:
        raise ValueError(f"memory size {text!r} is not a positive size such as 512M or 4G")
    return int(value * units[unit])
