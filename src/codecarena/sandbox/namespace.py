"""Nothing a sandboxed stage starts outlives it: the worker runs as PID 1 of a PID namespace of its own.

The harness starts a sandboxed worker through util-linux `unshare --pid --fork --kill-child
--mount-proc` (as an ordinary user also `--user --map-current-user`, which a PID namespace needs):
the worker is the namespace's init, every process it starts (a `setsid` double-fork daemon
included) lives in the namespace and is reparented to it, and when it exits the kernel kills the
rest. `--kill-child` kills the worker when `unshare` dies (the harness's memory guard and timeout
kill the pair), and the private /proc shows the codec no process outside its namespace: the harness
cannot be named, signalled or read. A persistent worker serves many jobs, so after each one it kills
every other process of its namespace itself (`end_descendants`).

The memory guard reads the tree from `unshare`, whose own peak (about 1 MiB) is counted in the
stage's peak RSS. Where the launcher cannot work (no `unshare`, namespaces refused), the stage runs
without it and the row says why.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import time

#: Set by the harness in a sandboxed worker's environment when it had to start it without a namespace.
NO_NAMESPACE = "CODECARENA_NO_PID_NAMESPACE"


@functools.cache
def launcher() -> tuple[tuple[str, ...], str]:
    """The argv prefix that starts a command as PID 1 of a new PID namespace, and "" (probed once, by
    starting `true` through it); or () and why it cannot be used here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return (), "util-linux unshare is not installed"
    prefix = (unshare, "--pid", "--fork", "--kill-child", "--mount-proc",
              *(() if os.geteuid() == 0 else ("--user", "--map-current-user")))
    true = shutil.which("true") or "/bin/true"
    try:
        probe = subprocess.run([*prefix, true], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"{unshare} could not be started ({exc})"
    if probe.returncode != 0:
        why = " ".join(probe.stderr.split())[-200:] or f"exit status {probe.returncode}"
        return (), f"{' '.join(prefix)} failed: {why}"
    return prefix, ""


def is_init() -> bool:
    """Whether this process is PID 1 of its namespace (the launcher worked)."""
    return os.getpid() == 1


def end_descendants(deadline_s: float = 10.0) -> None:
    """Kill every other process of this PID namespace and reap them (the caller is its init, so all of
    them are its descendants, orphans included). kill(-1) from init reaches every process of the
    namespace but init itself; it is repeated until none is left, in case one forked meanwhile."""
    if not is_init():
        return
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            break  # nothing left to signal
        _reap(block=True)
    _reap(block=False)


def _reap(block: bool) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
