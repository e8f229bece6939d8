"""Drop every capability a sandboxed worker holds, keeping its user id.

codecarena may run as root (this project's machines do). Root's power is its capabilities: without
them uid 0 is an ordinary user that owns root's files. So the sandbox keeps uid 0 and drops them all:
the bounding set emptied (no exec can regain one), the securebits NOROOT and NO_SETUID_FIXUP set and
locked (uid 0 never brings capabilities back, not at exec and not at a uid change), the ambient set
cleared, and the effective, permitted and inheritable sets zeroed. Switching to another uid instead
would lock the codec out of its own source, checkpoints and runtime under a 0700 /root, and a user
namespace maps uid 0 to itself and keeps capabilities over root's files: neither is cleaner.

Without CAP_SETPCAP (an ordinary user) there is nothing to drop but the bounding set, which only
matters at the exec of a file with capabilities, which no_new_privs already defeats.
"""

from __future__ import annotations

import ctypes

_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 47, 4
_CAP_SETPCAP = 8
_SECBIT_NOROOT, _SECBIT_NO_SETUID_FIXUP = 1 << 0, 1 << 2
_LOCKED = 2  # each securebit's lock is the next bit up
_SECUREBITS = sum(bit | bit << 1 for bit in (_SECBIT_NOROOT, _SECBIT_NO_SETUID_FIXUP))
_CAPABILITY_VERSION_3 = 0x20080522
_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


class CapabilityError(OSError):
    """A step of the drop failed: the worker must not run the codec with its capabilities."""


def held() -> dict[str, int]:
    """This thread's capability sets, from /proc/self/status (CapInh, CapPrm, CapEff, CapBnd, CapAmb)."""
    sets = {}
    with open("/proc/thread-self/status", encoding="ascii") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in _SETS:
                sets[key] = int(value, 16)
    return sets


def _last_cap() -> int:
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
        return int(fh.read())


def drop_all() -> str:
    """Drop them as the module says; what was done, in words (CapabilityError when a step fails)."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = held()
    if before["CapEff"] >> _CAP_SETPCAP & 1:
        for cap in range(_last_cap() + 1):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise CapabilityError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap}) failed")
        if libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0) != 0:
            raise CapabilityError(ctypes.get_errno(), "prctl(PR_SET_SECUREBITS) failed")
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise CapabilityError(ctypes.get_errno(), "prctl(PR_CAP_AMBIENT_CLEAR_ALL) failed")
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}, all zero
    if libc.capset(header, data) != 0:
        raise CapabilityError(ctypes.get_errno(), "capset failed")
    after = held()
    if any(after[name] for name in ("CapInh", "CapPrm", "CapEff", "CapAmb")):
        raise CapabilityError(0, f"capabilities remain after the drop: {after}")
    bounding = "no_new_privs stops an exec from using it"
    if not before["CapPrm"]:
        return f"none held; the bounding set is kept (no CAP_SETPCAP), and {bounding}"
    if not before["CapEff"] >> _CAP_SETPCAP & 1:
        return f"all dropped but the bounding set (no CAP_SETPCAP to empty it), and {bounding}"
    if after["CapBnd"]:
        raise CapabilityError(0, f"the bounding set remains after the drop: {after['CapBnd']:#x}")
    return ("all dropped: bounding set emptied, securebits NOROOT and NO_SETUID_FIXUP locked, effective, permitted, "
            "inheritable and ambient sets zeroed")
