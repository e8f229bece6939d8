"""A full disk is a stop, not a failed row: one line naming the path and the space needed.

A run on a full disk would otherwise fail every remaining row with a codec-looking error, leave
temporary files behind and print tracebacks. The harness checks the free space of the run directory
before a run and after every failed row; writes that hit ENOSPC raise DiskFullError after removing
their temporary files, and completed rows stay in rows.jsonl for the resume.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

# Job, report and log files of a row's stages, and filesystem slack.
_ROW_OVERHEAD_BYTES = 64 << 10


# What to do about a full disk during a run; other commands say what fits them (`advice`).
RUN_ADVICE = "completed results are kept: free some space and rerun the same command to resume"


class DiskFullError(RuntimeError):
    """No space left for what a command must write; the message names the path (the destination that
    is full), the space needed and what to do."""

    def __init__(self, path: Path, needed_bytes: int, advice: str = RUN_ADVICE) -> None:
        self.path, self.needed_bytes = Path(path), needed_bytes
        need = f", about {_mib(needed_bytes)} needed" if needed_bytes > 0 else ""
        super().__init__(f"{path}: no space left on device ({_mib(free_bytes(self.path))} free{need}); {advice}")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: Path) -> int:
    """Free bytes on the file system holding `path` (or its nearest existing parent)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def row_bytes(num_samples: int) -> int:
    """What one row writes at most, for 16-bit audio at the arena rate: the decoded wav, its replay
    (removed after the comparison), a payload no bigger than PCM, and the stage files."""
    return 3 * (2 * num_samples + 44) + _ROW_OVERHEAD_BYTES
