"""A persistent worker: one long-lived `python -m codecarena.worker --persistent` in a codec runtime.

It keeps models loaded between jobs (the service uses it; so can warm execution). Jobs are the
same job files as for one-shot workers and leave the same stage reports. The process runs in its
own process group under the same memory guard as one-shot workers: a watcher polls the tree's RSS
and kills the group at the limit; the job in flight fails with that reason and the next job starts
a fresh process.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

import psutil

from codecarena.runtime.guard import _kill_group, tree_rss
from codecarena.runtime.protocol import Job, ProtocolError, StageReport, read_report, write_job


class WorkerFailed(RuntimeError):
    """The persistent worker died or was killed while it held a job; it will be restarted."""


class PersistentWorker:
    def __init__(self, python: str, limit_bytes: int, log_path: Path, poll_s: float = 0.25,
                 timeout_s: float = 600.0) -> None:
        self.python, self.limit_bytes, self.log_path = python, limit_bytes, log_path
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self.fired = False
        self.peak_rss_bytes = 0
        self.starts = 0

    def _start(self) -> subprocess.Popen[str]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        proc = subprocess.Popen([self.python, "-m", "codecarena.worker", "--persistent"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True)
        self._proc, self.fired, self.starts = proc, False, self.starts + 1
        threading.Thread(target=self._watch, args=(proc,), daemon=True).start()
        return proc

    def _watch(self, proc: subprocess.Popen[str]) -> None:
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            rss = tree_rss(ps)
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
            if rss > self.limit_bytes:
                self.fired = True
                _kill_group(proc.pid)
                return
            time.sleep(self.poll_s)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def submit(self, job: Job, job_path: Path) -> StageReport:
        """Run one job; its stage report (which may say ok=False with the worker's reason)."""
        with self._lock:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
            write_job(job_path, job)
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(f"{job_path}\n")
                proc.stdin.flush()
                reply = self._read_line(proc)
            except (BrokenPipeError, OSError):
                reply = ""
            if not reply:
                self.stop()
                why = "killed by the memory guard" if self.fired else "exited or timed out"
                raise WorkerFailed(f"persistent worker {why} while running {job_path}; see {self.log_path}")
            try:
                done: dict[str, Any] = json.loads(reply)
                if done.get("job") != str(job_path):
                    raise ValueError(f"reply is for {done.get('job')!r}")
                return read_report(Path(job.report))
            except (ValueError, ProtocolError) as exc:
                self.stop()
                raise WorkerFailed(f"persistent worker replied {reply.strip()!r} without a report: {exc}") from None

    def _read_line(self, proc: subprocess.Popen[str]) -> str:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(self.timeout_s)
        if reader.is_alive():
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
        if self._log is not None:
            self._log.close()
            self._log = None
