"""Decoding what a channel impaired, the part of codecarena's public adapter API (version
`codecarena.plugin.API_VERSION`) for a family that declares `[channel]` (docs/channel.md).

`received(payload, units)` says which units of an impaired payload never arrived (None for a payload
that crossed no channel). A decoder that conceals losses itself feeds them to its decoder; one with
no loss interface decodes through `arena_frames`, the arena's policies (repeat the last received
frame, or silence), and returns the facts it gives as `Decoded.facts`, so every row says what was done.
The receiving side lives with the rest of the channel (`codecarena.channel.receive`); this module is
its public face.
"""

from __future__ import annotations

from codecarena.channel.receive import Received, arena_frames, received

__all__ = ["Received", "arena_frames", "received"]
