"""The receiving side of a channel, for decoders: which units of an impaired payload were lost, and the
arena's concealment policies for a decoder that has none of its own.

An adapter whose decoder conceals losses itself (Opus, Lyra) reads `received()` and feeds the loss to
its decoder; one whose decoder has no loss interface (Codec 2) decodes through `arena_frames`, which
repeats the last received frame or plays silence, and every row says that the arena did it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from codecarena.channel.spec import POLICIES
from codecarena.payload import Payload

Unit = TypeVar("Unit")
POLICY_WORDS = {"repeat": "the arena's policy: each lost frame decodes the last received frame again "
                          "(silence before the first one)",
                "silence": "the arena's policy: each lost frame is silence, the decoder is not called"}


@dataclass(frozen=True)
class Received:
    spec: str  # the canonical channel spec
    erased: frozenset[int]  # the units that never arrived
    policy: str  # the arena's policy for decoders without concealment


def received(payload: Payload, units: int) -> Received | None:
    """What the channel record of an impaired payload says (None for a payload that crossed no channel);
    ValueError in one line when it is malformed."""
    record = payload.side_info.get("channel")
    if record is None:
        return None
    if not isinstance(record, dict) or sorted(record) != ["erased", "policy", "spec"]:
        raise ValueError("side info 'channel' must hold exactly spec, erased and policy")
    erased, policy, spec = record["erased"], record["policy"], record["spec"]
    if not isinstance(spec, str) or policy not in POLICIES or not isinstance(erased, list):
        raise ValueError("side info 'channel': spec must be text, policy one of " + ", ".join(POLICIES))
    if any(type(i) is not int or not 0 <= i < units for i in erased):
        raise ValueError(f"side info 'channel': erased must list unit indices below {units}")
    return Received(spec, frozenset(erased), policy)


def arena_frames(units: Sequence[Unit], got: Received, decode: Callable[[Unit], np.ndarray],
                 frame_samples: int) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Decode frame by frame, concealing each lost frame by the arena's policy; the decoded pieces and
    the facts of what was done."""
    pieces: list[np.ndarray] = []
    last: Unit | None = None
    repeated = silenced = 0
    for index, unit in enumerate(units):
        if index not in got.erased:
            last = unit
            pieces.append(decode(unit))
        elif got.policy == "repeat" and last is not None:
            repeated += 1
            pieces.append(decode(last))
        else:
            silenced += 1
            pieces.append(np.zeros(frame_samples, dtype=np.int16))
    return pieces, {"by": "arena", "policy": got.policy, "concealment": POLICY_WORDS[got.policy],
                    "lost_frames": len(got.erased), "repeated_frames": repeated, "silent_frames": silenced}
