"""What machine and software produced a run: recorded in run.json so a number can be traced."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

import codecarena
from codecarena.devices import cpu_model

PACKAGES = ("codecarena", "numpy", "soundfile", "soxr", "psutil", "rich", "av", "pycodec2")


def git_revision() -> dict[str, Any]:
    """The codecarena source revision, when it runs from a git checkout."""
    src = Path(codecarena.__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"revision": None, "dirty": None, "note": "not a git checkout"}
    return {"revision": rev, "dirty": bool(dirty)}


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
