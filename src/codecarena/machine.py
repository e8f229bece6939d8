"""What machine and software produced a run: recorded in run.json so a number can be traced."""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
from importlib import metadata
from typing import Any

import psutil

import codecarena
from codecarena.devices import cpu_model
from codecarena.revision import git_revision

PACKAGES = ("codecarena", "numpy", "soundfile", "soxr", "psutil", "rich", "av", "pycodec2")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def describe(argv: list[str]) -> dict[str, Any]:
    return {
        "version": 1,
        "codecarena": codecarena.__version__,
        "git": git_revision(),
        "command": argv,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "os": platform.platform(),
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total,
            "packages": package_versions(),
        },
    }
