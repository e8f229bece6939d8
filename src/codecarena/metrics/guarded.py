"""Metric scoring in a guarded child process, so that no metric can kill the harness.

pesq, ONNX Runtime, CTranslate2 and torch run native code, and a crash there (pesq's SIGSEGV on long
audio, for one) kills whichever process called it. A `GuardedScorer` keeps one scoring process,
`python -m codecarena.metrics.scoring_process`, started fresh (exec, not fork) in its own process
group under the memory guard, holding a `Scorer` whose models stay loaded from row to row. The
harness sends it one request per row (the two wav paths and the utterance); the process announces
each metric before computing it and sends each metric's records as soon as they exist. When it dies
(a signal, the memory guard, the per-metric timeout) the metric in flight fails with that reason,
a fresh process is started and the row's remaining metrics are still computed.

The values are those of in-process scoring: the same `Scorer.score_metric` computes them from the
same files, and JSON carries floats exactly.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from codecarena.devices import parse_device
from codecarena.files import open_unlinked
from codecarena.metrics.engines import devices_of
from codecarena.metrics.scorer import UtteranceInfo, failed_records, metrics_code_sha256, scoring_order
from codecarena.runtime.guard import _kill_group, parent_death_preexec, tree_rss
from codecarena.runtime.limits import StageLimits

WORKER_MODULE = "codecarena.metrics.scoring_process"


class ScoringProtocolError(ValueError):
    """A line between the harness and the scoring process that does not parse."""


@dataclass(frozen=True)
class WorkerConfig:
    """The first line the scoring process reads: what to score with."""
    metrics: tuple[str, ...]
    asr_models: tuple[tuple[str, str], ...]  # (language, catalogue name or CTranslate2 model folder)
    reference_results: str  # the run's reference_results/ folder; "" keeps them in memory
    metric_device: str  # where the learned metrics run (metrics/engines.py), checked before any row


@dataclass(frozen=True)
class ScoreRequest:
    reference: str
    decoded: str
    utterance: UtteranceInfo
    metrics: tuple[str, ...]  # still to compute, in scoring order


@dataclass(frozen=True)
class Event:
    """A line the scoring process writes: "started" (metric) before computing a metric, "scored"
    (metric, records) after it, "finished" when the request is done."""
    kind: str
    metric: str = ""
    records: dict[str, Any] = field(default_factory=dict)


def encode(message: WorkerConfig | ScoreRequest | Event) -> str:
    return json.dumps(asdict(message)) + "\n"


def _fields(line: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ScoringProtocolError(f"{what}: not a JSON object: {line[:120]!r}")
    return data


def decode_config(line: str) -> WorkerConfig:
    data = _fields(line, "scoring config")
    try:
        if set(data) != {"metrics", "asr_models", "reference_results", "metric_device"}:
            raise ValueError(f"keys {sorted(data)}")
        return WorkerConfig(tuple(data["metrics"]), tuple((str(k), str(v)) for k, v in data["asr_models"]),
                            str(data["reference_results"]), parse_device(data["metric_device"], "metric_device"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ScoringProtocolError(f"scoring config: {exc!r} in {line[:120]!r}") from None


def decode_request(line: str) -> ScoreRequest:
    data = _fields(line, "scoring request")
    try:
        utt = data["utterance"]
        info = UtteranceInfo(str(utt["id"]), str(utt["language"]), utt["transcript"],
                             tuple((str(kind), str(text)) for kind, text in utt["critical"]))
        return ScoreRequest(str(data["reference"]), str(data["decoded"]), info, tuple(data["metrics"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ScoringProtocolError(f"scoring request: {exc!r} in {line[:120]!r}") from None


def decode_event(line: str) -> Event:
    data = _fields(line, "scoring process reply")
    kind, metric, records = data.get("kind"), data.get("metric", ""), data.get("records", {})
    if kind not in ("started", "scored", "finished") or not isinstance(metric, str) or not isinstance(records, dict):
        raise ScoringProtocolError(f"scoring process reply: unexpected {line[:120]!r}")
    return Event(kind, metric, records)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# One thread for every numerical library in a scoring process: with N row runners, N rows are scored
# side by side instead of N processes each spreading over every core (docs/performance.md). The
# metrics also ask their libraries for one thread themselves (onnxruntime sessions, CTranslate2,
# torch, LiteRT); this covers the BLAS and OpenMP pools under numpy, scipy and librosa.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMEXPR_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}
THREAD_SETTINGS = {"environment": THREAD_ENV, "onnxruntime": "intra_op 1, inter_op 1 (DNSMOS, PLCMOS, SwiftF0)",
                   "ctranslate2_cpu_threads": 1, "torch_num_threads": 1, "litert_num_threads": 1}


class GuardedScorer:
    """Scores rows in a guarded scoring process; the same interface as the in-process Scorer."""

    def __init__(self, metrics: tuple[str, ...], asr_models: dict[str, str], limits: StageLimits,
                 log_path: Path | None, python: str = sys.executable, reference_results: Path | None = None,
                 metric_device: str = "cpu") -> None:
        """log_path receives the scoring process's stderr (None: this process's stderr);
        reference_results keeps reference-side results (None: in the scoring process's memory);
        metric_device is where the learned metrics run (engines.probe has checked it before any row)."""
        self.metrics = tuple(metrics)
        self.metric_device = metric_device
        self.asr_models = dict(asr_models)
        self.reference_results = reference_results
        self.limits, self.log_path, self.python = limits, log_path, python
        self.starts = 0  # scoring processes started so far
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._log: IO[bytes] | None = None
        self._fired = False
        self._peak_rss = 0
        self._timed_out = False

    @property
    def code_sha256(self) -> str:
        # The scoring process runs this same installation (same interpreter, same files).
        return metrics_code_sha256()

    @property
    def devices(self) -> dict[str, str]:
        # The scoring process's Scorer computes each metric there, or fails it (never on another device).
        return devices_of(self.metrics, self.metric_device)

    def failed_all(self, reason: str, only: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
        return failed_records(self.metrics if only is None else only, reason)

    def score_files(self, utt: UtteranceInfo, reference: Path, decoded: Path,
                    only: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
        """Every metric the scorer holds, or `only` those of them."""
        remaining = list(scoring_order(self.metrics if only is None else only))
        scores: dict[str, dict[str, Any]] = {}
        while remaining:
            scores.update(self._attempt(ScoreRequest(str(reference), str(decoded), utt, tuple(remaining)), remaining))
        return scores

    def close(self) -> None:
        if self._proc is not None:
            _kill_group(self._proc.pid)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if self._proc.stdin is not None:
                with contextlib.suppress(OSError):  # a broken pipe: the process is gone anyway
                    self._proc.stdin.close()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _start(self) -> subprocess.Popen[str]:
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(open_unlinked(self.log_path, append=True), "ab")
        # A new session makes the process the leader of its own group: one killpg takes down
        # anything it started, and a Ctrl-C meant for the harness is not its business. It dies with
        # this process: by the kernel's parent-death signal, which follows the thread that started
        # it (so only from the main thread), else when its stdin closes, after the metric it holds.
        lifeline = parent_death_preexec() if threading.current_thread() is threading.main_thread() else None
        proc = subprocess.Popen([self.python, "-m", WORKER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self._log, text=True, encoding="utf-8", start_new_session=True,
                                preexec_fn=lifeline, env={**os.environ, **THREAD_ENV})
        self._proc, self.starts = proc, self.starts + 1
        self._fired, self._peak_rss, self._timed_out = False, 0, False
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(proc, self._lines), daemon=True).start()
        threading.Thread(target=self._watch, args=(proc,), daemon=True).start()
        assert proc.stdin is not None
        config = WorkerConfig(self.metrics, tuple((k, str(v)) for k, v in sorted(self.asr_models.items())),
                              str(self.reference_results or ""), self.metric_device)
        proc.stdin.write(encode(config))
        proc.stdin.flush()
        return proc

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                lines.put(line)
        lines.put(None)

    def _watch(self, proc: subprocess.Popen[str]) -> None:
        try:
            ps = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while proc.poll() is None:
            rss = tree_rss(ps)
            self._peak_rss = max(self._peak_rss, rss)
            if rss > self.limits.memory_limit_bytes:
                self._fired = True
                _kill_group(proc.pid)
                return
            time.sleep(self.limits.guard_poll_s)

    def _attempt(self, request: ScoreRequest, remaining: list[str]) -> dict[str, dict[str, Any]]:
        """Send the request to a live scoring process and collect records until it finishes or dies;
        the metrics that got records (or died in flight) are removed from `remaining`."""
        scores: dict[str, dict[str, Any]] = {}
        in_flight = ""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self.close()  # one that died between rows leaves nothing behind
            try:
                proc = self._start()
            except OSError as exc:  # e.g. the interpreter cannot be executed
                self.close()
                return self._give_up(scores, remaining, "", f"scoring process could not start: {exc}")
        assert proc.stdin is not None
        try:
            proc.stdin.write(encode(request))
            proc.stdin.flush()
            while True:
                try:
                    line = self._lines.get(timeout=self.limits.stage_timeout_s)
                except queue.Empty:
                    self._timed_out = True
                    break
                if line is None:
                    break
                event = decode_event(line)
                if event.kind == "started":
                    in_flight = event.metric
                elif event.kind == "scored":
                    scores.update(event.records)
                    if event.metric in remaining:
                        remaining.remove(event.metric)
                    in_flight = ""
                elif remaining:
                    raise ScoringProtocolError(f"scoring process finished without scoring {', '.join(remaining)}")
                else:
                    return scores
            reason = self._death_reason(proc, in_flight)
        except OSError:  # the request could not be written: the process is gone
            reason = self._death_reason(proc, in_flight)
        except ScoringProtocolError as exc:
            reason = str(exc)
        self.close()
        return self._give_up(scores, remaining, in_flight, reason)

    @staticmethod
    def _give_up(scores: dict[str, dict[str, Any]], remaining: list[str], in_flight: str,
                 reason: str) -> dict[str, dict[str, Any]]:
        """The metric in flight fails with `reason`; with none in flight every remaining metric does
        (each attempt must end at least one metric)."""
        for name in [in_flight] if in_flight in remaining else list(remaining):
            scores.update(failed_records((name,), reason))
            remaining.remove(name)
        return scores

    @property
    def _log_name(self) -> str:
        return str(self.log_path) if self.log_path is not None else "stderr"

    def _death_reason(self, proc: subprocess.Popen[str], metric: str) -> str:
        if self._timed_out:
            _kill_group(proc.pid)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            code = proc.wait()
        where = f"while computing {metric}" if metric else "before it started a metric"
        if self._timed_out:
            return f"scoring process killed after the {self.limits.stage_timeout_s:g} s metric timeout {where}"
        if self._fired:
            return (f"scoring process killed by the memory guard {where}: process tree RSS "
                    f"{self._peak_rss / 2**20:.0f} MiB passed the limit {self.limits.memory_limit_bytes / 2**20:.0f} MiB")
        if code < 0:
            return f"scoring process killed by {_signal_name(-code)} {where}"
        return f"scoring process exited with status {code} {where} (see {self._log_name})"
