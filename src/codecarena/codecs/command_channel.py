"""How a command-line family's decoder receives what a channel impaired (docs/channel.md, "What each
decoder does with a loss"): the payload is then its file's frames behind the setup a receiver knows
first, and the family's concealment runs:

- LC3 and Speex: their library's own packet loss concealment, the decoder called through ctypes on
  the very library the registry entry pins (codecs/lc3_plc.py, codecs/speex_plc.py);
- GSM: the arena's GSM 06.11 substitution and muting on the frames, then `toast` decodes the file
  (codecs/gsm_substitution.py);
- G.722 and G.726 (raw ADPCM codes): the decoder gets the last received frame's codes in place of a
  lost frame's (silence codes, zero bytes, before the first), so that its adaptive state runs on, and
  the arena's G.711 Appendix I concealment replaces what it decoded for every lost 10 ms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from codecarena.codecs import lc3_plc, speex_plc
from codecarena.codecs.gsm_substitution import mute, substitute
from codecarena.plugin import Payload
from codecarena.plugin.channel import FRAMES_STREAM, SETUP_STREAM, Received, channel_library, g711_conceal, received


@dataclass(frozen=True)
class Tool:
    """What a receiver needs of the command-line adapter."""
    family: str
    framing: str
    rate: int  # the tool's sample rate
    nominal_bps: int | None
    decode_file: Callable[[bytes], np.ndarray]  # the tool's own decode of a bitstream file


def decode_impaired(adapter: Tool, payload: Payload) -> tuple[np.ndarray, dict[str, Any]]:
    """The int16 samples and the receiver's facts of an impaired command-line payload."""
    setup = b"".join(payload.packet_stream(SETUP_STREAM).packets)
    frames = payload.packet_stream(FRAMES_STREAM).packets
    got = received(payload, len(frames))
    assert got is not None
    family = adapter.family
    if family in ("lc3", "speex"):
        library = channel_library(family)
        if library is None:
            raise ValueError(f"{family} declares no concealment library")
        if family == "lc3":
            return lc3_plc.decode(library, setup, frames, got)
        timing = payload.side_info.get("container_timing")
        if not isinstance(timing, list):
            raise ValueError("an impaired Ogg Speex payload carries its pages' timing in side info 'container_timing'")
        return speex_plc.decode(library, setup, frames, timing, got)
    if family == "gsm":
        data, muted, facts = substitute(frames, got)
        return mute(adapter.decode_file(data), muted), facts
    if adapter.framing == "raw":
        return _adpcm(adapter, frames, got, round(payload.num_samples * adapter.rate / payload.sample_rate))
    raise ValueError(f"{family}: no receiver for an impaired payload of framing {adapter.framing}")


def _adpcm(adapter: Tool, frames: tuple[bytes, ...], got: Received,
           codec_samples: int) -> tuple[np.ndarray, dict[str, Any]]:
    rate = adapter.rate
    if not adapter.nominal_bps:
        raise ValueError(f"{adapter.family}: a raw stream's frames need its configuration's nominal_bps")
    bits = adapter.nominal_bps / rate  # bits a sample
    # A lost frame is empty, so sizes come from the rate: every frame 10 ms but the last, which holds the rest.
    size = int((rate // 100) * bits) // 8
    total = -(-codec_samples * int(bits) // 8)
    filled: list[bytes] = []
    last: bytes | None = None
    for index, frame in enumerate(frames):
        if index in got.erased:
            want = size if index + 1 < len(frames) else total - size * (len(frames) - 1)
            filled.append((last or bytes(want))[:want].ljust(want, b"\0"))
        else:
            filled.append(frame)
            last = frame
    samples = adapter.decode_file(b"".join(filled))
    # The declared raw frame is 10 ms (codec.toml), Appendix I's own frame.
    out, facts = g711_conceal(samples, rate, set(got.erased))
    return out, {"by": "arena", "concealment": "ITU-T G.711 Appendix I, the arena's, on the decoded signal (the "
                 "decoder got the last received frame's codes in place of each lost one)" +
                 (", every length doubled for 16 kHz" if rate == 16000 else ""),
                 "lost_frames": len(got.erased), "concealed_10ms": facts["lost_frames"],
                 "silent_10ms": facts["silent_frames"]}
