"""`codecarena codecs`: the codec specs codecarena accepts."""

from __future__ import annotations

import argparse


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    subparsers.add_parser("codecs", help="list the codec specs codecarena accepts")


def run(args: argparse.Namespace) -> int:
    from rich.text import Text

    from codecarena.console import console
    from codecarena.registry.catalog import FAMILIES, USER_PROBLEMS

    for family in FAMILIES.values():
        origin = "  (user codec: codecarena codec show " + family.name + ")" if family.origin == "user" else ""
        console.print(Text.assemble((family.name, "bold"), f"  {family.description}{origin}"))
        configs = ", ".join(family.configs)
        extra = " (or any bitrate: 7500, 10k, ...)" if family.config_is_bitrate else ""
        console.print(f"  configs: {configs}{extra}; default {family.default_config}")
        for option in family.options:
            choices = f" [{'|'.join(str(c) for c in option.choices)}]" if option.choices else ""
            bounds = (f" [{option.minimum:g}..{option.maximum:g}]"
                      if option.minimum is not None and option.maximum is not None else "")
            console.print(f"  {option.name}={option.default}{choices}{bounds}  {option.help}")
        example = f"{family.name}:{family.default_config}"
        if family.options:
            example += f",{family.options[0].name}={family.options[0].default}"
        console.print(f"  e.g. {example}")
    for name, reason in USER_PROBLEMS.items():
        console.print(Text.assemble((name, "bold"), f"  user codec that cannot be read: {reason}"))
    return 0
