"""The codec service (`codecarena serve`): encode and decode over HTTP, with provenance.

This module is the launcher whose sha256 the service declares. The codec runs in a persistent
worker in its own runtime (the model is loaded once, at start-up, before the port opens); this
process only validates requests, hands files to the worker and returns what it wrote. A bad request
gets a 4xx with a one-line reason; a worker failure gets a 5xx and a fresh worker for the next
request; neither stops the server.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

import codecarena
from codecarena import variants
from codecarena.codecs.catalog import FAMILIES
from codecarena.payload import PayloadError, decode_payload
from codecarena.runtime.envs import package_sha256
from codecarena.runtime.persistent import PersistentWorker, WorkerFailed
from codecarena.runtime.protocol import Job, StageReport
from codecarena.specs import CodecSpec

PROVENANCE_VERSION = 1
RATE = 16000  # what the service accepts and returns, as the arena does
PACKAGE = Path(codecarena.__file__).resolve().parent


class BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class ServiceConfig:
    spec: CodecSpec
    weights: str
    variant: str
    registry: dict[str, Any]  # registry id, status, pinned checkpoint (or the reason there is none)
    runtime: dict[str, Any]  # the runtime record (interpreter, packages)
    max_bytes: int
    memory_limit: int
    work: Path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def declared_sources(spec: CodecSpec, variant: str) -> dict[str, dict[str, str]]:
    """Path and sha256 of the code a service runs: this launcher, the worker, the adapter, the variant."""
    module = FAMILIES[spec.family].module.rsplit(".", 1)[-1]
    files = {"launcher": PACKAGE / "service" / "app.py", "worker": PACKAGE / "worker.py",
             "adapter": PACKAGE / "codecs" / f"{module}.py"}
    if variant:
        files["variant"] = variants.source_path(variant)
    return {name: {"path": str(path), "file": str(path.relative_to(PACKAGE.parent)), "sha256": _sha256(path)}
            for name, path in files.items()}


def wav_truncation(body: bytes) -> str:
    """libsndfile reads a cut-off wav without complaint (it returns the samples present): compare the
    data chunk's declared size with the bytes that arrived. '' when fine or not a RIFF wav."""
    if len(body) < 12 or body[:4] != b"RIFF" or body[8:12] != b"WAVE":
        return ""
    pos = 12
    while pos + 8 <= len(body):
        chunk, size = body[pos:pos + 4], int.from_bytes(body[pos + 4:pos + 8], "little")
        if chunk == b"data":
            present = len(body) - pos - 8
            if size > present:
                return f"truncated wav: its header declares {size} bytes of audio, the body holds {present}"
            return ""
        pos += 8 + size + (size & 1)
    return "truncated wav: no data chunk"


def _versions(names: tuple[str, ...]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


class CodecService:
    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        config.work.mkdir(parents=True, exist_ok=True)
        self.worker = PersistentWorker(config.runtime["interpreter"], config.memory_limit, config.work / "worker.log")
        self.model: dict[str, Any] = {}
        self.provenance: dict[str, Any] = {}

    def start(self) -> None:
        """Load the model (an encode of 0.1 s of silence) and verify our own sources before serving."""
        sources = declared_sources(self.config.spec, self.config.variant)
        harness_package = package_sha256()
        runtime_package = package_sha256(Path(self.config.runtime["site"]) / "codecarena") \
            if self.config.runtime.get("site") else harness_package
        if runtime_package != harness_package:
            raise RuntimeError(f"the runtime's codecarena copy ({runtime_package[:12]}) is not the launcher's "
                               f"({harness_package[:12]}); refusing to serve unverified code")
        probe = self.config.work / "startup.wav"
        sf.write(probe, np.zeros(RATE // 10, dtype=np.int16), RATE, subtype="PCM_16", format="WAV")
        report = self._run("encode", probe, self.config.work / "startup.ccap")
        if not report.ok:
            raise RuntimeError(f"the codec did not load: {report.error}")
        self.model = report.model
        self.provenance = {
            "version": PROVENANCE_VERSION,
            "codec": self.config.spec.canonical,
            "sample_rate": RATE,
            "weights": self.model.get("weights", "none"),
            "registry": self.config.registry,
            "checkpoint": self.model.get("checkpoint", {}),
            "variant": {**variants.provenance(self.config.variant),
                        "replaced_modules": self.model.get("variant", {}).get("replaced_modules", 0)},
            "sources": sources,
            "codecarena_package_sha256": harness_package,
            "sources_verified_at_start": True,
            "packages": {"service": _versions(("codecarena", "fastapi", "uvicorn", "starlette", "numpy", "soundfile")),
                         "runtime": {"interpreter": self.config.runtime["interpreter"],
                                     "packages_sha256": self.config.runtime.get("packages_sha256"),
                                     "packages": self.config.runtime.get("packages")}},
            "model": {k: v for k, v in self.model.items() if k not in ("checkpoint", "variant")},
            "pid": os.getpid(),
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        self.provenance_sha256 = hashlib.sha256(json.dumps(self.provenance, sort_keys=True).encode()).hexdigest()

    def _run(self, stage: str, src: Path, dst: Path) -> StageReport:
        job = Job(version=1, stage=stage, input=str(src), output=str(dst), report=str(dst) + ".report.json",
                  codec=self.config.spec.canonical if stage == "encode" else "", arena_rate=RATE, warm_repeats=0,
                  weights=self.config.weights, variant=self.config.variant)
        return self.worker.submit(job, Path(str(dst) + ".job.json"))

    def headers(self) -> dict[str, str]:
        return {"X-Codecarena-Codec": self.config.spec.canonical,
                "X-Codecarena-Weights": str(self.provenance["weights"]),
                "X-Codecarena-Variant": self.config.variant or "none",
                "X-Codecarena-Checkpoint-Sha256": str(self.provenance["checkpoint"].get("sha256", "")),
                "X-Codecarena-Launcher-Sha256": self.provenance["sources"]["launcher"]["sha256"],
                "X-Codecarena-Provenance-Sha256": self.provenance_sha256}

    def _body(self, body: bytes, what: str) -> bytes:
        if not body:
            raise BadRequest(400, f"empty request body: send a {what}")
        if len(body) > self.config.max_bytes:
            raise BadRequest(413, f"request body is {len(body)} bytes, over this service's limit of "
                                  f"{self.config.max_bytes}")
        return body

    def encode(self, body: bytes) -> bytes:
        body = self._body(body, "16 kHz mono wav")
        with tempfile.TemporaryDirectory(dir=self.config.work) as tmp:
            wav = Path(tmp) / "in.wav"
            wav.write_bytes(body)
            truncated = wav_truncation(body)
            if truncated:
                raise BadRequest(400, truncated)
            try:
                info = sf.info(str(wav))
            except (RuntimeError, sf.LibsndfileError):
                raise BadRequest(400, "request body is not a readable audio file (send a 16 kHz mono wav)") from None
            if info.samplerate != RATE:
                raise BadRequest(422, f"sample rate {info.samplerate} Hz is not supported: this service takes "
                                      f"{RATE} Hz mono")
            if info.channels != 1:
                raise BadRequest(422, f"{info.channels} channels: this service takes mono audio")
            if info.frames == 0:
                raise BadRequest(400, "the audio file holds no samples")
            try:
                sf.read(str(wav), dtype="float64")
            except (RuntimeError, sf.LibsndfileError) as exc:
                raise BadRequest(400, f"audio file is damaged or truncated ({str(exc).splitlines()[0]})") from None
            out = Path(tmp) / "out.ccap"
            report = self._run("encode", wav, out)
            if not report.ok:
                raise BadRequest(500, f"encode failed: {report.error}")
            return out.read_bytes()

    def decode(self, body: bytes) -> bytes:
        body = self._body(body, "codecarena payload")
        try:
            payload = decode_payload(body)
        except PayloadError as exc:
            raise BadRequest(400, f"corrupt payload: {exc}") from None
        if payload.codec != self.config.spec.canonical:
            raise BadRequest(409, f"payload is for codec {payload.codec}; this service runs {self.config.spec.canonical}")
        if payload.variant != self.config.variant:
            raise BadRequest(409, f"payload was encoded with variant {payload.variant or 'none'!r}; this service "
                                  f"runs {self.config.variant or 'none'!r}")
        if dict(payload.checkpoint) != self.provenance["checkpoint"]:
            raise BadRequest(409, "payload was encoded with another checkpoint than this service loads")
        with tempfile.TemporaryDirectory(dir=self.config.work) as tmp:
            src = Path(tmp) / "in.ccap"
            src.write_bytes(body)
            out = Path(tmp) / "out.wav"
            report = self._run("decode", src, out)
            if not report.ok:
                raise BadRequest(500, f"decode failed: {report.error}")
            return out.read_bytes()


def create_app(service: CodecService) -> FastAPI:
    app = FastAPI(title="codecarena codec service", docs_url=None, redoc_url=None, openapi_url=None)

    def failure(status: int, reason: str) -> JSONResponse:
        return JSONResponse({"error": reason.splitlines()[0]}, status_code=status, headers=service.headers())

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "codec": service.config.spec.canonical, "worker_pid": service.worker.pid}

    @app.get("/v1/provenance")
    def provenance() -> JSONResponse:
        return JSONResponse(service.provenance, headers=service.headers())

    async def _handle(request: Request, fn: Any, media_type: str) -> Response:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > service.config.max_bytes:
            return failure(413, f"request body is {length} bytes, over this service's limit of "
                                f"{service.config.max_bytes}")
        body = await request.body()
        try:
            from starlette.concurrency import run_in_threadpool

            data = await run_in_threadpool(fn, body)
        except BadRequest as exc:
            return failure(exc.status, exc.reason)
        except WorkerFailed as exc:
            return failure(503, f"the codec worker failed and will be restarted: {exc}")
        return Response(data, media_type=media_type, headers=service.headers())

    @app.post("/v1/encode")
    async def encode(request: Request) -> Response:
        return await _handle(request, service.encode, "application/octet-stream")

    @app.post("/v1/decode")
    async def decode(request: Request) -> Response:
        return await _handle(request, service.decode, "audio/wav")

    return app
