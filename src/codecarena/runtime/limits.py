"""Resource limits of codec stages: one record, validated in one place.

Every command that launches codec workers (run, audit --replay, serve, determinism) builds its limits
through `StageLimits`, so a negative timeout or a NaN poll period is refused with one line before any
process starts. Limits are not part of a run's plan: they decide whether a stage may finish, not what it
computes, so a rerun with a larger memory limit resumes the same run and every row records the limits it
ran under.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_POLL_S = 0.25
DEFAULT_TIMEOUT_S = 600.0
# A poll period longer than this would let a runaway worker grow for minutes between readings.
MAX_POLL_S = 10.0
# Below this a worker cannot even start Python; above a day is a typo rather than a plan.
MIN_TIMEOUT_S = 0.1
MAX_TIMEOUT_S = 86400.0
# No worker runs in less: the interpreter alone takes about 10 MiB.
MIN_MEMORY_BYTES = 16 << 20
# Far above any machine's memory, so that rows recorded on a larger machine still parse here; the
# command line is held to this machine's physical memory (`parse_limits`).
MAX_MEMORY_BYTES = 1 << 50


class LimitError(ValueError):
    """A resource limit that cannot be used; the message names the option and the accepted range."""


def physical_memory() -> int:
    import psutil  # not at module level: codec runtimes load this module through the row schema, without psutil

    return int(psutil.virtual_memory().total)


def default_memory_limit() -> int:
    """Half of physical memory: room for the harness and one more worker on the same machine."""
    return physical_memory() // 2


def parse_size(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1000000' -> bytes (binary multiples)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    number = raw.rstrip("KMGT")
    unit = raw[len(number):]
    try:
        value = float(number)
    except ValueError:
        raise LimitError(f"memory size {text!r} is not a number with an optional K/M/G/T unit") from None
    if unit not in units or not math.isfinite(value) or int(value * units[unit]) < 1:
        raise LimitError(f"memory size {text!r} is not a positive size such as 512M or 4G")
    return int(value * units[unit])


def _seconds(value: Any, option: str, low: float, high: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise LimitError(f"{option} {value!r}: expected a number of seconds") from None
    if isinstance(value, bool) or not math.isfinite(seconds) or not low <= seconds <= high:
        raise LimitError(f"{option} {value!r}: expected seconds between {low:g} and {high:g}")
    return seconds


@dataclass(frozen=True)
class StageLimits:
    memory_limit_bytes: int
    guard_poll_s: float = DEFAULT_POLL_S
    stage_timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        memory = self.memory_limit_bytes
        if type(memory) is not int or not MIN_MEMORY_BYTES <= memory <= MAX_MEMORY_BYTES:
            raise LimitError(f"--memory-limit {memory!r}: expected at least {MIN_MEMORY_BYTES >> 20} MiB and at most "
                             f"{MAX_MEMORY_BYTES >> 50} PiB")
        object.__setattr__(self, "guard_poll_s", _seconds(self.guard_poll_s, "--guard-poll", 0.001, MAX_POLL_S))
        object.__setattr__(self, "stage_timeout_s",
                           _seconds(self.stage_timeout_s, "--stage-timeout", MIN_TIMEOUT_S, MAX_TIMEOUT_S))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_limits(memory: str | None, poll: Any = DEFAULT_POLL_S, timeout: Any = DEFAULT_TIMEOUT_S) -> StageLimits:
    """Limits from command-line text; `memory` None means half of physical memory, and a memory limit
    above physical memory is refused: resident memory cannot pass it, so the guard would never act."""
    if memory is None:
        return StageLimits(default_memory_limit(), poll, timeout)
    size, physical = parse_size(memory), physical_memory()
    if size > physical:
        raise LimitError(f"--memory-limit {memory!r}: expected at most this machine's physical memory, "
                         f"{physical / 2**30:.1f} GiB (a worker's resident memory cannot pass it, so the guard "
                         f"would never stop one); the default is half of it")
    return StageLimits(size, poll, timeout)
