"""What several commands share on the command line."""

from __future__ import annotations

import argparse


class CliError(Exception):
    """An option value that cannot be used; reported as one line, exit status 2."""


def add_metric_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics", default="all",
                        help="all (every installed metric), none, or a comma list, e.g. pesq_wb,stoi,asr")
    parser.add_argument("--asr-model", action="append", default=[], metavar="LANG=NAME|DIR",
                        help="the ASR model of a language: tiny.en or base (catalogued, pinned), or a CTranslate2 "
                             "Whisper model folder; defaults: tiny.en for English, base for the other languages "
                             "Whisper knows")
    parser.add_argument("--metric-device", default=None, metavar="cpu|cuda[:N]",
                        help="where learned metrics run (default: --device); a metric library that cannot use it "
                             "fails the command before any result, never falls back silently: ask for "
                             "--metric-device cpu")


def add_device_arg(parser: argparse.ArgumentParser, what: str = "torch codec families") -> None:
    parser.add_argument("--device", default="cpu", metavar="cpu|cuda[:N]|mps",
                        help=f"where {what} run (default cpu); other families run on the CPU whatever it says, and "
                             "every row records where it ran (docs/results.md, Devices)")


def device_option(text: str, option: str = "--device") -> str:
    """The canonical device, or CliError naming the option and the accepted forms."""
    from codecarena.devices import DeviceError, parse_device

    try:
        return parse_device(text, option)
    except DeviceError as exc:
        raise CliError(str(exc)) from None


def add_runtime_python_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime-python", default=None, metavar="PATH",
                        help="run the torch families (those with an isolated runtime) in this existing Python "
                             "interpreter instead of their locked runtime, e.g. a GPU host's own torch; it must import "
                             "this codecarena and the family's packages; every output marks it as an external runtime "
                             "(docs/devices.md)")
