"""The shared library whose own packet loss concealment a family's decoder calls through ctypes
(its `[channel.library]`: Speex's libspeex, LC3's liblc3), found and checked before any row: the
Debian package that ships it must be installed at the version the family's registry entry pins, and
must ship the file. A library that is missing or of another version refuses the channel for that
family only, in one line."""

from __future__ import annotations

from pathlib import Path

from codecarena.channel.spec import ChannelError
from codecarena.registry.binaries import installed_version, package_files
from codecarena.registry.catalog import FAMILIES
from codecarena.registry.entries import RegistryError, debian_versions, entry_for_family


def channel_library(family: str) -> Path | None:
    """The path of the library the family's decoder conceals with (None when it declares none);
    ChannelError in one line naming the library and what is wrong."""
    support = FAMILIES[family].channel
    library = support.library if support is not None else None
    if library is None:
        return None
    try:
        pinned = debian_versions(entry_for_family(family)).get(library.package, "")
    except RegistryError as exc:
        raise ChannelError(f"{family}: its concealment library {library.file} has no registry pin ({exc})") from None
    if not pinned:
        raise ChannelError(f"{family}: its registry entry pins no version of {library.package}, which ships "
                           f"{library.file}, the library its decoder conceals with")
    found = installed_version(library.package)
    if found != pinned:
        raise ChannelError(f"{family}: its decoder conceals with {library.file} from {library.package} {pinned}, "
                           f"installed: {found or 'none'} (apt-get install {library.package}={pinned})")
    paths = [Path(p) for p in package_files(library.package) if Path(p).name == library.file]
    if not paths or not paths[0].exists():
        raise ChannelError(f"{family}: {library.package} {pinned} is installed but {library.file} is not among its files")
    return paths[0]
