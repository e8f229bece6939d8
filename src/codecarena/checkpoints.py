"""Checkpoint files: found in a local mirror, the cache, or downloaded from their pinned URLs, and
always verified (size and sha256) before anything loads them. Loaders take the bytes from
`read_checkpoint`, which verifies exactly the bytes it returns: a file is read once, so the bytes
loaded are the bytes hashed even if the file is replaced in between.

Resolution order, like the data: `--models-dir` / `$CODECARENA_MODELS` (a mirror folder holding
`<mirror_dir>/<file>`; strict: a missing or wrong file there is an error, never a silent download),
then the cache (`$XDG_CACHE_HOME/codecarena/models/<mirror_dir>`), then the pinned URL into the cache
(`codecarena fetch`; a run never downloads). `import_file` copies a file downloaded elsewhere into
the cache, only if it matches a pin (its size first, then its sha256).

A file whose size was never published (pin bytes 0) is identified by its sha256 alone; the size
found at its first verified fetch or import is recorded in `<mirror_dir>/sizes.json` in the cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from codecarena.diskspace import DiskFullError, is_disk_full
from codecarena.files import DownloadError, cache_home, download_verified, read_json, sha256_file, write_json
from codecarena.registry.entries import Checkpoint, CheckpointFile

MODELS_ENV = "CODECARENA_MODELS"
SIZES_FILE = "sizes.json"
NO_DOWNLOAD_ENV = "CODECARENA_NO_DOWNLOAD"


class CheckpointError(ValueError):
    """A checkpoint file that is missing or differs from its pin; names the file and the problem."""


class NoPinMatches(CheckpointError):
    """A file offered for import that is none of the checkpoint's pinned files."""


def cache_dir() -> Path:
    return cache_home() / "models"


def verify(path: Path, pin: CheckpointFile) -> None:
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file missing")
    size = path.stat().st_size
    if pin.bytes and size != pin.bytes:
        raise CheckpointError(f"{path}: {size} bytes, pinned {pin.bytes}; refusing to load")
    _check_sha256(path, pin, sha256_file(path))


def read_verified(path: Path, pin: CheckpointFile) -> bytes:
    """The file's bytes, read once and verified on exactly those bytes. The size is checked before
    reading, and at most one byte past the pin is read, so a wrong file never fills memory."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if pin.bytes and size != pin.bytes:
                raise CheckpointError(f"{path}: {size} bytes, pinned {pin.bytes}; refusing to load")
            expected = pin.bytes or size
            data = fh.read(expected + 1)
    except (FileNotFoundError, IsADirectoryError):
        raise CheckpointError(f"{path}: checkpoint file missing") from None
    if len(data) != expected:
        raise CheckpointError(f"{path}: changed while being read ({len(data)} bytes read, expected {expected}); "
                              f"refusing to load")
    _check_sha256(path, pin, hashlib.sha256(data).hexdigest())
    return data


def _check_sha256(path: Path, pin: CheckpointFile, actual: str) -> None:
    if actual != pin.sha256:
        raise CheckpointError(f"{path}: sha256 mismatch: expected {pin.sha256}, actual {actual}; refusing to load")


def resolve(checkpoint: Checkpoint, models_dir: Path | None = None, allow_download: bool | None = None,
            progress: bool = False) -> Path:
    """The folder holding every file of `checkpoint`, each verified against its pin. With
    `progress`, downloads show a progress bar (for `codecarena fetch`)."""
    folder, _ = _locate(checkpoint, models_dir, allow_download, progress, verify)
    return folder


def read_checkpoint(checkpoint: Checkpoint, models_dir: Path | None = None,
                    allow_download: bool | None = None) -> tuple[Path, dict[str, bytes]]:
    """The folder and the verified bytes of every file of `checkpoint`, by file name: what a loader
    must parse (loading the files by path again would load whatever is there by then)."""
    return _locate(checkpoint, models_dir, allow_download, False, read_verified)


T = TypeVar("T")


def _mirror(models_dir: Path | None) -> Path | None:
    return models_dir or (Path(os.environ[MODELS_ENV]) if os.environ.get(MODELS_ENV) else None)


def missing_files(checkpoint: Checkpoint, models_dir: Path | None = None) -> tuple[Path, list[str]]:
    """The folder `checkpoint`'s files are read from (the mirror, else the cache) and the names of
    those not there at their pinned size: a quick look (`codecarena codecs`), which hashes nothing;
    loading a file verifies its sha256."""
    mirror = _mirror(models_dir)
    folder = (mirror if mirror is not None else cache_dir()) / checkpoint.mirror_dir
    return folder, [pin.name for pin in checkpoint.files if not (folder / pin.name).is_file()
                    or (pin.bytes and (folder / pin.name).stat().st_size != pin.bytes)]


def _locate(checkpoint: Checkpoint, models_dir: Path | None, allow_download: bool | None, progress: bool,
            check: Callable[[Path, CheckpointFile], T]) -> tuple[Path, dict[str, T]]:
    mirror = _mirror(models_dir)
    if mirror is not None:
        folder = mirror / checkpoint.mirror_dir
        return folder, {pin.name: check(folder / pin.name, pin) for pin in checkpoint.files}
    folder = cache_dir() / checkpoint.mirror_dir
    if allow_download is None:
        allow_download = os.environ.get(NO_DOWNLOAD_ENV, "") not in ("1", "true")
    checked: dict[str, T] = {}
    for pin in checkpoint.files:
        path = folder / pin.name
        try:
            checked[pin.name] = check(path, pin)
            continue
        except CheckpointError:
            if not allow_download:
                raise CheckpointError(f"{path}: not in the cache and downloads are disabled; set {MODELS_ENV} "
                                      f"or pass --models-dir to a local mirror") from None
        try:
            _download(pin, path, progress)
        except DownloadError as exc:
            raise CheckpointError(f"{exc} (or set {MODELS_ENV} / --models-dir to a local mirror)") from None
        checked[pin.name] = check(path, pin)
    return folder, checked


def _download(pin: CheckpointFile, path: Path, progress: bool) -> None:
    if not progress:
        download_verified(pin.url, path, pin.sha256, pin.bytes or None)
    else:
        from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

        with Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn()) as bar:
            task = bar.add_task(pin.name, total=pin.bytes or None)
            download_verified(pin.url, path, pin.sha256, pin.bytes or None, on_chunk=lambda n: bar.advance(task, n))
    _record_size(pin, path)


def _record_size(pin: CheckpointFile, path: Path) -> None:
    """Keep the size of a verified file whose size was never published (sizes.json beside it)."""
    if pin.bytes:
        return
    record = path.parent / SIZES_FILE
    sizes = read_json(record) if record.is_file() else {}
    sizes[pin.name] = {"sha256": pin.sha256, "bytes": path.stat().st_size}
    write_json(record, sizes)


def import_file(checkpoint: Checkpoint, source: Path) -> tuple[CheckpointFile, Path]:
    """Copy a file downloaded elsewhere into the cache, accepted only when its size and sha256 are
    those of one of the checkpoint's pinned files (matched by content, so its name does not matter).
    The size is compared before anything is read: a file of no pinned size (a snapshot's README, a
    4 GiB file of another release) is refused with NoPinMatches without being hashed."""
    if not source.is_file():
        raise CheckpointError(f"{source}: no such file")
    size = source.stat().st_size
    candidates = [f for f in checkpoint.files if f.bytes in (0, size)]
    if not candidates:
        pinned = ", ".join(f"{f.name} {f.bytes} bytes" for f in checkpoint.files)
        raise NoPinMatches(f"{source}: {size} bytes matches no pinned file's size ({pinned}); not imported")
    actual = sha256_file(source)
    pin = next((f for f in candidates if f.sha256 == actual), None)
    if pin is None:
        pinned = ", ".join(f"{f.name} {f.sha256}" for f in candidates)
        raise NoPinMatches(f"{source}: sha256 {actual} matches no pinned file ({pinned}); not imported")
    dest = cache_dir() / checkpoint.mirror_dir / pin.name
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tmp)
        verify(tmp, pin)  # the copy, not only the source, is what the cache will hold
        os.replace(tmp, dest)
        _record_size(pin, dest)
    except (OSError, DiskFullError) as exc:
        if isinstance(exc, OSError) and not is_disk_full(exc):
            raise
        # The cache is what is full (an ENOSPC from a copy names its source file).
        raise DiskFullError(dest.parent, size, f"{source.name} was not imported: free some space there and rerun "
                                               f"the same `codecarena fetch` command") from None
    finally:
        tmp.unlink(missing_ok=True)
    return pin, dest
