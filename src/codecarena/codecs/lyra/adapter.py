"""Lyra v2 with its real TFLite weights, run with ai-edge-litert as the upstream C++ runs them.

Facts from google/lyra at 47698dadf0010abff6a848e02642f55f806d4842:
- 16 kHz mono, 320-sample (20 ms) frames; encoder input is int16 / 32768; decoder output x 32768,
  clipped to int16.
- soundstream_encoder.tflite: [1,320] f32 -> [1,1,64]; quantizer.tflite `encode(input_frames,
  num_quantizers)` -> indices int32 [46,1,1] (unused slots -1; 4 bits each) and `decode`;
  lyragan.tflite: [1,1,64] -> [1,320].
- 3200 / 6000 / 9200 bps = 16 / 30 / 46 quantizers = 8 / 15 / 23 bytes per packet, indices packed
  MSB-first with the first quantizer in the most significant bits, no packet header.
- Streaming state lives in resource variables that cannot be reset: every stream gets new
  interpreters.
- XNNPACK and the plain kernels give different bitstreams. As upstream (and the independent
  reference): encoder and LyraGAN with XNNPACK, the quantizer with the plain kernels.
The payload's packets are exactly the upstream packets.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from codecarena.plugin import Adapter, Decoded, Encoded, PacketStream, Payload, from_int16, to_int16
from codecarena.plugin.channel import received
from codecarena.plugin.checkpoints import pinned_files, pinned_side_bytes

REGISTRY_ID = "lyra_v2"
FRAME = 320
BITS_PER_INDEX = 4
QUANTIZERS = {"3200": 16, "6000": 30, "9200": 46}
MAX_QUANTIZERS = 46


def pack_indices(indices: np.ndarray) -> bytes:
    """One upstream packet: 4-bit indices, first quantizer in the most significant bits."""
    bits = len(indices) * BITS_PER_INDEX
    value = 0
    for index in indices:
        value = (value << BITS_PER_INDEX) | int(index)
    nbytes = math.ceil(bits / 8)
    return (value << (8 * nbytes - bits)).to_bytes(nbytes, "big")


def unpack_indices(packet: bytes, quantizers: int) -> np.ndarray:
    bits = quantizers * BITS_PER_INDEX
    if len(packet) != math.ceil(bits / 8):
        raise ValueError(f"packet of {len(packet)} bytes, {quantizers} quantizers need {math.ceil(bits / 8)}")
    value = int.from_bytes(packet, "big") >> (8 * len(packet) - bits)
    mask = (1 << BITS_PER_INDEX) - 1
    return np.array([(value >> (BITS_PER_INDEX * (quantizers - 1 - i))) & mask for i in range(quantizers)],
                    dtype=np.int32)


class LyraAdapter(Adapter):
    input_rate = 16000

    def load(self) -> dict[str, Any]:
        if self.weights != "real":
            raise ValueError("lyra runs its real TFLite weights only (no synthetic weights)")
        options = self.spec.options()
        self.quantizers = QUANTIZERS[self.spec.config]
        self.xnnpack = options["xnnpack"] == "on"
        self.threads = int(options["threads"])
        # Each file is read once and verified on those bytes; every stream builds fresh interpreters
        # from them (model_content), so what runs is what was hashed, whatever happens to the files.
        folder, self.models, checkpoint = pinned_files(REGISTRY_ID, "real", self.spec.config)
        sides = pinned_side_bytes(REGISTRY_ID, self.spec.config)
        return {
            "weights": "real", "checkpoint": checkpoint, "model_dir": str(folder),
            "encoder_model_bytes": sides["encoder"], "decoder_model_bytes": sides["decoder"],
            "frame_rate_hz": self.input_rate / FRAME, "quantizers": self.quantizers,
            "bits_per_index": BITS_PER_INDEX, "interpreter": {"xnnpack": self.xnnpack, "threads": self.threads,
                                                             "quantizer_xnnpack": False},
        }

    def _interpreter(self, name: str, xnnpack: bool) -> Any:
        kwargs: dict[str, Any] = {}
        if not xnnpack:
            kwargs["experimental_op_resolver_type"] = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        interpreter = Interpreter(model_content=self.models[name], num_threads=self.threads, **kwargs)
        interpreter.allocate_tensors()
        return interpreter

    def new_encoder(self) -> "FrameEncoder":
        return FrameEncoder(self._interpreter("soundstream_encoder.tflite", self.xnnpack),
                            self._interpreter("quantizer.tflite", False), self.quantizers)

    def new_decoder(self) -> "FrameDecoder":
        return FrameDecoder(self._interpreter("quantizer.tflite", False),
                            self._interpreter("lyragan.tflite", self.xnnpack), self.quantizers)

    def encode(self, audio: np.ndarray) -> Encoded:
        samples = to_int16(audio)
        frames = math.ceil(len(samples) / FRAME)
        # The last partial frame is zero-padded; the decode worker restores the exact length.
        padded = np.zeros(frames * FRAME, dtype=np.int16)
        padded[: len(samples)] = samples
        encoder = self.new_encoder()
        packets = tuple(encoder.encode_frame(padded[i * FRAME:(i + 1) * FRAME]) for i in range(frames))
        return Encoded(streams=(PacketStream("lyra", packets),),
                       side_info={"frame_samples": FRAME, "quantizers": self.quantizers},
                       facts={"packets": frames, "packet_bytes": len(packets[0]) if packets else 0})

    def decode(self, payload: Payload) -> Decoded:
        stream = payload.stream("lyra")
        assert isinstance(stream, PacketStream)
        decoder = self.new_decoder()
        got = received(payload, len(stream.packets))
        if got is not None:
            concealer = Concealment(decoder)
            out = [concealer.lost() if i in got.erased else concealer.received(p) for i, p in enumerate(stream.packets)]
            samples = np.concatenate(out) if out else np.zeros(0, dtype=np.int16)
            return Decoded(from_int16(samples), self.input_rate, concealer.facts(len(got.erased)))
        out = [decoder.decode_packet(p) for p in stream.packets]
        samples = np.concatenate(out) if out else np.zeros(0, dtype=np.int16)
        return Decoded(from_int16(samples), self.input_rate)

    def stream_latency_ms(self, encoded: Encoded) -> dict[str, float]:
        """One 20 ms hop and no look-ahead: upstream's encoder turns each hop into its packet, and the
        decoder each packet into its hop."""
        return {"frame_ms": 1000 * FRAME / self.input_rate, "lookahead_ms": 0.0}

    def length_tolerance(self, arena_rate: int) -> int:
        return FRAME


class FrameEncoder:
    """One encoder stream: feed 320-sample int16 frames, get upstream packets."""

    def __init__(self, encoder: Any, quantizer: Any, quantizers: int) -> None:
        self._encode = encoder.get_signature_runner("serving_default")
        self._quantize = quantizer.get_signature_runner("encode")
        self._quantizers = np.array(quantizers, dtype=np.int32)
        self.quantizers = quantizers

    def encode_frame(self, frame: np.ndarray) -> bytes:
        features = self._encode(input_audio=(frame.astype(np.float32) / 32768.0)[None, :])["output_0"]
        indices = self._quantize(input_frames=features, num_quantizers=self._quantizers)["output_0"].reshape(-1)
        used = indices[: self.quantizers]
        if np.any(used < 0) or np.any(used >= 1 << BITS_PER_INDEX) or np.any(indices[self.quantizers:] != -1):
            raise ValueError(f"quantizer returned indices outside the 4-bit layout: {indices.tolist()}")
        return pack_indices(used)


class FrameDecoder:
    """One decoder stream: feed packets, get 320 int16 samples each."""

    def __init__(self, quantizer: Any, gan: Any, quantizers: int) -> None:
        self._dequantize = quantizer.get_signature_runner("decode")
        self._generate = gan.get_signature_runner("serving_default")
        self.quantizers = quantizers

    def decode_packet(self, packet: bytes) -> np.ndarray:
        indices = np.full((MAX_QUANTIZERS, 1, 1), -1, dtype=np.int32)
        indices[: self.quantizers, 0, 0] = unpack_indices(packet, self.quantizers)
        features = self._dequantize(encoding_indices=indices)["output_0"]
        return self._synthesise(features)

    def decode_estimate(self) -> np.ndarray:
        """A hop of LyraGAN on upstream's estimate for a lost packet: zero features (ZeroFeatureEstimator)."""
        return self._synthesise(np.zeros((1, 1, FEATURES), dtype=np.float32))

    def _synthesise(self, features: np.ndarray) -> np.ndarray:
        audio = self._generate(input_audio=features)["output_0"].reshape(-1)
        return to_int16(audio.astype(np.float64))


FEATURES = 64
CONCEALMENT_SAMPLES = 1280  # upstream's kConcealmentDurationSeconds, 0.08 s at 16 kHz
FADE_SAMPLES = 640  # upstream's kFadeDurationSeconds, 0.04 s at 16 kHz
TO_NOISE, FROM_NOISE = 1, -1


class Concealment:
    """Upstream's LyraDecoder::DecodeSamplesInternal at whole hops (google/lyra lyra_decoder.cc, at the
    pinned commit): a lost packet is LyraGAN on zero features for the first 80 ms of a loss, then the
    output fades over 40 ms to comfort noise, and back over 40 ms once packets arrive. Upstream's comfort
    noise takes its phases from an unseeded absl::BitGen, so no run could repeat it: the arena puts
    silence in its place, and the facts say so."""

    def __init__(self, decoder: FrameDecoder) -> None:
        self.decoder = decoder
        self.progress = 0  # upstream's concealment_progress_
        self.fade = 0  # upstream's fade_progress_
        self.direction = FROM_NOISE
        self.counts = {"estimated_hops": 0, "faded_hops": 0, "silent_hops": 0}

    def received(self, packet: bytes) -> np.ndarray:
        self.progress = 0
        self.direction = FROM_NOISE
        return self._hop(lambda: self.decoder.decode_packet(packet))

    def lost(self) -> np.ndarray:
        if self.progress == CONCEALMENT_SAMPLES:
            self.direction = TO_NOISE
        else:
            self.progress += FRAME
        return self._hop(self.decoder.decode_estimate, lost=True)

    def _hop(self, generate: Any, lost: bool = False) -> np.ndarray:
        start = self.fade
        self.fade = min(max(start + self.direction * FRAME, 0), FADE_SAMPLES)
        if self.direction == TO_NOISE and start == FADE_SAMPLES:
            self.counts["silent_hops"] += 1
            return np.zeros(FRAME, dtype=np.int16)  # upstream: comfort noise alone; LyraGAN does not run
        audio = generate()
        if lost:
            self.counts["estimated_hops"] += 1
        if self.direction == FROM_NOISE and start == 0:
            return audio
        self.counts["faded_hops"] += 1
        # Upstream's cross-fade weight and its float arithmetic, the comfort noise being silence here.
        steps = start + self.direction * np.arange(FRAME)
        weight = ((1 + np.cos(steps * np.pi / FADE_SAMPLES)) / 2).astype(np.float32)
        return np.trunc(audio.astype(np.float32) * weight).astype(np.int16)

    def facts(self, lost: int) -> dict[str, Any]:
        return {"by": "codec", "concealment": "Lyra v2's own (upstream lyra_decoder.cc): LyraGAN on zero features "
                "for 80 ms of a loss, then a 40 ms fade to comfort noise; the arena plays silence in place of "
                "upstream's comfort noise, whose phases come from an unseeded generator",
                "lost_packets": lost, **self.counts}


ADAPTER = LyraAdapter

