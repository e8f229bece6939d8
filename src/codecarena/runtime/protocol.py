"""The worker protocol: a JSON job file in, output files plus a JSON stage report out.

Both sides parse strictly (exact keys, a version field) because the worker may run under another
interpreter in another runtime, possibly an older codecarena.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from codecarena.arena import ARENA_RATE
from codecarena.devices import FORMS, DeviceError, DeviceInfo, parse_device
from codecarena.files import write_json
from codecarena.text import printable

PROTOCOL_VERSION = 2  # 2: the job's device, the report's device facts and peak device memory


class ProtocolError(ValueError):
    """A job or report file that does not match the protocol."""


@dataclass(frozen=True)
class Job:
    version: int
    stage: str  # "encode", "decode" or "stream"
    input: str  # reference wav (encode) or payload file (decode)
    output: str  # payload file (encode) or decoded wav (decode)
    report: str
    codec: str  # canonical spec for encode; "" for decode, which learns it from the payload
    arena_rate: int
    warm_repeats: int
    weights: str = "real"  # "real" or "synthetic:SEED"; decode learns it from the payload
    variant: str = ""  # a named numerical variant ("" = upstream); decode learns it from the payload
    # Where a torch family's model runs (canonical, devices.parse_device); "cpu" for every other family.
    device: str = "cpu"

    def __post_init__(self) -> None:
        try:
            canonical = parse_device(self.device, "job device") == self.device
        except DeviceError:
            canonical = False
        if not isinstance(self.device, str) or not canonical:
            raise ProtocolError(f"job device {self.device!r} is not a canonical device ({FORMS})")

    @classmethod
    def encode(cls, reference: Path, payload: Path, report: Path, codec: str, *, warm_repeats: int = 0,
               weights: str = "real", variant: str = "", device: str = "cpu") -> Job:
        return cls(version=PROTOCOL_VERSION, stage="encode", input=str(reference), output=str(payload),
                   report=str(report), codec=codec, arena_rate=ARENA_RATE, warm_repeats=warm_repeats,
                   weights=weights, variant=variant, device=device)

    @classmethod
    def decode(cls, payload: Path, audio: Path, report: Path, *, warm_repeats: int = 0, device: str = "cpu") -> Job:
        """The decoder learns codec, weights and variant from the payload itself."""
        return cls(version=PROTOCOL_VERSION, stage="decode", input=str(payload), output=str(audio),
                   report=str(report), codec="", arena_rate=ARENA_RATE, warm_repeats=warm_repeats, device=device)

    @classmethod
    def stream(cls, reference: Path, report: Path, codec: str) -> Job:
        return cls(version=PROTOCOL_VERSION, stage="stream", input=str(reference), output="", report=str(report),
                   codec=codec, arena_rate=ARENA_RATE, warm_repeats=0)


@dataclass(frozen=True)
class StageReport:
    version: int
    stage: str
    ok: bool
    error: str
    pid: int
    started_at: float  # time.time() at the worker's first statement
    imports_s: float
    load_s: float
    io_s: float
    compute_s: float
    warm_compute_s: list[float]
    maxrss_bytes: int  # the worker's own peak RSS (getrusage), complements the guard's polling
    # Peak memory the stage's calls allocated on a CUDA device (torch.cuda.max_memory_allocated); None off CUDA.
    peak_device_memory_bytes: int | None
    audio_s: float  # duration of the utterance, for RTF
    model: dict[str, Any]
    facts: dict[str, Any]
    runtime: dict[str, Any]  # the interpreter that ran and its numpy version: proves which runtime served
    # The device the stage's torch model ran on, as devices.DeviceInfo.to_dict(); None when no torch model ran.
    device: dict[str, Any] | None


def _strict(cls: type, data: Any, what: str) -> Any:
    if not isinstance(data, dict):
        raise ProtocolError(f"{what}: not a JSON object")
    names = {f.name for f in fields(cls)}
    missing, extra = names - data.keys(), data.keys() - names
    if missing or extra:
        raise ProtocolError(f"{what}: missing keys {sorted(missing)}, unexpected keys {sorted(extra)}")
    if data["version"] != PROTOCOL_VERSION:
        raise ProtocolError(f"{what}: protocol version {data['version']!r}, expected {PROTOCOL_VERSION}")
    if cls is StageReport:
        if data["device"] is not None:
            try:
                DeviceInfo.from_dict(data["device"], f"{what}: device")
            except DeviceError as exc:
                raise ProtocolError(str(exc)) from None
        if not isinstance(data["error"], str):
            raise ProtocolError(f"{what}: error is {type(data['error']).__name__}, not a string")
        # The reason is a codec's own text (an exception it raised, a tool's message), and the
        # worker that writes it runs the codec's code: its control characters (a terminal's escape
        # sequences, line breaks) are written out, so that the reason a row stores and the console
        # prints is one printable line.
        data = {**data, "error": printable(data["error"])}
    return cls(**data)


def write_job(path: Path, job: Job) -> None:
    write_json(path, asdict(job), durable=False)


def read_job(path: Path) -> Job:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProtocolError(f"{path}: unreadable job ({exc})") from None
    return _strict(Job, data, str(path))


def write_report(path: Path, report: StageReport) -> None:
    write_json(path, asdict(report), durable=False)


def read_report(path: Path) -> StageReport:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProtocolError(f"{path}: unreadable stage report ({exc})") from None
    return _strict(StageReport, data, str(path))
