"""The identity of a program a command-line codec runs, and its check against the pins.

A binary's identity is its path (links followed), the sha256 of the file and, where a Debian package
ships it, the package and its installed version. A declaration pins a binary by its own sha256 (a
user's codec, pinned when it is added) or by its Debian package, whose exact version the family's
registry entry pins; a packaged file must also still be the file dpkg installed (its md5sums). The
libraries a registry entry pins (the codec itself often lives in one: libgsm1, libspeex1) must be
installed at their pinned versions; a user's codec pins the libraries its programs load by file
instead (registry/libraries.py). Anything else is refused with one line before a row runs, and
again in every worker, which records the identity in the row.

`identify` is what `codecarena codec add` calls to pin a user's binary.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codecarena.files import sha256_file
from codecarena.registry import dpkg, libraries
from codecarena.registry.catalog import Binary, Command


class BinaryError(ValueError):
    """A binary that is missing or differs from its pin (one line: which binary and how)."""


@dataclass(frozen=True)
class BinaryIdentity:
    name: str
    path: str  # as declared
    resolved: str  # links followed: the file that runs
    sha256: str
    package: str  # the Debian package that owns the file; "" when none does (or there is no dpkg)
    version: str  # that package's installed version; "" without a package

    def record(self) -> dict[str, Any]:
        return asdict(self)


def identify(name: str, path: str | Path) -> BinaryIdentity:
    """The identity of the executable file at `path` as it is now."""
    resolved = os.path.realpath(path)
    try:
        info = os.stat(resolved)
    except OSError as exc:
        raise BinaryError(f"binary {name} ({path}): {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode) or not os.access(resolved, os.X_OK):
        raise BinaryError(f"binary {name} ({path}): not an executable file")
    package = _owner(resolved) or (_owner(str(path)) if str(path) != resolved else "")
    return BinaryIdentity(name=name, path=str(path), resolved=resolved, sha256=sha256_file(Path(resolved)),
                          package=package, version=installed_version(package) if package else "")


def verify(binary: Binary, pins: Mapping[str, str]) -> BinaryIdentity:
    """`binary`'s identity, refused unless it matches its sha256 pin and, for a packaged binary, the
    package owns the file at the version `pins` (package -> Debian version) gives, unmodified."""
    identity = identify(binary.name, binary.path)
    where = f"binary {binary.name} ({identity.resolved})"
    if binary.sha256 and identity.sha256 != binary.sha256:
        raise BinaryError(f"{where}: sha256 {identity.sha256} differs from its pin {binary.sha256}")
    if binary.package:
        if identity.package != binary.package:
            owner = f"dpkg says {identity.package}" if identity.package else "no installed package owns it"
            raise BinaryError(f"{where}: declared from Debian package {binary.package}, but {owner}")
        pinned = pins.get(binary.package)
        if pinned is None:
            raise BinaryError(f"{where}: its Debian package {binary.package} has no version pin in the registry entry")
        if identity.version != pinned:
            raise BinaryError(f"{where}: Debian package {binary.package} is at {identity.version}, "
                              f"the registry pins {pinned}")
        if not _as_installed(binary.package, identity):
            raise BinaryError(f"{where}: differs from the file Debian package {binary.package} installed "
                              f"(dpkg's md5sums)")
    return identity


def verify_command(command: Command, pins: Mapping[str, str]) -> tuple[BinaryIdentity, ...]:
    """Every binary of a command-line family checked (`verify`), with the shared libraries it loads where
    they are pinned by file (a user's codec, registry/libraries.py), and every pinned package,
    libraries included, installed at its pinned version."""
    identities = tuple(verify(binary, pins) for binary in command.binaries)
    if command.libraries is not None:
        try:
            for identity in identities:
                libraries.check(identity.name, identity.resolved, command.libraries)
        except libraries.LibraryError as exc:
            raise BinaryError(str(exc)) from None
    for package, pinned in sorted(pins.items()):
        version = installed_version(package)
        if version != pinned:
            found = f"is at {version}" if version else "is not installed"
            raise BinaryError(f"Debian package {package} {found}, the registry pins {pinned} "
                              f"(install it with scripts/install.sh)")
    return identities


def installed_version(package: str) -> str:
    """The installed version of a Debian package; "" when it is not installed or there is no dpkg."""
    out = dpkg.query("-W", "-f=${db:Status-Status} ${Version}", package)
    status, _, version = out.partition(" ")
    return version if status == "installed" else ""


def package_files(package: str) -> list[str]:
    """The files an installed Debian package ships, as `dpkg-query -L` lists them (none without dpkg)."""
    return [line for line in dpkg.query("-L", package).splitlines() if line.startswith("/")]


def _owner(path: str) -> str:
    """The Debian package that ships `path` ("" when none), as `dpkg-query -S` says."""
    for line in dpkg.query("-S", path).splitlines():
        owner, sep, listed = line.partition(": ")
        if sep and listed == path and not line.startswith("diversion "):
            return owner.split(",")[0].strip().partition(":")[0]
    return ""


def _as_installed(package: str, identity: BinaryIdentity) -> bool:
    """The file's md5 is the one dpkg recorded for it when it installed `package`."""
    listing = dpkg.query("--control-path", package, "md5sums").strip()
    try:
        lines = Path(listing).read_text(encoding="utf-8").splitlines() if listing else []
    except OSError:
        return False
    names = {identity.resolved.lstrip("/"), identity.path.lstrip("/")}
    digests = [line.split(None, 1)[0] for line in lines if len(line.split(None, 1)) == 2
               and line.split(None, 1)[1] in names]
    return bool(digests) and digests[0] == _md5(identity.resolved)


def _md5(path: str) -> str:
    # dpkg's md5sums name installed files by MD5; it checks the file is dpkg's, sha256 is the identity.
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
