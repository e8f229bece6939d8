"""The listening test's local web server (`codecarena listen`): the page, the stimuli by content hash,
and the answers, each checked and written before it is acknowledged.

FastAPI on uvicorn, with the codec service's protections (docs/security.md): a deadline on request
headers (`service.app.header_deadline_protocol`) and on the body, and a body limit counted as it
arrives (Content-Length is only a claim). An answer must be sent as `application/json`, which a page
of another origin cannot do without a preflight this server never grants; bound to a loopback address,
the server also refuses a Host header naming another (a DNS-rebinding page). A stimulus is served only
as `/audio/<sha256>.wav` for a sha256 the test names, and only when the file's bytes still hash to it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from codecarena.diskspace import DiskFullError
from codecarena.files import parse_json
from codecarena.results.listening.answers import AnswerError, check_answer
from codecarena.results.listening.definition import ListeningError, ListeningTest
from codecarena.results.listening.manifest import MEDIA_TYPES, client_manifest, page_file
from codecarena.results.listening.screening import answers
from codecarena.results.listening.store import append_lines, read_lines
from codecarena.rundir import RunDir, unsafe_id_reason

MAX_BODY_BYTES = 64 << 10  # an answer is well under 4 KiB
AUDIO = re.compile(r"([0-9a-f]{64})\.wav")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; media-src 'self' blob:; "
                               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}

log = logging.getLogger("uvicorn.error")


@dataclass(frozen=True)
class ServerConfig:
    home: RunDir  # the run holding the test
    test: ListeningTest
    audio: dict[str, Path]  # sha256 -> the file's path (each stimulus, verified again when served)
    read_timeout: float
    loopback_port: int | None  # the port, when bound to a loopback address (Host headers are checked)


def _failure(status: int, reason: str) -> JSONResponse:
    # A body refused before it was all read (too big, too slow): the connection is not reused.
    closing = {"Connection": "close"} if status in (408, 413) else {}
    return JSONResponse({"error": reason.splitlines()[0]}, status_code=status, headers={**SECURITY_HEADERS, **closing})


async def _body(request: Request, timeout: float) -> bytes:
    """The request's body, refused (AnswerError 413) past MAX_BODY_BYTES as it arrives, or (408) when it
    has not ended within `timeout`."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise AnswerError(413, f"request body is {length} bytes, over the limit of {MAX_BODY_BYTES}")

    async def read() -> bytes:
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_BODY_BYTES:
                raise AnswerError(413, f"request body is over the limit of {MAX_BODY_BYTES} bytes")
        return bytes(data)

    try:
        return await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise AnswerError(408, f"request body not complete after {timeout:g} s") from None


def create_app(config: ServerConfig) -> FastAPI:
    app = FastAPI(title="codecarena listening test", docs_url=None, redoc_url=None, openapi_url=None)
    test = config.test

    def foreign_host(request: Request) -> bool:
        if config.loopback_port is None:
            return False
        host = request.headers.get("host", "")
        return host not in {f"{h}:{config.loopback_port}" for h in LOOPBACK_HOSTS}

    @app.middleware("http")
    async def hosts_only(request: Request, call_next: Any) -> Response:
        if foreign_host(request):
            return _failure(421, f"this server answers only to 127.0.0.1:{config.loopback_port}")
        response: Response = await call_next(request)
        return response

    @app.get("/")
    def index() -> Response:
        return Response(page_file("index.html"), media_type=MEDIA_TYPES[".html"], headers=SECURITY_HEADERS)

    @app.get("/listen.js")
    def script() -> Response:
        return Response(page_file("listen.js"), media_type=MEDIA_TYPES[".js"], headers=SECURITY_HEADERS)

    @app.get("/listen.css")
    def style() -> Response:
        return Response(page_file("listen.css"), media_type=MEDIA_TYPES[".css"], headers=SECURITY_HEADERS)

    @app.get("/manifest.json")
    def manifest() -> JSONResponse:
        return JSONResponse(client_manifest(test, "server"), headers=SECURITY_HEADERS)

    @app.get("/audio/{name}")
    def audio(name: str) -> Response:
        match = AUDIO.fullmatch(name)
        sha = match.group(1) if match else ""
        path = config.audio.get(sha)
        if path is None:
            return _failure(404, f"{name[:80]!r}: not a stimulus of this test (stimuli are served by sha256 only)")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            log.warning("%s: no longer hashes to %s; not served", path, sha)
            return _failure(500, "the stimulus on disk no longer has the test's bytes; the test cannot go on")
        return Response(data, media_type="audio/wav", headers=SECURITY_HEADERS)

    @app.get("/api/progress")
    def progress(listener: str = "") -> JSONResponse:
        if unsafe_id_reason(listener):
            return _failure(400, f"listener id {unsafe_id_reason(listener)}")
        try:
            lines, _ = read_lines(config.home.listener_ratings(test.name, listener))
        except ValueError as exc:
            log.warning("%s", exc)
            return _failure(500, f"listener {listener}'s rating file cannot be read; ask the test's organiser")
        done = [line.trial for line in answers(test, lines)]
        return JSONResponse({"listener": listener, "trained": any(line.kind == "training" for line in lines),
                             "answered": done, "complete": len(done) == len(test.trials)}, headers=SECURITY_HEADERS)

    @app.post("/api/answer")
    async def answer(request: Request) -> Response:
        return await receive(config, request)

    return app


async def receive(config: ServerConfig, request: Request) -> Response:
    """One answer: read within the limits, checked against the listener's file and appended, or refused."""
    test = config.test
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return _failure(415, "an answer is sent as application/json")
    try:
        body = await _body(request, config.read_timeout)
        try:
            submitted = parse_json(body)
        except ValueError as exc:
            raise AnswerError(400, f"malformed answer: not JSON ({str(exc)[:120]})") from None
        if not isinstance(submitted, dict) or not isinstance(submitted.get("listener"), str) or \
                unsafe_id_reason(submitted["listener"]):
            listener = submitted.get("listener") if isinstance(submitted, dict) else None
            raise AnswerError(400, f"listener id {unsafe_id_reason(listener) or 'missing'}")
        path = config.home.listener_ratings(test.name, submitted["listener"])
        received = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        written = await run_in_threadpool(
            append_lines, path, lambda history: [check_answer(test, submitted, history, received, "server")])
    except AnswerError as exc:
        return _failure(exc.status, str(exc))
    except DiskFullError as exc:
        log.warning("%s", exc)
        return _failure(507, "the server's disk is full: the answer was not written; try again later")
    except (ListeningError, OSError) as exc:
        log.warning("answer not written: %s", exc)
        return _failure(500, "the answer could not be written (the server's log says why); it was not kept")
    except ClientDisconnect:
        return Response(status_code=400)  # nobody is listening
    line = written[0]
    return JSONResponse({"accepted": line.trial, "kind": line.kind, "position": line.position,
                         "line_sha256": line.line_sha256}, headers=SECURITY_HEADERS)
