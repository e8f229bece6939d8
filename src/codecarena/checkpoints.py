"""Checkpoint files: found in a local mirror, the cache, or downloaded from their pinned URLs, and
always verified (size and sha256) before anything loads them.

Resolution order, like the data: `--models-dir` / `$CODECARENA_MODELS` (a mirror folder holding
`<mirror_dir>/<file>`; strict: a missing or wrong file there is an error, never a silent download),
then the cache (`$XDG_CACHE_HOME/codecarena/models/<mirror_dir>`), then the pinned URL into the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from codecarena.datasets import DatasetError, download_verified, sha256_file
from codecarena.registry.entries import Checkpoint, CheckpointFile

MODELS_ENV = "CODECARENA_MODELS"
NO_DOWNLOAD_ENV = "CODECARENA_NO_DOWNLOAD"


class CheckpointError(ValueError):
    """A checkpoint file that is missing or differs from its pin; names the file and the problem."""


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "codecarena" / "models"


def verify(path: Path, pin: CheckpointFile) -> None:
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file missing")
    size = path.stat().st_size
    if size != pin.bytes:
        raise CheckpointError(f"{path}: {size} bytes, pinned {pin.bytes}; refusing to load")
    actual = sha256_file(path)
    if actual != pin.sha256:
        raise CheckpointError(f"{path}: sha256 mismatch: expected {pin.sha256}, actual {actual}; refusing to load")


def resolve(checkpoint: Checkpoint, models_dir: Path | None = None, allow_download: bool | None = None,
            progress: bool = False) -> Path:
    """The folder holding every file of `checkpoint`, each verified against its pin. With
    `progress`, downloads show a progress bar (for `codecarena fetch`)."""
    mirror = models_dir or (Path(os.environ[MODELS_ENV]) if os.environ.get(MODELS_ENV) else None)
    if mirror is not None:
        folder = mirror / checkpoint.mirror_dir
        for pin in checkpoint.files:
            verify(folder / pin.name, pin)
        return folder
    folder = cache_dir() / checkpoint.mirror_dir
    if allow_download is None:
        allow_download = os.environ.get(NO_DOWNLOAD_ENV, "") not in ("1", "true")
    for pin in checkpoint.files:
        path = folder / pin.name
        try:
            verify(path, pin)
            continue
        except CheckpointError:
            if not allow_download:
                raise CheckpointError(f"{path}: not in the cache and downloads are disabled; set {MODELS_ENV} "
                                      f"or pass --models-dir to a local mirror") from None
        try:
            _download(pin, path, progress)
        except DatasetError as exc:
            raise CheckpointError(f"{exc} (or set {MODELS_ENV} / --models-dir to a local mirror)") from None
        verify(path, pin)
    return folder


def _download(pin: CheckpointFile, path: Path, progress: bool) -> None:
    if not progress:
        download_verified(pin.url, path, pin.sha256, pin.bytes)
        return
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    with Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn()) as bar:
        task = bar.add_task(pin.name, total=pin.bytes)
        download_verified(pin.url, path, pin.sha256, pin.bytes, on_chunk=lambda n: bar.advance(task, n))
