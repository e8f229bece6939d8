"""Confine a worker's writes to the folders its job writes into, with Linux's Landlock.

A user's codec runs inside a codecarena worker process and could write anywhere the user can. Before
such a worker imports it, the worker restricts itself (and everything it starts) to writing, creating,
removing or truncating files only beneath the folders of its job's outputs and of its report, and
/dev/null; reading is not restricted. A write elsewhere then fails inside the codec with
`PermissionError`, which fails its own row with that reason. Landlock needs Linux 5.13 or newer with
the LSM enabled; `confine` says whether it applied, and the row records it, so a row made without it
says so rather than claiming a guarantee it did not have.
"""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Every write-like file-system right, by the Landlock ABI version that introduced it.
_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_WRITES_BY_ABI = {1: _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE, 2: _REFER, 3: _TRUNCATE, 5: _IOCTL_DEV}
_FILE_RIGHTS = _WRITE_FILE | _TRUNCATE | _IOCTL_DEV  # the only rights a rule on a file (not a folder) may hold


class ConfineError(OSError):
    """Landlock is there but refused a step: the worker must not run the codec unconfined."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """Landlock's ABI version here, 0 when it is not available (an old kernel, the LSM disabled)."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def confine(writable: list[Path]) -> dict[str, object]:
    """Restrict this process's writes to beneath `writable` (folders) and /dev/null; what was done,
    for the row: {"landlock_abi": N, "writable": [...]} or {"landlock_abi": 0, "reason": ...}."""
    abi = abi_version()
    if abi == 0:
        return {"landlock_abi": 0, "reason": "Landlock is not available on this kernel; writes were not confined"}
    handled = sum(bits for version, bits in _WRITES_BY_ABI.items() if version <= abi)
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = struct.pack("=Q", handled)  # handled_access_fs only: network and scoping stay unrestricted
    ruleset = libc.syscall(_SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfineError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in [*writable, Path("/dev/null")]:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rights = handled if path.is_dir() else handled & _FILE_RIGHTS
                rule = struct.pack("=Qi", rights, fd)  # struct landlock_path_beneath_attr is packed
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), rule,
                                ctypes.c_uint32(0)) < 0:
                    raise ConfineError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise ConfineError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise ConfineError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return {"landlock_abi": abi, "writable": sorted(str(p) for p in writable)}
