"""A template: a process in a codec runtime that has done a worker's imports and nothing else, and forks
one fresh worker per stage (the harness's side is runtime/templates.py).

`python -m codecarena.worker_template FD MODULE...`: FD is this process's end of a SOCK_SEQPACKET
socket pair with the harness, each MODULE an adapter module to import besides what every stage
imports (`COMMON`). The template imports them, then runs no codec code at all: it loads no model,
reads no audio or payload, runs no torch operation and keeps no thread but its own. numpy's OpenBLAS
starts its thread pool as it loads; one empty fork runs OpenBLAS's own fork handler, which stops the
pool (a child starts its own at its first BLAS call, as a new interpreter does), and the template
then counts its threads: with more than one it refuses to serve, saying which, and the harness
starts new interpreters instead. It answers `{"ready": ...}` (its imports, their time, its RSS) or
`{"refused": why}`.

Then, per request `{"job": PATH}` with the stage's log as the message's one descriptor, it forks a
child that becomes the leader of a session of its own, dies with the template (parent-death signal),
writes to the log, restarts its peak RSS (Linux `clear_refs`), reseeds numpy's global generator from
the OS if the template imported it (a new interpreter seeds it so; Python's `random` reseeds itself
after a fork) and runs
`codecarena.worker.run(PATH)` exactly as `python -m codecarena.worker PATH` would, then exits. The
template answers `{"started": pid, "shared_bytes": n}` (n: the child's RSS at the fork, all of it
pages of the template, which its peak leaves out) and, once the child has exited,
`{"exited": pid, "status": code}` (negative: killed by that signal). The child stays a zombie until
the next request, so the harness can kill its process group without the pid being reused meanwhile.
The template exits when the socket closes, and dies with the harness.
"""

import time

STARTED_AT = time.time()

import ctypes  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

#: What every stage imports (codecarena.worker imports the rest lazily, inside `run`).
COMMON = ("numpy", "soundfile", "soxr", "codecarena.worker", "codecarena.runtime.protocol", "codecarena.payload",
          "codecarena.specs", "codecarena.codecs.loading", "codecarena.sandbox.enter", "codecarena.pcm16",
          "codecarena.files")
#: Imported as well where torch is: what a torch family's stage asks of its device.
TORCH_COMMON = ("codecarena.device_probe",)
# prctl(2): the signal this process gets when its parent dies. Resolved once, before any fork.
_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl
MESSAGE_BYTES = 65536


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _threads() -> list[str]:
    """The names of this process's threads."""
    names = []
    for task in sorted(os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
                names.append(comm.read().strip())
        except OSError:
            names.append(f"thread {task}")
    return names


def _import(modules: list[str]) -> tuple[list[str], dict[str, str]]:
    """Import each module; the ones imported, and why each of the others was not (its stage then
    imports it itself and fails, or not, as a new interpreter's would)."""
    done: list[str] = []
    failed: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - an adapter's dependency may raise anything, SystemExit included
            failed[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            continue
        done.append(name)
    return done, failed


def _quiesce() -> None:
    """One empty fork: OpenBLAS's fork handler stops its thread pool before any fork."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _resident() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _restart_peak() -> int:
    """Restart this process's high-water mark from its RSS now, which is returned: the pages it
    shares with the template. Where the kernel refuses, 0: the peak then counts the template too
    (overstated, never understated)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
        return _resident()
    except OSError:
        return 0


def _reseed() -> None:
    """Seed numpy's global generator from the OS, as a new interpreter's is, if the template imported
    it; numpy imports `numpy.random` lazily, so where the template did not, the child imports and
    seeds it itself at its first use (importing it here would cost a stage 10-30 ms for nothing)."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _die_with(parent: int) -> None:
    if _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(71)


def _child(sock: socket.socket, job: str, log: int, report: int, parent: int) -> None:
    """The forked stage: never returns."""
    code = 70
    try:
        import codecarena.worker as worker

        worker.STARTED_AT = time.time()
        os.setsid()
        _die_with(parent)
        sock.close()
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        shared = _restart_peak()
        os.write(report, shared.to_bytes(8, "little"))
        os.close(report)
        worker.SHARED_AT_FORK = shared
        sys.argv = [worker.__file__, job]
        _reseed()
        gc.enable()
        code = worker.run(Path(job))
    except BaseException:  # noqa: BLE001 - whatever happened, the child exits here and says why in its log
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _status(pid: int) -> int:
    """The exit status of child `pid` once it has exited, as subprocess gives it, leaving it a zombie."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    assert info is not None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _fork(sock: socket.socket, job: str, log: int) -> int:
    """One stage: fork its child and answer when it started and when it exited; its pid."""
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        _child(sock, job, log, write, parent)
    os.close(write)
    os.close(log)
    shared = b""
    while len(shared) < 8:
        chunk = os.read(read, 8 - len(shared))
        if not chunk:  # the child died before it could say
            break
        shared += chunk
    os.close(read)
    _send(sock, {"started": pid, "shared_bytes": int.from_bytes(shared, "little") if len(shared) == 8 else 0})
    _send(sock, {"exited": pid, "status": _status(pid)})
    return pid


def serve(sock: socket.socket, modules: list[str]) -> None:
    gc.disable()  # no collection moves or touches what the children share
    imported, failed = _import([*COMMON, *modules])
    if "torch" in sys.modules:
        more, more_failed = _import(list(TORCH_COMMON))
        imported, failed = imported + more, {**failed, **more_failed}
    _quiesce()
    threads = _threads()
    if len(threads) != 1:
        _send(sock, {"refused": f"its imports left {len(threads)} threads running ({', '.join(threads)}); forking "
                                "would copy one of them and none of the others"})
        return
    gc.collect()
    gc.freeze()
    _send(sock, {"ready": {"pid": os.getpid(), "imports": imported, "failed": failed,
                           "imports_s": time.time() - STARTED_AT, "rss_bytes": _resident()}})
    zombie = 0
    while True:
        message, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 1)
        if zombie:
            os.waitpid(zombie, 0)
            zombie = 0
        if not message:
            return
        try:
            job = json.loads(message)["job"]
        except (ValueError, KeyError, TypeError):
            job = None
        if len(fds) != 1 or not isinstance(job, str):
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": "a request is {\"job\": PATH} with the stage's log as its one descriptor"})
            continue
        zombie = _fork(sock, job, fds[0])


def main() -> None:
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        print("usage: python -m codecarena.worker_template FD [MODULE...]", file=sys.stderr)
        sys.exit(64)
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        serve(sock, sys.argv[2:])
    except (BrokenPipeError, ConnectionResetError):
        pass  # the harness went away: nothing is left to serve
    sys.exit(0)


if __name__ == "__main__":
    main()
