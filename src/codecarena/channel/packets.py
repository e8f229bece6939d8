"""Packetisation: how a channel cuts a payload into packets of whole codec frames, and the payload a
decoder gets once some packets are lost and some bits flipped (docs/channel.md, "Packets").

A payload is a sequence of frames, of one of three kinds:

- a packet stream of one packet per frame (Opus, Lyra): a frame is a packet;
- code streams whose last axis is time (Codec 2's one code a frame, the neural codecs' codebooks): a
  frame is one step of the coarsest stream with every codebook's codes, and the codes of the finer
  streams under it (SNAC's scales);
- a command-line tool's file, one packet: a frame is what its framing cuts (framing.split), the
  container's length fields and pages left out.

A packet is `per_packet` consecutive frames (the last may hold fewer). A lost packet's frames become
empty packets or zero codes, so the decoder never sees what the channel took, and `side_info["channel"]`
lists the frames that never arrived. A packet's bits are its frames' in order; a frame's bits are its
bytes' (the container's leading bits left out) or its codes', stream by stream, codebook by codebook,
each code from its most significant bit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from codecarena.channel.spec import Channel, ChannelError
from codecarena.framing import FramingError, split
from codecarena.payload import CodeStream, PacketStream, Payload
from codecarena.plural import counted
from codecarena.registry.catalog import FAMILIES
from codecarena.registry.strict import RegistryError

SIDE_INFO_KEY = "channel"
#: A packet lasts at least this long unless the channel says otherwise (and a frame is longer).
DEFAULT_PACKET_S = Fraction(20, 1000)
#: The streams of a command-line family's impaired payload: the setup a receiver knows before the
#: first frame, and the frames themselves.
SETUP_STREAM, FRAMES_STREAM = "setup", "frames"


@dataclass(frozen=True)
class Cutting:
    """What the harness knows of a configuration's frames from its declaration, before any payload."""
    where: str  # the configuration, for messages
    frame_s: Fraction | None  # one frame's duration; None when the family declares none
    framing: str = ""  # a command-line family's framing: its payload is the tool's whole file
    raw_frame_bytes: int = 0  # a raw stream's frame in bytes (the framing has no frames of its own)


def cutting(family: str, config: str, values: dict[str, Any], where: str) -> Cutting:
    """The frames of configuration `config` of `family` (`values`: its options, and a command-line
    family's configuration values); ChannelError in one line when its declaration cannot say."""
    declared = FAMILIES[family]
    support = declared.channel
    if support is None:
        raise ChannelError(f"{where}: {family} declares no [channel] support")
    command = declared.command
    if command is not None:
        values = {**dict(command.config(config).values), **values}
    try:
        frame_s = support.frame_seconds(config, values)
    except (RegistryError, KeyError) as exc:
        raise ChannelError(f"{where}: its declared frame cannot be read ({exc})") from None
    if command is None:
        return Cutting(where, frame_s)
    raw_bytes = 0
    if command.framing == "raw":
        nominal = command.config(config).nominal_bps
        bits = frame_s * nominal if frame_s is not None and nominal else Fraction(1, 3)
        if bits.denominator != 1 or bits % 8:
            raise ChannelError(f"{where}: a raw stream is cut into frames of whole bytes; its declared frame "
                               f"({support.frame_text(config, values) or 'none'}) at {nominal} bit/s is not")
        raw_bytes = int(bits) // 8
    return Cutting(where, frame_s, command.framing, raw_bytes)


def frames_per_packet(channel: Channel, cut: Cutting) -> int:
    """How many of the codec's frames one packet carries; ChannelError in one line, naming the frame's
    duration, for a packet that is not a whole number of them."""
    if channel.packet_frames is not None:
        return channel.packet_frames
    if cut.frame_s is None:
        if channel.packet_ms is not None:
            raise ChannelError(f"{cut.where}: its family declares no frame duration, so packet={channel.packet_text} "
                               "cannot be cut into its frames (leave packet out: one frame a packet, or give "
                               "packet=Nframes)")
        return 1
    if channel.packet_ms is None:
        return max(1, math.ceil(DEFAULT_PACKET_S / cut.frame_s))
    count = Fraction(channel.packet_ms) / 1000 / cut.frame_s
    if count.denominator != 1:
        raise ChannelError(f"{cut.where}: a packet of {channel.packet_text} is not a whole number of its "
                           f"{duration_text(cut.frame_s)} frames")
    return int(count)


def duration_text(seconds: Fraction) -> str:
    """A frame's duration as a reader takes it in: `20 ms`, or `13.333 ms (1/75 s)` when not whole."""
    ms = seconds * 1000
    if ms.denominator == 1:
        return f"{ms.numerator} ms"
    if (ms * 1000).denominator == 1:
        return f"{float(ms):g} ms"
    return f"{float(ms):.3f} ms ({seconds.numerator}/{seconds.denominator} s)"


class Frames:
    """One payload seen as frames: their bits, and the payload with frames erased and bits flipped."""

    def __init__(self, payload: Payload, cut: Cutting) -> None:
        if SIDE_INFO_KEY in payload.side_info:
            raise ChannelError(f"{payload.codec}: the payload's side info already holds {SIDE_INFO_KEY!r}")
        self.payload = payload
        self.cut = cut
        self.kind, self.count = _kind(payload, cut)
        if self.kind == "file":
            self._file()

    def _file(self) -> None:
        stream = self.payload.streams[0]
        assert isinstance(stream, PacketStream)
        try:
            self.split = split(self.cut.framing, stream.packets[0], self.cut.raw_frame_bytes)
        except FramingError as exc:
            raise ChannelError(f"{self.payload.codec}: its bitstream cannot be cut into frames ({exc})") from None
        if self.split.frame_s is not None and self.cut.frame_s is not None and self.split.frame_s != self.cut.frame_s:
            raise ChannelError(f"{self.payload.codec}: its file's frames last {duration_text(self.split.frame_s)}, "
                               f"its declaration says {duration_text(self.cut.frame_s)}")
        self.count = len(self.split.frames)

    @property
    def streams(self) -> str:
        return ",".join(s.name for s in self.payload.streams)

    def bits(self) -> list[int]:
        """The codec's bits of each frame (what a bit error can hit)."""
        if self.kind == "packets":
            return [8 * len(p) for p in self._packets().packets]
        if self.kind == "file":
            return [8 * len(f) - self.split.skip_bits for f in self.split.frames]
        return [self.count and sum(s.bit_width * math.prod(s.shape) for s in self._codes()) // self.count] * self.count

    def apply(self, lost: Iterable[int], flips: list[tuple[int, int]], record: dict[str, Any]) -> Payload:
        """The payload with frames `lost` erased, the (frame, bit) `flips` inverted, and `record` as
        its side info's channel record."""
        erased = set(lost)
        side = {**self.payload.side_info, SIDE_INFO_KEY: record}
        if self.kind == "codes":
            streams: tuple[CodeStream | PacketStream, ...] = tuple(self._impaired_codes(erased, flips))
        else:
            pieces = self._packets().packets if self.kind == "packets" else self.split.frames
            skip = self.split.skip_bits if self.kind == "file" else 0
            out = [bytearray(p) for p in pieces]
            for frame, bit in flips:
                at = skip + bit
                out[frame][at // 8] ^= 0x80 >> (at % 8)
            frames = tuple(b"" if i in erased else bytes(p) for i, p in enumerate(out))
            if self.kind == "packets":
                streams = (PacketStream(self._packets().name, frames),)
            else:
                streams = (PacketStream(SETUP_STREAM, (self.split.setup,)), PacketStream(FRAMES_STREAM, frames))
                if self.split.timing:
                    side["container_timing"] = [list(t) for t in self.split.timing]
        return dataclasses.replace(self.payload, streams=streams, side_info=side)

    def _packets(self) -> PacketStream:
        stream = self.payload.streams[0]
        assert isinstance(stream, PacketStream)
        return stream

    def _codes(self) -> list[CodeStream]:
        return [s for s in self.payload.streams if isinstance(s, CodeStream)]

    def _code_at(self, frame: int, bit: int) -> tuple[int, int, int]:
        """(stream, flat code index, bit from the most significant) of a frame's bit."""
        for number, stream in enumerate(self._codes()):
            per = stream.shape[-1] // self.count
            rows = math.prod(stream.shape[:-1])
            size = rows * per * stream.bit_width
            if bit < size:
                code, within = divmod(bit, stream.bit_width)
                row, step = divmod(code, per)
                return number, row * stream.shape[-1] + frame * per + step, within
            bit -= size
        raise ChannelError(f"{self.payload.codec}: bit {bit} lies outside frame {frame}")

    def _impaired_codes(self, erased: set[int], flips: list[tuple[int, int]]) -> list[CodeStream]:
        codes = self._codes()
        values = [np.array(s.values, dtype=np.uint64) for s in codes]
        for frame, bit in flips:
            number, index, within = self._code_at(frame, bit)
            values[number][index] ^= np.uint64(1 << (codes[number].bit_width - 1 - within))
        for number, stream in enumerate(codes):
            per = stream.shape[-1] // self.count if self.count else 0
            grid = values[number].reshape(-1, stream.shape[-1]) if values[number].size else values[number]
            for frame in erased:
                grid[..., frame * per:(frame + 1) * per] = 0
        return [CodeStream(s.name, s.bit_width, s.shape, v) for s, v in zip(codes, values)]


def _kind(payload: Payload, cut: Cutting) -> tuple[str, int]:
    streams = payload.streams
    if cut.framing:
        if len(streams) != 1 or not isinstance(streams[0], PacketStream) or len(streams[0].packets) != 1:
            raise ChannelError(f"{payload.codec}: a command-line family's payload is its tool's file, one packet of "
                               f"one stream; this one has {counted(len(streams), 'stream')}")
        return "file", 0
    if len(streams) == 1 and isinstance(streams[0], PacketStream):
        return "packets", len(streams[0].packets)
    if not streams or any(not isinstance(s, CodeStream) for s in streams):
        raise ChannelError(f"{payload.codec}: the payload has {counted(len(streams), 'stream')}; a channel acts on "
                           "one packet stream or on code streams whose last axis is time")
    lengths = [s.shape[-1] for s in streams if isinstance(s, CodeStream)]
    frames = min(lengths)
    if frames == 0 or any(n % frames for n in lengths):
        raise ChannelError(f"{payload.codec}: its code streams' time axes ({', '.join(map(str, lengths))} steps) are "
                           "not whole multiples of the coarsest one, so they cannot be cut into common frames")
    return "codes", frames
