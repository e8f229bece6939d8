"""A seccomp filter for a user codec's sandbox: the system calls Landlock has no right for.

Through libseccomp (`pyseccomp`, its ctypes binding), every other call allowed, these fail with EPERM
(Python raises PermissionError), in this thread and everything it starts:

- a file's metadata: the chmod, chown, utime and extended-attribute families (Landlock confines
  writes to a file's content and names, not its mode, owner, times or attributes), and the ioctls
  that set inode flags (`chattr`);
- io_uring_setup: io_uring's own operations (setxattr, socket, ...) would bypass this filter;
- socket(), whatever its domain, unless the declaration says `network = true`: no TCP, UDP, raw or
  unix socket (a unix socket at a path, such as a container daemon's, is a way out Landlock's ABI 7
  does not close). socketpair() stays allowed: its two ends reach only each other.

Calls of the newest kernels that this libseccomp does not name are added by number: since Linux 5.1
every new system call has the same number on all architectures (alpha aside).
"""

from __future__ import annotations

import errno
import functools
from typing import Any

METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "chown32",
            "fchown32", "lchown32", "utime", "utimes", "futimesat", "utimensat", "utimensat_time64", "setxattr",
            "lsetxattr", "fsetxattr", "setxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat")
_UNIFIED = {"fchmodat2": 452, "setxattrat": 463, "removexattrat": 466}
# FS_IOC_SETFLAGS (long and int argument forms) and FS_IOC_FSSETXATTR; the kernel reads the request as
# 32 bits, so only those are compared.
_SET_INODE_FLAGS = (0x40086602, 0x40046602, 0x401C5820)
NETWORK = ("socket", "socketcall")


class FilterUnavailable(RuntimeError):
    """libseccomp (or its binding) is missing here: the row says the filter was absent, and why."""


@functools.cache
def binding() -> Any:
    """The libseccomp binding, loaded (its import looks the library up with `ldconfig -p`: done before
    the sandbox is entered, so that the lookup is not confined)."""
    try:
        import pyseccomp
    except (ImportError, RuntimeError) as exc:  # RuntimeError: the binding found no libseccomp
        raise FilterUnavailable(f"libseccomp cannot be used here ({type(exc).__name__}: {exc})") from None
    return pyseccomp


def install(network: bool) -> tuple[str, ...]:
    """Load the filter; the calls it refuses (names, as libseccomp or this module knows them)."""
    seccomp = binding()
    refused = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    rules.set_attr(seccomp.Attr.CTL_TSYNC, 1)
    names = [*METADATA, "io_uring_setup", *(() if network else NETWORK)]
    added = []
    for name in names:
        number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
        if number < 0:
            number = _UNIFIED.get(name, -1)
        if number < 0:
            continue  # not a call of this architecture (chown32 on x86-64, socketcall on arm64)
        rules.add_rule(refused, number)
        added.append(name)
    for request in _SET_INODE_FLAGS:
        rules.add_rule(refused, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    added.append("ioctl(FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR)")
    rules.load()
    return tuple(added)
