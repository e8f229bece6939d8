"""Atomic file replacement, shared by the harness and the workers (which must not load the results
package): readers see the old file or the whole new one, never a prefix, and a failed write leaves no
temporary file behind."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from codecarena.diskspace import DiskFullError, is_disk_full


def write_json(path: Path, data: Any, durable: bool = True) -> None:
    """Atomic replace; `durable` also fsyncs (the worker protocol's job and report files are
    transient and skip it: a crash loses the stage either way)."""
    replace_text(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n", durable)


def replace_text(path: Path, text: str, durable: bool = True) -> None:
    """Write a temporary file beside `path` and rename it over `path`; on any failure the temporary
    file is removed and `path` keeps its old content."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise DiskFullError(path, len(text.encode())) from None
        raise
