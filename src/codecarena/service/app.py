"""The codec service (`codecarena serve`): encode and decode over HTTP, with provenance.

This module is the launcher whose sha256 the service declares. The codec runs in a persistent
worker in its own runtime (the model is loaded once, at start-up, before the port opens); this
process only validates requests, hands files to the worker and returns what it wrote. A bad request
gets a 4xx with a one-line reason; a worker failure gets a 5xx and a fresh worker for the next
request; a full work disk a 507; none stops the server. No response ever names a file on the server.

Long because it is the launcher whose sha256 the service declares (`sources.launcher` of
`/v1/provenance`): all that answers a request stays in the one file that hash covers.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import hmac
import json
import logging
import mmap
import os
import re
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import soundfile as sf
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

import codecarena
from codecarena import variants
from codecarena.arena import ARENA_RATE
from codecarena.audio_input import CONTAINERS, AudioInputError, check_audio_file
from codecarena.diskspace import DiskFullError, free_bytes, is_disk_full
from codecarena.machine import package_versions
from codecarena.registry.catalog import FAMILIES
from codecarena.payload import PayloadError, decode_header, decode_payload
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
# What encode takes: the content the worker reads as it is (libsndfile's WAV family, and FLAC).
ACCEPTED_CONTAINERS = frozenset(name for names in CONTAINERS.values() for name in names)
# Requests whose bodies are read at once (to the work disk): the one the worker codes and the next,
# read meanwhile. Those after them wait unread: uvicorn stops reading a connection whose body the
# app does not consume, so a waiting body stays in the client's socket, not in this process.
BODY_SLOTS = 2
# What a response reads of its output file at a time (uvicorn's own size of a body chunk).
RESPONSE_CHUNK = 64 << 10
# Job, report and log lines a request writes in the work folder beside its input and output.
STAGE_FILES_BYTES = 64 << 10
# The secret a service writes in its work folder (mode 0600) and holds open while it runs;
# service-check finds it among the open files of the process that owns the port.
KEY_FILE = "service.key"
NONCE = re.compile(r"[0-9a-f]{64}")

log = logging.getLogger("uvicorn.error")  # uvicorn's error log: one line per event, on stderr


class BadRequest(Exception):
    """A request's answer other than 200: `reason` for the client, `logged` (when not empty) the
    server's own line about it, with what the client is not shown."""

    def __init__(self, status: int, reason: str, logged: str = "") -> None:
        super().__init__(reason)
        self.status, self.reason, self.logged = status, reason, logged


class Unread(BadRequest):
    """A refusal made before the request's body ended (over the size limit, or no room to write
    it): answered after what the client still sends is read and discarded."""


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
    device: str = "cpu"  # where a torch family's model runs (`serve --device`); any other family runs on the CPU

    @property
    def max_samples(self) -> int:
        return int(self.max_seconds * ARENA_RATE)


def provenance_sha256(declaration: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a declaration (X-Codecarena-Provenance-Sha256)."""
    return hashlib.sha256(json.dumps(declaration, sort_keys=True).encode()).hexdigest()


def challenge_answer(key: bytes, nonce: str, provenance: str) -> str:
    """What a service answers to a nonce: bound to the declaration it serves, so that an answer
    relayed from another service does not fit a declaration changed on the way."""
    return hmac.new(key, f"{nonce}:{provenance}".encode(), hashlib.sha256).hexdigest()


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


def unsupported_media(path: Path) -> str | None:
    """What the file holds when it is audio encode does not take, judged by libsndfile's header
    read, else FFmpeg's probe, before the audio is decoded: the worker reads WAV or FLAC samples as they are, so MP3 or Ogg would be
    coded as if they were the PCM the service takes, and what only FFmpeg reads (m4a/AAC) would fail
    in the worker. None for WAV or FLAC, and for what is not audio (the shared validation says so)."""
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError):
        return _ffmpeg_audio(path)
    return None if info.format in ACCEPTED_CONTAINERS else f"{info.format} {info.subtype}"


def _ffmpeg_audio(path: Path) -> str | None:
    """FFmpeg's container and codec names of the file's first audio stream; None when it has none."""
    import av

    try:
        with av.open(str(path)) as container:
            streams = container.streams.audio
            return f"{container.format.name} {streams[0].codec_context.name}" if streams else None
    except (av.error.FFmpegError, OSError, ValueError):
        return None


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
        # This process's proof, to service-check, that it is the service answering on its port: a
        # secret only its user can read, held open for the service's life (service-check finds it
        # among the process's open files, then asks for an HMAC of a fresh nonce).
        self._key = secrets.token_hex(32).encode()
        self._key_fd = os.open(config.work / KEY_FILE, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(self._key_fd, self._key)
        self.worker = PersistentWorker(config.runtime["interpreter"], config.memory_limit, config.work / "worker.log")
        self.model: dict[str, Any] = {}
        self.provenance: dict[str, Any] = {}

    def close(self) -> None:
        self.worker.stop()
        os.close(self._key_fd)

    def answer(self, nonce: str) -> str:
        return challenge_answer(self._key, nonce, self.provenance_sha256)

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
                         # "external": the interpreter --runtime-python named, not the pinned runtime.
                         "runtime": {"environment": self.config.runtime.get("environment"),
                                     "interpreter": self.config.runtime["interpreter"],
                                     "packages_sha256": self.config.runtime.get("packages_sha256"),
                                     "packages": self.config.runtime.get("packages")}},
            "model": {k: v for k, v in self.model.items() if k not in ("checkpoint", "variant")},
            # Where the model runs and the numerical settings in force (None: no torch model).
            "device": report.device,
            "pid": os.getpid(),
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        self.provenance_sha256 = provenance_sha256(self.provenance)

    def _run(self, stage: str, src: Path, dst: Path) -> StageReport:
        report = Path(str(dst) + ".report.json")
        device = self.config.device if FAMILIES[self.config.spec.family].torch else "cpu"
        job = (Job.encode(src, dst, report, self.config.spec.canonical, weights=self.config.weights,
                          variant=self.config.variant, device=device) if stage == "encode"
               else Job.decode(src, dst, report, device=device))
        return self.worker.submit(job, Path(str(dst) + ".job.json"))

    @contextlib.contextmanager
    def request_folder(self) -> Iterator[Path]:
        """A temporary folder for one request: its body, written as it arrives, and the stage's
        files. A write in it that finds the disk full is the server's 507 in one line, not a 500
        with a traceback."""
        try:
            with tempfile.TemporaryDirectory(dir=self.config.work) as tmp:
                yield Path(tmp)
        except (OSError, DiskFullError) as exc:
            if not (isinstance(exc, DiskFullError) or is_disk_full(exc)):
                raise
            raise self.no_room(f"{type(exc).__name__}: {exc}") from None

    def no_room(self, why: str, needed: int = 0) -> BadRequest:
        free = free_bytes(self.config.work)
        amounts = f"{free / 2**20:.1f} MiB free" + (f", about {needed / 2**20:.1f} MiB needed" if needed else "")
        return BadRequest(507, f"the service's work disk is full ({amounts}); try again later",
                          logged=f"no room in the work folder {self.config.work} ({amounts}): {why.splitlines()[0]}; "
                                 f"answered 507")

    def _work(self, stage: str, src: Path, dst: Path, needed: int) -> BinaryIO:
        """Run one stage on the request's file and open what it wrote (the response streams it from
        the file, which outlives its request folder while open). The worker's refusal of the content
        is the client's 422, any other failure the server's 500, both without server paths. The worker writes in its own
        process (it reports ENOSPC as a failed stage, or dies writing its report): its failure while
        the work disk has less free than the `needed` bytes still to write is the server's 507."""
        try:
            report = self._run(stage, src, dst)
        except WorkerFailed as exc:
            if free_bytes(self.config.work) < needed:
                raise self.no_room(str(exc), needed) from None
            raise
        if report.ok:
            return open(dst, "rb")
        kind, _, reason = report.error.partition(": ")
        safe = client_safe(reason, {src: "request body"})
        if kind in CONTENT_ERRORS[stage]:
            raise BadRequest(422, f"{stage} refused the request: {safe}")
        if free_bytes(self.config.work) < needed:
            raise self.no_room(report.error, needed)
        raise BadRequest(500, f"{stage} failed in the codec worker: {kind}: {safe}",
                         logged=f"{stage} failed in the codec worker: {report.error}")

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

    def encode(self, body: Path) -> BinaryIO:
        """The payload of the audio in `body`, a request's body in its request folder."""
        size = body.stat().st_size
        if not size:
            raise BadRequest(400, "empty request body: send a 16 kHz mono wav")
        with open(body, "rb") as fh:
            magic = fh.read(4)
        # The suffix tells the shared validator which containers to accept: flac by its magic, else wav.
        wav = body.rename(body.with_name("in.flac" if magic == b"fLaC" else "in.wav"))
        media = unsupported_media(wav)
        if media is not None:
            raise BadRequest(415, f"request body is {media} audio; this service takes {ARENA_RATE // 1000} kHz "
                                  f"mono WAV or FLAC: convert it first")
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
        # A payload no bigger than the audio it codes, and the stage files.
        return self._work("encode", wav, wav.with_name("out.ccap"), size + STAGE_FILES_BYTES)

    def check_payload(self, claims: dict[str, Any]) -> None:
        """Everything a payload's header claims that this service can check before the worker runs:
        the worker would otherwise trust a forged family, rate or length (and allocate the length)."""
        spec = self.config.spec
        if claims["codec"] != spec.canonical:
            raise BadRequest(409, f"payload is for codec {claims['codec']}; this service runs {spec.canonical}")
        if claims["family"] != spec.family:
            raise BadRequest(422, f"payload declares family {claims['family'][:40]!r}, but {spec.canonical} is of "
                                  f"family {spec.family!r}")
        if dict(claims["config"]) != spec.config_dict():
            raise BadRequest(422, f"payload config is not the configuration of {spec.canonical} ({spec.config_dict()})")
        if claims["variant"] != self.config.variant:
            raise BadRequest(409, f"payload was encoded with variant {claims['variant'] or 'none'!r}; this service "
                                  f"runs {self.config.variant or 'none'!r}")
        if dict(claims["checkpoint"]) != self.provenance["checkpoint"]:
            raise BadRequest(409, "payload was encoded with another checkpoint than this service loads")
        if claims["sample_rate"] != ARENA_RATE:
            raise BadRequest(422, f"payload declares a sample rate of {claims['sample_rate']} Hz; this service "
                                  f"decodes to {ARENA_RATE} Hz only")
        if claims["channels"] != 1:
            raise BadRequest(422, f"payload declares {claims['channels']} channels; this service decodes mono only")
        if claims["num_samples"] > self.config.max_samples:
            raise self._too_long(claims["num_samples"], "payload declares")

    def decode(self, body: Path) -> BinaryIO:
        """The wav of the payload in `body`, a request's body in its request folder. The body is
        parsed through a read-only mapping of its file, never copied into this process's heap: its
        pages are the file's and go with the mapping (read whole, 12 concurrent 30 MiB bodies left
        about 360 MiB resident). What the header claims is checked before the rest is touched."""
        if not body.stat().st_size:
            raise BadRequest(400, "empty request body: send a codecarena payload")
        with open(body, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            try:
                claims = decode_header(mapped)
                self.check_payload(claims)
                decode_payload(mapped)
            except PayloadError as exc:
                raise BadRequest(400, f"corrupt payload: {exc}") from None
        src = body.rename(body.with_name("in.ccap"))
        # The 16-bit wav it decodes to, and the stage files.
        return self._work("decode", src, src.with_name("out.wav"), 2 * claims["num_samples"] + 44 + STAGE_FILES_BYTES)


def chunks_of(output: BinaryIO) -> Iterator[bytes]:
    """A stage's output, read in chunks as the response is sent (read whole, concurrent responses
    left their size resident, as request bodies did), and closed when the response ends."""
    with output:
        while chunk := output.read(RESPONSE_CHUNK):
            yield chunk


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
    """The HTTP application of `service`: health, provenance, challenge, encode and decode.

    Long because its handlers are closures over one service's configuration, its body slots and its
    failure responses; each handler is a few lines."""
    app = FastAPI(title="codecarena codec service", docs_url=None, redoc_url=None, openapi_url=None)
    config = service.config
    body_slots = asyncio.Semaphore(BODY_SLOTS)

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

    async def spool(request: Request, path: Path) -> None:
        """The body, written to `path` as it arrives (uvicorn hands it over in chunks of at most
        64 KiB), and refused as soon as it passes the limit: Content-Length is only a claim, and a
        chunked body has none. (Held in memory whole, concurrent bodies grew this process by about
        their total, and most of it stayed resident.)"""
        size = 0
        try:
            with open(path, "wb") as fh:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > config.max_bytes:
                        raise Unread(413, f"request body is over this service's limit of {config.max_bytes} bytes")
                    fh.write(chunk)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            full = service.no_room(f"{type(exc).__name__}: {exc}")
            raise Unread(full.status, full.reason, full.logged) from None

    async def refuse_unread(request: Request, status: int, reason: str) -> JSONResponse:
        """The refusal, after reading and discarding what the client is still sending (for at most
        the read timeout): closing on unread data resets the connection, and the client would never
        see why."""
        async def discard() -> None:
            async for _ in request.stream():
                pass

        with contextlib.suppress(TimeoutError, ClientDisconnect):
            await asyncio.wait_for(discard(), config.read_timeout)
        return failure(status, reason, headers={**service.headers(), "Connection": "close"})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "codec": config.spec.canonical, "worker_pid": service.worker.pid}

    @app.get("/v1/provenance")
    def provenance(request: Request) -> JSONResponse:
        return refused(request) or JSONResponse(service.provenance, headers=service.headers())

    @app.get("/v1/challenge")
    def challenge(request: Request) -> JSONResponse:
        """HMAC-SHA256, with this process's key, of the caller's nonce and the declaration's sha256."""
        denied = refused(request)
        if denied is not None:
            return denied
        nonce = request.query_params.get("nonce", "")
        if not NONCE.fullmatch(nonce):
            return failure(400, "nonce must be 64 lowercase hexadecimal digits")
        return JSONResponse({"hmac": service.answer(nonce)}, headers=service.headers())

    async def _handle(request: Request, fn: Any, media_type: str) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > config.max_bytes:
            return await refuse_unread(request, 413, f"request body is {length} bytes, over this service's limit "
                                                     f"of {config.max_bytes}")
        try:
            async with body_slots:
                return await answer(request, fn, media_type)
        except Unread as exc:
            if exc.logged:
                log.warning("%s %s: %s", client_of(request), request.url.path, exc.logged)
            # What the client still sends is discarded outside the slot: that takes time, not memory or disk.
            return await refuse_unread(request, exc.status, exc.reason)

    def client_of(request: Request) -> str:
        return f"{request.client.host}:{request.client.port}" if request.client else "client"

    async def answer(request: Request, fn: Any, media_type: str) -> Response:
        """The response to a request whose turn has come (Unread when its body cannot be taken)."""
        client = client_of(request)
        try:
            with service.request_folder() as folder:
                body = folder / "body"
                try:
                    # The body's deadline starts when its turn comes: waiting for a slot is the service's doing.
                    await asyncio.wait_for(spool(request, body), config.read_timeout)
                except TimeoutError:
                    log.warning("%s %s: request body not complete after %g s; answered 408", client,
                                request.url.path, config.read_timeout)
                    return failure(408, f"request body not complete after {config.read_timeout:g} s",
                                   headers={**service.headers(), "Connection": "close"})
                except ClientDisconnect:
                    log.warning("%s %s: client disconnected before its request body ended", client, request.url.path)
                    return Response(status_code=400)  # nobody is listening; uvicorn drops it
                output = await run_in_threadpool(fn, body)
        except Unread:
            raise
        except BadRequest as exc:
            if exc.logged:
                log.warning("%s %s: %s", client, request.url.path, exc.logged)
            return failure(exc.status, exc.reason)
        except WorkerFailed as exc:
            log.warning("%s", exc)
            return failure(503, f"the codec worker failed and will be restarted: {client_safe(str(exc), {})}")
        size = os.fstat(output.fileno()).st_size
        return StreamingResponse(chunks_of(output), media_type=media_type,
                                 headers={**service.headers(), "Content-Length": str(size)})

    @app.post("/v1/encode")
    async def encode(request: Request) -> Response:
        return await _handle(request, service.encode, "application/octet-stream")

    @app.post("/v1/decode")
    async def decode(request: Request) -> Response:
        return await _handle(request, service.decode, "audio/wav")

    return app
