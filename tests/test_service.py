"""The HTTP codec service: real server process on 127.0.0.1, real requests, bad input, provenance."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import soundfile as sf

from conftest import SHORT_CLIPS, codecarena, need_mirror
from codecarena.payload import decode_payload, write_payload

SRC = Path(__file__).resolve().parent.parent / "src" / "codecarena"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str, env: dict[str, str] | None = None, log: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """A service on a free port, up and answering /health. Its output goes to `log` when given (a
    test can read it while the service runs), else to a pipe."""
    port = free_port()
    with open(log, "w") if log is not None else contextlib.nullcontext(subprocess.PIPE) as output:
        proc = subprocess.Popen([sys.executable, "-m", "codecarena", "serve", "--port", str(port), *args],
                                stdout=output, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"service exited: {log.read_text() if log else proc.stdout.read()}")  # type: ignore[union-attr]
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("service did not come up")


def stop(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def post(url: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def opus_service() -> Iterator[str]:
    proc, url = start("--codec", "opus:12k", "--max-bytes", "400K")
    yield url
    stop(proc)


@pytest.fixture
def clip() -> bytes:
    return (need_mirror() / SHORT_CLIPS[0]).read_bytes()


def test_encode_then_decode_restores_the_exact_length_and_repeats_byte_for_byte(opus_service: str, clip: bytes) -> None:
    status, headers, payload = post(opus_service + "/v1/encode", clip)
    assert status == 200 and headers["x-codecarena-codec"] == "opus:12k"
    assert decode_payload(payload).num_samples == sf.info(io.BytesIO(clip)).frames
    first = post(opus_service + "/v1/decode", payload)
    second = post(opus_service + "/v1/decode", payload)
    assert first[0] == 200 and first[2] == second[2]
    audio, rate = sf.read(io.BytesIO(first[2]))
    assert rate == 16000 and len(audio) == sf.info(io.BytesIO(clip)).frames


def test_provenance_declares_the_sources_this_checkout_has(opus_service: str) -> None:
    declared = get_json(opus_service + "/v1/provenance")
    assert declared["codec"] == "opus:12k" and declared["variant"]["name"] == ""
    launcher = declared["sources"]["launcher"]
    assert launcher["sha256"] == hashlib.sha256((SRC / "service" / "app.py").read_bytes()).hexdigest()
    assert declared["sources_verified_at_start"] and declared["started_at"] and declared["packages"]["service"]["fastapi"]


def _wav(rate: int, channels: int = 1, seconds: float = 0.5) -> bytes:
    out = io.BytesIO()
    sf.write(out, np.zeros((int(rate * seconds), channels)) + 0.01, rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def _compressed(fmt: str) -> bytes:
    """Half a second of a 16 kHz mono tone in a container libsndfile reads (MP3, Ogg) or only
    FFmpeg does (m4a/AAC): everything about it but the container is what the service takes."""
    import av

    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(8000) / 16000)).astype(np.float32)
    out = io.BytesIO()
    if fmt != "m4a":
        sf.write(out, tone, 16000, format=fmt, subtype={"MP3": "MPEG_LAYER_III", "OGG": "VORBIS"}[fmt])
        return out.getvalue()
    with av.open(out, "w", format="mp4") as container:
        stream = container.add_stream("aac", rate=16000)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(tone[None, :], format="fltp", layout="mono")
        frame.sample_rate = 16000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


@pytest.mark.parametrize("path, body, status, needle", [
    ("/v1/encode", b"", 400, "empty request body"),
    ("/v1/encode", b"not audio at all", 400, "request body: unreadable audio"),
    ("/v1/encode", "wav8k", 422, "sample rate 8000 Hz is not supported"),
    ("/v1/encode", "stereo", 422, "2 channels"),
    ("/v1/encode", "big", 413, "over this service's limit"),
    ("/v1/encode", "truncated", 400, "request body: truncated"),
    ("/v1/encode", "MP3", 415, "request body is MP3 MPEG_LAYER_III audio; this service takes 16 kHz mono WAV or FLAC"),
    ("/v1/encode", "OGG", 415, "request body is OGG VORBIS audio; this service takes 16 kHz mono WAV or FLAC"),
    ("/v1/encode", "m4a", 415, "request body is mov,mp4,m4a,3gp,3g2,mj2 aac audio; this service takes 16 kHz mono"),
    ("/v1/decode", b"CCAP garbage", 400, "corrupt payload"),
    ("/v1/decode", "other_codec", 409, "payload is for codec pcm:16"),
])
def test_bad_input_gets_a_4xx_with_one_line_and_the_server_lives(opus_service: str, clip: bytes, tmp_path: Path,
                                                                 path: str, body: object, status: int,
                                                                 needle: str) -> None:
    if body == "wav8k":
        body = _wav(8000)
    elif body == "stereo":
        body = _wav(16000, channels=2)
    elif body == "big":
        body = _wav(16000, seconds=20)
    elif body in ("MP3", "OGG", "m4a"):
        body = _compressed(body)
    elif body == "truncated":
        body = clip[: len(clip) // 2]
    elif body == "other_codec":
        _, _, payload = post(opus_service + "/v1/encode", clip)
        import dataclasses

        write_payload(tmp_path / "p.ccap", dataclasses.replace(decode_payload(payload), codec="pcm:16", family="pcm",
                                                               config={}))
        body = (tmp_path / "p.ccap").read_bytes()
    code, _, reply = post(opus_service + path, body)  # type: ignore[arg-type]
    message = json.loads(reply)["error"]
    assert code == status and needle in message and "\n" not in message, (code, message)
    assert get_json(opus_service + "/health")["status"] == "ok"


def test_a_killed_codec_worker_is_replaced(opus_service: str, clip: bytes) -> None:
    assert post(opus_service + "/v1/encode", clip)[0] == 200
    pid = get_json(opus_service + "/health")["worker_pid"]
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    status, _, _ = post(opus_service + "/v1/encode", clip)
    assert status == 200 and get_json(opus_service + "/health")["worker_pid"] not in (pid, None)


def test_bounded_load_has_no_errors_and_reports_latency_percentiles(opus_service: str, clip: bytes) -> None:
    """200 requests (encode and decode alternating) from 8 concurrent clients."""
    from concurrent.futures import ThreadPoolExecutor

    _, _, payload = post(opus_service + "/v1/encode", clip)

    def one(i: int) -> tuple[int, float]:
        start = time.perf_counter()
        status, _, _ = post(opus_service + ("/v1/encode" if i % 2 == 0 else "/v1/decode"), clip if i % 2 == 0 else payload)
        return status, time.perf_counter() - start

    wall = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(200)))
    wall = time.perf_counter() - wall
    statuses = [status for status, _ in results]
    assert statuses == [200] * 200, {code: statuses.count(code) for code in set(statuses)}
    latency_ms = np.array([seconds for _, seconds in results]) * 1000
    report = {"requests": 200, "clients": 8, "errors": 0, "wall_s": wall, "requests_per_s": 200 / wall,
              **{f"p{q}_ms": float(np.percentile(latency_ms, q)) for q in (50, 95, 99)},
              "max_ms": float(latency_ms.max())}
    print("service load test:", json.dumps(report))
    artifacts = os.environ.get("CODECARENA_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        (Path(artifacts) / "service-load.json").write_text(json.dumps(report, indent=1))
    assert report["p50_ms"] <= report["p95_ms"] <= report["p99_ms"] <= report["max_ms"]
    assert get_json(opus_service + "/health")["status"] == "ok"


def test_service_check_verifies_a_local_service(opus_service: str, tmp_path: Path) -> None:
    result = codecarena("service-check", opus_service, "--json", tmp_path / "c.json")
    assert result.returncode == 0, result.stdout + result.stderr
    check = json.loads((tmp_path / "c.json").read_text())
    assert check["verified"] and check["all_match_local"] and "VERIFIED: local process" in result.stdout
    assert "does not prove what a remote server runs" in result.stdout


@contextlib.contextmanager
def impostor(declared: dict[str, Any]) -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1 that answers every GET with `declared`."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.dumps(declared).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_service_check_never_verifies_a_declaration_it_cannot_inspect(opus_service: str, tmp_path: Path) -> None:
    declared = get_json(opus_service + "/v1/provenance")
    declared["pid"] = 0  # what a remote server would look like: no local process to inspect
    declared["sources"]["launcher"]["sha256"] = "0" * 64

    with impostor(declared) as url:
        result = codecarena("service-check", url, "--json", tmp_path / "c.json")
    check = json.loads((tmp_path / "c.json").read_text())
    assert result.returncode == 1 and not check["verified"] and not check["all_match_local"]
    assert "NOT VERIFIED (declaration only)" in result.stdout and "launcher" in result.stdout


@pytest.mark.slow
def test_stable_codec_activations_are_declared_and_off_by_default(runtime_env, clip: bytes) -> None:  # type: ignore[no-untyped-def]
    env = runtime_env("dac")
    proc, url = start("--codec", "dac:16khz", "--weights", "synthetic", "--stable-codec-activations", env=env)
    try:
        declared = get_json(url + "/v1/provenance")
        assert declared["variant"]["name"] == "eager_snake_v1" and declared["variant"]["replaced_modules"] == 58
        assert declared["sources"]["variant"]["sha256"] == hashlib.sha256(
            (SRC / "variants" / "eager_snake_v1.py").read_bytes()).hexdigest()
        assert declared["weights"] == "synthetic" and len(declared["checkpoint"]["sha256"]) == 64
        # The cached synthetic checkpoint it names is hashed by service-check too.
        checked = codecarena("service-check", url, env=env)
        assert checked.returncode == 0 and "VERIFIED: local process" in checked.stdout, checked.stdout + checked.stderr
        status, headers, payload = post(url + "/v1/encode", clip)
        assert status == 200 and headers["x-codecarena-variant"] == "eager_snake_v1"
        assert decode_payload(payload).variant == "eager_snake_v1"
        # The first request is the model's first call on speech of this length (start-up only encoded
        # 0.1 s of silence); ten more in the same warm worker must give the very same bytes.
        warm = [post(url + "/v1/encode", clip) for _ in range(10)]
        assert [w[0] for w in warm] == [200] * 10
        assert all(w[2] == payload for w in warm), "a warm encode differs from the first (cold) one"
        assert post(url + "/v1/decode", payload)[0] == 200
    finally:
        stop(proc)
    proc, url = start("--codec", "dac:16khz", "--weights", "synthetic", env=env)
    try:
        assert get_json(url + "/v1/provenance")["variant"]["name"] == ""
        # A payload made with the variant is refused by the upstream-numerics service.
        code, _, reply = post(url + "/v1/decode", payload)
        assert code == 409 and "variant 'eager_snake_v1'" in json.loads(reply)["error"]
    finally:
        stop(proc)
