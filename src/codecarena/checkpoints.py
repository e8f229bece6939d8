"""Checkpoint files: found in a local mirror, the cache, or downloaded from their pinned URLs, and
always verified (size and sha256) before anything loads them. Loaders take the bytes from
`read_checkpoint`, which verifies exactly the bytes it returns: a file is read once, so the bytes
loaded are the bytes hashed even if the file is replaced in between.

Resolution order, like the data: `--models-dir` / `$CODECARENA_MODELS` (a mirror folder holding
`<mirror_dir>/<file>`; strict: a missing or wrong file there is an error, never a silent download),
then the cache (`$XDG_CACHE_HOME/codecarena/models/<mirror_dir>`), then the pinned URL into the cache.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from codecarena.files import DownloadError, cache_home, download_verified, sha256_file
from codecarena.registry.entries import Checkpoint, CheckpointFile

MODELS_ENV = "CODECARENA_MODELS"
NO_DOWNLOAD_ENV = "CODECARENA_NO_DOWNLOAD"


class CheckpointError(ValueError):
    """A checkpoint file that is missing or differs from its pin; names the file and the problem."""


def cache_dir() -> Path:
    return cache_home() / "models"


def verify(path: Path, pin: CheckpointFile) -> None:
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file missing")
    size = path.stat().st_size
    if size != pin.bytes:
        raise CheckpointError(f"{path}: {size} bytes, pinned {pin.bytes}; refusing to load")
    _check_sha256(path, pin, sha256_file(path))


def read_verified(path: Path, pin: CheckpointFile) -> bytes:
    """The file's bytes, read once and verified on exactly those bytes. The size is checked before
    reading, and at most one byte past the pin is read, so a wrong file never fills memory."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size != pin.bytes:
                raise CheckpointError(f"{path}: {size} bytes, pinned {pin.bytes}; refusing to load")
            data = fh.read(pin.bytes + 1)
    except (FileNotFoundError, IsADirectoryError):
        raise CheckpointError(f"{path}: checkpoint file missing") from None
    if len(data) != pin.bytes:
        raise CheckpointError(f"{path}: changed while being read ({len(data)} bytes read, pinned {pin.bytes}); "
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


def _locate(checkpoint: Checkpoint, models_dir: Path | None, allow_download: bool | None, progress: bool,
            check: Callable[[Path, CheckpointFile], T]) -> tuple[Path, dict[str, T]]:
    mirror = models_dir or (Path(os.environ[MODELS_ENV]) if os.environ.get(MODELS_ENV) else None)
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
        download_verified(pin.url, path, pin.sha256, pin.bytes)
        return
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    with Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn()) as bar:
        task = bar.add_task(pin.name, total=pin.bytes)
        download_verified(pin.url, path, pin.sha256, pin.bytes, on_chunk=lambda n: bar.advance(task, n))
