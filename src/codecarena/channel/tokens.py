"""The arena's concealment for neural codecs whose payload is token frames (docs/channel.md): their
decoders have no notion of a lost frame, so before the adapter decodes, every lost frame's codes
(the frame of every codebook, and of a multi-scale codec every finer scale's codes under it) are
replaced by a declared policy, and the channel record is taken off the payload:

- `repeat`: the last received frame's codes again; a frame lost before any was received gets code
  0 of every codebook (no codebook of these codecs has a neutral entry, so 0 is an arbitrary one);
- `zero`: code 0 of every codebook, for every lost frame.

It is labelled `concealment: arena` in every row, so that no one reads it as the codec's own PLC.
Flipped bits need nothing: the codes they changed are decoded as they arrive.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from codecarena.channel.packets import SIDE_INFO_KEY
from codecarena.channel.receive import received
from codecarena.payload import CodeStream, Payload

WORDS = {"repeat": "the arena's token policy: each lost frame's codes are the last received frame's (code 0 of "
                   "every codebook before the first), then the codec decodes",
         "zero": "the arena's token policy: each lost frame's codes are code 0 of every codebook (no codebook "
                 "has a neutral entry), then the codec decodes"}


def conceal_tokens(payload: Payload) -> tuple[Payload, dict[str, Any]]:
    """The payload with its lost token frames filled by the channel's policy and no channel record,
    and the facts of what was done; the payload unchanged and no facts when it crossed no channel."""
    streams = [s for s in payload.streams if isinstance(s, CodeStream)]
    if len(streams) != len(payload.streams) or not streams:
        raise ValueError(f"{payload.codec}: the arena's token policy acts on code streams only")
    frames = min(s.shape[-1] for s in streams)
    got = received(payload, frames)
    if got is None:
        return payload, {}
    if got.policy not in WORDS:
        raise ValueError(f"{payload.codec}: the arena's token policies are {', '.join(WORDS)}, not {got.policy}")
    lost = sorted(got.erased)
    out = []
    for stream in streams:
        per = stream.shape[-1] // frames
        grid = np.array(stream.values, dtype=np.uint64).reshape(-1, stream.shape[-1])
        last: int | None = None
        for frame in range(frames):
            cells = slice(frame * per, (frame + 1) * per)
            if frame not in got.erased:
                last = frame
            elif got.policy == "repeat" and last is not None:
                grid[:, cells] = grid[:, last * per:(last + 1) * per]
            else:
                grid[:, cells] = 0
        out.append(CodeStream(stream.name, stream.bit_width, stream.shape, grid.reshape(-1)))
    first = next((f for f in range(frames) if f not in got.erased), frames)
    zeroed = len(lost) if got.policy == "zero" else sum(1 for f in lost if f < first)
    side = {k: v for k, v in payload.side_info.items() if k != SIDE_INFO_KEY}
    facts = {"by": "arena", "policy": got.policy, "concealment": WORDS[got.policy], "lost_frames": len(lost),
             "repeated_frames": len(lost) - zeroed, "zero_frames": zeroed}
    return dataclasses.replace(payload, streams=tuple(out), side_info=side), facts
