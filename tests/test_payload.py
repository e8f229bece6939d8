"""Tests for codecarena.payload.

Expected bytes are written out by hand or built with struct/hashlib/json
directly from docs/payload-format.md, not with the code under test.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codecarena.payload import (
    FORMAT_VERSION,
    MAGIC,
    CodeStream,
    PacketStream,
    Payload,
    PayloadError,
    decode_payload,
    encode_payload,
    pack_codes,
    read_payload,
    unpack_codes,
    write_payload,
)

# --- helpers ------------------------------------------------------------------


def make_payload(streams=(), **overrides) -> Payload:
    fields = dict(
        codec="opus:6k",
        family="opus",
        config={"bitrate": 6000, "complexity": 10, "vbr": True, "frame_ms": 20.0},
        variant="",
        checkpoint={},
        sample_rate=16000,
        num_samples=16000 * 3 + 7,
        channels=1,
        codec_sample_rate=48000,
        streams=tuple(streams),
        side_info={"pre_skip": 312, "notes": ["a", None, 1.5, {"k": False}]},
    )
    fields.update(overrides)
    return Payload(**fields)


def rng_codes(seed: int, bit_width: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if bit_width == 64:
        return rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    return rng.integers(0, 2**bit_width, size=n, dtype=np.uint64)


def rich_payload() -> Payload:
    streams = [
        CodeStream("w1", 1, (9,), rng_codes(1, 1, 9)),
        CodeStream("w4", 4, (3, 5), rng_codes(2, 4, 15)),
        CodeStream("w10", 10, (2, 3, 4), rng_codes(3, 10, 24)),
        CodeStream("w11", 11, (7,), rng_codes(4, 11, 7)),
        CodeStream("w12", 12, (1, 13), rng_codes(5, 12, 13)),
        CodeStream("w28", 28, (5, 1), rng_codes(6, 28, 5)),
        CodeStream("w64", 64, (4, 2), rng_codes(7, 64, 8)),
        CodeStream("empty", 10, (0,), np.zeros(0, dtype=np.uint64)),
        CodeStream("empty2d", 3, (4, 0), []),
        PacketStream("opus", (b"\x01\x02\x03", b"", b"\xff" * 300, b"")),
        PacketStream("nopackets", ()),
        PacketStream("onlyempty", (b"",)),
    ]
    return make_payload(
        streams,
        checkpoint={"sha256": "ab" * 32, "url": "https://example.org/ckpt.pt"},
        variant="24khz",
    )


def build_file(header: dict | bytes, body: bytes = b"", *, version: int = 1) -> bytes:
    """A payload file assembled straight from the spec, with a correct checksum."""
    if isinstance(header, dict):
        header = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    head = MAGIC + struct.pack(">HI", version, len(header)) + header + body
    return head + hashlib.sha256(head).digest()


def valid_header(**overrides) -> dict:
    header = {
        "channels": 1,
        "checkpoint": {},
        "codec": "x:1",
        "codec_sample_rate": 8000,
        "config": {},
        "family": "x",
        "num_samples": 3,
        "sample_rate": 8000,
        "side_info": {},
        "streams": [
            {"bit_width": 4, "kind": "codes", "name": "c", "shape": [3]},
            {"count": 2, "kind": "packets", "name": "p"},
        ],
        "variant": "",
    }
    header.update(overrides)
    return header


VALID_BODY = bytes.fromhex("1230") + bytes.fromhex("00") + bytes.fromhex("01ab")


def ref_pack(values, bit_width: int) -> bytes:
    """Bit-string reference implementation of the packing rule."""
    bits = "".join(format(int(v), f"0{bit_width}b") for v in values)
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits), 8))


def header_span(data: bytes) -> tuple[int, int]:
    (length,) = struct.unpack(">I", data[6:10])
    return 10, 10 + length


# --- round trip ---------------------------------------------------------------


def assert_same_payload(a: Payload, b: Payload) -> None:
    for field in (
        "codec", "family", "config", "variant", "checkpoint", "sample_rate",
        "num_samples", "channels", "codec_sample_rate", "side_info",
    ):
        assert getattr(a, field) == getattr(b, field), field
        assert type(getattr(a, field)) is type(getattr(b, field)), field
    assert len(a.streams) == len(b.streams)
    for x, y in zip(a.streams, b.streams):
        assert type(x) is type(y)
        assert x.name == y.name
        if isinstance(x, CodeStream):
            assert (x.bit_width, x.shape) == (y.bit_width, y.shape)
            assert y.values.dtype == np.uint64 and y.values.ndim == 1
            assert np.array_equal(x.values, y.values)
        else:
            assert x.packets == y.packets
            assert all(type(p) is bytes for p in y.packets)
    assert a == b


def test_round_trip_rich_payload():
    p = rich_payload()
    data = encode_payload(p)
    q = decode_payload(data)
    assert_same_payload(p, q)
    assert encode_payload(q) == data
    # Float vs int survives the trip.
    assert type(q.config["frame_ms"]) is float and type(q.config["bitrate"]) is int


def test_round_trip_no_streams():
    p = make_payload(())
    assert_same_payload(p, decode_payload(encode_payload(p)))


def test_golden_file_bytes():
    p = Payload(
        codec="x:1", family="x", config={}, variant="", checkpoint={},
        sample_rate=8000, num_samples=3, channels=1, codec_sample_rate=8000,
        streams=(CodeStream("c", 4, (3,), [1, 2, 3]), PacketStream("p", (b"", b"\xab"))),
        side_info={},
    )
    header = (
        b'{"channels":1,"checkpoint":{},"codec":"x:1","codec_sample_rate":8000,"config":{},'
        b'"family":"x","num_samples":3,"sample_rate":8000,"side_info":{},"streams":['
        b'{"bit_width":4,"kind":"codes","name":"c","shape":[3]},'
        b'{"count":2,"kind":"packets","name":"p"}],"variant":""}'
    )
    head = b"CCAP" + b"\x00\x01" + len(header).to_bytes(4, "big") + header
    head += b"\x12\x30" + b"\x00" + b"\x01\xab"
    expected = head + hashlib.sha256(head).digest()
    # The worked example in docs/payload-format.md.
    assert len(expected) == 310
    assert expected[-32:].hex() == "42522e66e4e9135cb8c1585b7fdd85c838c0dc8cb9d4be625b0b6217a07f1c89"
    assert encode_payload(p) == expected
    assert build_file(valid_header(), VALID_BODY) == expected
    assert decode_payload(expected) == p


def test_header_number_and_string_forms_match_the_spec():
    p = make_payload(
        (),
        config={"a": 1e16, "b": 1e-5, "c": 0.0001, "d": 6000.0, "e": 6000, "f": -0.0, "g": 2.5e-5},
        variant="\u00e9\U0001f600\x7f/\n",
    )
    data = encode_payload(p)
    header = data[10 : 10 + int.from_bytes(data[6:10], "big")]
    assert b'"config":{"a":1e+16,"b":1e-05,"c":0.0001,"d":6000.0,"e":6000,"f":-0.0,"g":2.5e-05}' in header
    assert b'"variant":"\\u00e9\\ud83d\\ude00\\u007f/\\n"' in header
    assert decode_payload(data) == p


def test_write_and_read_file(tmp_path: Path):
    p = rich_payload()
    path = tmp_path / "utt0001.ccap"
    n = write_payload(path, p)
    assert n == path.stat().st_size == len(encode_payload(p))
    assert os.listdir(tmp_path) == ["utt0001.ccap"]  # no temp file left behind
    assert_same_payload(p, read_payload(path))
    # Overwriting replaces the whole file.
    small = make_payload(())
    write_payload(path, small)
    assert read_payload(path) == small
    assert os.listdir(tmp_path) == ["utt0001.ccap"]


def test_write_into_missing_directory_raises_oserror(tmp_path: Path):
    with pytest.raises(OSError):
        write_payload(tmp_path / "nope" / "x.ccap", make_payload(()))
    assert os.listdir(tmp_path) == []


def test_code_values_are_read_only_copies():
    source = np.array([1, 2, 3], dtype=np.int64)
    s = CodeStream("c", 2, (3,), source)
    source[0] = 0
    assert s.values.tolist() == [1, 2, 3]
    assert s.values.dtype == np.uint64
    with pytest.raises(ValueError):
        s.values[0] = 3
    decoded = decode_payload(encode_payload(make_payload([s]))).stream("c")
    with pytest.raises(ValueError):
        decoded.values[0] = 3


def test_values_in_logical_shape_are_flattened_in_c_order():
    grid = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.uint16)
    s = CodeStream("c", 3, (2, 3), np.asfortranarray(grid))
    assert s.values.tolist() == [1, 2, 3, 4, 5, 6]
    assert pack_codes(s.values, 3) == ref_pack([1, 2, 3, 4, 5, 6], 3)


def test_config_inputs_are_copied_and_normalised():
    config = {"a": (1, 2), "b": np.int64(5), "c": np.float32(0.5)}
    p = make_payload((), config=config)
    config["a"] = "changed"
    assert p.config == {"a": [1, 2], "b": 5, "c": 0.5}
    assert type(p.config["b"]) is int
    assert decode_payload(encode_payload(p)) == p


# --- bit packing --------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "bit_width", "expected"),
    [
        ([1, 2, 3], 4, "1230"),  # 0001 0010 | 0011 0000
        ([15], 4, "f0"),
        ([1023, 1], 10, "ffc010"),  # 1111111111 0000000001 0000
        ([0x2AA, 3], 10, "aa8030"),  # 1010101010 0000000011 0000
        ([1, 0, 1, 1, 0, 0, 0, 0, 1], 1, "b080"),
        ([5, 7, 2], 3, "bd00"),  # 101 111 010 0000000
        ([1], 11, "0020"),  # 00000000001 00000
        ([0xABC, 0xDEF], 12, "abcdef"),
        ([0x0123456, 0xFFFFFFF], 28, "0123456fffffff"),
        ([0x0123456789ABCDEF, 2**64 - 1], 64, "0123456789abcdefffffffffffffffff"),
        ([], 7, ""),
    ],
)
def test_pack_codes_hand_computed(values, bit_width, expected):
    packed = pack_codes(np.array(values, dtype=np.uint64), bit_width)
    assert packed.hex() == expected
    assert unpack_codes(packed, bit_width, len(values)).tolist() == values


def test_pack_codes_accepts_signed_and_list_input():
    assert pack_codes(np.array([1, 2, 3], dtype=np.int8), 4) == b"\x12\x30"
    assert pack_codes([1, 2, 3], 4) == b"\x12\x30"


@pytest.mark.parametrize("bit_width", [1, 3, 4, 10, 11, 12, 28, 63, 64])
def test_pack_codes_matches_reference_and_pads_with_zeros(bit_width):
    values = rng_codes(bit_width, bit_width, 1001)
    packed = pack_codes(values, bit_width)
    assert packed == ref_pack(values, bit_width)
    assert len(packed) == math.ceil(1001 * bit_width / 8)
    pad = len(packed) * 8 - 1001 * bit_width
    assert packed[-1] & ((1 << pad) - 1) == 0
    assert np.array_equal(unpack_codes(packed, bit_width, 1001), values)


def test_pack_codes_all_ones_leaves_padding_zero():
    # With every code bit set, any set padding bit would show up.
    packed = pack_codes(np.full(3, 2**10 - 1, dtype=np.uint64), 10)
    assert packed.hex() == "fffffffc"


def test_pack_large_stream_is_fast_enough():
    values = rng_codes(0, 11, 100_000)
    assert np.array_equal(unpack_codes(pack_codes(values, 11), 11, 100_000), values)


@given(st.integers(1, 64).flatmap(lambda w: st.tuples(st.just(w), st.lists(st.integers(0, 2**w - 1), max_size=40))))
@settings(max_examples=300, deadline=None)
def test_pack_codes_matches_reference_fuzz(case):
    bit_width, values = case
    packed = pack_codes(np.array(values, dtype=np.uint64), bit_width)
    assert packed == ref_pack(values, bit_width)
    assert unpack_codes(packed, bit_width, len(values)).tolist() == values


def test_unpack_rejects_nonzero_padding():
    with pytest.raises(PayloadError, match="padding bits"):
        unpack_codes(b"\x12\x31", 4, 3)
    with pytest.raises(PayloadError, match="padding bits"):
        unpack_codes(b"\xff\xc0\x18", 10, 2)


def test_unpack_rejects_wrong_length():
    with pytest.raises(PayloadError, match="need 2 bytes, got 3"):
        unpack_codes(b"\x12\x30\x00", 4, 3)
    with pytest.raises(PayloadError, match="need 2 bytes, got 1"):
        unpack_codes(b"\x12", 4, 3)


def test_pack_rejects_out_of_range():
    with pytest.raises(PayloadError, match="value 16 does not fit in 4 bits"):
        pack_codes(np.array([1, 16]), 4)
    with pytest.raises(PayloadError, match=">= 0"):
        pack_codes(np.array([-1]), 4)
    with pytest.raises(PayloadError, match="bit_width must be in 1..64, got 0"):
        pack_codes(np.array([0]), 0)
    with pytest.raises(PayloadError, match="bit_width must be in 1..64, got 65"):
        unpack_codes(b"", 65, 0)


# --- representation_bits --------------------------------------------------------


def test_representation_bits_hand_computed():
    p = make_payload(
        [
            CodeStream("a", 10, (2, 3), np.zeros(6, dtype=np.uint64)),  # 60
            CodeStream("b", 1, (5,), np.ones(5, dtype=np.uint64)),  # 5
            CodeStream("c", 64, (0, 4), []),  # 0
            PacketStream("p", (b"", b"abc", bytes(10))),  # 8 * 13 = 104
            PacketStream("q", ()),  # 0
        ]
    )
    assert p.representation_bits() == 169
    assert make_payload(()).representation_bits() == 0
    # 8 codes of 64 bits + 1 packet of 300 bytes.
    q = make_payload([CodeStream("x", 64, (8,), np.arange(8)), PacketStream("y", (bytes(300),))])
    assert q.representation_bits() == 512 + 2400


def test_stream_lookup():
    p = rich_payload()
    assert p.stream("w10").bit_width == 10
    assert p.stream("opus").packets[1] == b""
    with pytest.raises(PayloadError, match="no stream named 'missing'"):
        p.stream("missing")


# --- rejection paths: the file ----------------------------------------------------

GOOD = encode_payload(rich_payload())


def test_empty_file():
    with pytest.raises(PayloadError, match="^empty file$"):
        decode_payload(b"")


@pytest.mark.parametrize("data", [b"hello world, not a payload", b"RIFF\x00\x00\x00\x00WAVE", b"x", b"CCAX" + GOOD[4:]])
def test_wrong_magic(data):
    with pytest.raises(PayloadError, match=r"not a codecarena payload \(magic"):
        decode_payload(data)


def test_shorter_than_prefix():
    with pytest.raises(PayloadError, match="too short: 7 bytes"):
        decode_payload(GOOD[:7])
    with pytest.raises(PayloadError, match="too short: 3 bytes"):
        decode_payload(b"CCA")


@pytest.mark.parametrize("version", [0, 2, 65535])
def test_unsupported_version(version):
    data = build_file(valid_header(), VALID_BODY, version=version)
    with pytest.raises(PayloadError, match=f"unsupported format version {version} "):
        decode_payload(data)


def test_every_truncation_says_truncated():
    for cut in range(len(GOOD)):
        with pytest.raises(PayloadError, match="^(empty file|too short|truncated)") as info:
            decode_payload(GOOD[:cut])
        assert "\n" not in str(info.value)


def test_truncation_messages_name_the_place():
    hstart, hend = header_span(GOOD)
    with pytest.raises(PayloadError, match=r"truncated: header needs \d+ bytes, 5 left"):
        decode_payload(GOOD[: hstart + 5])
    # First code stream is 'w1': 9 bits = 2 bytes.
    with pytest.raises(PayloadError, match="truncated: stream 'w1' needs 2 bytes, 1 left"):
        decode_payload(GOOD[: hend + 1])
    with pytest.raises(PayloadError, match="truncated: checksum needs 32 bytes, 31 left"):
        decode_payload(GOOD[:-1])
    with pytest.raises(PayloadError, match="truncated: checksum needs 32 bytes, 0 left"):
        decode_payload(GOOD[:-32])
    # Packet stream 'opus' is the first stream with packets: cut inside its 300-byte packet.
    with pytest.raises(PayloadError, match=r"truncated: stream 'opus' packet 2 needs 300 bytes, \d+ left"):
        decode_payload(GOOD[: GOOD.index(b"\xff" * 300) + 10])


def test_trailing_garbage():
    with pytest.raises(PayloadError, match="trailing bytes: 1 byte after the checksum"):
        decode_payload(GOOD + b"\x00")
    with pytest.raises(PayloadError, match="trailing bytes: 5 bytes after the checksum"):
        decode_payload(GOOD + b"hello")


def flip(data: bytes, pos: int, mask: int = 0x01) -> bytes:
    return data[:pos] + bytes([data[pos] ^ mask]) + data[pos + 1 :]


def test_flipped_byte_in_header_string_says_corrupted():
    pos = GOOD.index(b'"opus:6k"') + 2
    with pytest.raises(PayloadError, match=r"^corrupted: sha256 mismatch$"):
        decode_payload(flip(GOOD, pos))


def test_flipped_byte_that_breaks_header_json_says_corrupted():
    hstart, _ = header_span(GOOD)
    with pytest.raises(PayloadError, match=r"^corrupted: sha256 mismatch \(header is not valid JSON"):
        decode_payload(flip(GOOD, hstart, 0x01))  # "{" -> "z"
    # A key renamed by the flip is a schema problem, still reported as damage.
    pos = GOOD.index(b'"channels"') + 1
    with pytest.raises(PayloadError, match=r"^corrupted: sha256 mismatch \(header: missing key 'channels'\)"):
        decode_payload(flip(GOOD, pos, 0x20))  # 'c' -> 'C'


def test_flipped_bit_in_streams_or_checksum_says_corrupted():
    _, hend = header_span(GOOD)
    packet = GOOD.index(b"\xff" * 300)
    positions = [packet, packet + 150, packet + 299, len(GOOD) - 32, len(GOOD) - 1]
    positions += list(range(hend, hend + 2 + 8 + 30))  # streams w1, w4, w10
    for pos in positions:
        for mask in (0x01, 0x80):
            with pytest.raises(PayloadError, match=r"^corrupted: sha256 mismatch$"):
                decode_payload(flip(GOOD, pos, mask))


def test_every_single_byte_flip_is_rejected():
    for pos in range(len(GOOD)):
        with pytest.raises(PayloadError):
            decode_payload(flip(GOOD, pos, 0x10))


def test_read_payload_prefixes_path(tmp_path: Path):
    path = tmp_path / "bad.ccap"
    path.write_bytes(GOOD[:-1])
    with pytest.raises(PayloadError, match=r"bad\.ccap: truncated: checksum") as info:
        read_payload(path)
    assert str(info.value).startswith(str(path) + ": ")


def test_read_payload_missing_file(tmp_path: Path):
    path = tmp_path / "missing.ccap"
    with pytest.raises(PayloadError) as info:
        read_payload(path)
    assert str(info.value) == f"{path}: no such file"


def test_read_payload_directory(tmp_path: Path):
    with pytest.raises(PayloadError) as info:
        read_payload(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: ")
    assert "directory" in str(info.value)


# --- rejection paths: header contents (files with a correct checksum) --------------


def test_valid_handbuilt_file_decodes():
    p = decode_payload(build_file(valid_header(), VALID_BODY))
    assert p.stream("c").values.tolist() == [1, 2, 3]
    assert p.stream("p").packets == (b"", b"\xab")


@pytest.mark.parametrize("key", sorted(valid_header()))
def test_missing_header_key(key):
    header = valid_header()
    del header[key]
    with pytest.raises(PayloadError, match=f"^header: missing key '{key}'$"):
        decode_payload(build_file(header, VALID_BODY))


def test_extra_header_key():
    with pytest.raises(PayloadError, match="^header: unexpected key 'bitrate'$"):
        decode_payload(build_file(valid_header(bitrate=6000), VALID_BODY))


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ({"bit_width": 4, "kind": "codes", "name": "c"}, r"streams\[0\]: missing key 'shape'"),
        ({"bit_width": 4, "kind": "codes", "name": "c", "shape": [3], "count": 1}, r"streams\[0\]: unexpected key 'count'"),
        ({"bit_width": 4, "name": "c", "shape": [3]}, r"streams\[0\]: missing key 'kind'"),
        ({"bit_width": 4, "kind": "bits", "name": "c", "shape": [3]}, r"kind must be 'codes' or 'packets', got 'bits'"),
        ({"bit_width": 0, "kind": "codes", "name": "c", "shape": [3]}, r"streams\[0\]\.bit_width must be in 1\.\.64, got 0"),
        ({"bit_width": 65, "kind": "codes", "name": "c", "shape": [3]}, r"streams\[0\]\.bit_width must be in 1\.\.64, got 65"),
        ({"bit_width": True, "kind": "codes", "name": "c", "shape": [3]}, r"bit_width must be an integer, got boolean"),
        ({"bit_width": 4.0, "kind": "codes", "name": "c", "shape": [3]}, r"bit_width must be an integer, got float"),
        ({"bit_width": 4, "kind": "codes", "name": "c", "shape": []}, r"shape must have 1\.\.64 dimensions, got 0"),
        ({"bit_width": 4, "kind": "codes", "name": "c", "shape": 3}, r"shape must be a tuple of integers, got int"),
        ({"bit_width": 4, "kind": "codes", "name": "c", "shape": [-1]}, r"shape\[0\] must be >= 0, got -1"),
        ({"bit_width": 4, "kind": "codes", "name": "", "shape": [3]}, r"streams\[0\]\.name must not be empty"),
        ({"bit_width": 4, "kind": "codes", "name": 7, "shape": [3]}, r"streams\[0\]\.name must be a string, got int"),
        ({"count": -1, "kind": "packets", "name": "c"}, r"streams\[0\]\.count must be >= 0, got -1"),
    ],
)
def test_bad_stream_entry(stream, message):
    header = valid_header(streams=[stream])
    with pytest.raises(PayloadError, match=message):
        decode_payload(build_file(header, b"\x12\x30"))


def test_duplicate_stream_names_in_header():
    header = valid_header(
        streams=[
            {"bit_width": 4, "kind": "codes", "name": "c", "shape": [3]},
            {"count": 0, "kind": "packets", "name": "c"},
        ]
    )
    with pytest.raises(PayloadError, match="duplicate stream name 'c'"):
        decode_payload(build_file(header, b"\x12\x30"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sample_rate": "16000"}, "header: sample_rate must be an integer, got str"),
        ({"sample_rate": True}, "header: sample_rate must be an integer, got boolean"),
        ({"sample_rate": 0}, "header: sample_rate must be >= 1, got 0"),
        ({"num_samples": -1}, "header: num_samples must be >= 0, got -1"),
        ({"num_samples": 1.5}, "header: num_samples must be an integer, got float"),
        ({"channels": 0}, "header: channels must be >= 1, got 0"),
        ({"codec_sample_rate": None}, "header: codec_sample_rate must be an integer, got null"),
        ({"codec": ""}, "header: codec must not be empty"),
        ({"family": 3}, "header: family must be a string, got int"),
        ({"variant": None}, "header: variant must be a string, got null"),
        ({"config": []}, "header: config must be an object/mapping, got array"),
        ({"side_info": "x"}, "header: side_info must be an object/mapping, got str"),
        ({"checkpoint": {"sha256": 1}}, r"header: checkpoint\['sha256'\] must be a string, got int"),
        ({"streams": {}}, "header: streams must be an array, got object"),
        ({"streams": [3]}, r"header: streams\[0\] must be an object, got int"),
        ({"config": {"n": 2**64}}, r"header: config\['n'\] must be in"),
    ],
)
def test_bad_header_types(overrides, message):
    with pytest.raises(PayloadError, match=f"^{message}"):
        decode_payload(build_file(valid_header(**overrides), VALID_BODY))


def test_header_not_a_json_object():
    with pytest.raises(PayloadError, match="^header must be a JSON object, got array$"):
        decode_payload(build_file(b"[]", b""))


def test_bad_header_without_room_for_a_checksum_is_not_called_corrupted():
    with pytest.raises(PayloadError, match="^header: missing key 'channels'$"):
        decode_payload(MAGIC + struct.pack(">HI", 1, 2) + b"{}")
    # With a (wrong) checksum-sized tail the same header counts as damage.
    with pytest.raises(PayloadError, match=r"^corrupted: sha256 mismatch \(header: missing key 'channels'\)$"):
        decode_payload(MAGIC + struct.pack(">HI", 1, 2) + b"{}" + bytes(32))


def test_header_not_json_or_not_utf8():
    with pytest.raises(PayloadError, match=r"^header is not valid JSON \(Expecting"):
        decode_payload(build_file(b"{not json", b""))
    with pytest.raises(PayloadError, match=r"^header is not valid UTF-8"):
        decode_payload(build_file(b'{"codec":"\xff"}', b""))


def test_header_non_canonical_json():
    pretty = json.dumps(valid_header(), sort_keys=True, indent=1).encode()
    with pytest.raises(PayloadError, match="^header JSON is not canonical"):
        decode_payload(build_file(pretty, VALID_BODY))
    unsorted = json.dumps(dict(reversed(valid_header().items())), separators=(",", ":")).encode()
    assert unsorted != json.dumps(valid_header(), sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(PayloadError, match="^header JSON is not canonical"):
        decode_payload(build_file(unsorted, VALID_BODY))
    raw_utf8 = json.dumps(valid_header(codec="é:1"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(PayloadError, match="^header JSON is not canonical"):
        decode_payload(build_file(raw_utf8.encode(), VALID_BODY))
    long_float = build_file(valid_header(config={"x": 1.0}), VALID_BODY).replace(b"1.0", b"1.00")
    long_float = long_float[:6] + struct.pack(">I", struct.unpack(">I", long_float[6:10])[0] + 1) + long_float[10:-32]
    long_float += hashlib.sha256(long_float).digest()
    with pytest.raises(PayloadError, match="^header JSON is not canonical"):
        decode_payload(long_float)


def test_header_duplicate_key_and_nan():
    text = json.dumps(valid_header(), sort_keys=True, separators=(",", ":"))
    dup = text.replace('"variant":""', '"variant":"","variant":""').encode()
    with pytest.raises(PayloadError, match="^header JSON has duplicate key 'variant'$"):
        decode_payload(build_file(dup, VALID_BODY))
    nan = text.replace('"side_info":{}', '"side_info":{"g":NaN}').encode()
    with pytest.raises(PayloadError, match="^header JSON contains NaN"):
        decode_payload(build_file(nan, VALID_BODY))
    huge = text.replace('"side_info":{}', '"side_info":{"g":1e999}').encode()
    with pytest.raises(PayloadError, match="out of range"):
        decode_payload(build_file(huge, VALID_BODY))
    long_int = text.replace('"side_info":{}', '"side_info":{"g":' + "9" * 5000 + "}").encode()
    with pytest.raises(PayloadError, match="out of range"):
        decode_payload(build_file(long_int, VALID_BODY))


def test_deeply_nested_header():
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(PayloadError, match="nested too deeply"):
        decode_payload(build_file(deep))
    nested = {"a": 1}
    for _ in range(40):
        nested = {"a": nested}
    with pytest.raises(PayloadError, match="nested deeper than 32"):
        decode_payload(build_file(valid_header(side_info=nested), VALID_BODY))


def test_huge_declared_sizes_do_not_allocate():
    header = valid_header(streams=[{"bit_width": 64, "kind": "codes", "name": "c", "shape": [2**63, 2**63]}])
    with pytest.raises(PayloadError, match="truncated: stream 'c' needs 680564733841876926926749214863536422912 bytes"):
        decode_payload(build_file(header, b""))
    header = valid_header(streams=[{"count": 2**64 - 1, "kind": "packets", "name": "p"}])
    with pytest.raises(PayloadError, match="truncated: stream 'p' needs at least"):
        decode_payload(build_file(header, bytes(100)))
    big_packet = build_file(valid_header(streams=[{"count": 1, "kind": "packets", "name": "p"}]), b"\xff\xff\xff\xff\x0f")
    with pytest.raises(PayloadError, match="truncated: stream 'p' packet 0 needs 4294967295 bytes, 32 left"):
        decode_payload(big_packet)
    huge_header = MAGIC + struct.pack(">HI", 1, 2**32 - 1) + b"{}"
    with pytest.raises(PayloadError, match="truncated: header needs 4294967295 bytes, 2 left"):
        decode_payload(huge_header)


def test_astronomical_shape_gives_a_short_one_line_message():
    # 64 dimensions of 2**64 - 1: (2**64 - 1)**64 lies in [2**4095, 2**4096), so at one bit per
    # code the section needs that many bits, i.e. a byte count in [2**4092, 2**4093).
    header = valid_header(streams=[{"bit_width": 1, "kind": "codes", "name": "c", "shape": [2**64 - 1] * 64}])
    with pytest.raises(PayloadError) as info:
        decode_payload(build_file(header, b""))
    assert str(info.value) == "truncated: stream 'c' needs at least 2**4092 bytes, 32 left"
    # A zero anywhere makes it an empty stream, however large the other dimensions.
    shape = [2**64 - 1, 0, 2**64 - 1]
    header = valid_header(streams=[{"bit_width": 64, "kind": "codes", "name": "c", "shape": shape}])
    parsed = decode_payload(build_file(header, b""))
    assert parsed.representation_bits() == 0
    assert parsed.stream("c").values.tolist() == []


@pytest.mark.parametrize(("bit_width", "count"), [(1, 9), (3, 5), (10, 3), (63, 1)])
def test_every_padding_bit_is_checked_at_parse_time(bit_width, count):
    # Set each bit of the section in turn: a code bit gives another valid stream, a padding bit
    # (the last 8 * ceil(count * bit_width / 8) - count * bit_width) a rejection, before any value is read.
    size = math.ceil(count * bit_width / 8)
    header = valid_header(streams=[{"bit_width": bit_width, "kind": "codes", "name": "c", "shape": [count]}])
    for bit in range(8 * size):
        body = bytearray(size)
        body[bit // 8] = 0x80 >> (bit % 8)
        data = build_file(header, bytes(body))
        if bit < count * bit_width:
            codes = [0] * count
            codes[bit // bit_width] = 1 << (bit_width - 1 - bit % bit_width)
            assert decode_payload(data).stream("c").values.tolist() == codes
        else:
            with pytest.raises(PayloadError, match="^stream 'c': packed codes: padding bits"):
                decode_payload(data)


def test_nonzero_padding_in_file():
    with pytest.raises(PayloadError, match="^stream 'c': packed codes: padding bits"):
        decode_payload(build_file(valid_header(), bytes.fromhex("1231") + VALID_BODY[2:]))


def test_section_shorter_than_declared_with_valid_checksum():
    # Written by a broken writer (checksum fine): 'p' declares 2 packets, the
    # file has 1, so the checksum's first bytes are read as a packet length.
    with pytest.raises(PayloadError, match=r"^truncated: stream 'p' packet 1 needs \d+ bytes, \d+ left$"):
        decode_payload(build_file(valid_header(), VALID_BODY[:3]))
    # And one that declares too few: the real checksum is not where it should be.
    short = valid_header(streams=[{"bit_width": 4, "kind": "codes", "name": "c", "shape": [3]}])
    with pytest.raises(PayloadError, match=r"^corrupted: sha256 mismatch$"):
        decode_payload(build_file(short, VALID_BODY))


# --- rejection paths: constructing values -------------------------------------------


def test_code_value_too_wide():
    with pytest.raises(PayloadError, match=r"stream 'c': value 16 does not fit in 4 bits \(must be < 2\*\*4\)"):
        CodeStream("c", 4, (2,), np.array([3, 16]))
    with pytest.raises(PayloadError, match="value 2 does not fit in 1 bits"):
        CodeStream("c", 1, (2,), [1, 2])
    CodeStream("c", 64, (1,), np.array([2**64 - 1], dtype=np.uint64))


@pytest.mark.parametrize("bit_width", [0, 65, -1])
def test_bit_width_out_of_range(bit_width):
    with pytest.raises(PayloadError, match=f"bit_width must be in 1..64, got {bit_width}"):
        CodeStream("c", bit_width, (1,), [0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(bit_width=True), "bit_width must be an integer, got boolean"),
        (dict(shape=()), "shape must have 1..64 dimensions, got 0"),
        (dict(shape=(3,)), r"shape \(3,\) holds 3 codes, values has 2"),
        (dict(shape=(2, -1)), r"shape\[1\] must be >= 0, got -1"),
        (dict(values=np.array([0.0, 1.0])), "values must be integers, got dtype float64"),
        (dict(values=np.array([-1, 1])), "values must be >= 0, got -1"),
        (dict(values=np.zeros((1, 2), dtype=np.uint8), shape=(2,)), "values must be 1-D or have the logical shape"),
        (dict(name=""), "stream name must not be empty"),
    ],
)
def test_bad_code_stream(kwargs, message):
    fields = dict(name="c", bit_width=4, shape=(2,), values=np.array([1, 2]))
    fields.update(kwargs)
    with pytest.raises(PayloadError, match=message):
        CodeStream(**fields)


def test_bad_packet_stream():
    with pytest.raises(PayloadError, match="packets must be a sequence of bytes, not one bytes"):
        PacketStream("p", b"abc")
    with pytest.raises(PayloadError, match="packet 1 must be bytes, got str"):
        PacketStream("p", (b"a", "b"))
    assert PacketStream("p", [bytearray(b"a"), memoryview(b"b")]).packets == (b"a", b"b")


def test_duplicate_stream_names():
    with pytest.raises(PayloadError, match="^duplicate stream name 'x'$"):
        make_payload([CodeStream("x", 1, (1,), [0]), PacketStream("x", ())])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_in_side_info(bad):
    with pytest.raises(PayloadError, match=r"side_info\['gain'\]\[1\]: NaN and infinity are not allowed"):
        make_payload((), side_info={"gain": [1.0, bad]})
    with pytest.raises(PayloadError, match=r"config\['x'\]: NaN and infinity"):
        make_payload((), config={"x": bad})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(codec=""), "^codec must not be empty$"),
        (dict(family=""), "^family must not be empty$"),
        (dict(sample_rate=0), "^sample_rate must be >= 1, got 0$"),
        (dict(sample_rate=True), "^sample_rate must be an integer, got boolean$"),
        (dict(num_samples=-1), "^num_samples must be >= 0"),
        (dict(channels=0), "^channels must be >= 1"),
        (dict(codec_sample_rate=16000.0), "^codec_sample_rate must be an integer, got float"),
        (dict(checkpoint={"sha256": None}), r"^checkpoint\['sha256'\] must be a string, got null"),
        (dict(config={1: "a"}), r"^config: object key 1 is not a string"),
        (dict(config={"s": {1, 2}}), r"^config\['s'\]: set is not a JSON value"),
        (dict(side_info={"b": b"x"}), r"^side_info\['b'\]: bytes is not a JSON value"),
        (dict(side_info={"big": 2**64}), r"^side_info\['big'\] must be in"),
        (dict(variant="\ud800"), "^variant contains an unpaired surrogate"),
        (dict(streams=[object()]), r"^streams\[0\] must be a CodeStream or PacketStream"),
    ],
)
def test_bad_payload_fields(overrides, message):
    with pytest.raises(PayloadError, match=message):
        make_payload(**overrides)


def test_json_int_range_edges_round_trip():
    p = make_payload((), side_info={"lo": -(2**63), "hi": 2**64 - 1, "neg0": -0.0, "tiny": 5e-324})
    assert decode_payload(encode_payload(p)).side_info == p.side_info


# --- fuzzing -------------------------------------------------------------------------

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL = encode_payload(
    make_payload(
        [CodeStream("c", 11, (2, 3), np.arange(6) * 300), PacketStream("p", (b"\x01\x02", b"", b"\x03"))],
        side_info={"pre_skip": 312},
    )
)


def decode_or_reject(data: bytes) -> None:
    try:
        p = decode_payload(data)
    except PayloadError as e:
        assert str(e) and "\n" not in str(e)
        return
    # Acceptance means these were exactly the bytes of some payload.
    assert encode_payload(p) == data


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes(data):
    decode_or_reject(data)


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_arbitrary_bytes_after_valid_prefix(rest):
    decode_or_reject(MAGIC + struct.pack(">H", FORMAT_VERSION) + rest)


mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 2**16)),
    st.tuples(st.just("flip"), st.integers(0, 2**16), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 2**16), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 2**16), st.integers(1, 8)),
)


def mutate(data: bytes, ops) -> bytes:
    for op in ops:
        if not data and op[0] != "insert":
            continue
        pos = op[1] % (len(data) + 1)
        if op[0] == "truncate":
            data = data[:pos]
        elif op[0] == "flip":
            pos = op[1] % len(data)
            data = data[:pos] + bytes([data[pos] ^ op[2]]) + data[pos + 1 :]
        elif op[0] == "insert":
            data = data[:pos] + op[2] + data[pos:]
        else:
            data = data[:pos] + data[pos + op[2] :]
    return data


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_mutated_payload(ops):
    mutated = mutate(SMALL, ops)
    if mutated == SMALL:
        assert decode_payload(mutated) is not None
        return
    decode_or_reject(mutated)


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=3))
def test_fuzz_mutated_payload_with_fixed_checksum(ops):
    # Re-sealing the checksum makes the mutation reach the structural checks.
    body = mutate(SMALL[:-32], ops)
    decode_or_reject(body + hashlib.sha256(body).digest())


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@st.composite
def code_streams(draw, name: str) -> CodeStream:
    bit_width = draw(st.integers(1, 64))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=3)))
    n = math.prod(shape)
    values = draw(st.lists(st.integers(0, 2**bit_width - 1), min_size=n, max_size=n))
    return CodeStream(name, bit_width, shape, np.array(values, dtype=np.uint64))


@st.composite
def payloads(draw) -> Payload:
    names = draw(st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=4))
    streams = [
        draw(code_streams(name) | st.builds(PacketStream, st.just(name), st.lists(st.binary(max_size=12), max_size=4).map(tuple)))
        for name in names
    ]
    return Payload(
        codec=draw(st.text(min_size=1, max_size=12)),
        family=draw(st.text(min_size=1, max_size=8)),
        config=draw(json_objects),
        variant=draw(st.text(max_size=8)),
        checkpoint=draw(st.dictionaries(st.text(max_size=6), st.text(max_size=12), max_size=2)),
        sample_rate=draw(st.integers(1, 2**63)),
        num_samples=draw(st.integers(0, 2**40)),
        channels=draw(st.integers(1, 8)),
        codec_sample_rate=draw(st.integers(1, 192_000)),
        streams=tuple(streams),
        side_info=draw(json_objects),
    )


@FUZZ
@given(payloads())
def test_fuzz_valid_payloads_round_trip(p):
    data = encode_payload(p)
    q = decode_payload(data)
    assert_same_payload(p, q)
    assert encode_payload(q) == data
    expected_bits = sum(
        s.values.size * s.bit_width if isinstance(s, CodeStream) else 8 * sum(map(len, s.packets)) for s in p.streams
    )
    assert q.representation_bits() == expected_bits


# --- packet length varints ----------------------------------------------------------


@pytest.mark.parametrize(
    "size, prefix",
    [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16384, "808001")],
)
def test_packet_length_is_minimal_leb128(size, prefix):
    # Hand-derived LEB128: 300 = 0b10_0101100 -> 0xac 0x02.
    p = make_payload((PacketStream("p", (bytes(size),)),))
    data = encode_payload(p)
    body = data[header_span(data)[1] : -32]
    assert body == bytes.fromhex(prefix) + bytes(size)
    assert decode_payload(data).stream("p").packets == (bytes(size),)


def test_non_minimal_varint_is_rejected():
    header = valid_header(streams=[{"count": 1, "kind": "packets", "name": "p"}])
    with pytest.raises(PayloadError, match="^corrupted: stream 'p' packet 0 length is not a minimal varint$"):
        decode_payload(build_file(header, bytes.fromhex("8100") + b"\xab"))


def test_overlong_varint_is_rejected():
    header = valid_header(streams=[{"count": 1, "kind": "packets", "name": "p"}])
    with pytest.raises(PayloadError, match="longer than 5 bytes"):
        decode_payload(build_file(header, bytes.fromhex("808080808001") + bytes(40)))
    with pytest.raises(PayloadError, match="is more than 4294967295"):
        decode_payload(build_file(header, bytes.fromhex("8080808010") + bytes(40)))


# --- memory: parsing materialises no codes and no packets ------------------------------

# Runs in a fresh interpreter so that nothing else in the test session shows in its peak RSS.
# Writing 5 to clear_refs resets the peak (VmHWM) to the current RSS; a small file is parsed
# first so that first-use costs (lazy imports, allocator arenas) are not counted against the big one.
PEAK_CHILD = """
import sys
from codecarena.payload import read_payload

def kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

read_payload(sys.argv[1]).representation_bits()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = kib("VmHWM")
payload = read_payload(sys.argv[2])
bits = payload.representation_bits()
print((kib("VmHWM") - before) * 1024, bits)
"""


def parse_peak(small: Path, big: Path) -> tuple[int, int]:
    """(peak RSS increase in bytes, representation bits) of read_payload(big) in a fresh process."""
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(small), str(big)], env=env,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    peak, bits = out.split()
    return int(peak), int(bits)


WORST_CASE_BYTES = 2 * 2**20


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures peak RSS through Linux /proc")
@pytest.mark.parametrize("kind", ["one-bit codes", "empty packets"])
def test_parsing_worst_case_payload_peaks_under_4x_its_size(tmp_path: Path, kind: str):
    # The densest encodings per byte: 8 codes per byte, or one empty packet per (length) byte.
    n = WORST_CASE_BYTES
    if kind == "one-bit codes":
        spec = {"bit_width": 1, "kind": "codes", "name": "c", "shape": [8 * n]}
        body, bits = bytes(range(256)) * (n // 256), 8 * n
    else:
        spec = {"count": n, "kind": "packets", "name": "p"}
        body, bits = bytes(n), 0
    big = tmp_path / "big.ccap"
    big.write_bytes(build_file(valid_header(streams=[spec]), body))
    small = tmp_path / "small.ccap"
    small.write_bytes(build_file(valid_header(), VALID_BODY))
    peak, parsed_bits = parse_peak(small, big)
    assert parsed_bits == bits
    size = big.stat().st_size
    assert peak < 4 * size, f"parsing a {size}-byte payload of {kind} raised peak RSS by {peak} bytes"


@pytest.mark.parametrize("bit_width", [1, 3, 11, 57, 64])
def test_parsed_values_match_across_unpack_blocks(bit_width):
    # 200_003 codes span several of the reader's blocks, the last one partial.
    values = rng_codes(bit_width, bit_width, 200_003)
    stream = CodeStream("c", bit_width, (200_003,), values)
    data = encode_payload(make_payload([stream]))
    parsed = decode_payload(data).stream("c")
    assert parsed.values.dtype == np.uint64 and not parsed.values.flags.writeable
    assert np.array_equal(parsed.values, values)
    assert parsed == stream and hash(parsed) == hash(stream)


def test_pack_codes_across_blocks_matches_reference():
    values = rng_codes(9, 3, 70_001)
    assert pack_codes(values, 3) == ref_pack(values, 3)


def test_parsed_packets_and_reencoding():
    packets = tuple(bytes([i % 251]) * (i % 300) for i in range(2000)) + (b"",) * 100
    p = make_payload([PacketStream("p", packets), CodeStream("c", 5, (2, 7), rng_codes(3, 5, 14))])
    data = encode_payload(p)
    parsed = decode_payload(data)
    assert parsed.representation_bits() == 8 * sum(map(len, packets)) + 5 * 14
    assert encode_payload(parsed) == data
    assert parsed.stream("p").packets == packets
    assert all(type(x) is bytes for x in parsed.stream("p").packets)
    assert parsed == p and hash(parsed.stream("p")) == hash(p.stream("p"))


def test_parsed_payload_copies_and_pickles():
    p = rich_payload()
    data = encode_payload(p)
    for clone in (copy.deepcopy(decode_payload(data)), pickle.loads(pickle.dumps(decode_payload(data)))):
        assert_same_payload(p, clone)
        assert encode_payload(clone) == encode_payload(p)


def test_mutable_input_buffer_is_not_read_after_parsing():
    p = rich_payload()
    buffer = bytearray(encode_payload(p))
    parsed = [decode_payload(buffer), decode_payload(memoryview(buffer))]
    buffer[:] = bytes(len(buffer))
    for q in parsed:
        assert_same_payload(p, q)


def _mapped_outcome(data: bytes, tmp_path: Path) -> str:
    """What decode_payload says of `data` read through a read-only mapping of its file (as the
    service reads a request body), and that the mapping then closes: no view of it outlives the
    parse, whether it succeeds or refuses."""
    import mmap

    path = tmp_path / "p.ccap"
    path.write_bytes(data)
    try:
        # The refusal leaves the block with its traceback: a view it held would keep the mapping
        # from closing (BufferError in place of the refusal).
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return f"ok {decode_payload(mapped).representation_bits()}"
    except PayloadError as exc:
        return str(exc)


@pytest.mark.parametrize("case", ["good", "padding", "sha256", "truncated", "header", "trailing"])
def test_a_mapped_file_parses_as_its_bytes_do_and_closes_after_a_refusal(case: str, tmp_path: Path) -> None:
    header = valid_header()
    data = {"good": build_file(header, VALID_BODY),
            "padding": build_file(header, bytes.fromhex("1231") + VALID_BODY[2:]),
            "sha256": build_file(header, VALID_BODY)[:-1] + b"\0",
            "truncated": build_file(header, VALID_BODY)[:-40],
            "header": build_file(header, VALID_BODY).replace(b'"codec"', b'"codeX"'),
            "trailing": build_file(header, VALID_BODY) + b"\0"}[case]
    try:
        expected = f"ok {decode_payload(data).representation_bits()}"
    except PayloadError as exc:
        expected = str(exc)
    assert (case == "good") == expected.startswith("ok ")
    assert _mapped_outcome(data, tmp_path) == expected
