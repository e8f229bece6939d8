"""Templates: one process per codec runtime that has done a worker's imports, from which every cold
stage is a forked child (the template's own side is codecarena/worker_template.py).

A new interpreter per stage spends most of a short stage importing numpy, the codec's libraries and
codecarena. A template pays that once per runtime per row runner: it is started with the runtime's
interpreter (`python -m codecarena.worker_template FD MODULE...`), imports, stops numpy's BLAS pool,
checks it holds one thread, and then runs no codec code; each stage is a child it forks, which has
seen no audio, no payload and no model before, runs `codecarena.worker.run(JOB)` and exits. The
harness talks to it over a SOCK_SEQPACKET socket pair (the stage's log travels as a descriptor).

The child is guarded as a stage started with exec is (runtime/guard.py): it leads its own process
group, the memory guard polls its tree and kills the group at the limit, the stage timeout kills it,
and it dies with the template, which dies with the process that started it (parent-death signal).
Its peak RSS is its own: its high-water mark, restarted at the fork, less its RSS at the fork (the
template's pages, which it shares and which are counted once, in the template). A page of the
template the child writes to is copied without raising its RSS, so it is not counted; the template
freezes its objects for the collector (gc.freeze), so that collections in the child do not write to
them.

A template that dies (crash, kill, memory) is started again and the stage retried once in a fresh
child, its record saying so (`StageLaunch.process`); a template that cannot start, or refuses (its
imports left threads running), is not tried again in this run: its runtime's stages run in new
interpreters, and their records say why. Why not `multiprocessing`'s forkserver: it is one per
process (a run has one template per runtime), it starts from the parent's interpreter and hands the
child the parent's sys.path (a runtime's own virtualenv must not see the harness's packages), and it
puts a resource tracker and a second server process beside each template; the fork loop here is a
hundred lines that do exactly what a stage needs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecarena.files import open_unlinked
from codecarena.rundir import WorkerFiles
from codecarena.runtime import private
from codecarena.runtime.guard import GuardedResult, _kill_group, guard_process, lifeline
from codecarena.runtime.limits import StageLimits

#: A stage's `process` when it ran in a new interpreter.
FRESH = "fresh interpreter"
MESSAGE_BYTES = 65536
# A template imports torch in seconds on an idle machine; this is for a loaded one.
START_TIMEOUT_S = 300.0


class TemplateDied(RuntimeError):
    """The template exited while it held a stage; the message says how."""


@dataclass(frozen=True)
class StageLaunch:
    """How one stage was started: its guarded result and its `process` record."""
    result: GuardedResult
    process: str


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


class Template:
    """One template process in a runtime; started by `TemplateSet`, which restarts it when it dies."""

    def __init__(self, python: str, modules: tuple[str, ...], files: WorkerFiles) -> None:
        self.python, self.modules, self.files = python, modules, files
        self.ready: dict[str, Any] = {}
        log = open_unlinked(files.log, append=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([python, "-m", "codecarena.worker_template", str(theirs.fileno()), *modules],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(theirs.fileno(),),
                                         start_new_session=True, preexec_fn=lifeline())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            os.close(log)
        self.sock = ours

    def _receive(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The template's next message; None when none came within `timeout_s`; TemplateDied when it exited."""
        self.sock.settimeout(timeout_s)
        try:
            message = self.sock.recv(MESSAGE_BYTES)
        except TimeoutError:
            return None
        except OSError:
            message = b""
        if not message:
            raise TemplateDied(self._death())
        data: dict[str, Any] = json.loads(message)
        return data

    def _death(self) -> str:
        try:
            status = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(self.proc.pid)
            status = self.proc.wait()
        return f"template {self.proc.pid} of {self.python} exited with status {status} (see {self.files.log})"

    def wait_ready(self) -> str:
        """"" once the template serves, else why it does not (it has exited then)."""
        if self.ready:
            return ""
        try:
            message = self._receive(START_TIMEOUT_S)
        except TemplateDied as died:
            return str(died)
        if message is None or "ready" not in message:
            self.stop()
            return (f"template of {self.python} refused: {message['refused']}" if message and "refused" in message
                    else f"template of {self.python} did not start within {START_TIMEOUT_S:g} s")
        self.ready = message["ready"]
        return ""

    @property
    def process(self) -> str:
        """What a stage forked from it records."""
        imports = ", ".join(name for name in self.ready["imports"] if not name.startswith("codecarena.")
                            or name == "codecarena.worker" or name.startswith("codecarena.codecs."))
        return (f"forked from template {self.ready['pid']} (imports: {imports}; imported in "
                f"{self.ready['imports_s']:.2f} s, RSS {mib(self.ready['rss_bytes'])})")

    def run(self, job: Path, log_path: Path, limits: StageLimits) -> tuple[GuardedResult, int]:
        """One stage in a forked child, guarded; its result and the bytes it shared with the template at
        the fork (which its peak leaves out). TemplateDied when the template exits meanwhile."""
        log = open_unlinked(log_path)
        try:
            spawn_time = time.time()
            start = time.perf_counter()
            socket.send_fds(self.sock, [json.dumps({"job": str(job)}).encode()], [log])
        except OSError:
            raise TemplateDied(self._death()) from None
        finally:
            os.close(log)
        started = self._receive(None)
        assert started is not None
        if "started" not in started:
            raise TemplateDied(f"template {self.ready['pid']} answered {started}")
        pid, shared = int(started["started"]), int(started["shared_bytes"])

        def wait(timeout: float | None) -> int | None:
            exited = self._receive(timeout)
            return None if exited is None else int(exited["status"])

        try:
            returncode, guard = guard_process(pid, wait, limit_bytes=limits.memory_limit_bytes,
                                              poll_s=limits.guard_poll_s, timeout_s=limits.stage_timeout_s,
                                              shared_bytes=shared)
        except TemplateDied:
            _kill_group(pid)
            raise
        return GuardedResult(returncode=returncode, spawn_time=spawn_time, wall_s=time.perf_counter() - start,
                             guard=guard), shared

    def stop(self) -> None:
        self.sock.close()
        _kill_group(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class TemplateSet:
    """A row runner's templates: one per runtime interpreter, importing the adapter modules its
    families need (`modules`: interpreter -> adapter modules). `start` starts them all at once (they
    import while the runner does other work); each is waited for at its first stage."""

    def __init__(self, modules: dict[str, tuple[str, ...]], files_of: Callable[[str], WorkerFiles]) -> None:
        self.modules, self.files_of = modules, files_of
        self._templates: dict[str, Template] = {}
        self._refused: dict[str, str] = {}
        self.starts = 0

    def start(self, pythons: Iterable[str] | None = None) -> None:
        for python in pythons if pythons is not None else self.modules:
            self._get(python)

    def _get(self, python: str) -> Template | str:
        if python in self._refused:
            return self._refused[python]
        if python not in self._templates:
            self.starts += 1
            files = self.files_of(f"template-{self.starts}-{os.getpid()}")
            files.log.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._templates[python] = Template(python, self.modules.get(python, ()), files)
            except OSError as exc:
                self._refused[python] = f"template of {python} could not be started ({exc})"
                return self._refused[python]
        return self._templates[python]

    def get(self, python: str) -> Template | str:
        """The serving template of `python`, or why its stages run in new interpreters."""
        template = self._get(python)
        if isinstance(template, str):
            return template
        why = template.wait_ready()
        if why:
            del self._templates[python]
            self._refused[python] = why
            return why
        return template

    def launch(self, python: str, job: Path, log_path: Path, limits: StageLimits,
               folder: Path) -> StageLaunch | str:
        """One stage forked from `python`'s template, retried once in a fresh child of a new template
        (its private `folder` emptied again) when the template dies while it holds it; why not, when
        there is no template (the stage then runs in a new interpreter). TemplateDied when the second
        template dies too."""
        template = self.get(python)
        if isinstance(template, str):
            return template
        died = ""
        for attempt in range(2):
            try:
                result, shared = template.run(job, log_path, limits)
            except TemplateDied as exc:
                self._templates.pop(python, None)
                template.stop()
                if attempt == 1:
                    raise TemplateDied(f"{died}; its replacement died too: {exc}") from None
                died = str(exc)
                private.prepare(folder)
                template = self.get(python)
                if isinstance(template, str):
                    raise TemplateDied(f"{died}; no replacement: {template}") from None
                continue
            process = f"{template.process}; {mib(shared)} shared with it at the fork, not in this stage's peak"
            if died:
                process += f"; retried in a new template after the first died: {died}"
            return StageLaunch(result, process)
        raise AssertionError("unreachable")

    def stop(self) -> None:
        for template in self._templates.values():
            template.stop()
        self._templates.clear()
