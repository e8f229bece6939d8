"""Launching one codec stage (encode, decode, replay) and turning what happened into a `Stage` record.

A cold stage is a fresh worker under the memory guard and the stage timeout: a child forked from its
runtime's template (runtime/templates.py) when the caller holds templates, else a new interpreter,
`python -m codecarena.worker JOB.json` (a user codec's always, in its sandbox, runtime/launch.py); its
record says which (`process`). A warm stage goes to a persistent worker that keeps the model loaded. Either way the worker writes into a private folder, from which the
harness places the job's output and report where the job names them (runtime/private.py); where the
job file, the log and the private folder are is the caller's `StageFiles` (a run's come from its
`RunDir`, rundir.py), and the
record holds the worker's own timing split, the guard's record and the RTFs derived from them. The stage's
peak RSS is its guard record's: the guard's readings with the worker's own final peak folded in, so a
stage whose peak passed its limit between two polls is failed for it, like one the guard killed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from codecarena.rundir import StageFiles
from codecarena.runtime import private
from codecarena.runtime.guard import GuardRecord, run_guarded, with_final_peak
from codecarena.runtime.launch import worker_command
from codecarena.runtime.limits import StageLimits
from codecarena.runtime.persistent import PersistentWorker, WorkerFailed
from codecarena.runtime.protocol import Job, ProtocolError, StageReport, write_job
from codecarena.runtime.templates import FRESH, StageLaunch, TemplateDied, TemplateSet

#: A warm stage's `process`.
PERSISTENT = "persistent worker"


@dataclass(frozen=True)
class Stage:
    name: str  # "encode", "decode" or "replay"
    exit_status: int
    ok: bool
    error: str
    wall_s: float  # spawn to exit, as the harness saw it
    process_start_s: float  # spawn until the worker's first statement
    imports_s: float
    load_s: float
    io_s: float
    compute_s: float  # the first (cold) codec call
    warm_compute_s: list[float]
    cold_rtf: float | None  # (process start + imports + load + io + compute) / audio seconds
    warm_rtf: float | None  # median warm compute / audio seconds; None without warm repeats
    peak_rss_bytes: int  # the guard record's peak: its readings and the worker's own VmHWM (guard.with_final_peak)
    guard: GuardRecord
    # What process ran it: "fresh interpreter", "forked from template ... (imports: ...)" (runtime/templates.py)
    # or "persistent worker"; None in rows before version 10.
    process: str | None


def _report_times(report: StageReport | None) -> dict[str, float]:
    """A stage's timing split as its worker reported it (zeros when no report came back)."""
    return {key: getattr(report, key) if report else 0.0 for key in ("imports_s", "load_s", "io_s", "compute_s")}


def _over_limit(name: str, guard: GuardRecord) -> str:
    """Why a stage whose peak passed its limit is failed although the guard had nothing left to kill."""
    return (f"{name} worker's peak RSS {guard.peak_rss_bytes / 2**20:.1f} MiB passed the memory limit "
            f"{guard.limit_bytes / 2**20:.1f} MiB between two guard polls")


def _launch(job_path: Path, limits: StageLimits, files: StageFiles, python: str, sandbox: str,
            templates: TemplateSet | None) -> StageLaunch:
    """Start the stage's worker and guard it until it exits: forked from its runtime's template when
    there is one, else a new interpreter (a user codec's always: its worker enters its sandbox as
    PID 1 of a PID namespace of its own before it imports anything, docs/security.md)."""
    why = ""
    if templates is not None and sandbox:
        why = "a user codec's worker, started in its sandbox"
    elif templates is not None:
        launched = templates.launch(python, job_path, files.log, limits, files.folder)
        if isinstance(launched, StageLaunch):
            return launched
        why = launched
    command, env = worker_command(python, sandbox, files.folder, str(job_path))
    result = run_guarded(command, limit_bytes=limits.memory_limit_bytes, poll_s=limits.guard_poll_s,
                         timeout_s=limits.stage_timeout_s, log_path=files.log, env=env)
    return StageLaunch(result, f"{FRESH} ({why})" if why else FRESH)


def run_stage(name: str, job: Job, limits: StageLimits, files: StageFiles, python: str,
              sandbox: str = "", templates: TemplateSet | None = None) -> tuple[Stage, StageReport | None]:
    """One stage in a fresh worker writing into `files.folder`: a child forked from its runtime's
    template in `templates`, or a new interpreter (without `templates`, and for user codec `sandbox`,
    in its sandbox); the job's output and report are placed where it names them."""
    folder = files.folder
    private.prepare(folder)
    inner = private.into(job, folder)
    write_job(files.job, inner)
    Path(job.report).unlink(missing_ok=True)
    try:
        try:
            launched = _launch(files.job, limits, files, python, sandbox, templates)
        except TemplateDied as exc:
            return _template_failure(name, limits, str(exc)), None
        result = launched.result
        killed = result.guard.fired
        report: StageReport | None = None
        report_error = ""
        if Path(inner.report).exists() and not killed and not result.guard.timed_out:
            try:
                report = private.collect(inner, job)
            except (ProtocolError, private.PlaceError) as exc:
                report_error = str(exc)
    finally:
        private.discard(folder)
    guard = with_final_peak(result.guard, report.maxrss_bytes if report else 0)
    peak = guard.peak_rss_bytes
    if killed:
        error = (f"memory guard killed the {name} worker: process tree RSS {peak / 2**20:.1f} MiB "
                 f"passed the limit {guard.limit_bytes / 2**20:.1f} MiB")
    elif guard.fired:
        error = _over_limit(name, guard)
    elif guard.timed_out:
        error = f"{name} worker killed after the {limits.stage_timeout_s:g} s stage timeout"
    elif report is None:
        error = report_error or f"{name} worker exited with status {result.returncode} and no report (see {files.log})"
    elif not report.ok:
        error = f"{name}: {report.error}"
    elif result.returncode != 0:
        error = f"{name} worker reported success but exited with status {result.returncode}"
    else:
        error = ""
    cold_rtf = warm_rtf = None
    process_start = 0.0
    if report is not None and report.audio_s > 0:
        process_start = max(0.0, report.started_at - result.spawn_time)
        cold = process_start + report.imports_s + report.load_s + report.io_s + report.compute_s
        cold_rtf = cold / report.audio_s
        if report.warm_compute_s:
            warm_rtf = statistics.median(report.warm_compute_s) / report.audio_s
    stage = Stage(
        name=name, exit_status=result.returncode, ok=not error, error=error, wall_s=result.wall_s,
        process_start_s=process_start,
        **_report_times(report),
        warm_compute_s=list(report.warm_compute_s) if report else [],
        cold_rtf=cold_rtf, warm_rtf=warm_rtf, peak_rss_bytes=peak, guard=guard, process=launched.process,
    )
    return stage, report


def _template_failure(name: str, limits: StageLimits, why: str) -> Stage:
    """A stage whose template died twice: it failed with that reason, and nothing of it was measured."""
    guard = GuardRecord(limit_bytes=limits.memory_limit_bytes, poll_s=limits.guard_poll_s, fired=False,
                        peak_rss_bytes=0, polls=0, timed_out=False)
    return Stage(name=name, exit_status=-1, ok=False, error=f"{name}: {why}", wall_s=0.0, process_start_s=0.0,
                 **_report_times(None), warm_compute_s=[], cold_rtf=None, warm_rtf=None, peak_rss_bytes=0,
                 guard=guard, process="forked from template (its template died twice)")


def run_stage_warm(name: str, job: Job, files: StageFiles,
                   worker: PersistentWorker) -> tuple[Stage, StageReport | None]:
    """The same stage through a persistent worker (whose own private folder it writes into): no
    process start, the model already loaded after its first job. A worker that dies fails this
    stage only; the next job starts a new worker."""
    Path(job.report).unlink(missing_ok=True)
    start = time.perf_counter()
    report: StageReport | None
    try:
        report = worker.submit(job, files.job)
        error = "" if report.ok else f"{name}: {report.error}"
    except WorkerFailed as exc:
        report, error = None, f"{name}: {exc}"
    wall = time.perf_counter() - start
    guard = with_final_peak(
        GuardRecord(limit_bytes=worker.limit_bytes, poll_s=worker.poll_s, fired=worker.fired,
                    peak_rss_bytes=worker.job_peak_rss_bytes, polls=worker.job_polls, timed_out=worker.timed_out),
        report.maxrss_bytes if report else 0)
    if guard.fired and report is not None:
        # The worker's own peak, where the guard's readings cannot see one (no VmHWM), passed the limit.
        error = _over_limit(name, guard)
    peak = guard.peak_rss_bytes
    warm_rtf = report.compute_s / report.audio_s if report is not None and report.audio_s > 0 else None
    stage = Stage(
        name=name, exit_status=0 if not error else 2, ok=not error, error=error, wall_s=wall, process_start_s=0.0,
        **_report_times(report),
        warm_compute_s=[], cold_rtf=None, warm_rtf=warm_rtf, peak_rss_bytes=peak, guard=guard,
        process=PERSISTENT,
    )
    return stage, report
