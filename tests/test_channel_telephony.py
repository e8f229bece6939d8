"""The channel for the command-line telephony families, and the arena's token policy for the neural ones (docs/channel.md): each family's impaired
payload decodes through its receiver (LC3 and Speex: their library's own PLC through ctypes; GSM:
the arena's 06.11 substitution and muting; G.722 and G.726: the arena's G.711 Appendix I), with
nothing lost bit for bit what the tool itself decodes, and with a loss otherwise than silence."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import soundfile as sf

from codecarena.channel.g711_plc import conceal
from codecarena.channel.impair import impair
from codecarena.channel.packets import cutting
from codecarena.channel.receive import Received
from codecarena.channel.spec import parse_channel
from codecarena.channel.tokens import conceal_tokens
from codecarena.codecs.command import CommandAdapter
from codecarena.codecs.gsm_substitution import FRAME_BYTES, _lower, substitute
from codecarena.payload import CodeStream, Payload
from codecarena.plugin import Encoded, to_int16
from codecarena.specs import parse_spec
from conftest import SHORT_CLIPS, need_mirror

SPECS = ("lc3:32k", "speex:q8", "gsm:13k", "g722:64k", "g726:32k")
needs_tools = pytest.mark.skipif(any(shutil.which(t) is None for t in ("elc3", "speexenc", "toast", "ffmpeg")),
                                 reason="the telephony tools are not installed")


def _payload(spec_text: str, encoded: Encoded, rate: int, samples: int) -> Payload:
    spec = parse_spec(spec_text)
    return Payload(codec=spec.canonical, family=spec.family, config={}, variant="", checkpoint={}, sample_rate=rate,
                   num_samples=samples, channels=1, codec_sample_rate=rate, streams=encoded.streams,
                   side_info=encoded.side_info)


def _decode(spec_text: str, channel: str) -> tuple[np.ndarray, np.ndarray, dict, list[int]]:
    """The tool's own decode of the clean payload, the receiver's decode of it through `channel`,
    the receiver's facts, and the frames the channel erased."""
    audio, rate = sf.read(need_mirror() / SHORT_CLIPS[0], dtype="float64")
    spec = parse_spec(spec_text)
    adapter = CommandAdapter(spec)
    adapter.load()
    clip = audio[: rate * 2]  # two seconds are plenty and keep the test short
    if rate != adapter.input_rate:
        import soxr
        clip = soxr.resample(clip, rate, adapter.input_rate)
    payload = _payload(spec_text, adapter.encode(clip), adapter.input_rate, len(clip))
    clean = to_int16(adapter.decode(payload).audio)
    cut = cutting(spec.family, spec.config, spec.options(), spec_text)
    bad, _trace = impair(payload, parse_channel(channel), "utt", "0" * 64, cut)
    got = adapter.decode(bad)
    return clean, to_int16(got.audio), got.facts, bad.side_info["channel"]["erased"]


@needs_tools
@pytest.mark.parametrize("spec", SPECS)
def test_with_nothing_lost_the_receiver_gives_the_tools_own_samples_bit_for_bit(spec: str) -> None:
    clean, received, facts, erased = _decode(spec, "loss=0%")
    assert erased == [] and facts["lost_frames" if "lost_frames" in facts else "lost_packets"] == 0
    assert facts["by"] == ("codec" if spec.split(":")[0] in ("lc3", "speex") else "arena")
    assert received.dtype == clean.dtype and np.array_equal(received, clean)


@needs_tools
@pytest.mark.parametrize("spec", SPECS)
def test_with_a_loss_the_receiver_conceals_every_lost_frame_and_differs_from_silence(spec: str) -> None:
    clean, received, facts, erased = _decode(spec, "loss=20%")
    assert erased, "a 20% loss over two seconds loses frames"
    assert facts.get("lost_frames", facts.get("lost_packets")) == len(erased)
    if "concealed_frames" in facts:  # the library's own PLC ran once for each lost frame
        assert facts["concealed_frames"] == len(erased)
    # Silence insertion: the clean decode with every lost frame's samples zeroed.
    frame_samples = {"lc3": 160, "speex": 320, "gsm": 160, "g722": 160, "g726": 80}[spec.split(":")[0]]
    silenced = clean.copy()
    for index in erased:
        silenced[index * frame_samples:(index + 1) * frame_samples] = 0
    first = erased[0] * frame_samples
    window = slice(first, first + frame_samples)
    assert len(received) == len(clean)
    assert np.any(received[window] != 0), "the first lost frame is concealed, not silent"
    assert not np.array_equal(received, silenced) and not np.array_equal(received, clean)


def test_g711_appendix_i_leaves_a_clean_signal_alone_and_fades_a_long_loss_to_silence() -> None:
    t = np.arange(8000)
    voiced = (8000 * np.sin(2 * np.pi * 125 * t / 8000)).astype(np.int16)  # a 64-sample pitch period
    same, facts = conceal(voiced, 8000, set())
    assert np.array_equal(same, voiced) and facts["lost_frames"] == 0
    lost = set(range(20, 30))  # 100 ms from 200 ms on
    out, facts = conceal(voiced, 8000, lost)
    assert facts["lost_frames"] == 10 and facts["silent_frames"] == 4
    first = out[200 * 8:210 * 8].astype(float)
    # The first 10 ms repeat the last pitch period: close to the sine, which the pitch search found.
    assert np.corrcoef(first, voiced[200 * 8:210 * 8])[0, 1] > 0.95
    assert np.all(out[260 * 8:300 * 8] == 0)  # from 60 ms of loss on, silence
    assert np.abs(out[250 * 8:260 * 8]).max() < np.abs(out[200 * 8:210 * 8]).max()  # fading
    assert np.array_equal(out[320 * 8:], voiced[320 * 8:])  # received again, once the overlap-add is over


def test_gsm_substitution_repeats_then_lowers_xmaxc_by_4_then_mutes() -> None:
    frame = bytes([0xD0 | 0x5]) + bytes(range(1, FRAME_BYTES))
    lowered = _lower(frame)
    value, low = int.from_bytes(frame, "big"), int.from_bytes(lowered, "big")
    fields = 0
    for k in range(4):  # sub-block k's xmaxc: bits 51 + 56k to 56 + 56k, counted from the frame's first
        shift = 8 * FRAME_BYTES - (51 + 56 * k) - 6
        fields |= 0x3F << shift
        assert (low >> shift) & 0x3F == max(((value >> shift) & 0x3F) - 4, 0)
    assert (value ^ low) & ~fields == 0 and value != low  # nothing but the xmaxc fields changed
    frames = tuple(frame for _ in range(20))
    data, muted, facts = substitute(frames, Received("loss=5%", frozenset(range(1, 19)), "repeat"))
    out = [data[i * FRAME_BYTES:(i + 1) * FRAME_BYTES] for i in range(20)]
    assert out[1] == frame and out[2] == lowered and out[3] == _lower(lowered)
    assert muted == [17, 18] and (facts["repeated_frames"], facts["attenuated_frames"]) == (1, 17)


def _tokens_payload(side: dict) -> Payload:
    coarse = CodeStream("scale0", 4, (1, 3), np.array([1, 2, 3], dtype=np.uint64))
    fine = CodeStream("scale1", 4, (2, 6), np.arange(1, 13, dtype=np.uint64))  # two codebooks, two steps a frame
    return Payload(codec="snac:24khz", family="snac", config={}, variant="", checkpoint={}, sample_rate=24000,
                   num_samples=3, channels=1, codec_sample_rate=24000, streams=(coarse, fine), side_info=side)


def test_the_token_policy_repeats_the_last_received_frame_of_every_codebook_or_zeroes_it() -> None:
    repeat, facts = conceal_tokens(_tokens_payload({"channel": {"spec": "loss=5%", "erased": [0, 2],
                                                                "policy": "repeat"}}))
    assert "channel" not in repeat.side_info
    assert repeat.code_stream("scale0").values.tolist() == [0, 2, 2]
    assert repeat.code_stream("scale1").values.reshape(2, 6).tolist() == [[0, 0, 3, 4, 3, 4], [0, 0, 9, 10, 9, 10]]
    assert (facts["by"], facts["lost_frames"], facts["repeated_frames"], facts["zero_frames"]) == ("arena", 2, 1, 1)
    zero, facts = conceal_tokens(_tokens_payload({"channel": {"spec": "loss=5%", "erased": [1], "policy": "zero"}}))
    assert zero.code_stream("scale1").values.reshape(2, 6).tolist() == [[1, 2, 0, 0, 5, 6], [7, 8, 0, 0, 11, 12]]
    assert facts["zero_frames"] == 1
    clean = _tokens_payload({})
    assert conceal_tokens(clean) == (clean, {})


@needs_tools
@pytest.mark.parametrize("spec", ("g722:64k", "g726:40k", "gsm:13k", "lc3:32k", "speex:q8"))
def test_losing_the_first_and_the_last_frame_keeps_the_decoded_length(spec: str) -> None:
    audio, rate = sf.read(need_mirror() / SHORT_CLIPS[0], dtype="float64")
    parsed = parse_spec(spec)
    adapter = CommandAdapter(parsed)
    adapter.load()
    import soxr
    clip = soxr.resample(audio[: rate * 2 - 37], rate, adapter.input_rate)  # a last frame that is not whole
    payload = _payload(spec, adapter.encode(clip), adapter.input_rate, len(clip))
    clean = to_int16(adapter.decode(payload).audio)
    bad, _ = impair(payload, parse_channel("loss=0%"), "utt", "0" * 64,
                    cutting(parsed.family, parsed.config, parsed.options(), spec))
    frames = list(bad.packet_stream("frames").packets)
    erased = [0, len(frames) - 1]
    for index in erased:
        frames[index] = b""
    streams = tuple(s if s.name != "frames" else dataclasses.replace(s, packets=tuple(frames)) for s in bad.streams)
    lost = dataclasses.replace(bad, streams=streams, side_info={**bad.side_info, "channel": {
        "spec": "loss=0%", "erased": erased, "policy": "repeat"}})
    got = adapter.decode(lost)
    assert len(got.audio) == len(clean) and got.facts.get("lost_frames", got.facts.get("lost_packets")) == 2
