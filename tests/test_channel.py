"""Channels (docs/channel.md): specs, seeded draws, impaired payloads and their traces, and what each
decoder does with a loss. Whole runs through the command line are in test_channel_runs.py."""

from __future__ import annotations

import hashlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import SHORT_CLIPS, need_mirror
from codecarena.channel.impair import impair, impair_file, read_trace, rederive
from codecarena.channel.packets import Cutting, cutting, frames_per_packet
from codecarena.channel.models import Draws, flipped_bits, lost_units
from codecarena.channel.receive import Received, arena_frames, received
from codecarena.channel.spec import ChannelError, parse_channel
from codecarena.payload import CodeStream, PacketStream, Payload, decode_payload, encode_payload, read_payload
from codecarena.payload import write_payload
from codecarena.registry.catalog import parse_declaration
from codecarena.registry.strict import RegistryError
from codecarena.pipeline.prepare import SelectionError, with_channels
from codecarena.specs import SpecError, parse_configuration, parse_spec


@pytest.mark.parametrize("text,canonical", [
    ("loss=5%", "loss=5%"), ("loss=05.50%", "loss=5.5%"), ("loss=0%", "loss=0%"),
    ("burst=10%,len=3", "burst=10%,len=3"), ("ber=0.001", "ber=1e-3"), ("ber=1.5E-4", "ber=1.5e-4"),
    ("loss=5%,seed=0,policy=repeat", "loss=5%"), ("loss=5%,policy=silence,seed=7", "loss=5%,seed=7,policy=silence"),
    ("loss=-0%", "loss=0%"), ("ber=-0", "ber=0"),
])
def test_a_channel_spec_has_one_canonical_text(text: str, canonical: str) -> None:
    assert parse_channel(text).canonical == canonical


@pytest.mark.parametrize("text,message", [
    ("loss=5", "needs a percent sign"), ("loss=101%", "above 100%"), ("ber=0.6", "above 0.5"),
    ("burst=10%", "needs len=B"), ("burst=60%,len=1", "at most len/(len+1)"), ("loss=5%,len=2", "unknown key 'len'"),
    ("jitter=5ms", "expected one of loss, burst, ber"), ("loss=5%,seed=x", "not a non-negative integer"),
    ("loss=5%,policy=guess", "not one of repeat, silence"), ("loss=1e1%", "not a number"),
    # #36 (18): a negative value is out of range, not "not a number"
    ("loss=-5%", "loss=-5% is below 0%"), ("burst=-5%,len=3", "burst=-5% is below 0%"),
    ("burst=5%,len=-2", "len=-2 is below 1 packet"), ("ber=-1e-3", "ber=-1e-3 is below 0"),
    ("loss=5%,seed=-1", "seed=-1 is below 0"), ("loss=--5%", "loss='--5' is not a number"),
])
def test_a_bad_channel_spec_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(ChannelError) as err:
        parse_channel(text)
    assert message in str(err.value) and text in str(err.value) and "\n" not in str(err.value)


def test_a_configuration_is_a_codec_spec_and_a_channel() -> None:
    spec = parse_configuration("opus:12k,fec=10@loss=05%")
    assert (spec.canonical, spec.bare.canonical, spec.channel) == ("opus:12k,fec=10@loss=5%", "opus:12k,fec=10",
                                                                   "loss=5%")
    assert spec.slug == "opus_12k__fec_10@loss_5pct" and spec.bare.slug == "opus_12k__fec_10"
    with pytest.raises(SpecError, match="opus@loss=5: channel 'loss=5': .* needs a percent sign"):
        parse_configuration("opus@loss=5")


def test_a_configuration_whose_folder_name_would_not_fit_a_file_name_is_refused_when_parsed() -> None:
    """#36 (14): the slug names the configuration's folders; one longer than a file name holds
    (255 bytes) parsed, then failed its rows with 'File name too long'."""
    fits = parse_configuration("opus:12k@loss=0." + "0" * 235 + "1%")
    assert len(fits.slug) == 255
    for text in ("opus:12k@loss=0." + "0" * 236 + "1%", "opus:12k@burst=5%,len=1" + "0" * 300):
        with pytest.raises(SpecError) as err:
            parse_configuration(text)
        message = str(err.value)
        assert "\n" not in message and message.startswith(text[:77] + "...: its folder name would be ")
        assert "more than the 255 a file name can hold; write the channel's or condition's numbers with fewer digits" \
            in message


def test_a_channel_given_with_run_channel_is_held_to_the_same_bound(tmp_path: Path) -> None:
    from conftest import codecarena

    result = codecarena("run", "--codec", "opus:12k", "--channel", "loss=0." + "0" * 300 + "1%", "--out", tmp_path / "run")
    assert result.returncode == 2 and not (tmp_path / "run").exists(), result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("codecarena: error: opus:12k@loss=0.000") and "its folder name would be 320 characters" in line


@pytest.mark.slow
def test_a_configuration_whose_folder_name_is_as_long_as_a_file_name_can_be_runs(tmp_path: Path) -> None:
    """The bound is the file system's, not a guess below it: a slug of 255 characters runs and audits."""
    import shutil

    from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of

    (tmp_path / "in").mkdir()
    shutil.copy(need_mirror() / SHORT_CLIPS[0], tmp_path / "in" / "clip0.wav")
    out = tmp_path / "run"
    done = codecarena("run", "--input", tmp_path / "in", "--codec", "opus:12k@loss=0." + "0" * 235 + "1%",
                      "--metrics", "none", "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r["status"] for r in rows_of(out)] == ["ok"]
    assert codecarena("audit", out).returncode == 0


def test_draws_are_sha256_in_counter_mode_as_documented() -> None:
    # docs/channel.md: key = SHA-256("codecarena channel draws v1" NUL key); block i = SHA-256(key, i as 8
    # bytes big-endian), cut into four big-endian 64-bit words.
    key = hashlib.sha256(b"codecarena channel draws v1\0loss,seed=0\0u\0loss").digest()
    block1 = hashlib.sha256(key + (1).to_bytes(8, "big")).digest()
    assert Draws("loss,seed=0\0u\0loss")[5] == int.from_bytes(block1[8:16], "big")


def test_independent_loss_loses_the_stated_share_and_nests_across_rates() -> None:
    five, ten = (lost_units(parse_channel(f"loss={r}%"), 40000, "utt") for r in (5, 10))
    assert abs(len(five) / 40000 - 0.05) < 0.005 and abs(len(ten) / 40000 - 0.10) < 0.006
    assert set(five) <= set(ten)
    assert lost_units(parse_channel("loss=10%"), 40000, "utt") == ten  # the same seed: the same losses
    assert lost_units(parse_channel("loss=10%,seed=1"), 40000, "utt") != ten
    assert lost_units(parse_channel("loss=10%"), 40000, "other") != ten
    assert lost_units(parse_channel("loss=0%"), 1000, "utt") == []
    assert lost_units(parse_channel("loss=100%"), 10, "utt") == list(range(10))


def test_a_burst_channel_has_its_stated_loss_rate_and_mean_burst_length() -> None:
    lost = lost_units(parse_channel("burst=10%,len=3"), 60000, "utt")
    bursts = 1 + sum(1 for a, b in zip(lost, lost[1:]) if b != a + 1)
    assert abs(len(lost) / 60000 - 0.10) < 0.012
    assert abs(len(lost) / bursts - 3) < 0.25


def test_bit_errors_flip_the_stated_share_of_bits() -> None:
    flips = flipped_bits(parse_channel("ber=1e-2"), [240] * 400, "utt")
    assert abs(len(flips) / 96000 - 0.01) < 0.0015
    assert all(0 <= unit < 400 and 0 <= bit < 240 for unit, bit in flips)
    assert lost_units(parse_channel("ber=1e-2"), 400, "utt") == []


def _packets_payload() -> Payload:
    packets = (b"\x00\x01", b"\xff", b"\x10\x20\x30", b"\x01")
    return Payload(codec="x:1", family="x", config={}, variant="", checkpoint={}, sample_rate=16000,
                   num_samples=4, channels=1, codec_sample_rate=16000, streams=(PacketStream("p", packets),),
                   side_info={"keep": 1})


def _codes_payload() -> Payload:
    codes = CodeStream("frames", 12, (4,), np.array([0xABC, 0x123, 0xFFF, 0x001], dtype=np.uint64))
    return Payload(codec="x:1", family="x", config={}, variant="", checkpoint={}, sample_rate=16000, num_samples=4,
                   channels=1, codec_sample_rate=8000, streams=(codes,), side_info={})


def test_a_lost_packet_is_emptied_and_announced_and_a_flipped_bit_is_not() -> None:
    from codecarena.channel.impair import apply

    bad = apply(_packets_payload(), parse_channel("loss=50%"), [1, 3], [[2, 0], [2, 23], [0, 15]])
    assert bad.packet_stream("p").packets == (b"\x00\x00", b"", b"\x90\x20\x31", b"")
    assert bad.side_info == {"keep": 1, "channel": {"spec": "loss=50%", "erased": [1, 3], "policy": "repeat"}}
    assert decode_payload(encode_payload(bad)) == bad  # the payload parser accepts it as it is


def test_a_lost_frame_code_is_zeroed_and_flips_count_from_the_codes_top_bit() -> None:
    from codecarena.channel.impair import apply

    bad = apply(_codes_payload(), parse_channel("ber=1e-3"), [2], [[0, 0], [1, 11]])
    assert bad.code_stream("frames").values.tolist() == [0x2BC, 0x122, 0, 0x001]


def test_a_trace_outside_the_payload_is_refused() -> None:
    from codecarena.channel.impair import apply

    for lost, flipped in (([4], []), ([-1], []), ([], [[0, 16]]), ([], [[-1, 0]])):
        with pytest.raises(ChannelError, match="outside the 4 units"):
            apply(_packets_payload(), parse_channel("loss=5%"), lost, flipped)


def test_a_payload_the_channel_cannot_act_on_is_refused_in_one_line() -> None:
    two = Payload(codec="x:1", family="x", config={}, variant="", checkpoint={}, sample_rate=16000, num_samples=4,
                  channels=1, codec_sample_rate=16000,
                  streams=(PacketStream("a", (b"1",)), PacketStream("b", (b"2",))), side_info={})
    with pytest.raises(ChannelError, match="has 2 streams"):
        impair(two, parse_channel("loss=5%"), "u", "0" * 64)


def test_the_impaired_payload_rederives_from_the_clean_one_and_its_trace(tmp_path: Path) -> None:
    clean = tmp_path / "clean.ccap"
    write_payload(clean, _packets_payload())
    channel = parse_channel("loss=50%,seed=3")
    trace = impair_file(clean, tmp_path / "bad.ccap", tmp_path / "trace.json", channel, "utt")
    assert read_trace(tmp_path / "trace.json") == trace
    assert hashlib.sha256((tmp_path / "bad.ccap").read_bytes()).hexdigest() == trace.impaired_payload_sha256
    assert read_payload(tmp_path / "bad.ccap").side_info["channel"]["erased"] == trace.lost
    assert rederive(clean, tmp_path / "trace.json", "loss=50%,seed=3", "utt")[1] == []
    # A trace edited to lose another packet is neither what the channel draws nor the file's.
    text = (tmp_path / "trace.json").read_text()
    forged = text.replace('"lost": [', '"lost": [0, ', 1) if 0 not in trace.lost else text.replace(
        '"lost": [\n  0,', '"lost": [', 1)
    (tmp_path / "trace.json").write_text(forged)
    problems = rederive(clean, tmp_path / "trace.json", "loss=50%,seed=3", "utt")[1]
    assert any("is not what loss=50%,seed=3 draws" in p for p in problems)
    assert any("is not the impaired payload the trace names" in p for p in problems)


def test_received_reads_the_erasures_strictly() -> None:
    from codecarena.channel.impair import apply

    bad = apply(_packets_payload(), parse_channel("loss=5%,policy=silence"), [3], [])
    assert received(bad, 4) == Received("loss=5%,policy=silence", frozenset({3}), "silence")
    assert received(_packets_payload(), 4) is None
    with pytest.raises(ValueError, match="unit indices below 2"):
        received(bad, 2)


def test_the_arena_repeats_the_last_received_frame_or_plays_silence() -> None:
    frames = [1, 2, 3, 4, 5]

    def decode(frame: int) -> np.ndarray:
        return np.full(2, frame, dtype=np.int16)

    out, facts = arena_frames(frames, Received("loss=5%", frozenset({0, 2, 3}), "repeat"), decode, 2)
    assert np.concatenate(out).tolist() == [0, 0, 2, 2, 2, 2, 2, 2, 5, 5]
    assert (facts["by"], facts["repeated_frames"], facts["silent_frames"]) == ("arena", 2, 1)
    out, facts = arena_frames(frames, Received("loss=5%", frozenset({2}), "silence"), decode, 2)
    assert np.concatenate(out).tolist() == [1, 1, 2, 2, 0, 0, 4, 4, 5, 5]


def test_a_declaration_says_who_conceals_and_how_long_its_frames_last() -> None:
    base = 'api_version = 1\nname = "x"\ndescription = "d"\nconfigs = ["a", "b"]\ndefault_config = "a"\n'
    family = parse_declaration(base + '[channel]\nconcealment = "arena"\ndescription = "repeat"\nframe = "40 ms"\n'
                               '[channel.config_frames]\nb = "320/16000 s"\n', "x.toml", "m")
    assert family.channel is not None and family.channel.concealment == "arena"
    assert family.channel.policies == ("repeat", "silence")
    assert (family.channel.frame_seconds("a", {}), family.channel.frame_seconds("b", {})) == (Fraction(1, 25),
                                                                                           Fraction(1, 50))
    with pytest.raises(RegistryError, match="x.toml: channel: concealment must be one of codec, arena"):
        parse_declaration(base + '[channel]\nconcealment = "both"\ndescription = "?"\n', "x.toml", "m")
    with pytest.raises(RegistryError, match="x.toml: channel: frame '20 bananas' is not a duration"):
        parse_declaration(base + '[channel]\nconcealment = "arena"\ndescription = "?"\nframe = "20 bananas"\n',
                          "x.toml", "m")
    with pytest.raises(RegistryError, match="policies are the arena's"):
        parse_declaration(base + '[channel]\nconcealment = "codec"\ndescription = "?"\npolicies = ["repeat"]\n',
                          "x.toml", "m")


def test_a_packet_is_a_whole_number_of_frames_or_is_refused_naming_the_frame() -> None:
    assert frames_per_packet(parse_channel("loss=5%"), cutting("opus", "12k", {"frame_ms": 10.0}, "o")) == 2
    assert frames_per_packet(parse_channel("loss=5%"), cutting("codec2", "700C", {}, "c")) == 1
    assert frames_per_packet(parse_channel("loss=5%,packet=80ms"), cutting("codec2", "700C", {}, "c")) == 2
    assert frames_per_packet(parse_channel("loss=5%,packet=3frames"), cutting("codec2", "3200", {}, "c")) == 3
    with pytest.raises(ChannelError, match="codec2:700C@x: a packet of 30ms is not a whole number of its 40 ms frames"):
        frames_per_packet(parse_channel("loss=5%,packet=30ms"), cutting("codec2", "700C", {}, "codec2:700C@x"))
    with pytest.raises(SelectionError, match="codec2:700C@loss=5%,packet=30ms: a packet of 30ms is not a whole "
                                             "number of its 40 ms frames"):
        with_channels((parse_spec("codec2:700C"),), ["loss=5%,packet=30ms"])
    with pytest.raises(SelectionError, match="codec2 offers the arena's policies repeat, silence, not policy=zero"):
        with_channels((parse_spec("codec2:700C"),), ["loss=5%,policy=zero"])


def test_a_lost_packet_of_several_frames_erases_them_all_and_the_trace_says_so() -> None:
    payload = _packets_payload()
    channel = parse_channel("loss=50%,packet=2frames")
    cut = Cutting("x", Fraction(1, 50))
    bad, trace = impair(payload, channel, "utt", "0" * 64, cut)
    assert (trace.version, trace.frames, trace.frames_per_packet, trace.units, trace.frame_s) == (2, 4, 2, 2, "1/50")
    erased = bad.side_info["channel"]["erased"]
    assert erased == trace.lost_frames() and all(p // 2 in trace.lost for p in erased)
    clean = payload.packet_stream("p").packets
    assert [len(p) for p in bad.packet_stream("p").packets] == [0 if i in erased else len(clean[i]) for i in range(4)]


class _StubDecoder:
    """Stands in for Lyra's FrameDecoder: every hop is 1000 (received) or 100 (zero features)."""

    def decode_packet(self, packet: bytes) -> np.ndarray:
        return np.full(320, 1000, dtype=np.int16)

    def decode_estimate(self) -> np.ndarray:
        return np.full(320, 100, dtype=np.int16)


def test_lyra_conceals_as_upstream_for_80_ms_then_fades_to_silence_in_place_of_comfort_noise() -> None:
    from codecarena.codecs.lyra.adapter import Concealment

    lyra = Concealment(_StubDecoder())  # type: ignore[arg-type]
    hops = [lyra.received(b"")] + [lyra.lost() for _ in range(7)] + [lyra.received(b""), lyra.received(b"")]
    assert [int(h[0]) for h in hops[:5]] == [1000, 100, 100, 100, 100]  # 4 hops = 80 ms on zero features
    # Hop 6 fades out from weight 1 to (1 + cos(319 pi / 640)) / 2 = 0.50245: 100 -> 50.
    assert (int(hops[5][0]), int(hops[5][-1])) == (100, 50)
    # Hop 7: weight 0.5 down to (1 + cos(639 pi / 640)) / 2 = 6.0e-6, truncated like upstream's int16.
    assert (int(hops[6][0]), int(hops[6][-1])) == (50, 0)
    assert not hops[7].any()  # pure comfort noise: silence here, and LyraGAN does not run
    # Packets again: fade in from weight 0 at sample 0 to 0.49755 at 319, then the second half.
    assert (int(hops[8][0]), int(hops[8][-1]), int(hops[9][0])) == (0, 497, 500)
    assert lyra.counts == {"estimated_hops": 6, "faded_hops": 4, "silent_hops": 1}


def _opus_payload(spec_text: str, clip: Path) -> tuple[object, Payload]:
    from codecarena.codecs.opus.adapter import OpusAdapter
    from codecarena.specs import parse_spec

    spec = parse_spec(spec_text)
    adapter = OpusAdapter(spec)
    adapter.load()
    audio, _ = sf.read(clip)
    encoded = adapter.encode(audio)
    return adapter, Payload(codec=spec.canonical, family="opus", config=spec.config_dict(), variant="",
                            checkpoint={}, sample_rate=16000, num_samples=len(audio), channels=1,
                            codec_sample_rate=16000, streams=encoded.streams, side_info=encoded.side_info)


def test_opus_through_libopus_equals_pyav_without_loss_and_conceals_with_plc_or_fec() -> None:
    adapter, payload = _opus_payload("opus:24k,fec=10", need_mirror() / SHORT_CLIPS[0])
    clean = adapter.decode(payload)  # type: ignore[attr-defined]
    none_lost, _ = impair(payload, parse_channel("loss=0%"), "u", "0" * 64)
    through = adapter.decode(none_lost)  # type: ignore[attr-defined]
    assert np.array_equal(through.audio, clean.audio) and through.sample_rate == clean.sample_rate
    assert through.facts["deep_plc_or_osce"] in (True, False) and through.facts["lost_packets"] == 0
    from codecarena.channel.impair import apply

    # Packets 26 and 27 of this clip carry LBRR data (libopus.has_lbrr), packet 21 does not.
    lost = apply(payload, parse_channel("loss=5%"), [25], [])
    with_fec = adapter.decode(lost)  # type: ignore[attr-defined]
    assert (with_fec.facts["fec_recovered_packets"], with_fec.facts["plc_packets"]) == (1, 0)
    lost_two = apply(payload, parse_channel("loss=5%"), [20, 25, 26], [])
    both = adapter.decode(lost_two)  # type: ignore[attr-defined]
    # 20: its next packet has no FEC data, so libopus's PLC runs; 25: its next packet is lost; 26: recovered.
    facts = both.facts
    assert (facts["fec_recovered_packets"], facts["fec_next_packet_without_lbrr"], facts["plc_packets"]) == (1, 1, 1)
    assert len(with_fec.audio) == len(clean.audio) == len(both.audio)
    assert not np.array_equal(with_fec.audio, clean.audio)


def test_a_version_5_row_still_hashes_to_its_digest() -> None:
    """Row version 6 added `channel`; a version 5 row was hashed without it and stays intact."""
    from codecarena.files import sha256_json
    from codecarena.results.schema import parse_row

    row = parse_row({**_V5_ROW, "row_sha256": None}).to_dict()
    del row["channel"], row["device"], row["metric_devices"], row["condition"], row["input_metrics"], row["row_sha256"]  # what versions 6 to 9 added
    assert "channel" not in _V5_ROW
    parsed = parse_row({**_V5_ROW, "row_sha256": sha256_json(row)})
    assert parsed.channel is None and parsed.intact


def test_a_family_without_channel_support_is_refused_before_any_work(tmp_path: Path) -> None:
    from conftest import codecarena

    result = codecarena("run", "--codec", "pcm:16", "--channel", "loss=5%", "--out", tmp_path / "run")
    assert result.returncode == 2 and not (tmp_path / "run").exists()
    assert result.stderr.strip().splitlines() == [
        "codecarena: error: pcm:16@loss=5%: pcm declares no [channel] support, so its payloads cannot cross a channel "
        "(families that can: opus, codec2, lyra, encodec, dac, snac, mimi, bigcodec, fish_dac, xcodec2, wavtokenizer, g722, g726, gsm, speex, lc3)"]


_V5_ROW = {
    "version": 5, "codec": "pcm:16", "family": "pcm", "config": {"config": "16"}, "registry": "pcm", "checkpoint": {},
    "runtime": {}, "weights": "none", "variant": "", "mode": "cold", "utterance": "u", "language": "en", "speaker": "",
    "sample_rate": 16000, "num_samples": 16000, "duration_s": 1.0, "reference": "references/u.wav",
    "reference_sha256": "0" * 64, "reference_resampled_from": None, "reference_conversions": [], "payload": None,
    "payload_bytes": None, "payload_sha256": None, "representation_bits": None, "representation_bps": None,
    "payload_bps": None, "decoded": None, "decoded_sha256": None, "replay_sampled": True, "replay_sha256": None,
    "replay_identical": None, "decoded_samples": None, "trimmed_samples": None, "padded_samples": None,
    "length_tolerance": None, "finite": None, "silent": None, "clipped_samples": None, "checks_passed": False,
    "codec_facts": {}, "metrics": {}, "scoring_s": None, "metrics_code_sha256": None, "limits": None, "model": {},
    "stages": [], "status": "failed", "error": "x",
}


def _points(rates_values: list[tuple[float, float]], name: str) -> list[dict[str, object]]:
    return [{"rate": rate, "metrics": {name: value}} for rate, value in rates_values]


def test_robustness_is_the_interpolated_rate_of_a_drop_of_half_a_point() -> None:
    from codecarena.results.robustness import crossing

    # PESQ 4.0 clean, 3.8 at 5%, 3.2 at 10%: the drop reaches 0.5 at 5% + (0.5 - 0.2) / (0.8 - 0.2) x 5% = 7.5%.
    found = crossing(_points([(0.0, 4.0), (0.05, 3.8), (0.10, 3.2)], "pesq_wb"), "pesq_wb")  # type: ignore[arg-type]
    assert found["clean"] == 4.0 and found["rate"] == pytest.approx(0.075) and found["beyond"] is None
    # WER is better lower: 0.1 clean, 0.3 at 10%, 0.7 at 20% -> a rise of 0.5 at 10% + 0.3 / 0.4 x 10% = 17.5%.
    found = crossing(_points([(0.0, 0.1), (0.1, 0.3), (0.2, 0.7)], "wer"), "wer")  # type: ignore[arg-type]
    assert found["rate"] == pytest.approx(0.175)
    found = crossing(_points([(0.0, 4.0), (0.2, 3.9)], "pesq_wb"), "pesq_wb")  # type: ignore[arg-type]
    assert (found["rate"], found["beyond"]) == (None, 0.2)
    found = crossing(_points([(0.05, 3.0), (0.2, 1.9)], "pesq_wb"), "pesq_wb")  # type: ignore[arg-type]
    assert found == {"clean": None, "rate": None, "beyond": None}  # no clean channel: no robustness


def test_opus_streams_frame_by_frame_like_its_whole_decode_and_declares_its_latency(tmp_path: Path) -> None:
    import json

    from conftest import codecarena

    clip = need_mirror() / SHORT_CLIPS[0]
    result = codecarena("stream", "opus:12k", "--input", clip, "--json", tmp_path / "stream.json")
    assert result.returncode == 0, result.stdout + result.stderr
    (facts,) = json.loads((tmp_path / "stream.json").read_text())["results"]
    assert facts["packets_identical"] and facts["audio_identical"]
    # One 20 ms frame plus libopus's look-ahead of 312 samples at 48 kHz (the OpusHead's pre-skip).
    assert facts["declared_latency_ms"] == {"frame_ms": 20.0, "lookahead_ms": 6.5, "total_ms": 26.5}
    assert 0 < facts["first_packet_to_first_sample_ms"] < 1000


def test_compare_pairs_configurations_named_with_their_channels() -> None:
    from codecarena.results.compare import parse_pairs

    pairs = parse_pairs("opus:12k@loss=05%=opus:12k,fec=10@loss=5%", ["opus:12k@loss=5%"], ["opus:12k,fec=10@loss=5%"])
    assert pairs == [("opus:12k@loss=5%", "opus:12k,fec=10@loss=5%")]


def _two_stream_tokens() -> Payload:
    """Four frames of two code streams of 4-bit codes: two codebooks of one step a frame, and a finer
    scale of two steps a frame. A frame's 16 bits: codebook 0's code, codebook 1's, the fine scale's two."""
    books = CodeStream("books", 4, (2, 4), np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.uint64))
    fine = CodeStream("fine", 4, (1, 8), np.arange(8, dtype=np.uint64))
    return Payload(codec="snac:24khz", family="snac", config={}, variant="", checkpoint={}, sample_rate=24000,
                   num_samples=4, channels=1, codec_sample_rate=24000, streams=(books, fine), side_info={})


def test_tokens_changed_counts_each_code_a_flip_changed_once_and_none_in_a_lost_frame() -> None:
    from codecarena.channel.impair import apply
    from codecarena.channel.token_errors import token_errors

    clean = _two_stream_tokens()
    # One frame a packet. Packet 0: bits 0 and 3 are both codebook 0's code at step 0 (one token). Packet 1:
    # bit 5 is codebook 1's code at step 1; bit 12 the fine scale's second code of frame 1 (step 3). Packet 2
    # is lost: its flips (codebook 1 at step 2, the fine scale's step 4) change no token the decoder gets.
    # Packet 3: bit 1 is codebook 0's code at step 3. So 4 of the 16 tokens changed.
    flips = [[0, 0], [0, 3], [1, 5], [1, 12], [2, 4], [2, 9], [3, 1]]
    impaired = apply(clean, parse_channel("ber=1e-2"), [2], flips)
    assert impaired.code_stream("books").values.tolist() == [1 ^ 0b1001, 2, 0, 4 ^ 0b0100, 5, 6 ^ 0b0100, 0, 8]
    found = token_errors(clean, impaired, [2])
    assert (found.tokens, found.changed) == (16, 4)
    assert found.record() == {"tokens": 16, "tokens_changed": 4, "tokens_changed_fraction": 0.25}
    # Without the loss, the lost packet's two flips are two more changed tokens.
    assert token_errors(clean, apply(clean, parse_channel("ber=1e-2"), [], flips), []).changed == 6


def test_a_payload_without_tokens_records_null_token_counts_never_zero(tmp_path: Path) -> None:
    from codecarena.channel.stage import cross
    from codecarena.rundir import RunDir

    run = RunDir(tmp_path)
    for family, payload in (("opus", _packets_payload()), ("codec2", _codes_payload()), ("snac", _two_stream_tokens())):
        files = run.row(family, "utt")
        files.payload.parent.mkdir(parents=True)
        write_payload(files.payload, payload)
        _, record = cross("ber=0.2", family, Cutting(family, None), "utt", run, files)
        tokens = (record["tokens"], record["tokens_changed"], record["tokens_changed_fraction"])
        if family == "snac":
            assert record["tokens"] == 16 and 0 < record["tokens_changed"] <= record["flipped_bits"], record
        else:
            assert record["flipped_bits"] > 0 and tokens == (None, None, None), record


def test_the_audit_rederives_the_tokens_changed_and_refuses_a_tampered_count(tmp_path: Path) -> None:
    from codecarena.channel.stage import cross
    from codecarena.results.channel_audit import channel_problems
    from codecarena.results.schema import ROW_VERSION, parse_row
    from codecarena.rundir import RunDir

    run = RunDir(tmp_path)
    spec = parse_configuration("encodec:6k@ber=2e-2")
    files = run.row(spec.slug, "utt")
    files.payload.parent.mkdir(parents=True)
    values = np.random.default_rng(0).integers(0, 1024, size=8 * 20).astype(np.uint64)
    clean = Payload(codec="encodec:6k", family="encodec", config={"config": "6k"}, variant="", checkpoint={},
                    sample_rate=24000, num_samples=6400, channels=1, codec_sample_rate=24000,
                    streams=(CodeStream("codes", 10, (8, 20), values),), side_info={})
    write_payload(files.payload, clean)
    _, record = cross("ber=2e-2", "encodec", cutting("encodec", "6k", {}, spec.canonical), "utt", run, files)
    # No packet is lost, so every code that differs from the clean one is a token the flips changed.
    differs = int((read_payload(files.impaired).code_stream("codes").values != values).sum())
    assert record["tokens"] == 160 and 0 < differs == record["tokens_changed"], record
    row = {**_V5_ROW, "version": ROW_VERSION, "codec": spec.canonical, "family": "encodec", "status": "ok", "error": "",
           "utterance": "utt", "payload": run.relative(files.payload), "channel": record, "device": None,
           "metric_devices": None, "condition": None, "input_metrics": None,
           "codec_facts": {"decode": {"receiver": {"by": "arena"}}}, "row_sha256": None}
    assert channel_problems(parse_row(row), run, "row") == []
    tampered = {**record, "tokens_changed": record["tokens_changed"] - 1}
    assert channel_problems(parse_row({**row, "channel": tampered}), run, "row") == [
        f"row: the channel record says tokens_changed {differs - 1}, its trace gives {differs}"]
    # A version 10 row counted no tokens: its fields read as null, and a count in them is refused.
    old = {k: v for k, v in record.items() if not k.startswith("tokens")}
    assert channel_problems(parse_row({**row, "version": 10, "channel": old}), run, "row") == []
    assert any("tokens_changed" in p for p in channel_problems(parse_row({**row, "version": 10}), run, "row"))


def test_a_version_10_row_with_a_channel_reads_with_null_token_counts_and_keeps_its_digest() -> None:
    """Row version 11 added the channel record's token counts; a version 10 row was hashed without them."""
    from codecarena.files import sha256_json
    from codecarena.results.schema import parse_row

    record = {"channel": "ber=1e-3", "model": "ber", "parameters": {"bit_error_rate": "0.001"}, "seed": 0,
              "policy": "repeat", "concealment": "arena", "payload": "channel/e/u.ccap", "payload_sha256": "1" * 64,
              "payload_bytes": 100, "trace": "channel/e/u.trace.json", "trace_sha256": "2" * 64, "unit": "packet",
              "units": 10, "lost": 0, "lost_fraction": 0.0, "bits": 800, "flipped_bits": 1,
              "bit_error_fraction": 0.00125}
    v10 = {**_V5_ROW, "version": 10, "channel": record, "device": None, "metric_devices": None, "condition": None,
           "input_metrics": None}
    parsed = parse_row({**v10, "row_sha256": sha256_json(v10)})  # hashed as it was written
    assert parsed.intact
    assert (parsed.channel["tokens"], parsed.channel["tokens_changed"], parsed.channel["tokens_changed_fraction"]) == (
        None, None, None)


def test_the_console_and_the_report_say_what_share_of_tokens_the_bit_errors_changed() -> None:
    from types import SimpleNamespace

    from codecarena.results import robustness

    rows = []
    for i in range(2):
        for codec, value, channel in (
                ("encodec:6k", 3.0, None),
                ("encodec:6k@ber=1e-3", 2.0, {"units": 10, "lost": 0, "bits": 16_000, "flipped_bits": 16,
                                              "tokens": 1600, "tokens_changed": 8 + 8 * i})):
            rows.append(SimpleNamespace(codec=codec, utterance=f"u{i}", status="ok", channel=channel, language="en",
                                        metrics={"pesq_wb": {"value": value, "status": "ok"}}))
    channels = robustness.summary(rows)  # type: ignore[arg-type]
    clean, impaired = channels["curves"][0]["points"]
    # 8 + 16 of 3200 tokens changed: 0.75%; no tokens counted without a channel.
    assert (clean["tokens_changed_fraction"], impaired["tokens_changed_fraction"]) == (None, 0.0075)
    (_, line) = robustness.text_lines(channels)
    assert "0.001 (0.001 realised; 0.75% of tokens changed): 2.000" in line, line
    assert "tokens_changed_fraction" not in robustness.summary(rows, 5)["curves"][0]["points"][1]  # type: ignore[arg-type]


def test_run_help_and_the_docs_name_every_policy_a_channel_spec_takes() -> None:
    # #41: the neural families offer repeat and zero, and refuse silence; a user reading `run --help`
    # or docs/channel.md's spec line was told only repeat|silence.
    from conftest import codecarena
    from codecarena.channel.spec import POLICIES

    shown = codecarena("run", "--help", check=True).stdout
    docs = (Path(__file__).resolve().parents[1] / "docs" / "channel.md").read_text()
    spec_line = next(line for line in docs.splitlines() if line.startswith("Every spec takes"))
    for policy in POLICIES:
        assert policy in shown.replace("\n", " ").split("policy=")[1].split(";")[0], policy
        assert policy in spec_line.split("policy=")[1].split("`")[0], policy
