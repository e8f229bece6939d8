"""A channel applied to a payload: the impaired payload a fresh decoder gets, and the trace of what
the channel did, from which the impaired payload re-derives exactly (the audit does so).

The unit of loss is a packet: a whole number of the codec's frames (channel/packets.py says what a
frame is for each kind of payload and how frames become packets). A lost packet's frames become empty
or zero, so the decoder never sees what the channel took; the list of lost frames goes to the decoder
in `side_info["channel"]`, as a receiver knows which sequence numbers never arrived. A flipped bit
goes unannounced, as on a real link.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from codecarena.channel.models import DRAWS_VERSION, flipped_bits, lost_units
from codecarena.channel.packets import SIDE_INFO_KEY, Cutting, Frames, frames_per_packet
from codecarena.channel.spec import Channel, ChannelError, parse_channel
from codecarena.files import JSONFileError, read_json, sha256_file, write_json
from codecarena.payload import Payload, encode_payload, read_payload, write_payload
from codecarena.payload.fields import PayloadError
from codecarena.plural import counted

#: 2 added the packetisation (frames, frames_per_packet, frame_s); a version 1 trace is of one frame
#: a packet, as every channel was then.
TRACE_VERSION = 2
_V2_FIELDS = ("frames", "frames_per_packet", "frame_s")

__all__ = ["SIDE_INFO_KEY", "TRACE_VERSION", "Trace", "apply", "impair", "impair_file", "read_trace", "rederive"]


@dataclass(frozen=True)
class Trace:
    """What the channel did to one payload; written beside the impaired payload as JSON."""
    version: int
    channel: str  # canonical channel spec
    model: str
    parameters: dict[str, Any]
    seed: int
    draws: str  # how the draws were made (docs/channel.md)
    utterance: str
    stream: str  # the payload streams the channel acted on, joined by commas
    unit: str  # "packet" ("frame" in a version 1 trace of a code stream)
    units: int  # packets
    bits: int  # bits of all packets together, the denominator of the bit error rate
    lost: list[int]  # packets
    flipped: list[list[int]]  # [packet, bit], bit 0 the most significant of the packet's first frame
    clean_payload_sha256: str
    impaired_payload_sha256: str
    frames: int = 0  # the codec's frames in the payload
    frames_per_packet: int = 1
    frame_s: str = ""  # one frame's duration in seconds, an exact fraction ("1/50"); "" when undeclared

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return data if self.version >= 2 else {k: v for k, v in data.items() if k not in _V2_FIELDS}

    def lost_frames(self) -> list[int]:
        """The frames of the lost packets."""
        return [f for p in self.lost for f in range(p * self.frames_per_packet,
                                                    min((p + 1) * self.frames_per_packet, self.frames))]


def _packets(frames: Frames, per_packet: int) -> list[list[int]]:
    """The frames of each packet."""
    return [list(range(start, min(start + per_packet, frames.count))) for start in range(0, frames.count, per_packet)]


def apply(payload: Payload, channel: Channel, lost: list[int], flipped: list[list[int]], cut: Cutting | None = None,
          per_packet: int = 1) -> Payload:
    """The payload with the frames of packets `lost` erased and `flipped` [packet, bit] inverted,
    announcing the erased frames."""
    frames = Frames(payload, cut or Cutting(payload.codec, None))
    return _apply(frames, channel, lost, flipped, per_packet)


def _apply(frames: Frames, channel: Channel, lost: list[int], flipped: list[list[int]],
           per_packet: int) -> Payload:
    """The impaired payload."""
    packets = _packets(frames, per_packet)
    frame_bits = frames.bits()
    bits = [sum(frame_bits[f] for f in members) for members in packets]
    if any(not 0 <= unit < len(bits) for unit in lost) or any(
            not (0 <= unit < len(bits) and 0 <= bit < bits[unit]) for unit, bit in flipped):
        raise ChannelError(f"{frames.payload.codec}: a lost unit or flipped bit lies outside the "
                           f"{counted(len(bits), 'unit')}")
    erased = sorted(f for p in set(lost) for f in packets[p])
    flips = []
    for packet, bit in flipped:
        for frame in packets[packet]:
            if bit < frame_bits[frame]:
                flips.append((frame, bit))
                break
            bit -= frame_bits[frame]
    record = {"spec": channel.canonical, "erased": erased, "policy": channel.policy}
    return frames.apply(erased, flips, record)


def impair(payload: Payload, channel: Channel, utterance: str, clean_sha256: str, cut: Cutting | None = None,
           version: int = TRACE_VERSION) -> tuple[Payload, Trace]:
    """The impaired payload and its trace (its impaired_payload_sha256 filled in). A version 1 trace is
    re-derived as version 1 packetised: one frame a packet."""
    cut = cut or Cutting(payload.codec, None)
    frames = Frames(payload, cut)
    per_packet = frames_per_packet(channel, cut) if version >= 2 else 1
    packets = _packets(frames, per_packet)
    frame_bits = frames.bits()
    bits = [sum(frame_bits[f] for f in members) for members in packets]
    lost = lost_units(channel, len(bits), utterance)
    flipped = flipped_bits(channel, bits, utterance)
    impaired = _apply(frames, channel, lost, flipped, per_packet)
    digest = hashlib.sha256(encode_payload(impaired)).hexdigest()
    unit = "frame" if version < 2 and frames.kind == "codes" else "packet"
    trace = Trace(version=version, channel=channel.canonical, model=channel.model,
                  parameters=channel.parameters(), seed=channel.seed,
                  draws=f"sha256 counter v{DRAWS_VERSION}, key {channel.draw_key!r} and the utterance",
                  utterance=utterance, stream=frames.streams, unit=unit, units=len(bits), bits=sum(bits),
                  lost=lost, flipped=flipped, clean_payload_sha256=clean_sha256, impaired_payload_sha256=digest,
                  frames=frames.count, frames_per_packet=per_packet,
                  frame_s=str(cut.frame_s) if cut.frame_s is not None else "")
    return impaired, trace


def impair_file(clean: Path, impaired: Path, trace_path: Path, channel: Channel, utterance: str,
                cut: Cutting | None = None) -> Trace:
    """Read a clean payload, write its impaired payload and trace; ChannelError or PayloadError in one line."""
    payload = read_payload(clean)
    bad, trace = impair(payload, channel, utterance, sha256_file(clean), cut)
    write_payload(impaired, bad, durable=False)
    write_json(trace_path, trace.to_dict(), durable=False)
    return trace


def read_trace(path: Path) -> Trace:
    """A trace file, strictly: exact keys and types (those of its version: 1 or 2), or ChannelError
    naming the file."""
    try:
        data = read_json(path)
    except JSONFileError as exc:
        raise ChannelError(str(exc)) from None
    version = data.get("version") if isinstance(data, dict) else None
    names = [f.name for f in dataclasses.fields(Trace) if version != 1 or f.name not in _V2_FIELDS]
    if not isinstance(data, dict) or sorted(data) != sorted(names):
        raise ChannelError(f"{path}: not a channel trace (expected the keys {', '.join(names)})")
    kinds = {"version": int, "channel": str, "model": str, "parameters": dict, "seed": int, "draws": str,
             "utterance": str, "stream": str, "unit": str, "units": int, "bits": int, "lost": list, "flipped": list,
             "clean_payload_sha256": str, "impaired_payload_sha256": str, "frames": int, "frames_per_packet": int,
             "frame_s": str}
    for key in names:
        if not isinstance(data[key], kinds[key]) or isinstance(data[key], bool):
            raise ChannelError(f"{path}: {key} must be {kinds[key].__name__}")
    if data["version"] not in (1, TRACE_VERSION):
        raise ChannelError(f"{path}: trace version {data['version']}, this codecarena reads 1 and {TRACE_VERSION}")
    ints = all(type(i) is int for i in data["lost"])
    pairs = all(isinstance(f, list) and len(f) == 2 and all(type(i) is int for i in f) for f in data["flipped"])
    if not ints or not pairs:
        raise ChannelError(f"{path}: lost must list unit indices and flipped [unit, bit] pairs")
    if version == 1:
        data = {**data, "frames": data["units"]}
    elif data["frames_per_packet"] < 1 or (data["frame_s"] and not _fraction(data["frame_s"])):
        raise ChannelError(f"{path}: frames_per_packet must be at least 1 and frame_s an exact fraction of seconds")
    return Trace(**data)


def _fraction(text: str) -> bool:
    try:
        return Fraction(text) > 0
    except (ValueError, ZeroDivisionError):
        return False


def rederive(clean: Path, trace_path: Path, channel_text: str, utterance: str,
             cut: Cutting | None = None) -> tuple[Trace, list[str]]:
    """What the audit checks of one impaired payload: the trace is the channel's own (drawn again from
    its spec, seed and utterance, packetised as the configuration's frames say) for this clean payload,
    and applying it to the clean payload gives the impaired payload's bytes. Returns the trace and the
    problems found (none when all holds)."""
    trace = read_trace(trace_path)
    channel = parse_channel(channel_text)
    cut = cut or Cutting(channel_text, None)
    try:
        payload = read_payload(clean)
    except PayloadError as exc:
        return trace, [f"clean payload unreadable: {exc}"]
    problems = []
    clean_sha = sha256_file(clean)
    if trace.clean_payload_sha256 != clean_sha:
        problems.append(f"trace {trace_path.name} is of clean payload {trace.clean_payload_sha256[:12]}, "
                        f"the row's is {clean_sha[:12]}")
    if trace.channel != channel.canonical or trace.utterance != utterance:
        problems.append(f"trace {trace_path.name} is of {trace.channel} / {trace.utterance}, "
                        f"the row's is {channel.canonical} / {utterance}")
    _, drawn = impair(payload, channel, utterance, clean_sha, cut, version=trace.version)
    recorded = (trace.lost, trace.flipped, trace.units, trace.bits, trace.frames, trace.frames_per_packet,
                trace.frame_s if trace.version >= 2 else drawn.frame_s)
    if (drawn.lost, drawn.flipped, drawn.units, drawn.bits, drawn.frames, drawn.frames_per_packet,
            drawn.frame_s) != recorded:
        problems.append(f"trace {trace_path.name} is not what {channel.canonical} draws for this utterance "
                        f"({len(trace.lost)} lost / {len(trace.flipped)} flipped of {trace.units} packets of "
                        f"{trace.frames_per_packet} frames recorded, {len(drawn.lost)} / {len(drawn.flipped)} of "
                        f"{drawn.units} of {drawn.frames_per_packet} drawn)")
    try:
        applied = _apply(Frames(payload, cut), channel, trace.lost, trace.flipped, trace.frames_per_packet)
    except (ChannelError, PayloadError) as exc:
        return trace, [*problems, f"trace {trace_path.name} does not apply to the clean payload ({exc})"]
    if hashlib.sha256(encode_payload(applied)).hexdigest() != trace.impaired_payload_sha256:
        problems.append(f"the clean payload with trace {trace_path.name} applied is not the impaired payload "
                        "the trace names")
    return trace, problems
