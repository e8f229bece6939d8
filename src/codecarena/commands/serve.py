"""`codecarena serve`: an HTTP codec service that declares its provenance."""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from codecarena.choices import TOKEN_ENV
from codecarena.commands.common import CliError, add_device_arg, add_runtime_python_arg, device_option

VARIANT_FOR_STABLE_ACTIVATIONS = "eager_snake_v1"
KEEP_ALIVE_S = 5  # an idle connection between requests is closed after this (uvicorn's default, stated)


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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
    add_device_arg(p, "a torch codec family's model")
    add_runtime_python_arg(p)


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


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from codecarena import selection
    from codecarena.files import data_home
    from codecarena.registry.catalog import FAMILIES
    from codecarena.registry.entries import entry_for_family
    from codecarena.runtime.limits import parse_limits, parse_size
    from codecarena.service.app import CodecService, ServiceConfig, create_app, header_deadline_protocol
    from codecarena.service.check import is_loopback, service_token
    from codecarena.specs import parse_spec

    spec = parse_spec(args.codec)
    if FAMILIES[spec.family].origin == "user":
        raise CliError(f"{spec.family} is a user codec: the service serves built-in families, whose sources its "
                       "provenance declares (a user codec runs only in its sandbox's stages: `codecarena run`)")
    weights = selection.canonical_weights(args.weights)
    if weights == "user":
        raise CliError("--weights user (a checkpoint pinned with `registry pin`) is for `codecarena run` only")
    for option, seconds in (("--max-seconds", args.max_seconds), ("--read-timeout", args.read_timeout)):
        if not (math.isfinite(seconds) and seconds > 0):
            raise CliError(f"{option} {seconds:g}: must be a positive number of seconds")
    device = device_option(args.device)
    runtime = selection.runtimes((spec,), weights, args.runtime_python)[spec.family]
    selection.probe_devices((spec,), {spec.family: runtime}, device)
    variant = selection.check_variant(VARIANT_FOR_STABLE_ACTIVATIONS if args.stable_codec_activations else "", (spec,))
    entry = entry_for_family(spec.family)
    registry = {"id": entry.id, "status": entry.status,
                "checkpoint": entry.checkpoint.identity(entry.id) if entry.checkpoint else None}
    token = service_token(args.token)
    if not is_loopback(args.host):
        print(f"codecarena serve: warning: --host {args.host} accepts connections from other machines; the service "
              f"is meant for trusted networks" + ("" if token else f" (and no --token or ${TOKEN_ENV} is set)"),
              file=sys.stderr, flush=True)
    with _work_folder(data_home() if data_home().is_dir() else None) as work:
        config = ServiceConfig(spec=spec, weights=weights, variant=variant, registry=registry, runtime=runtime,
                               max_bytes=parse_size(args.max_bytes), max_seconds=args.max_seconds,
                               read_timeout=args.read_timeout, token=token,
                               memory_limit=parse_limits(args.memory_limit).memory_limit_bytes,
                               work=work, device=device)
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
            service.close()
    return 0
