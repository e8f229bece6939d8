"""The service's ASGI app driven in this process (#28, #36): how many request bodies it holds at
once, how much of a body and of its answer sits in memory, and a full work disk. A real `CodecService` (pcm:16, its worker started) answers; the test plays
the HTTP server, handing each request its body chunk by chunk, so what the app reads, and when,
is observed directly rather than through timing or memory readings."""

from __future__ import annotations

import asyncio
import builtins
import collections
import dataclasses
import errno
import hashlib
import io
import json
import logging
import shutil
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from codecarena.service.app import CodecService, ServiceConfig, create_app
from codecarena.specs import parse_spec

READ_TIMEOUT_S = 60.0  # never reached: every test ends its requests itself
# Half the 8 MiB bodies below: what the app may hold at once, mostly encode's audio check (a few
# arrays of a 65,536-frame block, about 2.5 MiB) and the body's and the answer's 64 KiB chunks.
HELD_BOUND = 4 << 20
DiskUsage = collections.namedtuple("DiskUsage", "total used free")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CodecService]:
    config = ServiceConfig(spec=parse_spec("pcm:16"), weights="real", variant="", registry={},
                           runtime={"interpreter": sys.executable}, max_bytes=64 << 20, max_seconds=600.0,
                           read_timeout=READ_TIMEOUT_S, token="", memory_limit=4 << 30,
                           work=tmp_path_factory.mktemp("serve"))
    service = CodecService(config)
    service.start()
    yield service
    service.close()


class Client:
    """One POST to the app, whose body the test hands over with `send`; `end` finishes it and
    `vanish` disconnects. `asked` counts the app's calls for more body. The answer's first
    `keep` bytes are kept in `reply`; `received` counts them all and `digest` hashes them all."""

    def __init__(self, app: Any, path: str, keep: int = 1 << 30) -> None:
        self.chunks: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.asked = 0
        self.status = 0
        self.reply = b""
        self.keep, self.received, self.digest = keep, 0, hashlib.sha256()
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"test")], "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}
        self.task = asyncio.ensure_future(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        self.asked += 1
        return await self.chunks.get()

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        else:
            body = message.get("body", b"")
            self.received += len(body)
            self.digest.update(body)
            self.reply += body[:max(0, self.keep - len(self.reply))]

    def send(self, chunk: bytes) -> None:
        self.chunks.put_nowait({"type": "http.request", "body": chunk, "more_body": True})

    def end(self, chunk: bytes = b"") -> None:
        self.chunks.put_nowait({"type": "http.request", "body": chunk, "more_body": False})

    def vanish(self) -> None:
        self.chunks.put_nowait({"type": "http.disconnect"})


async def settle() -> None:
    """Let every task run until it waits on something only the test can give."""
    for _ in range(50):
        await asyncio.sleep(0)


def post(service: CodecService, path: str, body: bytes) -> tuple[int, str]:
    async def one() -> tuple[int, bytes]:
        client = Client(create_app(service), path)
        client.end(body)
        await client.task
        return client.status, client.reply

    status, reply = asyncio.run(one())
    return status, json.loads(reply)["error"] if status != 200 else ""


def post_whole(service: CodecService, path: str, body: bytes) -> bytes:
    """The answer of a request that succeeds."""
    async def one() -> Client:
        client = Client(create_app(service), path)
        client.end(body)
        await client.task
        return client

    client = asyncio.run(one())
    assert client.status == 200, client.reply
    return client.reply


def wav(seconds: float = 0.5) -> bytes:
    out = io.BytesIO()
    sf.write(out, np.full(int(16000 * seconds), 0.1), 16000, format="WAV", subtype="PCM_16")
    return out.getvalue()


# --- 8: concurrent bodies are bounded ------------------------------------------------------------


@pytest.mark.parametrize(("path", "refusal"), [("/v1/encode", b"unreadable audio"),
                                               ("/v1/decode", b"corrupt payload: not a codecarena payload")])
def test_a_third_concurrent_body_is_not_read_until_a_slot_frees(service: CodecService, path: str,
                                                                refusal: bytes) -> None:
    """Two requests hold their bodies half sent; a third, with its body on the wire, waits unread
    (the server stops reading its socket), and is read as soon as one of the two goes away."""
    async def scenario() -> None:
        app = create_app(service)
        first, second, third = (Client(app, path) for _ in range(3))
        for client in (first, second, third):
            client.send(b"RIFF" + b"\0" * 65536)
        await settle()
        assert (first.asked, second.asked) == (2, 2)  # each read its first chunk and asks for more
        assert third.asked == 0
        first.vanish()
        await settle()
        assert first.task.done() and third.asked == 2
        second.vanish()
        third.end()
        await asyncio.gather(second.task, third.task)
        assert third.status == 400 and refusal in third.reply

    asyncio.run(scenario())


# --- #36 (4): neither a body nor its answer is held whole ---------------------------------------


def traced_peak(service: CodecService, path: str, body: bytes) -> tuple[int, Client]:
    """The most memory the app's allocations held at once (tracemalloc sees every allocation of
    this process, in every thread) while it answered `body`, sent in uvicorn's 64 KiB chunks made
    beforehand; the client keeps only the answer's first bytes."""
    chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]

    async def one() -> Client:
        client = Client(create_app(service), path, keep=4096)
        for chunk in chunks[:-1]:
            client.send(chunk)
        client.end(chunks[-1])
        await client.task
        return client

    tracemalloc.start()
    try:
        client = asyncio.run(one())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, client


@pytest.mark.parametrize("path", ["/v1/encode", "/v1/decode"])
def test_neither_a_body_nor_its_answer_is_held_whole_in_memory(service: CodecService, path: str) -> None:
    """An 8 MiB wav to encode and its 8 MiB payload to decode, with answers as large: the app
    holds a few chunks of either at once, not the body (decode read its body whole, 12 concurrent
    30 MiB bodies left 360 MiB resident) nor the answer (both read the worker's output whole)."""
    audio = wav(262.0)
    payload = post_whole(service, "/v1/encode", audio)
    body, answer = (audio, payload) if path == "/v1/encode" else (payload, audio)
    peak, client = traced_peak(service, path, body)
    assert client.status == 200, client.reply
    assert (client.received, client.digest.hexdigest()) == (len(answer), hashlib.sha256(answer).hexdigest())
    assert peak < HELD_BOUND, f"{path}: the app held {peak / 2**20:.1f} MiB for an {len(body) / 2**20:.1f} MiB body"


def test_a_payload_refused_while_mapped_is_a_400_naming_the_problem(service: CodecService) -> None:
    """The parser's refusal from inside the mapping, not a BufferError (a view kept alive by the
    error's traceback) that made it a 500: a code section whose padding bits are not zero."""
    from codecarena.payload import CodeStream, decode_payload, encode_payload

    payload = decode_payload(post_whole(service, "/v1/encode", wav()))
    codes = CodeStream("pcm", 3, (3,), np.array([1, 2, 3], dtype=np.uint64))
    data = bytearray(encode_payload(dataclasses.replace(payload, streams=(codes,))))
    data[-33] |= 1  # the last bit of the section: padding
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    assert post(service, "/v1/decode", bytes(data)) == (
        400, "corrupt payload: stream 'pcm': packed codes: padding bits after the last code are not zero")


# --- low: a full work disk is a 507 in one line ------------------------------------------------


def full_work_disk(monkeypatch: pytest.MonkeyPatch, work: Path) -> None:
    """Every file opened for writing in the work folder finds the disk full (how Path.write_bytes
    and a plain open reach it alike)."""
    real_open = builtins.open

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if set(mode) & set("wax+") and Path(file).is_relative_to(work):
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)


@pytest.mark.parametrize("where", ["request body", "job file", "worker's output", "worker died"])
def test_a_full_work_disk_is_a_507_in_one_line_without_a_traceback(service: CodecService, where: str,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from codecarena.diskspace import DiskFullError
    from codecarena.runtime.persistent import WorkerFailed

    if where == "request body":
        full_work_disk(monkeypatch, service.config.work)
    elif where == "job file":  # what replace_text raises when its write finds the disk full
        def write_job(path: Path, job: Any) -> None:
            raise DiskFullError(path, 4096)

        monkeypatch.setattr("codecarena.runtime.persistent.write_job", write_job)
    else:
        # The worker writes in its own process: what this one sees is a failed stage (or a worker
        # that died writing its report) while the work disk has no room for the request.
        monkeypatch.setattr(shutil, "disk_usage", lambda path: DiskUsage(total=1 << 30, used=1 << 30, free=0))
        real_submit = service.worker.submit

        def submit(job: Any, job_path: Path) -> Any:
            report = real_submit(job, job_path)
            if where == "worker died":
                raise WorkerFailed(f"persistent worker exited while running {job_path}; see {service.worker.log_path}")
            return dataclasses.replace(report, ok=False,
                                       error=f"OSError: [Errno 28] No space left on device: '{job.output}'")

        monkeypatch.setattr(service.worker, "submit", submit)
    with caplog.at_level(logging.WARNING, logger="uvicorn.error"):
        status, message = post(service, "/v1/encode", wav())
    assert status == 507, (status, message)
    assert message.startswith("the service's work disk is full") and "try again" in message, message
    assert "\n" not in message and str(service.config.work) not in message, message
    assert [r.exc_info for r in caplog.records] == [None], caplog.text
    assert "answered 507" in caplog.text and "Traceback" not in caplog.text
    monkeypatch.undo()
    assert post(service, "/v1/encode", wav())[0] == 200  # the next request, with room, is served
