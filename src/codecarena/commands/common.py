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
