"""Adapter-level tests of the PCM, Codec 2 and Opus adapters, run in this process (importing the codec
libraries is fine in a test), plus the fresh-process Codec 2 decode through the real worker.

Expected numbers are hand-derived: frame counts from ceil(samples / samples_per_frame), bit budgets from
the Codec 2 mode tables, Opus TOC meanings from RFC 6716 section 3.1 (Table 2), CBR packet sizes from
bitrate x frame duration / 8.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from codecarena.payload import CodeStream, PacketStream, Payload, read_payload, write_payload
from codecarena.runtime.protocol import Job, read_report, write_job
from codecarena.specs import parse_spec

DATA = Path(os.environ.get("CODECARENA_DATA", "/work/shared/data/speech"))
# 52400 samples (3.3 s) of LibriSpeech read speech at 16 kHz; speech starts within the first 2 s.
SPEECH_FILE = "en_librispeech_1089-134686-0001.wav"


@pytest.fixture(scope="module")
def speech16() -> np.ndarray:
    path = DATA / SPEECH_FILE
    if not path.is_file():
        pytest.skip(f"real speech not available: {path} is missing (set CODECARENA_DATA to the speech folder)")
    audio, rate = sf.read(path, dtype="float64", always_2d=False)
    assert rate == 16000 and audio.ndim == 1
    # Exactly 2 s, so packet and frame counts can be written by hand.
    assert len(audio) >= 32000
    return audio[:32000]


@pytest.fixture(scope="module")
def speech8(speech16: np.ndarray) -> np.ndarray:
    # What the worker feeds Codec 2: the arena audio resampled to 8 kHz with soxr.
    return soxr.resample(speech16, 16000, 8000, quality="HQ")


def _adapter(text: str):
    spec = parse_spec(text)
    if spec.family == "pcm":
        from codecarena.codecs.pcm.adapter import ADAPTER
    elif spec.family == "codec2":
        from codecarena.codecs.codec2.adapter import ADAPTER
    else:
        from codecarena.codecs.opus.adapter import ADAPTER
    adapter = ADAPTER(spec)
    adapter.load()
    return adapter


def _payload(adapter, encoded, *, sample_rate: int, num_samples: int, side_info=None) -> Payload:
    """The payload exactly as worker._encode builds it."""
    spec = adapter.spec
    return Payload(
        codec=spec.canonical, family=spec.family, config=spec.config_dict(), variant="", checkpoint={},
        sample_rate=sample_rate, num_samples=num_samples, channels=1, codec_sample_rate=adapter.input_rate,
        streams=encoded.streams, side_info=encoded.side_info if side_info is None else side_info,
    )


# --- PCM ----------------------------------------------------------------------


def test_pcm_round_trip_is_bit_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(1234)
    k = rng.integers(-32768, 32768, size=16000)
    k[:4] = [-32768, 32767, 0, -1]  # the extremes and the sign boundary
    audio = k / 32768.0
    adapter = _adapter("pcm")
    encoded = adapter.encode(audio)
    (stream,) = encoded.streams
    assert isinstance(stream, CodeStream)
    assert stream.bit_width == 16 and stream.shape == (16000,)
    # Two's complement as unsigned: -32768 -> 0x8000, 32767 -> 0x7fff, -1 -> 0xffff.
    assert [int(v) for v in stream.values[:4]] == [0x8000, 0x7FFF, 0, 0xFFFF]
    payload = _payload(adapter, encoded, sample_rate=16000, num_samples=16000)
    assert payload.representation_bits() == 16 * 16000 == 256000
    # Through the file, as a fresh decoder would see it.
    write_payload(tmp_path / "p.ccap", payload)
    decoded = adapter.decode(read_payload(tmp_path / "p.ccap"))
    assert decoded.sample_rate == 16000
    assert decoded.audio.dtype == np.float64
    assert np.array_equal(decoded.audio, audio)
    assert np.array_equal(np.round(decoded.audio * 32768).astype(np.int64), k)


# --- Codec 2 ------------------------------------------------------------------

# config -> (samples per frame at 8 kHz, bits per frame), from the Codec 2 mode tables:
# 3200 bit/s in 20 ms frames = 64 bits; 700C: 28 bits per 40 ms frame (700 bit/s).
CODEC2_MODES = {"3200": (160, 64), "700C": (320, 28)}


@pytest.mark.parametrize(
    "config,samples,frames,bits",
    [
        ("3200", 8000, 50, 3200),  # 8000 / 160 = 50 frames x 64 bits
        ("700C", 8000, 25, 700),  # 8000 / 320 = 25 frames x 28 bits
        ("3200", 8001, 51, 3264),  # a partial last frame is padded: ceil(8001 / 160) = 51
        ("700C", 8001, 26, 728),  # ceil(8001 / 320) = 26
    ],
)
def test_codec2_frames_and_bits(config: str, samples: int, frames: int, bits: int) -> None:
    spf, width = CODEC2_MODES[config]
    adapter = _adapter(f"codec2:{config}")
    assert (adapter.samples_per_frame, adapter.bits_per_frame) == (spf, width)
    t = np.arange(samples) / 8000.0
    audio = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * np.random.default_rng(7).standard_normal(samples)
    encoded = adapter.encode(audio)
    (stream,) = encoded.streams
    assert isinstance(stream, CodeStream)
    assert stream.name == "frames"
    assert stream.bit_width == width
    assert stream.shape == (frames,)
    assert encoded.facts["frames"] == frames
    payload = _payload(adapter, encoded, sample_rate=16000, num_samples=2 * samples)
    assert payload.representation_bits() == bits
    decoded = adapter.decode(payload)
    assert decoded.sample_rate == 8000
    assert len(decoded.audio) == frames * spf
    assert np.all(np.isfinite(decoded.audio))


def test_codec2_rejects_frames_of_another_mode() -> None:
    a3200, a700 = _adapter("codec2:3200"), _adapter("codec2:700C")
    encoded = a3200.encode(np.zeros(1600))
    payload = _payload(a3200, encoded, sample_rate=16000, num_samples=3200)
    with pytest.raises(ValueError, match="64 bits"):
        a700.decode(payload)


@pytest.mark.parametrize("config", ["3200", "700C"])
def test_codec2_second_decode_in_one_process_differs(config: str, speech8: np.ndarray) -> None:
    adapter = _adapter(f"codec2:{config}")
    encoded = adapter.encode(speech8)
    payload = _payload(adapter, encoded, sample_rate=16000, num_samples=2 * len(speech8))
    first = adapter.decode(payload).audio
    second = adapter.decode(payload).audio
    assert len(first) == len(second)
    # The decoded speech is not silence, so a difference is not rounding of zeros.
    assert np.sqrt(np.mean(first**2)) > 1e-3
    # Same payload, same adapter, new codec object per decode, and still different audio: the
    # library carries hidden state (its random generator) from one decode to the next.
    assert not np.array_equal(first, second)
    assert np.mean(first != second) > 0.1


def _fresh_decode(tmp_path: Path, payload_path: Path, name: str) -> tuple[bytes, dict]:
    job_path = tmp_path / f"{name}.job.json"
    wav = tmp_path / f"{name}.wav"
    report = tmp_path / f"{name}.report.json"
    write_job(job_path, Job.decode(payload_path, wav, report))
    proc = subprocess.run([sys.executable, "-m", "codecarena.worker", str(job_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    stage = read_report(report)
    assert stage.ok, stage.error
    assert stage.stage == "decode"
    return wav.read_bytes(), stage.facts


@pytest.mark.parametrize("config", ["3200", "700C"])
def test_codec2_fresh_process_decodes_are_identical(config: str, speech16: np.ndarray,
                                                    speech8: np.ndarray, tmp_path: Path) -> None:
    adapter = _adapter(f"codec2:{config}")
    encoded = adapter.encode(speech8)
    payload = _payload(adapter, encoded, sample_rate=16000, num_samples=len(speech16))
    payload_path = tmp_path / f"codec2_{config}.ccap"
    write_payload(payload_path, payload)

    # (test_codec2_second_decode_in_one_process_differs shows that in one process it is not repeatable,
    # so equality here is a property of fresh processes, not of the decoder.)
    first, facts = _fresh_decode(tmp_path, payload_path, "first")
    second, _ = _fresh_decode(tmp_path, payload_path, "second")
    assert first == second, "two fresh decoder processes wrote different wav files for the same payload"

    # The file is a real decode of the whole utterance at the arena rate, not an empty or silent one.
    audio, rate = sf.read(tmp_path / "first.wav", dtype="int16", always_2d=False)
    assert rate == 16000
    assert len(audio) == 32000
    rms = np.sqrt(np.mean((audio / 32768.0) ** 2))
    assert rms > 1e-3
    assert facts["decoder_rate"] == 8000
    frames = {"3200": 100, "700C": 50}[config]  # 16000 samples at 8 kHz: / 160 = 100, / 320 = 50
    assert facts["decoded_samples_native"] == frames * CODEC2_MODES[config][0] == 16000


# --- Opus ---------------------------------------------------------------------

# RFC 6716 section 3.1, Table 2: TOC config (top 5 bits) -> (mode, bandwidth, frame ms).
RFC6716_TOC = {
    0: ("silk", "nb", 10), 1: ("silk", "nb", 20), 2: ("silk", "nb", 40), 3: ("silk", "nb", 60),
    4: ("silk", "mb", 10), 5: ("silk", "mb", 20), 6: ("silk", "mb", 40), 7: ("silk", "mb", 60),
    8: ("silk", "wb", 10), 9: ("silk", "wb", 20), 10: ("silk", "wb", 40), 11: ("silk", "wb", 60),
    12: ("hybrid", "swb", 10), 13: ("hybrid", "swb", 20),
    14: ("hybrid", "fb", 10), 15: ("hybrid", "fb", 20),
    16: ("celt", "nb", 2.5), 17: ("celt", "nb", 5), 18: ("celt", "nb", 10), 19: ("celt", "nb", 20),
    20: ("celt", "wb", 2.5), 21: ("celt", "wb", 5), 22: ("celt", "wb", 10), 23: ("celt", "wb", 20),
    24: ("celt", "swb", 2.5), 25: ("celt", "swb", 5), 26: ("celt", "swb", 10), 27: ("celt", "swb", 20),
    28: ("celt", "fb", 2.5), 29: ("celt", "fb", 5), 30: ("celt", "fb", 10), 31: ("celt", "fb", 20),
}
BANDWIDTH_ORDER = ("nb", "mb", "wb", "swb", "fb")


def _bandwidth(packet: bytes) -> str:
    return RFC6716_TOC[packet[0] >> 3][1]


def _packet_ms(packet: bytes) -> float:
    """Duration of one Opus packet: frame size from the config, frame count from the code bits c."""
    frame_ms = RFC6716_TOC[packet[0] >> 3][2]
    code = packet[0] & 0b11
    count = 1 if code == 0 else 2 if code in (1, 2) else packet[1] & 0b111111  # code 3: M in byte 1
    return frame_ms * count


def _encode_opus(text: str, audio: np.ndarray):
    adapter = _adapter(text)
    encoded = adapter.encode(audio)
    (stream,) = encoded.streams
    assert isinstance(stream, PacketStream)
    return adapter, encoded, stream.packets


@pytest.mark.parametrize(
    "toc,expected",
    [
        (0x08, ("silk", "nb")),  # config 1: SILK NB 20 ms, mono, one frame
        (0x0B, ("silk", "nb")),  # config 1, code 3: the low bits do not matter
        (0x28, ("silk", "mb")),  # config 5: SILK MB 20 ms
        (0x48, ("silk", "wb")),  # config 9: SILK WB 20 ms
        (0x50, ("silk", "wb")),  # config 10: SILK WB 40 ms
        (0x5C, ("silk", "wb")),  # config 11, stereo: SILK WB 60 ms
        (0x60, ("hybrid", "swb")),  # config 12: Hybrid SWB 10 ms
        (0x68, ("hybrid", "swb")),  # config 13
        (0x70, ("hybrid", "fb")),  # config 14: Hybrid FB 10 ms
        (0x7F, ("hybrid", "fb")),  # config 15, stereo, code 3
        (0x80, ("celt", "nb")),  # config 16: CELT NB 2.5 ms
        (0x98, ("celt", "nb")),  # config 19: CELT NB 20 ms
        (0xA0, ("celt", "wb")),  # config 20: CELT WB 2.5 ms
        (0xB8, ("celt", "wb")),  # config 23
        (0xC0, ("celt", "swb")),  # config 24
        (0xD8, ("celt", "swb")),  # config 27
        (0xE0, ("celt", "fb")),  # config 28
        (0xFF, ("celt", "fb")),  # config 31, stereo, code 3
    ],
)
def test_toc_mode_bandwidth(toc: int, expected: tuple[str, str]) -> None:
    from codecarena.codecs.opus.adapter import toc_mode_bandwidth

    assert toc_mode_bandwidth(toc) == expected


def test_toc_mode_bandwidth_covers_table_2() -> None:
    from codecarena.codecs.opus.adapter import toc_mode_bandwidth

    for config, (mode, bandwidth, _) in RFC6716_TOC.items():
        assert toc_mode_bandwidth(config << 3) == (mode, bandwidth), config


def test_opus_12k_speech_is_wideband(speech16: np.ndarray) -> None:
    _, encoded, packets = _encode_opus("opus:12k", speech16)
    # 2 s in 20 ms frames: 100 frames, plus at most one for the look-ahead the flush emits.
    assert 100 <= len(packets) <= 102
    assert encoded.facts["packets"] == len(packets)
    assert all(packets)
    bandwidths = [_bandwidth(p) for p in packets]
    assert all(BANDWIDTH_ORDER.index(bw) >= BANDWIDTH_ORDER.index("wb") for bw in bandwidths), set(bandwidths)
    assert encoded.facts["coded_bandwidth"] in ("wb", "swb", "fb")
    assert sum(encoded.facts["bandwidth_packets"].values()) == len(packets)
    assert {"opus_head"} <= set(encoded.side_info)


def test_opus_6k_is_narrowband_by_libopus_choice(speech16: np.ndarray) -> None:
    _, encoded, packets = _encode_opus("opus:6k", speech16)
    assert {_bandwidth(p) for p in packets} == {"nb"}
    assert encoded.facts["coded_bandwidth"] == "nb"


def test_opus_bandwidth_option_is_applied(speech16: np.ndarray) -> None:
    """The bandwidth option must reach libopus (FFmpeg's `cutoff`): at 12 kbit/s libopus codes speech
    as wideband on its own, so a ceiling of nb or mb that was silently ignored would show up here."""
    auto = {_bandwidth(p) for p in _encode_opus("opus:12k", speech16)[2]}
    assert auto == {"wb"}
    for ceiling in ("nb", "mb"):
        _, encoded, packets = _encode_opus(f"opus:12k,bandwidth={ceiling}", speech16)
        assert {_bandwidth(p) for p in packets} == {ceiling}
        assert encoded.facts["coded_bandwidth"] == ceiling


def test_opus_6k_bandwidth_wb_is_only_a_ceiling(speech16: np.ndarray) -> None:
    """What `opus:6k,bandwidth=wb` really codes. The option is documented as a *maximum* coded bandwidth
    and FFmpeg maps `cutoff` to OPUS_SET_MAX_BANDWIDTH; at 6 kbit/s libopus still picks narrowband under
    a wideband ceiling, so this spec codes NB, exactly like plain `opus:6k` (the facts say so). That the
    option is not silently ignored is proven by test_opus_bandwidth_option_is_applied."""
    _, encoded, packets = _encode_opus("opus:6k,bandwidth=wb", speech16)
    assert {_bandwidth(p) for p in packets} == {"nb"}
    assert encoded.facts["coded_bandwidth"] == "nb"


def test_opus_cbr_packets_have_equal_size_and_vbr_packets_do_not(speech16: np.ndarray) -> None:
    _, _, cbr = _encode_opus("opus:12k,vbr=off", speech16)
    # 12000 bit/s x 20 ms / 8 = 30 bytes per packet; the flush packet may differ.
    assert {len(p) for p in cbr[:-1]} == {30}
    _, _, vbr = _encode_opus("opus:12k,vbr=on", speech16)
    assert len({len(p) for p in vbr[:-1]}) > 3
    # Same target rate on average: within 25% of 30 bytes per packet.
    assert 0.75 * 30 < np.mean([len(p) for p in vbr]) < 1.25 * 30


def test_opus_frame_duration_40ms(speech16: np.ndarray) -> None:
    _, _, p20 = _encode_opus("opus:12k", speech16)
    adapter40, encoded40, p40 = _encode_opus("opus:12k,frame_ms=40", speech16)
    assert {_packet_ms(p) for p in p20} == {20}
    assert {_packet_ms(p) for p in p40} == {40}
    assert encoded40.facts["frame_size"] == 640  # 40 ms at 16 kHz
    # 2 s: 50 packets of 40 ms (plus the flush) against 100 of 20 ms.
    assert 50 <= len(p40) <= 52
    assert abs(2 * len(p40) - len(p20)) <= 2


@pytest.mark.parametrize("text,frame_48k", [("opus:12k", 960), ("opus:12k,frame_ms=40", 1920)])
def test_opus_decoded_length(text: str, frame_48k: int, speech16: np.ndarray, tmp_path: Path) -> None:
    adapter, encoded, _ = _encode_opus(text, speech16)
    payload = _payload(adapter, encoded, sample_rate=16000, num_samples=len(speech16))
    write_payload(tmp_path / "p.ccap", payload)
    decoded = adapter.decode(read_payload(tmp_path / "p.ccap"))
    assert decoded.sample_rate == 48000
    assert abs(len(decoded.audio) - 3 * 32000) <= 2 * frame_48k
    assert np.all(np.isfinite(decoded.audio))
    # It decoded speech, not silence: the level is within 10 dB of the input's.
    level = lambda x: 10 * np.log10(np.mean(x**2))  # noqa: E731
    assert abs(level(decoded.audio) - level(speech16)) < 10


def test_opus_decode_without_opus_head_raises(speech16: np.ndarray) -> None:
    adapter, encoded, _ = _encode_opus("opus:12k", speech16[:8000])
    payload = _payload(adapter, encoded, sample_rate=16000, num_samples=8000, side_info={})
    with pytest.raises(ValueError, match="opus_head"):
        adapter.decode(payload)
    wrong_type = _payload(adapter, encoded, sample_rate=16000, num_samples=8000, side_info={"opus_head": 1})
    with pytest.raises(ValueError, match="opus_head"):
        adapter.decode(wrong_type)
