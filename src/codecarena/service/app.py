"""The codec service (`codecarena serve`): encode and decode over HTTP, with provenance.

This module is the launcher whose sha256 the service declares. The codec runs in a persistent
worker in its own runtime (the model is loaded once, at start-up, before the port opens); this
process only validates requests, hands files to the worker and returns what it wrote. A bad request
gets a 4xx with a one-line reason; a worker failure gets a 5xx and a fresh worker for the next
request; neither stops the server. No response ever names a file on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import hmac
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

import codecarena
from codecarena import variants
from codecarena.arena import ARENA_RATE
from codecarena.audio_input import AudioInputError, check_audio_file
from codecarena.machine import package_versions
from codecarena.registry.catalog import FAMILIES
from codecarena.payload import Payload, PayloadError, decode_payload
from codecarena.runtime.venvs import package_sha256
from codecarena.runtime.persistent import PersistentWorker, WorkerFailed
from codecarena.runtime.protocol import Job, StageReport
from codecarena.specs import CodecSpec

PROVENANCE_VERSION = 1
PACKAGE = Path(codecarena.__file__).resolve().parent
# Worker failures that are the request's content refused, by stage: validation of the audio, or of
# a payload whose header passed but whose streams or side info the adapter cannot use (it looks
# them up by name and index). Anything else is the server's own failure.
CONTENT_ERRORS = {"encode": frozenset({"AudioInputError", "ValueError"}),
                  "decode": frozenset({"PayloadError", "ValueError", "KeyError", "IndexError", "TypeError"})}
# An absolute path in a message meant for a client; the lookbehind spares ratios such as 8/16.
_SERVER_PATH = re.compile(r"(?<![\w.~])/[^\s:;,'\"()\[\]{}]+")

log = logging.getLogger("uvicorn.error")  # uvicorn's error log: one line per event, on stderr


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
    max_seconds: float  # the longest audio taken by encode or declared by a payload for decode
    read_timeout: float  # seconds for a request's headers, and again for its body
    token: str  # "" when requests need no bearer token
    memory_limit: int
    work: Path

    @property
    def max_samples(self) -> int:
        return int(self.max_seconds * ARENA_RATE)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def declared_sources(spec: CodecSpec, variant: str) -> dict[str, dict[str, str]]:
    """Path and sha256 of the code a service runs: this launcher, the worker, the adapter, the variant."""
    adapter = PACKAGE.parent.joinpath(*FAMILIES[spec.family].module.split(".")).with_suffix(".py")
    files = {"launcher": PACKAGE / "service" / "app.py", "worker": PACKAGE / "worker.py", "adapter": adapter}
    if variant:
        files["variant"] = variants.source_path(variant)
    return {name: {"path": str(path), "file": str(path.relative_to(PACKAGE.parent)), "sha256": _sha256(path)}
            for name, path in files.items()}


def client_safe(message: str, shown: dict[Path, str]) -> str:
    """`message` without server paths: the request's own files by what they are to the client, any
    other absolute path (work folder, logs, interpreter) by a placeholder."""
    for path, name in shown.items():
        message = message.replace(str(path), name)
    return _SERVER_PATH.sub("<server path>", message)


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
        sf.write(probe, np.zeros(ARENA_RATE // 10, dtype=np.int16), ARENA_RATE, subtype="PCM_16", format="WAV")
        report = self._run("encode", probe, self.config.work / "startup.ccap")
        if not report.ok:
            raise RuntimeError(f"the codec did not load: {report.error}")
        self.model = report.model
        self.provenance = {
            "version": PROVENANCE_VERSION,
            "codec": self.config.spec.canonical,
            "sample_rate": ARENA_RATE,
            "weights": self.model.get("weights", "none"),
            "registry": self.config.registry,
            "checkpoint": self.model.get("checkpoint", {}),
            "variant": {**variants.provenance(self.config.variant),
                        "replaced_modules": self.model.get("variant", {}).get("replaced_modules", 0)},
            "sources": sources,
            "codecarena_package_sha256": harness_package,
            "sources_verified_at_start": True,
            "packages": {"service": package_versions(("codecarena", "fastapi", "uvicorn", "starlette", "numpy", "soundfile")),
                         "runtime": {"interpreter": self.config.runtime["interpreter"],
                                     "packages_sha256": self.config.runtime.get("packages_sha256"),
                                     "packages": self.config.runtime.get("packages")}},
            "model": {k: v for k, v in self.model.items() if k not in ("checkpoint", "variant")},
            "pid": os.getpid(),
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        self.provenance_sha256 = hashlib.sha256(json.dumps(self.provenance, sort_keys=True).encode()).hexdigest()

    def _run(self, stage: str, src: Path, dst: Path) -> StageReport:
        report = Path(str(dst) + ".report.json")
        job = (Job.encode(src, dst, report, self.config.spec.canonical, weights=self.config.weights,
                          variant=self.config.variant) if stage == "encode" else Job.decode(src, dst, report))
        return self.worker.submit(job, Path(str(dst) + ".job.json"))

    def _work(self, stage: str, src: Path, dst: Path) -> bytes:
        """Run one stage on the request's file; the worker's refusal of the content is the client's 422,
        any other failure the server's 500, both without server paths."""
        report = self._run(stage, src, dst)
        if report.ok:
            return dst.read_bytes()
        kind, _, reason = report.error.partition(": ")
        safe = client_safe(reason, {src: "request body"})
        if kind in CONTENT_ERRORS[stage]:
            raise BadRequest(422, f"{stage} refused the request: {safe}")
        log.warning("%s failed in the codec worker: %s", stage, report.error)
        raise BadRequest(500, f"{stage} failed in the codec worker: {kind}: {safe}")

    def headers(self) -> dict[str, str]:
        return {"X-Codecarena-Codec": self.config.spec.canonical,
                "X-Codecarena-Weights": str(self.provenance["weights"]),
                "X-Codecarena-Variant": self.config.variant or "none",
                "X-Codecarena-Checkpoint-Sha256": str(self.provenance["checkpoint"].get("sha256", "")),
                "X-Codecarena-Launcher-Sha256": self.provenance["sources"]["launcher"]["sha256"],
                "X-Codecarena-Provenance-Sha256": self.provenance_sha256}

    def _too_long(self, samples: int, what: str) -> BadRequest:
        return BadRequest(413, f"{what} {samples} samples ({samples / ARENA_RATE:.1f} s), over this service's limit of "
                               f"{self.config.max_seconds:g} s")

    def encode(self, body: bytes) -> bytes:
        if not body:
            raise BadRequest(400, "empty request body: send a 16 kHz mono wav")
        with tempfile.TemporaryDirectory(dir=self.config.work) as tmp:
            # The suffix tells the shared validator which containers to accept: flac by its magic, else wav.
            wav = Path(tmp) / ("in.flac" if body[:4] == b"fLaC" else "in.wav")
            wav.write_bytes(body)
            try:
                facts = check_audio_file(wav, shown="request body")
            except AudioInputError as exc:
                raise BadRequest(400, client_safe(str(exc), {wav: "request body"})) from None
            if facts.sample_rate != ARENA_RATE:
                raise BadRequest(422, f"sample rate {facts.sample_rate} Hz is not supported: this service takes "
                                      f"{ARENA_RATE} Hz mono")
            if facts.channels != 1:
                raise BadRequest(422, f"{facts.channels} channels: this service takes mono audio")
            if facts.num_samples > self.config.max_samples:
                raise self._too_long(facts.num_samples, "the audio holds")
            return self._work("encode", wav, Path(tmp) / "out.ccap")

    def check_payload(self, payload: Payload) -> None:
        """Everything the header claims that this service can check before the worker runs: the
        worker would otherwise trust a forged family, rate or length (and allocate the length)."""
        spec = self.config.spec
        if payload.codec != spec.canonical:
            raise BadRequest(409, f"payload is for codec {payload.codec}; this service runs {spec.canonical}")
        if payload.family != spec.family:
            raise BadRequest(422, f"payload declares family {payload.family[:40]!r}, but {spec.canonical} is of "
                                  f"family {spec.family!r}")
        if dict(payload.config) != spec.config_dict():
            raise BadRequest(422, f"payload config is not the configuration of {spec.canonical} ({spec.config_dict()})")
        if payload.variant != self.config.variant:
            raise BadRequest(409, f"payload was encoded with variant {payload.variant or 'none'!r}; this service "
                                  f"runs {self.config.variant or 'none'!r}")
        if dict(payload.checkpoint) != self.provenance["checkpoint"]:
            raise BadRequest(409, "payload was encoded with another checkpoint than this service loads")
        if payload.sample_rate != ARENA_RATE:
            raise BadRequest(422, f"payload declares a sample rate of {payload.sample_rate} Hz; this service "
                                  f"decodes to {ARENA_RATE} Hz only")
        if payload.channels != 1:
            raise BadRequest(422, f"payload declares {payload.channels} channels; this service decodes mono only")
        if payload.num_samples > self.config.max_samples:
            raise self._too_long(payload.num_samples, "payload declares")

    def decode(self, body: bytes) -> bytes:
        if not body:
            raise BadRequest(400, "empty request body: send a codecarena payload")
        try:
            payload = decode_payload(body)
        except PayloadError as exc:
            raise BadRequest(400, f"corrupt payload: {exc}") from None
        self.check_payload(payload)
        with tempfile.TemporaryDirectory(dir=self.config.work) as tmp:
            src = Path(tmp) / "in.ccap"
            src.write_bytes(body)
            return self._work("decode", src, Path(tmp) / "out.wav")


def header_deadline_protocol(read_timeout: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with a deadline on request headers. uvicorn times out idle
    connections only after a response: a client that connects and sends nothing, or its headers a
    byte at a time, would otherwise hold a connection for ever. (The body has its own deadline, in
    `create_app`.)"""

    class HeaderDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(read_timeout, self._expire)

        def _expire(self) -> None:
            # A request in progress is the body deadline's and the worker's business.
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

    return HeaderDeadline


def create_app(service: CodecService) -> FastAPI:
    app = FastAPI(title="codecarena codec service", docs_url=None, redoc_url=None, openapi_url=None)
    config = service.config

    def failure(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": reason.splitlines()[0]}, status_code=status,
                            headers=service.headers() if headers is None else headers)

    def refused(request: Request) -> JSONResponse | None:
        """401 unless the request carries the bearer token (when the service has one)."""
        if not config.token:
            return None
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(), config.token.encode()):
            return None
        return failure(401, "this service requires an 'Authorization: Bearer <token>' header",
                       headers={"WWW-Authenticate": "Bearer"})

    async def read_body(request: Request) -> bytes:
        """The body as it arrives, refused as soon as it passes the limit: Content-Length is only a
        claim, and a chunked body has none."""
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > config.max_bytes:
                raise BadRequest(413, f"request body is over this service's limit of {config.max_bytes} bytes")
        return bytes(body)

    async def too_large(request: Request, reason: str) -> JSONResponse:
        """413, after reading and discarding what the client is still sending (for at most the read
        timeout): closing on unread data resets the connection, and the client would never see why."""
        async def discard() -> None:
            async for _ in request.stream():
                pass

        with contextlib.suppress(TimeoutError, ClientDisconnect):
            await asyncio.wait_for(discard(), config.read_timeout)
        return failure(413, reason, headers={**service.headers(), "Connection": "close"})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "codec": config.spec.canonical, "worker_pid": service.worker.pid}

    @app.get("/v1/provenance")
    def provenance(request: Request) -> JSONResponse:
        return refused(request) or JSONResponse(service.provenance, headers=service.headers())

    async def _handle(request: Request, fn: Any, media_type: str) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > config.max_bytes:
            return await too_large(request, f"request body is {length} bytes, over this service's limit of "
                                            f"{config.max_bytes}")
        client = f"{request.client.host}:{request.client.port}" if request.client else "client"
        try:
            body = await asyncio.wait_for(read_body(request), config.read_timeout)
        except BadRequest as exc:
            if exc.status == 413:
                return await too_large(request, exc.reason)
            return failure(exc.status, exc.reason)
        except TimeoutError:
            log.warning("%s %s: request body not complete after %g s; answered 408", client, request.url.path,
                        config.read_timeout)
            return failure(408, f"request body not complete after {config.read_timeout:g} s",
                           headers={**service.headers(), "Connection": "close"})
        except ClientDisconnect:
            log.warning("%s %s: client disconnected before its request body ended", client, request.url.path)
            return Response(status_code=400)  # nobody is listening; uvicorn drops it
        try:
            data = await run_in_threadpool(fn, body)
        except BadRequest as exc:
            return failure(exc.status, exc.reason)
        except WorkerFailed as exc:
            log.warning("%s", exc)
            return failure(503, f"the codec worker failed and will be restarted: {client_safe(str(exc), {})}")
        return Response(data, media_type=media_type, headers=service.headers())

    @app.post("/v1/encode")
    async def encode(request: Request) -> Response:
        return await _handle(request, service.encode, "application/octet-stream")

    @app.post("/v1/decode")
    async def decode(request: Request) -> Response:
        return await _handle(request, service.decode, "audio/wav")

    return app
