"""The codec service against hostile and careless clients (issue 15): bodies without a length,
slow and vanishing clients, forged payloads, a bearer token, impostors of a service, and a serve
process that leaves nothing behind. One token-protected opus service serves the module."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import http.client
import io
import json
import os
import re
import signal
import socket
import struct
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
from codecarena.payload import CodeStream, PacketStream, decode_payload, encode_payload
from test_service import free_port, impostor, start, stop

TOKEN = "s3cret-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_BYTES = 400 * 1024
READ_TIMEOUT_S = 2
MAX_SECONDS = 30
# How long a test waits for the service to act on a timeout it was given READ_TIMEOUT_S for: a
# generous bound for a loaded machine, not a measurement.
PATIENCE_S = 30
# An absolute path in a client-facing message (a server temp folder, a log, an interpreter).
ABSOLUTE_PATH = re.compile(r"(^|[\s:('\"])/\w")


@dataclasses.dataclass(frozen=True)
class Service:
    url: str
    port: int
    log: Path
    pid: int


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    log = tmp_path_factory.mktemp("service") / "serve.log"
    proc, url = start("--codec", "opus:12k", "--max-bytes", "400K", "--read-timeout", str(READ_TIMEOUT_S),
                      "--max-seconds", str(MAX_SECONDS), env={"CODECARENA_SERVICE_TOKEN": TOKEN}, log=log)
    yield Service(url, int(url.rsplit(":", 1)[1]), log, proc.pid)
    stop(proc)


def request(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                 headers=AUTH if headers is None else headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def error_of(reply: bytes) -> str:
    message = json.loads(reply)["error"]
    assert "\n" not in message and not ABSOLUTE_PATH.search(message), message
    return message


@pytest.fixture
def clip() -> bytes:
    return (need_mirror() / SHORT_CLIPS[0]).read_bytes()


@pytest.fixture
def payload(service: Service, clip: bytes) -> bytes:
    status, body = request(service.url + "/v1/encode", clip)
    assert status == 200, body
    return body


def connect(service: Service) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", service.port), timeout=PATIENCE_S)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a socket timeout fails the test)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


# --- 17: bearer token -------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": TOKEN}])
def test_every_endpoint_but_health_needs_the_token(service: Service, clip: bytes, headers: dict[str, str]) -> None:
    for path, body in (("/v1/provenance", None), ("/v1/encode", clip), ("/v1/decode", b"CCAP")):
        status, reply = request(service.url + path, body, headers)
        assert status == 401 and "Authorization: Bearer" in error_of(reply), (path, status, reply)
    assert request(service.url + "/health", None, headers)[0] == 200
    assert request(service.url + "/v1/provenance")[0] == 200


def test_service_check_sends_the_token(service: Service, tmp_path: Path) -> None:
    refused = codecarena("service-check", service.url, env={"CODECARENA_SERVICE_TOKEN": ""})
    assert refused.returncode == 2 and "HTTP 401" in refused.stderr and "--token" in refused.stderr
    result = codecarena("service-check", service.url, "--token", TOKEN, "--json", tmp_path / "c.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "c.json").read_text())["verified"]


# --- 4: a body without a length is bounded too ----------------------------------------------


def test_a_chunked_body_over_the_limit_is_refused_before_it_ends(service: Service) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=PATIENCE_S)
    conn.putrequest("POST", "/v1/encode")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.putheader("Authorization", AUTH["Authorization"])
    conn.endheaders()
    chunk = b"\0" * 65536
    for _ in range(MAX_BYTES // len(chunk) + 1):
        conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    # No final zero-size chunk: a server that waited for the whole body would never answer.
    response = conn.getresponse()
    assert response.status == 413 and f"limit of {MAX_BYTES} bytes" in error_of(response.read())
    conn.close()
    assert request(service.url + "/health")[0] == 200


# --- #28 (8): concurrent bodies do not pile up in the server's memory ---------------------------


def long_pcm_payload(url: str, samples: int) -> bytes:
    """A pcm:16 payload of `samples` silent samples (2 bytes each), built from the header the
    service gives a short clip."""
    out = io.BytesIO()
    sf.write(out, np.zeros(16000), 16000, format="WAV", subtype="PCM_16")
    status, short = request(url + "/v1/encode", out.getvalue(), headers={})
    assert status == 200, short
    stream = decode_payload(short).streams[0]
    codes = CodeStream(stream.name, stream.bit_width, (samples,), np.zeros(samples, dtype=np.uint64))
    return encode_payload(dataclasses.replace(decode_payload(short), streams=(codes,), num_samples=samples))


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/encode", "/v1/decode"])
def test_concurrent_large_bodies_leave_the_servers_memory_flat(path: str) -> None:
    """12 clients send a 30 MiB wav, or payload, at once (the issue: 48 x 60 MiB wavs peaked at
    3.7 GB, 3.3 GB left resident; #36: 12 x 30 MiB payloads left 360 MiB). Bodies go to the work
    disk as they arrive, two requests at a time, and decode parses its body from the file: the
    server grows by far less than one body, where holding them grew it by about all twelve."""
    import psutil

    size = 30 << 20
    proc, url = start("--codec", "pcm:16", "--max-bytes", "31M")
    if path == "/v1/encode":
        header = b"RIFF" + struct.pack("<I", size - 8) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
        body = header + b"data" + struct.pack("<I", size - len(header) - 8) + bytes(size - len(header) - 8)
    else:
        body = long_pcm_payload(url, size // 2)
    server = psutil.Process(proc.pid)
    before, peak, sending = server.memory_info().rss, [0], threading.Event()

    def watch() -> None:
        while sending.is_set():
            peak[0] = max(peak[0], server.memory_info().rss)
            time.sleep(0.005)

    def send(_: int) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=PATIENCE_S)
        conn.request("POST", path, body=body)
        response = conn.getresponse()
        return response.status, response.read()

    sending.set()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            replies = list(pool.map(send, range(12)))
    finally:
        sending.clear()
        watcher.join()
        stop(proc)
    # 983 s of audio: every body was read and validated, then refused for its length.
    assert all(status == 413 and b"over this service's limit of 600 s" in reply for status, reply in replies), replies
    grown_mib = (peak[0] - before) / 2**20
    assert grown_mib < 64, f"the server grew by {grown_mib:.0f} MiB while 12 x 30 MiB bodies arrived"


# --- 17: slow clients are cut off -------------------------------------------------------------


def test_a_client_that_never_sends_its_body_gets_408(service: Service) -> None:
    with connect(service) as sock:
        sock.sendall(b"POST /v1/encode HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n" + b"RIFF")
        reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert b"request body not complete" in reply


def test_a_client_trickling_its_body_gets_408(service: Service) -> None:
    stop_sending = threading.Event()

    def trickle(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the server closing under the sender is the point
            while not stop_sending.wait(0.2):
                sock.send(b"x")

    with connect(service) as sock:
        sock.sendall(b"POST /v1/encode HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
        sender = threading.Thread(target=trickle, args=(sock,), daemon=True)
        sender.start()
        try:
            reply = sock.recv(65536)
        finally:
            stop_sending.set()
            sender.join()
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]


@pytest.mark.parametrize("pace", ["silent", "trickle"])
def test_a_client_that_does_not_finish_its_headers_is_disconnected(service: Service, pace: str) -> None:
    stop_sending = threading.Event()
    headers = b"POST /v1/encode HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"y" * 4096

    def trickle(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the server closing under the sender is the point
            for byte in headers:
                if stop_sending.wait(0.2):
                    return
                sock.send(bytes([byte]))

    with connect(service) as sock:
        sender = threading.Thread(target=trickle, args=(sock,), daemon=True)
        if pace == "trickle":
            sender.start()
        try:
            reply = read_all(sock)
        finally:
            stop_sending.set()
            if pace == "trickle":
                sender.join()
    assert reply == b""
    assert request(service.url + "/health")[0] == 200


# --- 18: a vanishing client is one log line -------------------------------------------------


def test_a_client_that_disconnects_mid_body_is_logged_in_one_line(service: Service) -> None:
    before = service.log.read_text()
    with connect(service) as sock:
        sock.sendall(b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\nCCAP")
    deadline = time.monotonic() + PATIENCE_S
    while "disconnected" not in service.log.read_text()[len(before):] and time.monotonic() < deadline:
        time.sleep(0.1)
    new = service.log.read_text()[len(before):]
    assert [line for line in new.splitlines() if "disconnected" in line], new
    assert "Traceback" not in new, new


# --- 10 and 13: a forged payload is the client's 4xx, never a giant wav or a 500 --------------


def forged(payload: bytes, **changes: Any) -> bytes:
    return encode_payload(dataclasses.replace(decode_payload(payload), **changes))


@pytest.mark.parametrize("changes, status, needle", [
    ({"num_samples": 10**9}, 413, f"over this service's limit of {MAX_SECONDS} s"),
    ({"sample_rate": 8000}, 422, "sample rate of 8000 Hz"),
    ({"sample_rate": 48000}, 422, "sample rate of 48000 Hz"),
    ({"sample_rate": 1}, 422, "sample rate of 1 Hz"),
    ({"channels": 2}, 422, "2 channels"),
    ({"family": "pcm"}, 422, "family 'pcm'"),
    ({"config": {"bitrate": 999}}, 422, "payload config is not the configuration of opus:12k"),
    ({"streams": (PacketStream("not-opus", (b"\x01",)),)}, 422, "no stream named 'opus'"),
    ({"side_info": {}}, 422, "lacks opus_head"),
])
def test_a_forged_payload_gets_a_4xx_without_server_paths(service: Service, payload: bytes, changes: dict[str, Any],
                                                          status: int, needle: str) -> None:
    code, reply = request(service.url + "/v1/decode", forged(payload, **changes))
    assert code == status and needle in error_of(reply), (code, reply)
    assert request(service.url + "/health")[0] == 200


def test_client_messages_name_no_server_file() -> None:
    from codecarena.service.app import client_safe

    tmp = Path("/tmp/codecarena-serve-x/tmp1")
    message = (f"persistent worker exited while running {tmp}/out.wav.job.json; see '/tmp/codecarena-serve-x/"
               f"worker.log'; {tmp}/in.ccap: 8/16 frames")
    assert client_safe(message, {tmp / "in.ccap": "request body"}) == \
        "persistent worker exited while running <server path>; see '<server path>'; request body: 8/16 frames"


def test_a_forged_length_within_the_limit_fails_the_codecs_tolerance(service: Service, payload: bytes) -> None:
    """4.9 KB of opus codes declaring 20 s: the decoder's own length is the truth."""
    declared = decode_payload(payload).num_samples
    code, reply = request(service.url + "/v1/decode", forged(payload, num_samples=20 * 16000))
    message = error_of(reply)
    assert code == 422 and "beyond the codec's tolerance" in message and "request body" in message, message
    assert str(20 * 16000) in message and declared < 20 * 16000
    code, wav = request(service.url + "/v1/decode", payload)
    assert code == 200 and sf.info(io.BytesIO(wav)).frames == declared


@pytest.mark.parametrize("changes, needle", [
    ({"sample_rate": 8000}, "payload declares 8000 Hz, the arena runs at 16000 Hz"),
    ({"num_samples": 16000 * 60}, "beyond the codec's tolerance"),
])
def test_the_decode_worker_refuses_a_forged_rate_or_length_before_restoring(tmp_path: Path, changes: dict[str, Any],
                                                                           needle: str) -> None:
    """The pipeline's workers get the same refusal, before the restored audio is allocated or written."""
    from codecarena.runtime.protocol import Job, read_report, write_job

    mirror = need_mirror()
    for stage, src, dst in (("encode", mirror / SHORT_CLIPS[0], tmp_path / "p.ccap"),
                            ("decode", tmp_path / "forged.ccap", tmp_path / "d.wav")):
        if stage == "decode":
            src.write_bytes(forged((tmp_path / "p.ccap").read_bytes(), **changes))
        report = tmp_path / f"{stage}.json"
        job = Job.encode(src, dst, report, "opus:12k") if stage == "encode" else Job.decode(src, dst, report)
        write_job(tmp_path / f"{stage}.job.json", job)
        subprocess.run([sys.executable, "-m", "codecarena.worker", str(tmp_path / f"{stage}.job.json")],
                       capture_output=True, timeout=300)
    report = read_report(tmp_path / "decode.json")
    assert not report.ok and needle in report.error and str(tmp_path / "forged.ccap") in report.error, report.error
    assert not (tmp_path / "d.wav").exists()


# --- 8 and 14: the encoder's input goes through the shared audio validation ----------------------


def float_wav(samples: np.ndarray) -> bytes:
    out = io.BytesIO()
    sf.write(out, samples, 16000, format="WAV", subtype="FLOAT")
    return out.getvalue()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_audio_is_refused(service: Service, bad: float) -> None:
    samples = np.full(16000, 0.1)
    samples[1234] = bad
    code, reply = request(service.url + "/v1/encode", float_wav(samples))
    assert code == 400 and "request body: 1 sample is NaN or infinite" in error_of(reply), reply


def test_audio_shorter_than_the_minimum_is_refused(service: Service) -> None:
    code, reply = request(service.url + "/v1/encode", float_wav(np.full(800, 0.1)))
    assert code == 400 and "shorter than" in error_of(reply), reply


def streamed(wav: bytes) -> bytes:
    """`wav` as a recorder that did not know the length writes it: RIFF and data sizes 0xFFFFFFFF."""
    data = wav.index(b"data")
    return wav[:4] + b"\xff\xff\xff\xff" + wav[8:data + 4] + b"\xff\xff\xff\xff" + wav[data + 8:]


def test_a_streamed_wav_header_is_accepted_as_run_accepts_it(service: Service, clip: bytes) -> None:
    frames = sf.info(io.BytesIO(clip)).frames
    code, reply = request(service.url + "/v1/encode", streamed(clip))
    assert code == 200, reply
    assert decode_payload(reply).num_samples == frames


# --- 11: service-check verifies the process that answers, not a replayed declaration ------------


@pytest.mark.parametrize("forgery, reason", [
    ("none", "is served by process"),
    ("empty sources", "the declaration lacks the launcher source"),
    ("fake checkpoint", "opus:12k has no weights, yet the declaration claims"),
])
def test_service_check_refuses_an_impostor_replaying_a_real_declaration(service: Service, tmp_path: Path,
                                                                        forgery: str, reason: str) -> None:
    declared = json.loads(request(service.url + "/v1/provenance")[1])
    assert declared["pid"] == service.pid
    if forgery == "empty sources":
        declared["sources"] = {}
    elif forgery == "fake checkpoint":
        declared["checkpoint"] = {"sha256": "f" * 64}
    with impostor(declared) as url:
        result = codecarena("service-check", url, "--json", tmp_path / "c.json")
    check = json.loads((tmp_path / "c.json").read_text())
    assert result.returncode == 1 and not check["verified"], result.stdout
    assert any(reason in problem for problem in check["problems"]), check["problems"]
    assert f"not the declared pid {service.pid}" in check["verification"]
    assert "NOT VERIFIED (declaration only)" in result.stdout


# --- #28: a process that is not this checkout's `codecarena serve` is never verified -----------

# An HTTP server that declares its own pid (and answers nothing but /v1/provenance); its command
# line holds "serve" and "codecarena", as the real one's does.
IMPOSTOR = '''
import http.server, json, os, sys
declared = json.load(open(sys.argv[-1]))
declared["pid"] = os.getpid()
body = json.dumps(declared).encode()

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/v1/provenance":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_port, flush=True)
server.serve_forever()
'''


@contextlib.contextmanager
def impostor_process(argv: list[str], cwd: Path) -> Iterator[str]:
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())  # type: ignore[union-attr]
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("kind, reasons", [
    ("script", ["does not run codecarena's entry point", "holds no service key open"]),
    ("package", ["imports codecarena from", "holds no service key open"]),
    ("interpreter", ["not this checkout's interpreter"]),
])
def test_service_check_refuses_a_process_that_declares_itself(service: Service, tmp_path: Path, kind: str,
                                                             reasons: list[str]) -> None:
    """Its own pid owns the socket, its command line says serve and codecarena, the declaration is
    the real service's: none of that is the service."""
    declaration = tmp_path / "declared.json"
    declaration.write_text(request(service.url + "/v1/provenance")[1].decode())
    script = tmp_path / "codecarena_serve.py"
    script.write_text(IMPOSTOR)
    python = sys.executable
    if kind == "interpreter":  # the same binary, another virtual environment
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
        python = str(tmp_path / "venv" / "bin" / "python")
    if kind == "package":  # `python -m codecarena serve`, from a folder holding another codecarena
        (tmp_path / "codecarena").mkdir()
        (tmp_path / "codecarena" / "__init__.py").write_text("")
        (tmp_path / "codecarena" / "__main__.py").write_text(IMPOSTOR)
        argv = [python, "-m", "codecarena", "serve", str(declaration)]
    else:
        argv = [python, str(script), "serve", str(declaration)]
    with impostor_process(argv, tmp_path) as url:
        result = codecarena("service-check", url, "--json", tmp_path / "c.json")
    check = json.loads((tmp_path / "c.json").read_text())
    assert result.returncode == 1 and not check["verified"], result.stdout
    assert "NOT VERIFIED (declaration only)" in result.stdout
    for reason in reasons:
        assert any(reason in problem for problem in check["problems"]), (reason, check["problems"])


def test_the_challenge_is_answered_only_with_the_key_the_process_holds(service: Service) -> None:
    import psutil

    from codecarena.service.app import challenge_answer, provenance_sha256
    from codecarena.service.check import asker, challenge_problems

    declared = json.loads(request(service.url + "/v1/provenance")[1])
    held = [Path(f.path) for f in psutil.Process(service.pid).open_files()]
    ask = asker(service.url, TOKEN)
    assert challenge_problems(service.pid, held, declared, ask) == []
    wrong = f"the service's answer to the challenge is not made with the key process {service.pid} holds"

    def another_key(nonce: str) -> str:
        return challenge_answer(b"0" * 64, nonce, provenance_sha256(declared))

    def replayed(nonce: str) -> str:  # the service's own answer, to another nonce
        return ask("0" * 64)

    for forge in (another_key, replayed):
        assert challenge_problems(service.pid, held, declared, forge) == [wrong]
    # The real answer, to a declaration changed on the way (a relay that rewrote the pid).
    assert challenge_problems(service.pid, held, {**declared, "pid": os.getpid()}, ask) == [wrong]
    assert challenge_problems(service.pid, [], declared, ask) == [
        f"process {service.pid} holds no service key open (service.key in its work folder), so it cannot prove "
        f"that it is the service that answers"]
    code, reply = request(service.url + "/v1/challenge?nonce=abc")
    assert code == 400 and "64 lowercase hexadecimal digits" in error_of(reply)
    assert request(service.url + "/v1/challenge?nonce=" + "0" * 64, headers={})[0] == 401


def test_a_service_key_others_can_read_proves_nothing(tmp_path: Path) -> None:
    from codecarena.service.app import challenge_answer, provenance_sha256
    from codecarena.service.check import challenge_problems

    key = tmp_path / "service.key"
    key.write_bytes(b"k" * 64)
    key.chmod(0o644)
    declared = {"pid": 1}

    def ask(nonce: str) -> str:
        return challenge_answer(b"k" * 64, nonce, provenance_sha256(declared))

    assert challenge_problems(1, [key], declared, ask) == [f"the service key {key} has mode 644, not 600: others can "
                                                            f"read it"]
    key.chmod(0o600)
    assert challenge_problems(1, [key], declared, ask) == []


def test_sources_must_be_this_checkouts_files(service: Service) -> None:
    from codecarena.service.app import declared_sources
    from codecarena.service.check import sources_problems
    from codecarena.specs import parse_spec

    declared = json.loads(request(service.url + "/v1/provenance")[1])
    local = declared_sources(parse_spec("opus:12k"), "")
    assert sources_problems(declared, local) == []
    declared["sources"]["worker"]["path"] = "/elsewhere/codecarena/worker.py"
    declared["sources"]["adapter"]["sha256"] = "0" * 64
    declared["variant"]["name"] = "eager_snake_v1"
    assert sources_problems(declared, local) == [
        "the declaration lacks the variant source",
        f"the worker source is declared at /elsewhere/codecarena/worker.py, not this checkout's {local['worker']['path']}",
        f"{local['adapter']['path']} (adapter) hashes to {local['adapter']['sha256'][:12]} here, not the declared "
        f"000000000000",
    ]


def test_a_synthetic_checkpoint_claim_is_hashed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.files import sha256_file
    from codecarena.registry.entries import entry_for_family
    from codecarena.service.check import checkpoint_problem
    from codecarena.specs import parse_spec

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    registry = entry_for_family("dac").id
    cached = tmp_path / "codecarena" / "models" / "synthetic" / registry / "dac_16khz-v1-seed0.pt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"synthetic weights")
    claim = {"registry": registry, "weights": "synthetic", "seed": "0", "file": cached.name,
             "sha256": sha256_file(cached)}
    spec = parse_spec("dac:16khz")
    assert checkpoint_problem(spec, {"weights": "synthetic", "checkpoint": claim}) == ""
    wrong = checkpoint_problem(spec, {"weights": "synthetic", "checkpoint": {**claim, "sha256": "f" * 64}})
    assert wrong.startswith(f"synthetic checkpoint {cached} hashes to") and "not the declared ffffffffffff" in wrong
    for forgery in ({"file": "../../../etc/passwd"}, {"seed": "7"}, {"registry": "other"}):
        assert "does not name a cached" in checkpoint_problem(spec, {"weights": "synthetic",
                                                                     "checkpoint": {**claim, **forgery}})
    cached.unlink()
    assert "cannot be read here" in checkpoint_problem(spec, {"weights": "synthetic", "checkpoint": claim})


def test_a_real_checkpoint_claim_must_be_the_pin_and_present_here(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.registry.entries import entry_for_family
    from codecarena.service.check import checkpoint_problem
    from codecarena.specs import parse_spec

    entry = entry_for_family("lyra")  # the family with real weights pinned
    assert entry.checkpoint is not None
    pinned = entry.checkpoint.identity(entry.id)
    spec = parse_spec("lyra:3200")
    monkeypatch.setenv("CODECARENA_MODELS", str(tmp_path))  # an empty mirror: the pinned files are not here
    missing = checkpoint_problem(spec, {"weights": "real", "checkpoint": pinned})
    assert missing.startswith("the pinned checkpoint cannot be verified here") and "missing" in missing, missing
    forged = checkpoint_problem(spec, {"weights": "real", "checkpoint": {**pinned, "revision": "forged"}})
    assert "is not the registry's pin" in forged
    assert "not weights lyra:3200 loads" in checkpoint_problem(spec, {"weights": "synthetic", "checkpoint": pinned})


# --- 17 and 18: the serve process itself --------------------------------------------------------


def serve_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A data home whose codecarena folder exists, so that serve makes its work folder there."""
    home = tmp_path / "data"
    (home / "codecarena").mkdir(parents=True)
    return {"XDG_DATA_HOME": str(home)}, home / "codecarena"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_removes_its_work_folder_when_stopped(tmp_path: Path, sig: signal.Signals) -> None:
    env, data = serve_env(tmp_path)
    proc, _ = start("--codec", "opus:12k", env=env)
    assert len(list(data.glob("codecarena-serve-*"))) == 1
    os.killpg(proc.pid, sig)
    proc.wait(timeout=PATIENCE_S)
    assert list(data.glob("codecarena-serve-*")) == []


def test_serve_removes_its_work_folder_when_the_codec_does_not_start(tmp_path: Path) -> None:
    """The worker imports the opus adapter's library; a broken one first on its path fails the start-up."""
    env, data = serve_env(tmp_path)
    (tmp_path / "av.py").write_text('raise ImportError("av is broken on purpose")\n')
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH"))))
    result = codecarena("serve", "--codec", "opus:12k", "--port", str(free_port()), env=env)
    assert result.returncode == 2 and "service did not start" in result.stderr, result.stderr
    assert "av is broken on purpose" in result.stderr
    assert list(data.glob("codecarena-serve-*")) == []


def test_a_host_beyond_loopback_warns_and_a_failed_bind_leaves_nothing(tmp_path: Path) -> None:
    """192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails after start-up."""
    env, data = serve_env(tmp_path)
    result = codecarena("serve", "--codec", "opus:12k", "--host", "192.0.2.1", "--port", str(free_port()), env=env)
    assert result.returncode != 0
    warning = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "--host 192.0.2.1" in warning[0] and "trusted networks" in warning[0], result.stderr
    assert "no --token" in warning[0]
    assert list(data.glob("codecarena-serve-*")) == []


@pytest.mark.parametrize("option, value", [("--read-timeout", "0"), ("--read-timeout", "-1"),
                                           ("--max-seconds", "nan"), ("--max-seconds", "inf")])
def test_a_limit_that_cannot_be_used_is_refused_in_one_line(option: str, value: str) -> None:
    result = codecarena("serve", "--codec", "opus:12k", "--port", str(free_port()), option, value)
    assert result.returncode == 2 and result.stderr == f"codecarena: error: {option} {value}: must be a positive " \
                                                       f"number of seconds\n", result.stderr
