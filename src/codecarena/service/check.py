"""What a running codec service declares about itself, checked against this checkout (`codecarena
service-check`), and the loopback and token rules that `codecarena serve` shares."""

from __future__ import annotations

import hmac
import http.client
import importlib.machinery
import ipaddress
import json
import os
import secrets
import shutil
import socket
import stat
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codecarena.choices import TOKEN_ENV
from codecarena.specs import CodecSpec, parse_spec

# Sources every declaration must carry (plus "variant" when it names one): without them a
# declaration says nothing about the code that serves.
REQUIRED_SOURCES = ("launcher", "worker", "adapter")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def service_token(given: str | None) -> str:
    """The bearer token named on the command line, else the one in $CODECARENA_SERVICE_TOKEN ("" = none)."""
    return given if given is not None else os.environ.get(TOKEN_ENV, "")


def _fetch(url: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (a URL the user named)
        return json.loads(response.read().decode("utf-8"))


def check(url: str, token: str = "") -> dict[str, Any]:
    """What a service declares, against the sources and checkpoints here. A declaration is a claim:
    it is verified only when the process that answers on the URL's port is the declared, live
    `codecarena serve` process of this checkout, proves it with its key, and every declared source
    and checkpoint file, hashed now, matches."""
    from codecarena.service.app import PROVENANCE_VERSION, declared_sources

    declared = _fetch(url.rstrip("/") + "/v1/provenance", token)
    if declared.get("version") != PROVENANCE_VERSION:
        raise ValueError(f"{url}: provenance version {declared.get('version')!r}, expected {PROVENANCE_VERSION}")
    for key in ("variant", "checkpoint"):
        if not isinstance(declared.get(key), dict):
            raise ValueError(f"{url}: provenance field {key!r} is not an object")
    spec = parse_spec(declared["codec"])
    local = declared_sources(spec, declared["variant"]["name"])
    claimed: dict[str, Any] = declared.get("sources") or {}
    comparisons = []
    for name in dict.fromkeys([*local, *claimed]):
        claim, mine = claimed.get(name), local.get(name)
        comparisons.append({"source": name, "file": (claim or mine)["file"],
                            "declared_sha256": claim["sha256"] if claim else None,
                            "local_sha256": mine["sha256"] if mine else None,
                            "matches_local": bool(claim and mine and mine["sha256"] == claim["sha256"])})
    parsed = urllib.parse.urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    problems = verification_problems(parsed.hostname or "", port, declared, spec, local, asker(url, token))
    pid = declared.get("pid")
    return {"version": 1, "url": url, "codec": declared["codec"], "variant": declared["variant"],
            "checkpoint": declared["checkpoint"], "weights": declared["weights"], "sources": comparisons,
            "all_match_local": all(c["matches_local"] for c in comparisons), "verified": not problems,
            "problems": problems,
            "verification": "; ".join(problems) if problems else
                            f"local process {pid}, this checkout's `codecarena serve` run by this interpreter, answers "
                            f"on port {port} with the key in its work folder; its declared sources and checkpoint, "
                            f"hashed now, match this checkout",
            "note": "a service's provenance is a declaration of code and configuration; it does not prove what a "
                    "remote server runs. Only a process on this machine whose source files were hashed counts "
                    "as verified."}


def asker(url: str, token: str) -> Callable[[str], str]:
    """Asks the service at `url` to answer a nonce; OSError or ValueError when it gives no answer."""
    def ask(nonce: str) -> str:
        reply = _fetch(f"{url.rstrip('/')}/v1/challenge?nonce={nonce}", token)
        answer = reply.get("hmac") if isinstance(reply, dict) else None
        if not isinstance(answer, str):
            raise ValueError("the answer holds no hmac")
        return answer

    return ask


def verification_problems(host: str, port: int, declared: dict[str, Any], spec: CodecSpec,
                          local: dict[str, dict[str, str]], ask: Callable[[str], str]) -> list[str]:
    """Why the declaration is not verified; empty when it is. `ask` puts a nonce to the service."""
    if not is_loopback(host):
        return [f"{host} is not this machine: the declaration cannot be verified from here"]
    pid = declared.get("pid")
    problems = [_listener_problem(host, port, pid), *_process_problems(pid, declared, ask)]
    if not declared.get("sources_verified_at_start"):
        problems.append("the service did not verify its sources at start-up")
    problems += sources_problems(declared, local)
    problems.append(checkpoint_problem(spec, declared))
    return [p for p in problems if p]


def _listener_problem(host: str, port: int, pid: Any) -> str:
    """The declared pid must own the socket that accepts connections on host:port: a process that
    merely replays a real service's declaration (pid included) listens on its own socket."""
    import psutil

    addresses = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)} | {"0.0.0.0", "::"}
    try:
        owners = {c.pid for c in psutil.net_connections(kind="tcp")
                  if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.laddr.ip in addresses}
    except psutil.Error as exc:
        return f"the sockets of this machine cannot be listed ({exc}), so the answering process is unknown"
    if not owners:
        return f"no process on this machine listens on {host}:{port}"
    if None in owners:
        return f"the process listening on {host}:{port} cannot be inspected (another user's?)"
    if owners != {pid}:
        return f"{host}:{port} is served by process {', '.join(map(str, sorted(owners)))}, not the declared pid {pid}"
    return ""


def _process_problems(pid: Any, declared: dict[str, Any], ask: Callable[[str], str]) -> list[str]:
    """The declared pid must be `codecarena serve` of this checkout, run by this interpreter, and
    must prove that it answers with the key in its work folder. All of it is read from the kernel
    (command line, executable, working folder, environment at start, open files), not from what the
    service says."""
    import psutil

    try:
        process = psutil.Process(int(pid))
        cmdline, exe, cwd, environ = process.cmdline(), process.exe(), process.cwd(), process.environ()
        open_files = process.open_files()
    except (psutil.NoSuchProcess, TypeError, ValueError):
        return [f"declared pid {pid} is not a process on this machine"]
    except psutil.Error as exc:
        return [f"process {pid} cannot be inspected ({type(exc).__name__}: another user's?)"]
    problems = [_interpreter_problem(pid, cmdline, exe, cwd, environ), _entry_point_problem(pid, cmdline, cwd, environ)]
    return [p for p in problems if p] + challenge_problems(pid, [Path(f.path) for f in open_files], declared, ask)


def _interpreter_problem(pid: Any, cmdline: list[str], exe: str, cwd: str, environ: dict[str, str]) -> str:
    """This interpreter: the same binary (the kernel's record, where a virtual environment's
    symlink ends), started from the same folder (Python picks its virtual environment by the
    pyvenv.cfg beside the path it was started as, argv[0])."""
    mine = Path(sys.executable)
    if Path(exe).resolve() != mine.resolve():
        return f"process {pid} runs {exe}, not this checkout's interpreter {mine.resolve()}"
    argv0 = cmdline[0] if cmdline else ""
    started = shutil.which(argv0, path=environ.get("PATH", "")) if os.sep not in argv0 else os.path.join(cwd, argv0)
    if started is None or os.path.dirname(os.path.abspath(started)) != os.path.dirname(os.path.abspath(mine)):
        return f"process {pid} was started as {argv0}, not this checkout's interpreter {mine}"
    return ""


def _entry_point_problem(pid: Any, cmdline: list[str], cwd: str, environ: dict[str, str]) -> str:
    """`-m codecarena serve` or this interpreter's `codecarena serve` script, importing this
    checkout's package: found as that process finds it, from its working folder (or the script's)
    and its PYTHONPATH before this interpreter's own path."""
    from codecarena.service.app import PACKAGE

    args, script = cmdline[1:], Path(sys.executable).parent / "codecarena"
    if args[:2] == ["-m", "codecarena"]:
        first, command = cwd, args[2:3]
    elif args and Path(cwd, args[0]).resolve() == script.resolve():
        first, command = str(Path(cwd, args[0]).resolve().parent), args[1:2]
    else:
        return f"process {pid} does not run codecarena's entry point ({' '.join(cmdline)[:120]})"
    if command != ["serve"]:
        return f"process {pid} is not a codecarena service ({' '.join(cmdline)[:120]})"
    theirs = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    ours = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    path = [*([] if environ.get("PYTHONSAFEPATH") else [first]), *(os.path.join(cwd, p) for p in theirs),
            *(p for p in sys.path[1:] if p and os.path.abspath(p) not in ours)]
    found = importlib.machinery.PathFinder.find_spec("codecarena", path)
    package = Path(found.origin).resolve().parent if found is not None and found.origin else None
    if package != PACKAGE:
        return f"process {pid} imports codecarena from {package or 'nowhere this interpreter finds'}, not this " \
               f"checkout's {PACKAGE}"
    return ""


def challenge_problems(pid: Any, open_files: list[Path], declared: dict[str, Any], ask: Callable[[str], str]) -> list[str]:
    """The service must answer a fresh nonce with the key that process `pid` holds open: only a
    process holding it (and its user) can. The key must be readable by its owner only."""
    from codecarena.service.app import KEY_FILE, challenge_answer, provenance_sha256

    keys = [path for path in open_files if path.name == KEY_FILE]
    if not keys:
        return [f"process {pid} holds no service key open ({KEY_FILE} in its work folder), so it cannot prove that "
                f"it is the service that answers"]
    if len(keys) > 1:
        return [f"process {pid} holds {len(keys)} files named {KEY_FILE} open, not one: which is its key is unknown"]
    try:
        mode = stat.S_IMODE(keys[0].stat().st_mode)
        key = keys[0].read_bytes()
    except OSError as exc:
        return [f"the service key {keys[0]} of process {pid} cannot be read here ({exc.strerror})"]
    problems = [] if mode == 0o600 else [f"the service key {keys[0]} has mode {mode:o}, not 600: others can read it"]
    nonce = secrets.token_hex(32)
    try:
        answer = ask(nonce)
    except urllib.error.HTTPError as exc:
        return [*problems, f"the service did not answer the challenge (HTTP {exc.code})"]
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return [*problems, f"the service did not answer the challenge ({exc})"]
    if not hmac.compare_digest(answer.encode(), challenge_answer(key, nonce, provenance_sha256(declared)).encode()):
        problems.append(f"the service's answer to the challenge is not made with the key process {pid} holds")
    return problems


def sources_problems(declared: dict[str, Any], local: dict[str, dict[str, str]]) -> list[str]:
    """Each required source must be declared, at this checkout's path, with this checkout's sha256."""
    claimed: dict[str, Any] = declared.get("sources") or {}
    required = [*REQUIRED_SOURCES, *(["variant"] if declared["variant"]["name"] else [])]
    problems = [f"the declaration lacks the {name} source" for name in required if name not in claimed]
    for name, claim in claimed.items():
        mine = local.get(name)
        if mine is None:
            problems.append(f"the declaration names a {name} source this checkout does not have")
        elif claim.get("path") != mine["path"]:
            problems.append(f"the {name} source is declared at {claim.get('path')}, not this checkout's {mine['path']}")
        elif claim.get("sha256") != mine["sha256"]:
            problems.append(f"{mine['path']} ({name}) hashes to {mine['sha256'][:12]} here, not the declared "
                            f"{str(claim.get('sha256'))[:12]}")
    return problems


def checkpoint_problem(spec: CodecSpec, declared: dict[str, Any]) -> str:
    """The checkpoint claim against the files here: none for a DSP codec; for synthetic weights the
    cached file it names, hashed now; for real weights the registry's pin, with each pinned file
    present here and verified (never downloaded)."""
    from codecarena.checkpoints import CheckpointError, cache_dir, resolve
    from codecarena.registry.catalog import FAMILIES
    from codecarena.files import sha256_file
    from codecarena.registry.entries import entry_for_family

    claim, weights = declared.get("checkpoint"), declared.get("weights")
    kind = FAMILIES[spec.family].supported_weights
    if not isinstance(claim, dict):
        return "the declaration has no checkpoint record"
    if kind == "none":
        return "" if not claim and weights == "none" else \
            f"{spec.canonical} has no weights, yet the declaration claims weights {weights!r} and checkpoint {claim}"
    entry = entry_for_family(spec.family)
    if weights == "synthetic" and kind == "real_or_synthetic":
        name = str(claim.get("file", ""))
        if claim.get("registry") != entry.id or claim.get("weights") != "synthetic" or \
                Path(name).name != name or not name.endswith(f"-seed{claim.get('seed')}.pt"):
            return f"the synthetic checkpoint claim {claim} does not name a cached {entry.id} file"
        # Where plugin.torch.synthetic_checkpoint caches it (plugin.checkpoints.synthetic_cache): the plugin API
        # is the codec side, which the harness never imports (and it needs torch).
        path = cache_dir() / "synthetic" / entry.id / name
        try:
            digest = sha256_file(path)
        except OSError:
            return f"synthetic checkpoint {path} cannot be read here"
        return "" if digest == claim.get("sha256") else \
            f"synthetic checkpoint {path} hashes to {digest[:12]} here, not the declared {str(claim.get('sha256'))[:12]}"
    if weights == "real":
        if entry.checkpoint is None:
            return f"registry entry {entry.id} pins no checkpoint, yet the declaration claims real weights"
        pinned = entry.checkpoint.for_config(spec.config)
        if claim != pinned.identity(entry.id):
            return f"the declared checkpoint {claim} is not the registry's pin for {spec.canonical}"
        try:
            resolve(pinned, allow_download=False)
        except CheckpointError as exc:
            return f"the pinned checkpoint cannot be verified here: {exc}"
        return ""
    return f"weights {weights!r} are not weights {spec.canonical} loads"
