"""`codecarena serve` and `codecarena service-check`."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from codecarena.codecs.base import parse_weights
from codecarena.runtime.limits import parse_limits, parse_size
from codecarena.specs import CodecSpec, parse_spec

VARIANT_FOR_STABLE_ACTIVATIONS = "eager_snake_v1"
TOKEN_ENV = "CODECARENA_SERVICE_TOKEN"
KEEP_ALIVE_S = 5  # an idle connection between requests is closed after this (uvicorn's default, stated)
# Sources every declaration must carry (plus "variant" when it names one): without them a
# declaration says nothing about the code that serves.
REQUIRED_SOURCES = ("launcher", "worker", "adapter")


def add_parsers(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="an HTTP codec service (encode/decode) that declares its provenance")
    p.add_argument("--codec", required=True, metavar="SPEC")
    p.add_argument("--weights", default="real", metavar="real|synthetic[:SEED]")
    p.add_argument("--stable-codec-activations", action="store_true",
                   help=f"apply {VARIANT_FOR_STABLE_ACTIVATIONS} (eager Snake1d; off by default, which keeps "
                        "upstream numerics)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; anything else warns: "
                                                       "the service is meant for trusted networks)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--max-bytes", default="64M", help="largest request body accepted (default 64M)")
    p.add_argument("--max-seconds", type=float, default=600.0,
                   help="longest audio encoded, or declared by a payload to decode (default 600)")
    p.add_argument("--read-timeout", type=float, default=60.0,
                   help="seconds a client has to send a request's headers, and again its body (default 60)")
    p.add_argument("--token", default=None,
                   help=f"require 'Authorization: Bearer TOKEN' on every endpoint but /health (default ${TOKEN_ENV}; "
                        "prefer the variable: other users can read a command line)")
    p.add_argument("--memory-limit", default=None, help="memory guard of the codec worker (default half of RAM)")
    p.add_argument("--models-dir", type=Path, help="local mirror of model files (else $CODECARENA_MODELS)")
    c = subparsers.add_parser("service-check", help="compare what a running service declares with local sources")
    c.add_argument("url", help="base URL of the service, e.g. http://127.0.0.1:8765")
    c.add_argument("--token", default=None, help=f"bearer token of the service (default ${TOKEN_ENV})")
    c.add_argument("--json", type=Path, metavar="OUT", help="also write the check as JSON")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _token(args: argparse.Namespace) -> str:
    return args.token if args.token is not None else os.environ.get(TOKEN_ENV, "")


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _work_folder(parent: Path | None) -> Iterator[Path]:
    """The service's scratch folder, removed however `serve` ends: SIGTERM (how services are
    stopped) unwinds like Ctrl-C instead of killing the process where it stands."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        work = Path(tempfile.mkdtemp(prefix="codecarena-serve-", dir=parent))
        try:
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from codecarena.cli import CliError, _runtimes, _variant
    from codecarena.registry.entries import entry_for_family
    from codecarena.runtime.envs import data_dir
    from codecarena.service.app import CodecService, ServiceConfig, create_app, header_deadline_protocol

    spec = parse_spec(args.codec)
    parse_weights(args.weights)
    for option, seconds in (("--max-seconds", args.max_seconds), ("--read-timeout", args.read_timeout)):
        if not (math.isfinite(seconds) and seconds > 0):
            raise CliError(f"{option} {seconds:g}: must be a positive number of seconds")
    weights = "synthetic:" + str(parse_weights(args.weights)[1]) if args.weights != "real" else "real"
    runtime = _runtimes((spec,), weights)[spec.family]
    variant = _variant(VARIANT_FOR_STABLE_ACTIVATIONS if args.stable_codec_activations else "", (spec,))
    entry = entry_for_family(spec.family)
    registry = {"id": entry.id, "status": entry.status,
                "checkpoint": entry.checkpoint.identity(entry.id) if entry.checkpoint else None}
    token = _token(args)
    if not is_loopback(args.host):
        print(f"codecarena serve: warning: --host {args.host} accepts connections from other machines; the service "
              f"is meant for trusted networks" + ("" if token else f" (and no --token or ${TOKEN_ENV} is set)"),
              file=sys.stderr, flush=True)
    with _work_folder(data_dir() if data_dir().is_dir() else None) as work:
        config = ServiceConfig(spec=spec, weights=weights, variant=variant, registry=registry, runtime=runtime,
                               max_bytes=parse_size(args.max_bytes), max_seconds=args.max_seconds,
                               read_timeout=args.read_timeout, token=token,
                               memory_limit=parse_limits(args.memory_limit).memory_limit_bytes,
                               work=work)
        service = CodecService(config)
        try:
            try:
                service.start()
            except RuntimeError as exc:
                raise CliError(f"service did not start: {exc}") from None
            print(f"codecarena serve: {spec.canonical} (weights {service.provenance['weights']}, variant "
                  f"{variant or 'none'}) on http://{args.host}:{args.port} ; provenance sha256 "
                  f"{service.provenance_sha256[:12]}", flush=True)
            uvicorn.run(create_app(service), host=args.host, port=args.port, log_level="warning",
                        http=header_deadline_protocol(args.read_timeout), timeout_keep_alive=KEEP_ALIVE_S)
        finally:
            service.worker.stop()
    return 0


def _fetch(url: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (a URL the user named)
        return json.loads(response.read().decode("utf-8"))


def check(url: str, token: str = "") -> dict[str, Any]:
    """What a service declares, against the sources and checkpoints here. A declaration is a claim:
    it is verified only when the process that answers on the URL's port is the declared, live
    `codecarena serve` process and every declared source and checkpoint file, hashed now, matches."""
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
    problems = verification_problems(parsed.hostname or "", port, declared, spec, local)
    pid = declared.get("pid")
    return {"version": 1, "url": url, "codec": declared["codec"], "variant": declared["variant"],
            "checkpoint": declared["checkpoint"], "weights": declared["weights"], "sources": comparisons,
            "all_match_local": all(c["matches_local"] for c in comparisons), "verified": not problems,
            "problems": problems,
            "verification": "; ".join(problems) if problems else
                            f"local process {pid} answers on port {port}; its declared sources and checkpoint, "
                            f"hashed now, match this checkout",
            "note": "a service's provenance is a declaration of code and configuration; it does not prove what a "
                    "remote server runs. Only a process on this machine whose source files were hashed counts "
                    "as verified."}


def verification_problems(host: str, port: int, declared: dict[str, Any], spec: CodecSpec,
                          local: dict[str, dict[str, str]]) -> list[str]:
    """Why the declaration is not verified; empty when it is."""
    if not is_loopback(host):
        return [f"{host} is not this machine: the declaration cannot be verified from here"]
    pid = declared.get("pid")
    problems = [_listener_problem(host, port, pid), _process_problem(pid)]
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


def _process_problem(pid: Any) -> str:
    import psutil

    try:
        cmdline = psutil.Process(int(pid)).cmdline()
    except (psutil.Error, TypeError, ValueError):
        return f"declared pid {pid} is not a process on this machine"
    if "serve" not in cmdline or not any("codecarena" in part for part in cmdline):
        return f"process {pid} is not a codecarena service ({' '.join(cmdline)[:80]})"
    return ""


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
    from codecarena.codecs.catalog import FAMILIES
    from codecarena.datasets import sha256_file
    from codecarena.registry.entries import entry_for_family

    claim, weights = declared.get("checkpoint"), declared.get("weights")
    kind = FAMILIES[spec.family].weights
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
        # Where torch_weights.synthetic_checkpoint caches it (that module needs torch; this one must not).
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
        if claim != entry.checkpoint.identity(entry.id):
            return f"the declared checkpoint {claim} is not the registry's pin for {entry.id}"
        try:
            resolve(entry.checkpoint, allow_download=False)
        except CheckpointError as exc:
            return f"the pinned checkpoint cannot be verified here: {exc}"
        return ""
    return f"weights {weights!r} are not weights {spec.canonical} loads"


def service_check(args: argparse.Namespace) -> int:
    from codecarena.cli import CliError
    from codecarena.console import console
    from codecarena.files import write_json

    token = _token(args)
    try:
        result = check(args.url, token)
    except urllib.error.HTTPError as exc:
        hint = f"; pass --token or set ${TOKEN_ENV}" if exc.code == 401 else ""
        raise CliError(f"{args.url}: no usable provenance (HTTP {exc.code}{hint})") from None
    except (urllib.error.URLError, OSError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CliError(f"{args.url}: no usable provenance ({exc})") from None
    console.print(f"{result['url']}: {result['codec']} (weights {result['weights']}, variant "
                  f"{result['variant']['name'] or 'none'}, checkpoint sha256 {str(result['checkpoint'].get('sha256', ''))[:12]})")
    for c in result["sources"]:
        mark = "matches" if c["matches_local"] else "DIFFERS from"
        console.print(f"  {c['source']:<9} {c['file']}: declared {(c['declared_sha256'] or 'nothing')[:12]} {mark} "
                      f"local {(c['local_sha256'] or 'missing')[:12]}")
    console.print(("VERIFIED: " if result["verified"] else "NOT VERIFIED (declaration only): ") + result["verification"],
                  soft_wrap=True)
    console.print(result["note"])
    if args.json:
        write_json(args.json, result)
    return 0 if result["verified"] else 1
