"""Opus (libopus bundled in PyAV's FFmpeg) at 16 kHz input.

The Opus packets are the bitstream: representation bits are the packet bytes x 8, including the
packet produced when the encoder is flushed. The OpusHead (which carries the pre-skip) is side info.
libopus picks narrowband at 6-8 kbps on its own, so the coded bandwidth is read back from every
packet's TOC byte rather than assumed from the options.
"""

from __future__ import annotations

import ctypes
import fractions
import math
from collections import Counter
from pathlib import Path
from typing import Any

import av
import numpy as np

from codecarena.codecs.opus import libopus
from codecarena.plugin import Adapter, Decoded, Encoded, PacketStream, Payload, from_int16, to_int16
from codecarena.plugin.channel import received

# FFmpeg's libopus wrapper maps these cutoff frequencies to OPUS_SET_MAX_BANDWIDTH.
_CUTOFF_HZ = {"nb": 4000, "mb": 6000, "wb": 8000, "swb": 12000, "fb": 20000}
_SILK_BANDWIDTH = ("nb", "mb", "wb")
_CELT_BANDWIDTH = ("nb", "wb", "swb", "fb")


def toc_mode_bandwidth(toc: int) -> tuple[str, str]:
    """(mode, bandwidth) from an Opus TOC byte, per RFC 6716 section 3.1."""
    config = toc >> 3
    if config < 12:
        return "silk", _SILK_BANDWIDTH[config // 4]
    if config < 16:
        return "hybrid", "swb" if config < 14 else "fb"
    return "celt", _CELT_BANDWIDTH[(config - 16) // 4]


def bitrate_bps(config: str) -> int:
    return int(config[:-1]) * 1000 if config.endswith("k") else int(config)


def _libopus_version() -> str:
    libs = sorted((Path(av.__file__).parent.parent / "av.libs").glob("libopus*.so*"))
    if not libs:
        return "unknown"
    lib = ctypes.CDLL(str(libs[0]))
    lib.opus_get_version_string.restype = ctypes.c_char_p
    return lib.opus_get_version_string().decode()


class OpusAdapter(Adapter):
    input_rate = 16000

    def load(self) -> dict[str, Any]:
        self.options = self.spec.options()
        return {"parameters": 0, "parameter_bytes": 0, "libopus": _libopus_version(), "pyav": av.__version__}

    def _encoder_options(self) -> dict[str, str]:
        frame_ms = float(self.options["frame_ms"])
        opts = {
            "application": str(self.options["application"]),
            "vbr": str(self.options["vbr"]),
            "compression_level": str(self.options["complexity"]),
            "frame_duration": f"{frame_ms:g}",
        }
        if self.options["bandwidth"] != "auto":
            opts["cutoff"] = str(_CUTOFF_HZ[str(self.options["bandwidth"])])
        if int(self.options["fec"]):
            # Both knobs: libopus spends bits on LBRR only when it also expects loss.
            opts["fec"] = "1"
            opts["packet_loss"] = str(self.options["fec"])
        return opts

    def _context(self) -> Any:
        ctx = av.CodecContext.create("libopus", "w")
        ctx.sample_rate = self.input_rate
        ctx.layout = "mono"
        ctx.format = "s16"
        ctx.bit_rate = bitrate_bps(self.spec.config)
        ctx.time_base = fractions.Fraction(1, self.input_rate)
        ctx.options = self._encoder_options()
        ctx.open()
        return ctx

    def encode(self, audio: np.ndarray) -> Encoded:
        ctx = self._context()
        step = ctx.frame_size
        # A real-time sender only ever sends whole frames, so the last partial one is zero-padded
        # (as in docs/reference-smoke.md); the decoder restores the exact length.
        samples = to_int16(audio)
        samples = np.concatenate([samples, np.zeros(-len(samples) % step, dtype=np.int16)])
        packets: list[bytes] = []
        for start in range(0, len(samples), step):
            chunk = samples[start:start + step].reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(chunk, format="s16", layout="mono")
            frame.sample_rate = self.input_rate
            frame.pts = start
            packets.extend(bytes(p) for p in ctx.encode(frame))
        packets.extend(bytes(p) for p in ctx.encode(None))
        head = bytes(ctx.extradata or b"")
        modes = Counter(toc_mode_bandwidth(p[0]) for p in packets if p)
        bandwidths = Counter(bw for (_, bw), n in modes.items() for _ in range(n))
        return Encoded(
            streams=(PacketStream("opus", tuple(packets)),),
            side_info={"opus_head": head.hex()},
            facts={
                "packets": len(packets),
                "frame_size": step,
                "coded_bandwidth": bandwidths.most_common(1)[0][0] if bandwidths else "none",
                "bandwidth_packets": dict(sorted(bandwidths.items())),
                "mode_packets": {f"{m}/{bw}": n for (m, bw), n in sorted(modes.items())},
            },
        )

    def decode(self, payload: Payload) -> Decoded:
        stream = payload.packet_stream("opus")
        head = payload.side_info.get("opus_head")
        if not isinstance(head, str):
            raise ValueError("payload side info lacks opus_head")
        got = received(payload, len(stream.packets))
        if got is not None:
            frame = round(float(self.options["frame_ms"]) * libopus.RATE / 1000)
            audio, facts = libopus.decode_received(stream.packets, got.erased, bytes.fromhex(head), frame,
                                                   fec=int(self.options["fec"]) > 0)
            return Decoded(audio, libopus.RATE, facts)
        ctx = av.CodecContext.create("libopus", "r")
        # The OpusHead carries the pre-skip; given it, FFmpeg drops the encoder's look-ahead samples.
        ctx.extradata = bytes.fromhex(head)
        chunks: list[np.ndarray] = []
        rate = 0
        for packet in stream.packets:
            for frame in ctx.decode(av.Packet(packet)):
                rate = frame.sample_rate
                chunks.append(_frame_to_float(frame))
        for frame in ctx.decode(None):
            rate = frame.sample_rate
            chunks.append(_frame_to_float(frame))
        audio = np.concatenate(chunks) if chunks else np.zeros(0)
        return Decoded(audio, rate or 48000)

    # The frame-streaming interface (`codecarena stream`): the same encoder fed one frame at a time, and
    # libopus's own decoder fed one packet at a time, as a real-time receiver does.
    @property
    def stream_frame_samples(self) -> int:
        return round(float(self.options["frame_ms"]) * self.input_rate / 1000)

    def new_encoder(self) -> "FrameEncoder":
        return FrameEncoder(self._context(), self.input_rate)

    def new_decoder(self) -> "FrameDecoder":
        # The pre-skip this configuration's stream header (OpusHead) declares.
        return FrameDecoder(libopus.pre_skip(bytes(self._context().extradata or b"")))

    def stream_latency_ms(self, encoded: Encoded) -> dict[str, float]:
        """The algorithmic latency as libopus declares it: one frame plus its look-ahead, which the
        OpusHead's pre-skip is (OPUS_GET_LOOKAHEAD, in 48 kHz samples)."""
        skip = libopus.pre_skip(bytes.fromhex(str(encoded.side_info["opus_head"])))
        return {"frame_ms": float(self.options["frame_ms"]), "lookahead_ms": 1000 * skip / libopus.RATE}

    def length_tolerance(self, arena_rate: int) -> int:
        # Up to one padded final frame plus the frame the flush emits.
        frame = float(self.spec.options()["frame_ms"]) / 1000 * arena_rate
        return 2 * math.ceil(frame) + 2


def _frame_to_float(frame: Any) -> np.ndarray:
    data = frame.to_ndarray()
    if frame.format.name in ("s16", "s16p"):
        return from_int16(data.reshape(-1))
    if frame.format.name in ("flt", "fltp"):
        return data.reshape(-1).astype(np.float64)
    raise ValueError(f"unexpected Opus decoder sample format {frame.format.name}")


class FrameEncoder:
    """One encoder stream: int16 frames in, one packet each; `flush()` gives the packet of the end."""

    def __init__(self, ctx: Any, rate: int) -> None:
        self._ctx, self._rate, self._pts = ctx, rate, 0

    def encode_frame(self, samples: np.ndarray) -> bytes:
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self._rate
        frame.pts = self._pts
        self._pts += len(samples)
        packets = [bytes(p) for p in self._ctx.encode(frame)]
        if len(packets) != 1:
            raise ValueError(f"the encoder gave {len(packets)} packets for one frame")
        return packets[0]

    def flush(self) -> list[bytes]:
        return [bytes(p) for p in self._ctx.encode(None)]


class FrameDecoder:
    """One libopus decoder stream at 48 kHz: packets in, int16 samples out, the pre-skip dropped as it
    comes out (so the stream equals the whole-utterance decode)."""

    rate = libopus.RATE

    def __init__(self, pre_skip: int) -> None:
        self._decoder = libopus.Decoder(complexity=0)
        self._skip = pre_skip

    def decode_packet(self, packet: bytes) -> np.ndarray:
        audio = self._decoder.decode(packet, libopus.MAX_FRAME)
        if audio is None:
            raise ValueError("libopus rejected a packet")
        dropped = min(self._skip, len(audio))
        self._skip -= dropped
        return to_int16(audio[dropped:])


ADAPTER = OpusAdapter
