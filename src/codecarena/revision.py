"""Which codecarena is running: its version and, when it runs from a git checkout, the commit and
whether the checkout differs from it (`codecarena --version`, and `git` in run.json's machine record).

Standard library only, and two short git calls: `--version` answers without importing the library.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import codecarena

_PACKAGE = Path(codecarena.__file__).resolve().parent


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(_PACKAGE), *args], capture_output=True, text=True, timeout=10,
                          check=True).stdout.strip()


def git_revision() -> dict[str, Any]:
    """The commit codecarena's source is checked out at and whether tracked files differ from it, when
    it runs from a git checkout (its `src/codecarena` the checkout's own, not an installed copy that
    merely lies inside some repository, such as a virtualenv in one)."""
    try:
        top, revision = _git("rev-parse", "--show-toplevel", "HEAD").splitlines()
        if Path(top).resolve() != _PACKAGE.parents[1]:
            return {"revision": None, "dirty": None, "note": "not a git checkout"}
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, ValueError, subprocess.SubprocessError):
        return {"revision": None, "dirty": None, "note": "not a git checkout"}
    return {"revision": revision, "dirty": bool(dirty)}


def version_line() -> str:
    """What `codecarena --version` prints: `codecarena 0.1.0 (git 3beace18e624, dirty)` from a checkout,
    else the version and where this copy is installed."""
    git = git_revision()
    if git["revision"] is None:
        return f"codecarena {codecarena.__version__} (installed at {_PACKAGE}, not a git checkout)"
    return f"codecarena {codecarena.__version__} (git {git['revision'][:12]}{', dirty' if git['dirty'] else ''})"
