"""Decoding what a channel impaired, the part of codecarena's public adapter API (version
`codecarena.plugin.API_VERSION`) for a family that declares `[channel]` (docs/channel.md).

`received(payload, units)` says which units of an impaired payload never arrived (None for a payload
that crossed no channel). A decoder that conceals losses itself feeds them to its decoder; one with
no loss interface decodes through `arena_frames`, the arena's policies (repeat the last received
frame, or silence), and returns the facts it gives as `Decoded.facts`, so every row says what was done.
A command-line family's impaired payload is its file's frames (`FRAMES_STREAM`) behind the setup a
receiver knows first (`SETUP_STREAM`); `channel_library` finds the pinned library whose own
concealment a decoder calls, `g711_conceal` is the arena's G.711 Appendix I concealment of a decoded
signal, and `lc3_header` and `speex_header` read the setup.
The receiving side lives with the rest of the channel (`codecarena.channel.receive`); this module is
its public face.
"""

from __future__ import annotations

from codecarena.channel.g711_plc import conceal as g711_conceal
from codecarena.channel.library import channel_library
from codecarena.channel.packets import FRAMES_STREAM, SETUP_STREAM
from codecarena.channel.receive import Received, arena_frames, received
from codecarena.framing import lc3_header, speex_header

__all__ = ["FRAMES_STREAM", "SETUP_STREAM", "Received", "arena_frames", "channel_library", "g711_conceal",
           "lc3_header", "received", "speex_header"]
