"""How the harness starts a codec worker: plain for a built-in unit, in its sandbox for a user codec.

A sandboxed worker is started as PID 1 of a PID namespace of its own (sandbox/namespace.py), with
`--sandbox FAMILY FOLDER` so that it confines itself to its private folder before it reads a job, and
with TMPDIR inside that folder (a command-line codec's tools write their temporary files there, the
only place they may write). Where no namespace can be made, the environment tells the worker why,
and its rows say so.
"""

from __future__ import annotations

import os
from pathlib import Path

from codecarena.runtime.private import TMP
from codecarena.sandbox import namespace


def worker_command(python: str, sandbox: str, folder: Path, *args: str) -> tuple[list[str], dict[str, str] | None]:
    """The argv of `python -m codecarena.worker ARGS`, and its environment (None: this process's)."""
    if not sandbox:
        return [python, "-m", "codecarena.worker", *args], None
    prefix, why = namespace.launcher()
    env = {**os.environ, "TMPDIR": str(folder / TMP)}
    if why:
        env[namespace.NO_NAMESPACE] = why
    return [*prefix, python, "-m", "codecarena.worker", "--sandbox", sandbox, str(folder), *args], env
