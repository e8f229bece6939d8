"""The worker's side of a user codec's sandbox: confine this process before any of the codec's code runs.

`python -m codecarena.worker --sandbox FAMILY FOLDER ...` calls `enter` first, before it reads a job or
imports numpy (whose thread pools would start unconfined threads: Landlock, seccomp and capabilities
are per thread, so the worker refuses to confine itself with more than one). In order:

1. every capability dropped (sandbox/capabilities.py);
2. Landlock: writes only beneath FOLDER (the private folder of the job, or of the persistent
   worker's jobs) and /dev/null, TCP refused unless declared, signals and abstract unix sockets
   scoped (sandbox/landlock.py);
3. seccomp: metadata calls, io_uring and (unless declared) socket() refused (sandbox/syscalls.py);
4. no bytecode written (a package is compiled from its pinned bytes, codecs/pinned_source.py).

The record (`model.confined` of each of its rows) names each protection as applied, with how, or
absent, with why. From then on this worker runs FAMILY's stages only, writing only into FOLDER.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

RECORD_VERSION = 2  # 1 (unversioned): {"landlock_abi", "writable"} or {"landlock_abi": 0, "reason"}

#: The sandbox this process entered: {"family", "folder", "record"}; empty when it entered none.
ACTIVE: dict[str, Any] = {}


class SandboxError(RuntimeError):
    """The sandbox could not be entered: the worker runs none of the codec's code."""


def enter(family: str, folder: Path) -> dict[str, Any]:
    """Confine this process for user codec `family`, writing beneath `folder`; the record."""
    from codecarena.registry.catalog import FAMILIES
    from codecarena.sandbox import capabilities, landlock, namespace, syscalls

    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise SandboxError(f"the worker has {threads} threads; it must confine itself before any starts")
    unit = FAMILIES.get(family)
    if unit is None or unit.origin != "user":
        raise SandboxError(f"{family} is not a user codec; only a user codec runs in a sandbox")
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise SandboxError(f"{folder}: the sandbox's folder does not exist")
    applied: dict[str, str] = {}
    absent: dict[str, str] = {}
    try:
        syscalls.binding()
    except syscalls.FilterUnavailable:
        pass  # said below, where the filter would be installed
    try:
        applied["capabilities"] = capabilities.drop_all() + f" (uid {os.getuid()} kept)"
        landlock.no_new_privs()
        restricted = landlock.restrict([folder], unit.network)
    except OSError as exc:
        raise SandboxError(str(exc)) from None
    _landlock(restricted, unit.network, applied, absent)
    try:
        refused = syscalls.install(unit.network)
    except syscalls.FilterUnavailable as exc:
        absent["metadata"] = absent["sockets"] = str(exc)
    except OSError as exc:
        raise SandboxError(f"the seccomp filter could not be loaded: {exc}") from None
    else:
        applied["metadata"] = "seccomp: " + ", ".join(n for n in refused if n not in syscalls.NETWORK) + " fail (EPERM)"
        if unit.network:
            absent["sockets"] = "the declaration says network = true"
        else:
            applied["sockets"] = "seccomp: socket() fails (EPERM) whatever its domain; socketpair() is allowed"
    if namespace.is_init():
        applied["descendants"] = ("PID 1 of its own PID namespace with a private /proc: every process it starts ends "
                                  "with it (a persistent worker's, after each job), and no other process is visible")
    else:
        absent["descendants"] = os.environ.get(namespace.NO_NAMESPACE) or "not started as PID 1 of its own namespace"
    sys.dont_write_bytecode = True
    applied["bytecode"] = "no bytecode cache is read or written: Python sources are compiled from the pinned bytes"
    record = {"version": RECORD_VERSION, "landlock_abi": restricted.abi, "writable": list(restricted.writable),
              "network_declared": unit.network, "applied": applied, "absent": absent}
    ACTIVE.update(family=family, folder=folder, record=record)
    return record


def _landlock(done: Any, network: bool, applied: dict[str, str], absent: dict[str, str]) -> None:
    """What the Landlock ruleset (landlock.Restricted) held, protection by protection."""
    from codecarena.sandbox import landlock

    if done.abi == 0:
        absent["writes"] = "Landlock is not available on this kernel (Linux 5.13+ with the LSM enabled)"
    else:
        applied["writes"] = f"Landlock ABI {done.abi}: only beneath {', '.join(done.writable)} and /dev/null"
    if done.tcp:
        applied["tcp"] = f"Landlock ABI {done.abi}: TCP bind and connect refused"
    else:
        absent["tcp"] = ("the declaration says network = true" if network else
                         f"Landlock ABI {done.abi} has no network rights (ABI {landlock.NET_ABI}, Linux 6.7+)")
    if done.scoped:
        applied["signals"] = (f"Landlock ABI {done.abi} scope: signals and abstract unix sockets reach only the "
                              "worker's own processes")
    else:
        absent["signals"] = f"Landlock ABI {done.abi} has no scoping (ABI {landlock.SCOPE_ABI}, Linux 6.12+)"


def refusal(family: str, outputs: list[str]) -> str:
    """Why this worker must not run a stage of `family` writing `outputs` ("" when it may): a user codec
    runs only in its own sandbox, and a sandbox runs its own family only, writing into its folder."""
    from codecarena.registry.catalog import FAMILIES

    if not ACTIVE:
        if FAMILIES[family].origin == "user":
            return f"user codec {family} runs only in its sandbox (python -m codecarena.worker --sandbox {family} ...)"
        return ""
    if family != ACTIVE["family"]:
        return f"this worker is the sandbox of user codec {ACTIVE['family']}; it runs no other family ({family})"
    for output in outputs:
        if output and Path(output).resolve().parent != ACTIVE["folder"]:
            return f"{output}: a sandboxed stage writes only into its folder {ACTIVE['folder']}"
    return ""
