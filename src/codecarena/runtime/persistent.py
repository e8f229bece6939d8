"""A persistent worker: one long-lived `python -m codecarena.worker --persistent` in a codec runtime.

It keeps models loaded between jobs (the service uses it; so can warm execution). Jobs are the
same job files as for one-shot workers and leave the same stage reports, written into the worker's own
private folder, emptied before each job and copied out of after it (runtime/private.py). A user codec
never shares one: `WorkerSet` gives each of its configurations a worker of its own, started in its
sandbox (runtime/launch.py), which ends every process a job started once the job is done. The process runs in its
own process group under the same memory guard as one-shot workers: a watcher polls the tree's peak
RSS (guard.tree_peak_rss) and kills the group at the limit; the job in flight fails with that reason
and the next job starts a fresh process. Each job's peak is its own: the tree's high-water marks are
reset as the job is handed over, and read once more when it is answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import psutil

from codecarena.files import open_unlinked
from codecarena.rundir import WorkerFiles
from codecarena.runtime import private
from codecarena.runtime.guard import _kill_group, lifeline, reset_peaks, tree_peak_rss
from codecarena.runtime.launch import worker_command
from codecarena.runtime.protocol import Job, ProtocolError, StageReport, write_job
from codecarena.sandbox import for_family
from codecarena.specs import CodecSpec


class WorkerFailed(RuntimeError):
    """The persistent worker died or was killed while it held a job; it will be restarted."""


class PersistentWorker:
    def __init__(self, python: str, limit_bytes: int, log_path: Path, poll_s: float = 0.25,
                 timeout_s: float = 600.0, folder: Path | None = None, sandbox: str = "") -> None:
        """`folder`: its private folder (default: beside its log); `sandbox`: the user codec whose
        sandbox it runs in ("" for none)."""
        self.python, self.limit_bytes, self.log_path = python, limit_bytes, log_path
        self.folder = folder if folder is not None else log_path.with_name(f"{log_path.stem}.private")
        self.sandbox = sandbox
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self._lock = threading.Lock()
        # A reading and a job's reset never interleave: one taken before the reset must not land in the new job.
        self._readings = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self.fired = False
        self.timed_out = False
        self.peak_rss_bytes = 0  # over the worker's life
        self.job_peak_rss_bytes = 0  # over the job in flight (or the last one)
        self.job_polls = 0
        self.starts = 0

    def _start(self) -> subprocess.Popen[str]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(open_unlinked(self.log_path, append=True), "ab")
        private.prepare(self.folder)
        command, env = worker_command(self.python, self.sandbox, self.folder, "--persistent")
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                start_new_session=True, preexec_fn=lifeline(), env=env)
        self._proc, self.fired, self.timed_out, self.starts = proc, False, False, self.starts + 1
        threading.Thread(target=self._watch, args=(proc,), daemon=True).start()
        return proc

    def _watch(self, proc: subprocess.Popen[str]) -> None:
        while proc.poll() is None and not self._check(proc):
            time.sleep(self.poll_s)

    def _check(self, proc: subprocess.Popen[str]) -> bool:
        """One reading for the job in flight; over the limit, the guard fires and kills the group."""
        with self._readings:
            try:
                peak = tree_peak_rss(psutil.Process(proc.pid))
            except psutil.Error:  # already gone: nothing to read or kill
                return False
            self.job_polls += 1
            self.job_peak_rss_bytes = max(self.job_peak_rss_bytes, peak)
            self.peak_rss_bytes = max(self.peak_rss_bytes, peak)
            over = peak > self.limit_bytes
            if over:
                self.fired = True
                _kill_group(proc.pid)
            return over

    def _new_job(self, proc: subprocess.Popen[str]) -> None:
        with self._readings:
            try:
                reset_peaks(psutil.Process(proc.pid))
            except psutil.Error:
                pass  # it died since the check: the job's write fails and says so
            self.job_peak_rss_bytes, self.job_polls = 0, 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def submit(self, job: Job, job_path: Path) -> StageReport:
        """Run one job; its stage report (which may say ok=False with the worker's reason)."""
        with self._lock:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
            self._new_job(proc)
            private.prepare(self.folder)
            inner = private.into(job, self.folder)
            write_job(job_path, inner)
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(f"{job_path}\n")
                proc.stdin.flush()
                reply = self._read_line(proc)
            except (BrokenPipeError, OSError):
                reply = ""
            if not reply:
                self.stop()
                why = ("killed by the memory guard" if self.fired else
                       f"killed after the {self.timeout_s:g} s job timeout" if self.timed_out else "exited")
                raise WorkerFailed(f"persistent worker {why} while running {job_path}; see {self.log_path}")
            # A job shorter than the poll period would otherwise have no reading of its own, and a peak
            # since the last poll would go unjudged: over the limit, the job fails as if killed during it.
            if self._check(proc):
                self.stop()
                raise WorkerFailed(f"persistent worker killed by the memory guard after running {job_path}: its "
                                   f"peak RSS {self.job_peak_rss_bytes / 2**20:.1f} MiB passed the limit "
                                   f"{self.limit_bytes / 2**20:.1f} MiB between two polls; see {self.log_path}")
            try:
                done: dict[str, Any] = json.loads(reply)
                if done.get("job") != str(job_path):
                    raise ValueError(f"reply is for {done.get('job')!r}")
                return private.collect(inner, job)
            except (ValueError, ProtocolError, private.PlaceError) as exc:
                self.stop()
                raise WorkerFailed(f"persistent worker replied {reply.strip()!r} without a report: {exc}") from None

    def _read_line(self, proc: subprocess.Popen[str]) -> str:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(self.timeout_s)
        if reader.is_alive():
            self.timed_out = True
            _kill_group(proc.pid)
            reader.join(5)
            return ""
        return result[0] if result else ""

    def stop(self) -> None:
        if self._proc is not None:
            _kill_group(self._proc.pid)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self._proc = None
            private.discard(self.folder)
        if self._log is not None:
            self._log.close()
            self._log = None


class WorkerSet:
    """One persistent worker per codec runtime (interpreter) for the built-in units, and one per
    configuration of a user codec, in its sandbox: a user codec never shares a process, so it can
    touch no other codec's numbers (docs/security.md). Each is started on first use, its log and its
    private folder named by `files_of` (a run's `RunDir.worker`)."""

    def __init__(self, limit_bytes: int, files_of: Callable[[str], WorkerFiles], poll_s: float = 0.25,
                 timeout_s: float = 600.0) -> None:
        self.limit_bytes, self.files_of, self.poll_s, self.timeout_s = limit_bytes, files_of, poll_s, timeout_s
        self._workers: dict[tuple[str, str], PersistentWorker] = {}

    def get(self, python: str, spec: CodecSpec) -> PersistentWorker:
        """The worker for `spec`'s stages in the runtime `python`."""
        sandbox = for_family(spec.family)
        key = (python, spec.bare.canonical if sandbox else "")
        if key not in self._workers:
            name = f"{spec.bare.slug if sandbox else 'persistent'}-{len(self._workers)}-{os.getpid()}"
            files = self.files_of(name)
            self._workers[key] = PersistentWorker(python, self.limit_bytes, files.log, self.poll_s, self.timeout_s,
                                                  files.folder, sandbox)
        return self._workers[key]

    def stop(self) -> None:
        for worker in self._workers.values():
            worker.stop()
        self._workers.clear()
