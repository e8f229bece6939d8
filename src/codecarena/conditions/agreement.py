"""How much of a payload a re-encode kept: the share of its units equal, at the same position, to those
of the payload it was coded from (a generation and the one before it). The units are the stream's own:
packets (Opus, Lyra: equal bytes), the codes of a one-dimensional code stream (a Codec 2 frame, a PCM
sample) or tokens (a neural codec's codebooks, each position of each codebook). Streams are compared in order, over the length both have."""

from __future__ import annotations

from typing import Any

import numpy as np

from codecarena.payload import CodeStream, PacketStream, Payload


def agreement(earlier: Payload, later: Payload) -> dict[str, Any]:
    """{unit, compared, equal, fraction} of `later` against `earlier`; ValueError when their streams
    differ in kind or shape (another codec)."""
    if len(earlier.streams) != len(later.streams):
        raise ValueError(f"payloads of {len(earlier.streams)} and {len(later.streams)} streams cannot be compared")
    compared = equal = 0
    units = set()
    for a, b in zip(earlier.streams, later.streams):
        if isinstance(a, PacketStream) and isinstance(b, PacketStream):
            n = min(len(a.packets), len(b.packets))
            compared += n
            equal += sum(1 for i in range(n) if a.packets[i] == b.packets[i])
            units.add("packet")
        elif isinstance(a, CodeStream) and isinstance(b, CodeStream) and a.shape[:-1] == b.shape[:-1]:
            frames = min(a.shape[-1], b.shape[-1])
            mine = np.asarray(a.values, dtype=np.int64).reshape(-1, a.shape[-1])[:, :frames]
            theirs = np.asarray(b.values, dtype=np.int64).reshape(-1, b.shape[-1])[:, :frames]
            compared += mine.size
            equal += int(np.count_nonzero(mine == theirs))
            units.add("code" if len(a.shape) == 1 else "token")
        else:
            raise ValueError(f"streams {a.name} and {b.name} differ in kind or codebooks")
    return {"unit": "/".join(sorted(units)), "compared": compared, "equal": equal,
            "fraction": equal / compared if compared else None}
