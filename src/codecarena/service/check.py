"""What a running codec service declares about itself, checked against this checkout (`codecarena
service-check`), and the loopback and token rules that `codecarena serve` shares."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from codecarena.specs import CodecSpec, parse_spec

TOKEN_ENV = "CODECARENA_SERVICE_TOKEN"
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
        pinned = entry.checkpoint.for_config(spec.config)
        if claim != pinned.identity(entry.id):
            return f"the declared checkpoint {claim} is not the registry's pin for {spec.canonical}"
        try:
            resolve(pinned, allow_download=False)
        except CheckpointError as exc:
            return f"the pinned checkpoint cannot be verified here: {exc}"
        return ""
    return f"weights {weights!r} are not weights {spec.canonical} loads"
