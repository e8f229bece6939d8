"""`codecarena service-check`: compare what a running service declares with local sources."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecarena.choices import TOKEN_ENV
from codecarena.commands.common import CliError


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    c = subparsers.add_parser("service-check", help="compare what a running service declares with local sources")
    c.add_argument("url", help="base URL of the service, e.g. http://127.0.0.1:8765")
    c.add_argument("--token", default=None, help=f"bearer token of the service (default ${TOKEN_ENV})")
    c.add_argument("--json", type=Path, metavar="OUT", help="also write the check as JSON")


def run(args: argparse.Namespace) -> int:
    import urllib.error

    from codecarena.console import console
    from codecarena.files import write_json
    from codecarena.service.check import check, service_token

    try:
        result = check(args.url, service_token(args.token))
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
