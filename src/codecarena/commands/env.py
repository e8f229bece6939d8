"""`codecarena env create|list|remove`: isolated runtimes of codec families."""

from __future__ import annotations

import argparse


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    env = subparsers.add_parser("env", help="isolated runtimes of codec families")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    env_create = env_sub.add_parser("create", help="build a family's virtualenv from its lock file")
    env_create.add_argument("family", help="codec family or registry id")
    env_sub.add_parser("list", help="built runtimes")
    env_remove = env_sub.add_parser("remove", help="delete a family's runtime")
    env_remove.add_argument("family", help="codec family or registry id")


def run(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.files import data_home
    from codecarena.runtime import venvs
    from codecarena.selection import registry_entry

    if args.env_command == "list":
        found = venvs.list_envs()
        for record in found:
            console.print(f"{record['registry']}: {record.get('interpreter', '-')} "
                          f"({len(record.get('packages', []))} packages, sha256 "
                          f"{record.get('packages_sha256', '-')[:12]}){' ' + record['error'] if 'error' in record else ''}")
        if not found:
            console.print(f"no isolated runtimes under {data_home() / 'envs'}")
        return 0
    entry = registry_entry(args.family)
    if args.env_command == "remove":
        removed = venvs.remove(entry.id)
        console.print(f"{entry.id}: {'removed' if removed else 'no runtime to remove'}")
        return 0
    console.print(f"building {entry.id} runtime in {venvs.env_dir(entry.id)} ...")
    folder = venvs.create(entry)
    record = venvs.describe(entry)
    console.print(f"{entry.id}: {record['interpreter']} with {len(record['packages'])} packages "
                  f"(sha256 {record['packages_sha256'][:12]}) in {folder}")
    return 0
