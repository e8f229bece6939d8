"""`codecarena serve` and `codecarena service-check`."""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from codecarena.codecs.base import parse_weights
from codecarena.runtime.limits import default_memory_limit, parse_size
from codecarena.specs import parse_spec

VARIANT_FOR_STABLE_ACTIVATIONS = "eager_snake_v1"


def add_parsers(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="an HTTP codec service (encode/decode) that declares its provenance")
    p.add_argument("--codec", required=True, metavar="SPEC")
    p.add_argument("--weights", default="real", metavar="real|synthetic[:SEED]")
    p.add_argument("--stable-codec-activations", action="store_true",
                   help=f"apply {VARIANT_FOR_STABLE_ACTIVATIONS} (eager Snake1d; off by default, which keeps "
                        "upstream numerics)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--max-bytes", default="64M", help="largest request body accepted (default 64M)")
    p.add_argument("--memory-limit", default=None, help="memory guard of the codec worker (default half of RAM)")
    p.add_argument("--models-dir", type=Path, help="local mirror of model files (else $CODECARENA_MODELS)")
    c = subparsers.add_parser("service-check", help="compare what a running service declares with local sources")
    c.add_argument("url", help="base URL of the service, e.g. http://127.0.0.1:8765")
    c.add_argument("--json", type=Path, metavar="OUT", help="also write the check as JSON")


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from codecarena.cli import CliError, _runtimes, _variant
    from codecarena.registry.entries import entry_for_family
    from codecarena.runtime.envs import data_dir
    from codecarena.service.app import CodecService, ServiceConfig, create_app

    spec = parse_spec(args.codec)
    parse_weights(args.weights)
    weights = "synthetic:" + str(parse_weights(args.weights)[1]) if args.weights != "real" else "real"
    runtime = _runtimes((spec,), weights)[spec.family]
    variant = _variant(VARIANT_FOR_STABLE_ACTIVATIONS if args.stable_codec_activations else "", (spec,))
    entry = entry_for_family(spec.family)
    registry = {"id": entry.id, "status": entry.status,
                "checkpoint": entry.checkpoint.identity(entry.id) if entry.checkpoint else None}
    work = Path(tempfile.mkdtemp(prefix="codecarena-serve-", dir=data_dir() if data_dir().is_dir() else None))
    config = ServiceConfig(spec=spec, weights=weights, variant=variant, registry=registry, runtime=runtime,
                           max_bytes=parse_size(args.max_bytes),
                           memory_limit=parse_size(args.memory_limit) if args.memory_limit else default_memory_limit(),
                           work=work)
    service = CodecService(config)
    try:
        service.start()
    except RuntimeError as exc:
        service.worker.stop()
        raise CliError(f"service did not start: {exc}") from None
    print(f"codecarena serve: {spec.canonical} (weights {service.provenance['weights']}, variant {variant or 'none'}) "
          f"on http://{args.host}:{args.port} ; provenance sha256 {service.provenance_sha256[:12]}", flush=True)
    try:
        uvicorn.run(create_app(service), host=args.host, port=args.port, log_level="warning")
    finally:
        service.worker.stop()
    return 0


def _fetch(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (a URL the user named)
        return json.loads(response.read().decode("utf-8"))


def check(url: str) -> dict[str, Any]:
    """What a service declares, against the sources here. A declaration is a claim: it is
    verified only for a service on this machine whose process is alive and whose declared files,
    hashed now, match what it declared."""
    from codecarena.service.app import PROVENANCE_VERSION, declared_sources

    declared = _fetch(url.rstrip("/") + "/v1/provenance")
    if declared.get("version") != PROVENANCE_VERSION:
        raise ValueError(f"{url}: provenance version {declared.get('version')!r}, expected {PROVENANCE_VERSION}")
    spec = parse_spec(declared["codec"])
    local = declared_sources(spec, declared["variant"]["name"])
    comparisons = []
    for name, claim in declared["sources"].items():
        mine = local.get(name)
        comparisons.append({"source": name, "file": claim["file"], "declared_sha256": claim["sha256"],
                            "local_sha256": mine["sha256"] if mine else None,
                            "matches_local": bool(mine and mine["sha256"] == claim["sha256"])})
    host = urllib.parse.urlparse(url).hostname or ""
    verified, why = _verify_local_process(host, declared)
    return {"version": 1, "url": url, "codec": declared["codec"], "variant": declared["variant"],
            "checkpoint": declared["checkpoint"], "weights": declared["weights"], "sources": comparisons,
            "all_match_local": all(c["matches_local"] for c in comparisons), "verified": verified,
            "verification": why,
            "note": "a service's provenance is a declaration of code and configuration; it does not prove what a "
                    "remote server runs. Only a process on this machine whose source files were hashed counts "
                    "as verified."}


def _verify_local_process(host: str, declared: dict[str, Any]) -> tuple[bool, str]:
    import psutil

    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        return False, f"{host} is not this machine: the declaration cannot be verified from here"
    pid = declared.get("pid")
    try:
        process = psutil.Process(int(pid))
        cmdline = process.cmdline()
    except (psutil.Error, TypeError, ValueError):
        return False, f"declared pid {pid} is not a process on this machine"
    if "serve" not in cmdline or not any("codecarena" in part for part in cmdline):
        return False, f"process {pid} is not a codecarena service ({' '.join(cmdline)[:80]})"
    if not declared.get("sources_verified_at_start"):
        return False, "the service did not verify its sources at start-up"
    for name, claim in declared["sources"].items():
        try:
            digest = hashlib.sha256(Path(claim["path"]).read_bytes()).hexdigest()
        except OSError:
            return False, f"{claim['path']} ({name}) cannot be read here"
        if digest != claim["sha256"]:
            return False, f"{claim['path']} ({name}) now hashes to {digest[:12]}, not the declared {claim['sha256'][:12]}"
    return True, f"local process {pid} ({' '.join(cmdline[:4])}...); its declared source files hashed now match"


def service_check(args: argparse.Namespace) -> int:
    from codecarena.cli import CliError
    from codecarena.console import console
    from codecarena.files import write_json

    try:
        result = check(args.url)
    except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
        raise CliError(f"{args.url}: no usable provenance ({exc})") from None
    console.print(f"{result['url']}: {result['codec']} (weights {result['weights']}, variant "
                  f"{result['variant']['name'] or 'none'}, checkpoint sha256 {str(result['checkpoint'].get('sha256', ''))[:12]})")
    for c in result["sources"]:
        mark = "matches" if c["matches_local"] else "DIFFERS from"
        console.print(f"  {c['source']:<9} {c['file']}: declared {c['declared_sha256'][:12]} {mark} local "
                      f"{(c['local_sha256'] or 'missing')[:12]}")
    console.print(("VERIFIED: " if result["verified"] else "NOT VERIFIED (declaration only): ") + result["verification"])
    console.print(result["note"])
    if args.json:
        write_json(args.json, result)
    return 0 if result["all_match_local"] else 1
