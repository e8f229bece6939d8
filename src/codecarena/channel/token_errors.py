"""How many of a neural codec's tokens a channel's bit errors changed (docs/channel.md, "Tokens changed").

A token is one code of one codebook (or scale) at one time step, in every code stream of the payload.
A token is changed when its value in the impaired payload differs from the clean payload's in a frame
that arrived. A lost frame's tokens are not counted, though the trace may flip bits in them: the
arena's token policy replaces every code of a lost frame whatever the flips did, so none of those
flips reaches the decoder (the loss does, and the record counts it as lost). The trace flips distinct
bits, so a token hit by two flipped bits is one changed token.

Only the families whose lost frames the token policy fills (`[channel] tokens = true`) have tokens;
for every other payload (packets, a tool's file, Codec 2's one code a frame) the counts are null.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from codecarena.channel.spec import ChannelError
from codecarena.payload import CodeStream, Payload

#: The channel record's token fields, null where a payload has no tokens (and in rows before version 11).
NOT_APPLICABLE: dict[str, Any] = {"tokens": None, "tokens_changed": None, "tokens_changed_fraction": None}


@dataclass(frozen=True)
class TokenErrors:
    tokens: int  # codes in the payload, every stream's
    changed: int  # of them, those whose value the channel's flipped bits changed in a frame that arrived

    def record(self) -> dict[str, Any]:
        """The channel record's token fields."""
        return {"tokens": self.tokens, "tokens_changed": self.changed,
                "tokens_changed_fraction": self.changed / self.tokens if self.tokens else 0.0}


def token_errors(clean: Payload, impaired: Payload, lost_frames: Iterable[int]) -> TokenErrors:
    """The tokens of `clean` and how many of them differ in `impaired` outside the frames `lost_frames`
    (frames as channel/packets.py cuts code streams: one step of the coarsest stream); ChannelError in
    one line when the two payloads' code streams do not match."""
    streams = [s for s in clean.streams if isinstance(s, CodeStream)]
    if not streams or len(streams) != len(clean.streams):
        raise ChannelError(f"{clean.codec}: tokens are counted in code streams only")
    shapes = [(s.name, s.bit_width, s.shape) for s in streams]
    if [(s.name, s.bit_width, s.shape) for s in impaired.streams if isinstance(s, CodeStream)] != shapes or len(
            impaired.streams) != len(streams):
        raise ChannelError(f"{clean.codec}: the impaired payload's code streams are not the clean payload's "
                           f"({', '.join(f'{n} {list(shape)}' for n, _, shape in shapes)})")
    frames = min(s.shape[-1] for s in streams)
    lost = sorted(set(lost_frames))
    tokens = changed = 0
    for before, after in zip(streams, impaired.streams):
        assert isinstance(after, CodeStream)
        steps = before.shape[-1]
        if not steps:
            continue
        per = steps // frames if frames else 0
        arrived = np.ones(steps, dtype=bool)
        for frame in lost:
            arrived[frame * per:(frame + 1) * per] = False
        differs = (np.asarray(before.values).reshape(-1, steps) != np.asarray(after.values).reshape(-1, steps))
        tokens += int(np.asarray(before.values).size)
        changed += int(differs[:, arrived].sum())
    return TokenErrors(tokens, changed)
