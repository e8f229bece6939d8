"""A channel applied to a payload: the impaired payload a fresh decoder gets, and the trace of what
the channel did, from which the impaired payload re-derives exactly (the audit does so).

The unit of loss is a packet of a packet stream (Opus, Lyra) or a code of a one-dimensional code
stream (a Codec 2 frame). A lost packet becomes empty and a lost code zero, so the decoder never sees
what the channel took; the list of lost units goes to the decoder in `side_info["channel"]`, as a
receiver knows which sequence numbers never arrived. A flipped bit goes unannounced, as on a real link.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.channel.models import DRAWS_VERSION, flipped_bits, lost_units
from codecarena.channel.spec import Channel, ChannelError, parse_channel
from codecarena.files import JSONFileError, read_json, sha256_file, write_json
from codecarena.payload import CodeStream, PacketStream, Payload, encode_payload, read_payload, write_payload
from codecarena.payload.fields import PayloadError
from codecarena.plural import counted

TRACE_VERSION = 1
SIDE_INFO_KEY = "channel"


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
    stream: str  # the payload stream the channel acted on
    unit: str  # "packet" or "frame"
    units: int
    bits: int  # bits of all units together, the denominator of the bit error rate
    lost: list[int]
    flipped: list[list[int]]  # [unit, bit], bit 0 the most significant
    clean_payload_sha256: str
    impaired_payload_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _target(payload: Payload) -> CodeStream | PacketStream:
    if len(payload.streams) != 1:
        raise ChannelError(f"{payload.codec}: the payload has {counted(len(payload.streams), 'stream')}; a "
                           "channel acts on payloads of one packet stream or one one-dimensional code stream")
    stream = payload.streams[0]
    if isinstance(stream, CodeStream) and len(stream.shape) != 1:
        raise ChannelError(f"{payload.codec}: stream {stream.name!r} has shape {list(stream.shape)}; a channel acts "
                           "on one-dimensional code streams (one code per frame)")
    if SIDE_INFO_KEY in payload.side_info:
        raise ChannelError(f"{payload.codec}: the payload's side info already holds {SIDE_INFO_KEY!r}")
    return stream


def _unit_bits(stream: CodeStream | PacketStream) -> list[int]:
    if isinstance(stream, PacketStream):
        return [8 * len(p) for p in stream.packets]
    return [stream.bit_width] * stream.shape[0]


def apply(payload: Payload, channel: Channel, lost: list[int], flipped: list[list[int]]) -> Payload:
    """The payload with `lost` units erased and `flipped` bits inverted, announcing the erasures."""
    stream = _target(payload)
    bits = _unit_bits(stream)
    erased = set(lost)
    if any(not 0 <= unit < len(bits) for unit in erased) or any(
            not (0 <= unit < len(bits) and 0 <= bit < bits[unit]) for unit, bit in flipped):
        raise ChannelError(f"{payload.codec}: a lost unit or flipped bit lies outside the {counted(len(bits), 'unit')}")
    if isinstance(stream, PacketStream):
        packets = [bytearray(p) for p in stream.packets]
        for unit, bit in flipped:
            packets[unit][bit // 8] ^= 0x80 >> (bit % 8)
        new: CodeStream | PacketStream = PacketStream(stream.name, tuple(b"" if i in erased else bytes(p)
                                                                        for i, p in enumerate(packets)))
    else:
        values = np.array(stream.values, dtype=np.uint64)
        for unit, bit in flipped:
            values[unit] ^= np.uint64(1 << (stream.bit_width - 1 - bit))
        values[sorted(erased)] = 0
        new = CodeStream(stream.name, stream.bit_width, stream.shape, values)
    side = {**payload.side_info, SIDE_INFO_KEY: {"spec": channel.canonical, "erased": sorted(erased),
                                                 "policy": channel.policy}}
    return dataclasses.replace(payload, streams=(new,), side_info=side)


def impair(payload: Payload, channel: Channel, utterance: str, clean_sha256: str) -> tuple[Payload, Trace]:
    """The impaired payload and its trace (its impaired_payload_sha256 filled in)."""
    stream = _target(payload)
    bits = _unit_bits(stream)
    lost = lost_units(channel, len(bits), utterance)
    flipped = flipped_bits(channel, bits, utterance)
    impaired = apply(payload, channel, lost, flipped)
    digest = hashlib.sha256(encode_payload(impaired)).hexdigest()
    trace = Trace(version=TRACE_VERSION, channel=channel.canonical, model=channel.model,
                  parameters=channel.parameters(), seed=channel.seed,
                  draws=f"sha256 counter v{DRAWS_VERSION}, key {channel.draw_key!r} and the utterance",
                  utterance=utterance, stream=stream.name,
                  unit="packet" if isinstance(stream, PacketStream) else "frame", units=len(bits), bits=sum(bits),
                  lost=lost, flipped=flipped, clean_payload_sha256=clean_sha256, impaired_payload_sha256=digest)
    return impaired, trace


def impair_file(clean: Path, impaired: Path, trace_path: Path, channel: Channel, utterance: str) -> Trace:
    """Read a clean payload, write its impaired payload and trace; ChannelError or PayloadError in one line."""
    payload = read_payload(clean)
    bad, trace = impair(payload, channel, utterance, sha256_file(clean))
    write_payload(impaired, bad, durable=False)
    write_json(trace_path, trace.to_dict(), durable=False)
    return trace


def read_trace(path: Path) -> Trace:
    """A trace file, strictly: exact keys and types, or ChannelError naming the file."""
    try:
        data = read_json(path)
    except JSONFileError as exc:
        raise ChannelError(str(exc)) from None
    names = [f.name for f in dataclasses.fields(Trace)]
    if not isinstance(data, dict) or sorted(data) != sorted(names):
        raise ChannelError(f"{path}: not a channel trace (expected the keys {', '.join(names)})")
    kinds = {"version": int, "channel": str, "model": str, "parameters": dict, "seed": int, "draws": str,
             "utterance": str, "stream": str, "unit": str, "units": int, "bits": int, "lost": list, "flipped": list,
             "clean_payload_sha256": str, "impaired_payload_sha256": str}
    for key, kind in kinds.items():
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise ChannelError(f"{path}: {key} must be {kind.__name__}")
    if data["version"] != TRACE_VERSION:
        raise ChannelError(f"{path}: trace version {data['version']}, this codecarena reads {TRACE_VERSION}")
    ints = all(type(i) is int for i in data["lost"])
    pairs = all(isinstance(f, list) and len(f) == 2 and all(type(i) is int for i in f) for f in data["flipped"])
    if not ints or not pairs:
        raise ChannelError(f"{path}: lost must list unit indices and flipped [unit, bit] pairs")
    return Trace(**data)


def rederive(clean: Path, trace_path: Path, channel_text: str, utterance: str) -> tuple[Trace, list[str]]:
    """What the audit checks of one impaired payload: the trace is the channel's own (drawn again from
    its spec, seed and utterance) for this clean payload, and applying it to the clean payload gives
    the impaired payload's bytes. Returns the trace and the problems found (none when all holds)."""
    trace = read_trace(trace_path)
    channel = parse_channel(channel_text)
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
    _, drawn = impair(payload, channel, utterance, clean_sha)
    if (drawn.lost, drawn.flipped, drawn.units, drawn.bits) != (trace.lost, trace.flipped, trace.units, trace.bits):
        problems.append(f"trace {trace_path.name} is not what {channel.canonical} draws for this utterance "
                        f"({len(trace.lost)} lost / {len(trace.flipped)} flipped recorded, "
                        f"{len(drawn.lost)} / {len(drawn.flipped)} drawn)")
    try:
        applied = apply(payload, channel, trace.lost, trace.flipped)
    except (ChannelError, PayloadError) as exc:
        return trace, [*problems, f"trace {trace_path.name} does not apply to the clean payload ({exc})"]
    if hashlib.sha256(encode_payload(applied)).hexdigest() != trace.impaired_payload_sha256:
        problems.append(f"the clean payload with trace {trace_path.name} applied is not the impaired payload "
                        "the trace names")
    return trace, problems
