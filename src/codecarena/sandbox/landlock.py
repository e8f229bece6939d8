"""Linux's Landlock, as a user codec's sandbox uses it: writes, TCP and the reach of signals.

One ruleset, restricted onto the calling thread and everything it starts, holds three things, each as
far as the kernel's Landlock ABI knows it:

- file-system writes (ABI 1, with REFER at 2, TRUNCATE at 3, IOCTL_DEV at 5): writing, creating,
  removing, renaming or truncating files only beneath the writable folders and /dev/null. Reading
  is not restricted. Landlock has no right for a file's metadata (mode, owner, times, extended
  attributes): sandbox/syscalls.py refuses those calls.
- TCP (ABI 4): bind and connect handled with no rule, so both are refused, unless the codec's
  declaration says `network = true`.
- scoping (ABI 6): signals, and connections to abstract unix sockets, reach only processes of the
  same Landlock domain (the sandboxed worker and what it started), never the harness.

The kernel restricts the calling thread only: the caller must be single-threaded (sandbox/enter.py
checks it). What the ABI here lacks is returned, with why, for the row to say so.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
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
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
NET_ABI, SCOPE_ABI = 4, 6


class ConfineError(OSError):
    """Landlock is there but refused a step: the worker must not run the codec unconfined."""


@dataclass(frozen=True)
class Restricted:
    """What the ruleset holds: the ABI (0: Landlock absent), the writable folders, whether TCP bind
    and connect are refused and whether signals and abstract unix sockets are scoped."""
    abi: int
    writable: tuple[str, ...]
    tcp: bool
    scoped: bool


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """Landlock's ABI version here, 0 when it is not available (an old kernel, the LSM disabled)."""
    version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def no_new_privs() -> None:
    """No exec may gain privileges from now on (setuid bits, file capabilities): Landlock and seccomp
    both require it of a process that is not CAP_SYS_ADMIN."""
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfineError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def restrict(writable: list[Path], network: bool) -> Restricted:
    """Restrict this thread and its future children as the module says; `network` leaves TCP alone."""
    abi = abi_version()
    if abi == 0:
        return Restricted(0, (), False, False)
    handled = sum(bits for version, bits in _WRITES_BY_ABI.items() if version <= abi)
    tcp = abi >= NET_ABI and not network
    scoped = abi >= SCOPE_ABI
    # struct landlock_ruleset_attr grew a field at ABI 4 (handled_access_net) and 6 (scoped): the
    # kernel reads the size it is given, so an older kernel gets the struct it knows.
    fields = [handled] + ([_NET_BIND_TCP | _NET_CONNECT_TCP if tcp else 0] if abi >= NET_ABI else []) \
        + ([_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL] if scoped else [])
    attr = struct.pack(f"={len(fields)}Q", *fields)
    libc = _libc()
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
        no_new_privs()
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise ConfineError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return Restricted(abi, tuple(sorted(str(p) for p in writable)), tcp, scoped)
