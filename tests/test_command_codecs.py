"""Command-line codecs (#29): declarations parsed strictly, framing parsers on files the real tools
write, binary identities checked against their pins, the shared adapter's failures one line each, and
the telephony entries and a user's own tool through the real `codecarena run`.

Expected rates are written out from the standards: G.722 is 8 bits per pair of 16 kHz samples, GSM
06.10 260 bits per 160 samples at 8 kHz (toast: 33 bytes, a 4-bit signature), LC3 at 10 ms frames
bitrate / 800 bytes a frame behind a 16-bit length and an 18-byte file header, Speex wideband packets
32, 52 and 70 bytes at quality 4, 6 and 8.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from codecarena import framing
from codecarena.codecs.command import CommandAdapter, CommandError
from codecarena.framing import FramingError
from codecarena.payload import read_payload, write_payload
from codecarena.pipeline.resume import changed_binaries
from codecarena.registry import binaries
from codecarena.registry.binaries import BinaryError, identify, verify, verify_command
from codecarena.registry.catalog import COMMAND_MODULE, FAMILIES, FRAMINGS, Binary, parse_declaration
from codecarena.registry.entries import RegistryError, debian_versions, entry_for_family, parse_entry
from codecarena.registry_rules import rule_problems
from codecarena.specs import parse_spec
from codecarena.worker import make_payload

from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of

TELEPHONY = ("g722", "g726", "gsm", "speex", "lc3")
TOOLS = ("ffmpeg", "toast", "speexenc", "speexdec", "elc3", "dlc3")
needs_tools = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                 reason="the telephony tools are not installed (scripts/install.sh installs them)")


# --- declarations ----------------------------------------------------------------------------------

def test_the_telephony_units_are_command_line_families_with_their_declared_rates() -> None:
    rates = {name: (FAMILIES[name].command.bandwidth, FAMILIES[name].command.sample_rate)  # type: ignore[union-attr]
             for name in TELEPHONY}
    assert rates == {"g722": ("wideband", 16000), "g726": ("narrowband", 8000), "gsm": ("narrowband", 8000),
                     "speex": ("wideband", 16000), "lc3": ("wideband", 16000)}
    assert all(FAMILIES[name].kind == "command" and FAMILIES[name].module == COMMAND_MODULE for name in TELEPHONY)
    assert FAMILIES["opus"].kind == "python" and FAMILIES["opus"].command is None
    nominal = {f"{name}:{config}": command.config(config).nominal_bps
               for name in TELEPHONY for config, _ in FAMILIES[name].command.configs  # type: ignore[union-attr]
               for command in [FAMILIES[name].command]}
    assert nominal == {"g722:64k": 64000, "g726:16k": 16000, "g726:24k": 24000, "g726:32k": 32000,
                       "g726:40k": 40000, "gsm:13k": 13000, "speex:q4": 12800, "speex:q6": 20600,
                       "speex:q8": 27800, "lc3:16k": 16000, "lc3:24k": 24000, "lc3:32k": 32000}


def test_every_packaged_binary_of_a_telephony_unit_has_its_debian_version_pinned() -> None:
    for name in TELEPHONY:
        entry = entry_for_family(name)
        pins = debian_versions(entry)
        assert entry.source_release and entry.roles == ("communication_anchor",)
        assert all(b.package in pins for b in FAMILIES[name].command.binaries), name  # type: ignore[union-attr]
    assert debian_versions(entry_for_family("gsm")) == {"libgsm-tools": "1.0.22-1", "libgsm1": "1.0.22-1"}


SCRIPT_DECLARATION = """\
api_version = 1
kind = "command"
name = "mine"
description = "8-bit linear at 8 kHz, a test's own tool"
configs = ["ok"]
default_config = "ok"

[command]
bandwidth = "narrowband"
framing = "raw"
encode = ["{tool}", "encode", "{mode}", "{input}", "{output}"]
decode = ["{tool}", "decode", "{mode}", "{input}", "{output}"]
length_tolerance = 0

[[command.binaries]]
name = "tool"
path = "/usr/bin/true"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

[command.configs.ok]
mode = "ok"
nominal_bps = 64000
"""


def test_a_minimal_command_declaration_parses() -> None:
    family = parse_declaration(SCRIPT_DECLARATION, "mine/codec.toml", "ignored")
    assert family.module == COMMAND_MODULE and family.command is not None
    assert family.command.argv("encode", "ok", {}, "in.wav", "out.bin") == ["/usr/bin/true", "encode", "ok",
                                                                             "in.wav", "out.bin"]
    assert family.command.program("decode") == Binary("tool", "/usr/bin/true", "", "0" * 64)


@pytest.mark.parametrize(("change", "message"), [
    (('framing = "raw"', 'framing = "mp4"'), "framing must be one of raw"),
    (('bandwidth = "narrowband"', 'bandwidth = "8k"'), "bandwidth must be one of narrowband"),
    (('length_tolerance = 0', 'length_tolerance = 0\nshell = true'), "unknown key 'shell'"),
    (('encode = ["{tool}", ', 'encode = ["/bin/sh", "-c", '), "encode must start with one of its binaries"),
    (('"{mode}", "{input}", "{output}"]\ndecode', '"{tool}", "{input}", "{output}"]\ndecode'),
     "names the binary {tool} past argv[0]"),
    (('"encode", "{mode}", "{input}"', '"encode", "{mode}", "in.wav"'), "encode must name the {input} file"),
    (('length_tolerance = 0', 'length_tolerance = 0\nencode_stdout = true'), "names {output}, but encode_stdout"),
    (('"decode", "{mode}"', '"decode", "{level}"'), "uses {level}, which configs.ok does not give"),
    (('mode = "ok"', 'mode = "ok"\nlevel = "3"'), "value 'level' is used by neither command"),
    (('"decode", "{mode}"', '"decode", "{mode}}"'), "has a brace that is not a {placeholder}"),
    (('path = "/usr/bin/true"', 'path = "true"'), "path must be absolute"),
    (('sha256 = "' + "0" * 64 + '"', 'package = "Coreutils"'), "package must be a Debian package name"),
    (('sha256 = "' + "0" * 64 + '"', ''), "binaries[0]: package or sha256 must be given (a built-in unit pins"),
    (('[command.configs.ok]', '[command.configs.other]'), "configs must have one table for each config"),
    (('default_config = "ok"', 'default_config = "ok"\nconfig_is_bitrate = true'),
     "config_is_bitrate is not for a command-line family"),
    (('default_config = "ok"', 'default_config = "ok"\nsupported_weights = "real"'), "must be none"),
    (('kind = "command"', 'kind = "python"'), 'command is only for kind = "command"'),
    (('kind = "command"', 'kind = "shell"'), "kind must be one of python, command"),
])
def test_a_bad_command_declaration_is_refused_with_one_line_naming_file_and_key(
        change: tuple[str, str], message: str) -> None:
    old, new = change
    assert old in SCRIPT_DECLARATION
    with pytest.raises(RegistryError) as caught:
        parse_declaration(SCRIPT_DECLARATION.replace(old, new, 1), "mine/codec.toml", "ignored")
    assert message in str(caught.value) and str(caught.value).startswith("mine/codec.toml: ")
    assert "\n" not in str(caught.value)


ENTRY = """\
schema_version = 1
id = "mine"
display_name = "mine"
codec_family = ""
adapter_blocker = "a test entry"
roles = ["communication_anchor"]
status = "registered"
license = "Apache-2.0"

[source]
repository = "https://example.org/mine"
release = "1.0.22"
{pins}

[runtime]
python = "3.11"
environment = "main"

[reference_hardware]
quoted_figures = "none quoted"
"""


def test_debian_package_pins_parse_and_a_floating_one_is_refused() -> None:
    entry = parse_entry(ENTRY.format(pins='debian_packages = ["ffmpeg=7:5.1.9-0+deb12u1", "libgsm1=1.0.22-1"]'),
                        "mine.toml")
    assert debian_versions(entry) == {"ffmpeg": "7:5.1.9-0+deb12u1", "libgsm1": "1.0.22-1"}
    for bad in ('["ffmpeg"]', '["ffmpeg>=7"]', '["ffmpeg=latest"]', '["libgsm1=1.0.22-1", "libgsm1=1.0.22-2"]'):
        with pytest.raises(RegistryError, match="mine.toml.source: debian_packages"):
            parse_entry(ENTRY.format(pins=f"debian_packages = {bad}"), "mine.toml")


# --- framing parsers, on files the real tools write --------------------------------------------------

@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The first short clip at 16 kHz and, resampled by FFmpeg, at 8 kHz (wav and raw s16le)."""
    folder = tmp_path_factory.mktemp("speech")
    wav16 = folder / "in16.wav"
    shutil.copy(need_mirror() / SHORT_CLIPS[0], wav16)
    wav8 = folder / "in8.wav"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", wav16, "-ar", "8000", wav8], check=True)
    raw8 = folder / "in8.raw"
    raw8.write_bytes(sf.read(wav8, dtype="int16")[0].astype("<i2").tobytes())
    return {"16": wav16, "8": wav8, "raw8": raw8}


def _tool(argv: list[object], stdout: Path | None = None) -> None:
    with open(stdout or "/dev/null", "wb") as sink:
        subprocess.run([str(a) for a in argv], check=True, stdout=sink, stderr=subprocess.DEVNULL)


@needs_tools
def test_gsm_toast_frames_are_260_codec_bits_behind_a_4_bit_signature(speech: dict[str, Path], tmp_path: Path) -> None:
    _tool(["toast", "-l", "-c", speech["raw8"]], tmp_path / "x.gsm")
    data = (tmp_path / "x.gsm").read_bytes()
    frames = math.ceil(sf.info(speech["8"]).frames / 160)
    assert len(data) == 33 * frames
    parsed = framing.parse("gsm_toast", data)
    assert (parsed.frames, parsed.codec_bits, parsed.framing_bits) == (frames, 260 * frames, 4 * frames)
    with pytest.raises(FramingError, match="not a whole number of 33-byte GSM frames"):
        framing.parse("gsm_toast", data[:-1])
    with pytest.raises(FramingError, match="GSM frame 1 does not start with the 0xD signature"):
        framing.parse("gsm_toast", data[:33] + b"\x00" + data[34:])


@needs_tools
@pytest.mark.parametrize("bitrate", [16000, 32000])
def test_lc3_file_frames_behind_a_header_and_16_bit_lengths(speech: dict[str, Path], tmp_path: Path,
                                                            bitrate: int) -> None:
    _tool(["elc3", "-b", bitrate, "-m", "10", speech["16"], tmp_path / "x.lc3"])
    data = (tmp_path / "x.lc3").read_bytes()
    parsed = framing.parse("lc3_file", data)
    per_frame = bitrate // 800  # bytes in 10 ms
    assert parsed.frames is not None and len(data) == 18 + parsed.frames * (2 + per_frame)
    assert (parsed.codec_bits, parsed.framing_bits) == (8 * per_frame * parsed.frames, 8 * 18 + 16 * parsed.frames)
    assert parsed.details == {"sample_rate": 16000, "bitrate_bps": bitrate, "channels": 1, "frame_us": 10000,
                              "num_samples": sf.info(speech["16"]).frames}
    with pytest.raises(FramingError, match=r"LC3 frame \d+: \d+ bytes, \d+ left"):
        framing.parse("lc3_file", data[:-1])
    with pytest.raises(FramingError, match="is not LC3's 0xCC1C"):
        framing.parse("lc3_file", b"\x00" + data[1:])


@needs_tools
@pytest.mark.parametrize(("quality", "packet_bytes"), [(4, 32), (8, 70)])
def test_ogg_speex_audio_packets_are_the_codec_bits(speech: dict[str, Path], tmp_path: Path, quality: int,
                                                    packet_bytes: int) -> None:
    _tool(["speexenc", "-w", "--quality", quality, speech["16"], tmp_path / "x.spx"])
    data = (tmp_path / "x.spx").read_bytes()
    parsed = framing.parse("ogg_speex", data)
    assert parsed.frames is not None and parsed.frames >= math.ceil(sf.info(speech["16"]).frames / 320)
    assert parsed.codec_bits == 8 * packet_bytes * parsed.frames
    assert parsed.codec_bits + parsed.framing_bits == 8 * len(data) and parsed.framing_bits > 8 * 80
    assert parsed.details["sample_rate"] == 16000 and parsed.details["header_packets"] == 2
    with pytest.raises(FramingError, match="runs past the end of the file"):
        framing.parse("ogg_speex", data[:-1])
    with pytest.raises(FramingError, match="does not start an Ogg page"):
        framing.parse("ogg_speex", b"X" + data[1:])


@needs_tools
def test_raw_g722_is_all_codec_bits_8_per_pair_of_samples(speech: dict[str, Path], tmp_path: Path) -> None:
    _tool(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", speech["16"], "-c:a", "g722", "-f", "g722",
           tmp_path / "x.g722"])
    data = (tmp_path / "x.g722").read_bytes()
    assert len(data) == math.ceil(sf.info(speech["16"]).frames / 2)
    assert framing.parse("raw", data) == framing.Framing("raw", 8 * len(data), 0, None)
    with pytest.raises(FramingError, match="the bitstream is empty"):
        framing.parse("raw", b"")


def test_every_declared_framing_has_a_parser() -> None:
    assert set(framing.PARSERS) == set(FRAMINGS)


# --- binary identity ---------------------------------------------------------------------------------

def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def test_a_sha256_pin_holds_and_a_changed_binary_is_refused_with_one_line(tmp_path: Path) -> None:
    tool = _script(tmp_path / "tool", "print('v1')\n")
    identity = identify("tool", tool)
    assert identity.resolved == str(tool) and identity.package == "" and len(identity.sha256) == 64
    pinned = Binary("tool", str(tool), sha256=identity.sha256)
    assert verify(pinned, {}) == identity
    _script(tool, "print('v2')\n")
    with pytest.raises(BinaryError) as caught:
        verify(pinned, {})
    message = str(caught.value)
    assert message.startswith(f"binary tool ({tool}): sha256 ") and "differs from its pin" in message
    with pytest.raises(BinaryError, match="not an executable file"):
        identify("tool", tmp_path)
    with pytest.raises(BinaryError, match="No such file"):
        identify("tool", tmp_path / "nonesuch")


@pytest.mark.skipif(shutil.which("toast") is None or shutil.which("dpkg-query") is None,
                    reason="needs Debian's libgsm-tools")
def test_a_packaged_binary_needs_its_package_at_the_pinned_version() -> None:
    gsm = FAMILIES["gsm"].command
    assert gsm is not None
    pins = debian_versions(entry_for_family("gsm"))
    (identity,) = verify_command(gsm, pins)
    assert (identity.package, identity.version) == ("libgsm-tools", binaries.installed_version("libgsm-tools"))
    with pytest.raises(BinaryError, match="Debian package libgsm-tools is at .*, the registry pins 0.9-1"):
        verify_command(gsm, {**pins, "libgsm-tools": "0.9-1"})
    with pytest.raises(BinaryError, match="has no version pin in the registry entry"):
        verify_command(gsm, {})
    with pytest.raises(BinaryError, match="Debian package codecarena-nonesuch is not installed, the registry pins 1.0"):
        verify_command(gsm, {**pins, "codecarena-nonesuch": "1.0"})
    with pytest.raises(BinaryError, match="declared from Debian package speex, but dpkg says libgsm-tools"):
        verify(Binary("toast", "/usr/bin/toast", package="speex"), {"speex": "1"})


@pytest.mark.skipif(shutil.which("toast") is None or shutil.which("dpkg-query") is None,
                    reason="needs Debian's libgsm-tools")
def test_registry_audit_check_local_checks_a_command_line_familys_pins() -> None:
    gsm = entry_for_family("gsm")
    assert [p for p in rule_problems([gsm], check_local=True) if p.startswith("gsm:")] == []
    moved = dataclasses.replace(gsm, source_debian_packages=("libgsm-tools=0.9-1", "libgsm1=1.0.22-1"))
    (problem,) = [p for p in rule_problems([moved], check_local=True) if p.startswith("gsm:")]
    assert problem.startswith("gsm: status 'smoked' but binary toast (/usr/bin/toast): Debian package "
                              "libgsm-tools is at ") and problem.endswith("the registry pins 0.9-1")


def test_a_binary_that_changed_since_the_run_started_is_named() -> None:
    toast = {"name": "toast", "path": "/usr/bin/toast", "resolved": "/usr/bin/toast", "sha256": "a" * 64,
             "package": "libgsm-tools", "version": "1.0.22-1"}
    before = {"gsm": {"registry": "gsm", "binaries": [toast]}, "opus": {"registry": "opus"}}
    assert changed_binaries(before, before) == ""
    now = {"gsm": {"registry": "gsm", "binaries": [{**toast, "sha256": "b" * 64, "version": "1.0.22-2"}]}}
    assert changed_binaries(before, now) == (f"binary toast of gsm changed (sha256 {'a' * 64} -> {'b' * 64}, "
                                             "version 1.0.22-1 -> 1.0.22-2)")


# --- the shared adapter, in process, with a tool written here -------------------------------------

TOOL = """\
import sys, wave
stage, mode, src, dst = sys.argv[1:5]
if mode == "fail":
    sys.stderr.write("quantiser: cannot open the input\\nboom: giving up\\n")
    sys.exit(3)
if mode == "missing":
    sys.exit(0)
if mode == "empty":
    open(dst, "wb").close()
    sys.exit(0)
if stage == "encode":
    with wave.open(src, "rb") as w:
        pcm = w.readframes(w.getnframes())
    # 8-bit linear: the high byte of each little-endian 16-bit sample, offset to unsigned.
    open(dst, "wb").write(bytes((pcm[i + 1] + 128) % 256 for i in range(0, len(pcm), 2)))
else:
    codes = open(src, "rb").read()
    with wave.open(dst, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000)
        w.writeframes(b"".join(bytes([0, (c - 128) % 256]) for c in codes))
"""


def user_declaration(tool: Path, sha256: str = "") -> str:
    """The declaration of `mine`, running `tool`; without `sha256`, as docs/plugins.md writes it
    (`codec add` pins the binary)."""
    return textwrap.dedent(f"""\
        api_version = 1
        kind = "command"
        name = "mine"
        description = "8-bit linear at 8 kHz, a test's own tool"
        configs = ["ok", "fail", "missing", "empty"]
        default_config = "ok"

        [command]
        bandwidth = "narrowband"
        framing = "raw"
        encode = ["{{tool}}", "encode", "{{mode}}", "{{input}}", "{{output}}"]
        decode = ["{{tool}}", "decode", "ok", "{{input}}", "{{output}}"]
        length_tolerance = 0

        [[command.binaries]]
        name = "tool"
        path = "{tool}"
        """) + (f'sha256 = "{sha256}"\n' if sha256 else "") + "".join(f'\n[command.configs.{mode}]\nmode = "{mode}"\nnominal_bps = 64000\n'
                       for mode in ("ok", "fail", "missing", "empty"))


@pytest.fixture
def mine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The family `mine` in this process's catalog: a python script as the tool, pinned by sha256."""
    tool = _script(tmp_path / "quantise8", TOOL)
    family = parse_declaration(user_declaration(tool, identify("tool", tool).sha256), "mine/codec.toml", "")
    monkeypatch.setitem(FAMILIES, "mine", family)
    return tool


def _adapter(spec: str) -> CommandAdapter:
    adapter = CommandAdapter(parse_spec(spec))
    adapter.load()
    return adapter


def test_a_user_tool_round_trips_its_bitstream_bytes_unchanged(mine: Path, tmp_path: Path) -> None:
    adapter = _adapter("mine:ok")
    audio = np.sin(np.arange(800) / 8.0) * 0.5
    encoded = adapter.encode(audio)
    (packet,) = encoded.streams[0].packets  # type: ignore[union-attr]
    assert len(packet) == 800 and encoded.facts["codec_bits"] == 6400 and encoded.facts["framing_bits"] == 0
    spec = parse_spec("mine:ok")
    path = tmp_path / "x.ccap"
    write_payload(path, make_payload(spec, encoded, {}, "", 16000, 1600, 8000))
    payload = read_payload(path)
    assert payload.representation_bits() == 8 * len(packet)
    decoded = _adapter("mine:ok").decode(payload)
    expected = np.array([(c - 128) % 256 for c in packet], dtype=np.uint8).astype(np.int8).astype(np.float64) / 128
    assert decoded.sample_rate == 8000 and np.array_equal(decoded.audio, expected)
    assert adapter.length_tolerance(16000) == 2


@pytest.mark.parametrize(("mode", "message"), [
    ("fail", "encode command {tool} encode fail input.wav bitstream exited with status 3: "
             "quantiser: cannot open the input boom: giving up"),
    ("missing", "encode command exited 0 but wrote no bitstream (bitstream is missing)"),
    ("empty", "encode command exited 0 but its bitstream (bitstream) is empty"),
])
def test_a_failing_command_fails_with_one_line_naming_the_command(mine: Path, mode: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        _adapter(f"mine:{mode}").encode(np.zeros(800))
    assert str(caught.value) == message.format(tool=mine)


def test_a_decoder_running_other_binaries_refuses_the_payload(mine: Path, tmp_path: Path) -> None:
    encoded = _adapter("mine:ok").encode(np.zeros(80))
    path = tmp_path / "x.ccap"
    write_payload(path, make_payload(parse_spec("mine:ok"), encoded, {}, "", 16000, 160, 8000))
    decoder = _adapter("mine:ok")
    decoder.identities["tool"] = identify("tool", _script(tmp_path / "other", "pass\n"))
    with pytest.raises(CommandError, match="payload was encoded by binaries"):
        decoder.decode(read_payload(path))


# --- through the real command line -------------------------------------------------------------------

def _bitstream_bytes(run: Path, row: dict) -> int:  # type: ignore[type-arg]
    (packet,) = read_payload(run / row["payload"]).packet_stream("bitstream").packets
    return len(packet)


@pytest.mark.slow
@needs_tools
def test_the_telephony_entries_give_ok_rows_at_their_standard_rates(speech_dir: Path, tmp_path: Path) -> None:
    configs = [f"{name}:{config}" for name in TELEPHONY for config in FAMILIES[name].configs]
    # One clip keeps it short: the one of odd length (25563 samples), so that half-filled bytes and
    # frames and the 16 -> 8 kHz rounding all occur.
    (speech_dir / "clip0.wav").unlink()
    out = tmp_path / "run"
    done = codecarena("run", "--input", speech_dir, *(a for c in configs for a in ("--codec", c)),
                      "--metrics", "none", "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    audit = codecarena("audit", out)
    assert audit.returncode == 0 and "audit passed" in audit.stdout, audit.stdout + audit.stderr
    rows = rows_of(out)
    assert sorted({r["codec"] for r in rows}) == sorted(configs) and len(rows) == len(configs)
    assert rows[0]["num_samples"] == 25563
    for row in rows:
        facts, where = row["codec_facts"], f"{row['codec']} {row['utterance']}"
        assert row["status"] == "ok" and row["replay_identical"] is True, where
        assert row["decoded_samples"] == row["num_samples"], where
        # Every bit of the bitstream is counted, and the framing's share is reported beside the codec's.
        size = _bitstream_bytes(out, row)
        assert row["representation_bits"] == 8 * size == facts["codec_bits"] + facts["framing_bits"], where
        assert row["representation_bps"] == pytest.approx(8 * size / row["duration_s"]), where
        narrow = row["family"] in ("g726", "gsm")
        assert facts["resampled_to"] == (8000 if narrow else None), where
        assert facts["nominal_bps"] == FAMILIES[row["family"]].command.config(row["config"]["config"]).nominal_bps
        samples = math.ceil(row["num_samples"] * (8000 if narrow else 16000) / 16000)
        seconds = row["duration_s"]
        if row["family"] == "g722":
            assert size == math.ceil(samples / 2) and facts["framing_bits"] == 0
            assert 64000 <= row["representation_bps"] <= 64000 + 8 / seconds, where
        elif row["family"] == "g726":
            code_bits = facts["nominal_bps"] // 8000
            assert size == math.ceil(samples * code_bits / 8) and facts["framing_bits"] == 0, where
        elif row["family"] == "gsm":
            frames = math.ceil(samples / 160)
            assert (facts["frames"], facts["codec_bits"], facts["framing_bits"]) == (frames, 260 * frames, 4 * frames)
            # 13 kbit/s of frames plus 200 bit/s of signatures, over the frames' own duration.
            assert 8 * size / (frames * 0.020) == pytest.approx(13200), where
        elif row["family"] == "lc3":
            per_frame = facts["nominal_bps"] // 800
            assert facts["framing_details"]["bitrate_bps"] == facts["nominal_bps"], where
            assert facts["codec_bits"] == 8 * per_frame * facts["frames"], where
            assert facts["framing_bits"] == 8 * 18 + 16 * facts["frames"], where
        else:
            packet = {12800: 32, 20600: 52, 27800: 70}[facts["nominal_bps"]]
            assert facts["codec_bits"] == 8 * packet * facts["frames"], where
            assert facts["frames"] * 320 >= row["num_samples"], where
    record = json.loads((out / "run.json").read_text())
    assert {b["name"] for b in record["runtimes"]["lc3"]["binaries"]} == {"elc3", "dlc3"}
    assert rows[0]["model"]["binaries"] == record["runtimes"][rows[0]["family"]]["binaries"]
    # The ledger (#32): each configuration's declared nominal rate is its claim, checked against the codec's
    # own bits (the bitstream's, less the framing the rows report).
    ledger = json.loads((out / "summary.json").read_text())["ledger"]["codecs"]
    assert sorted(entry["codec"] for entry in ledger) == sorted(configs)
    for entry in ledger:
        (row,) = [r for r in rows if r["codec"] == entry["codec"]]
        facts = row["codec_facts"]
        assert entry["claim"]["bps"] == facts["nominal_bps"] and entry["claim"]["source"] == "declaration"
        assert entry["framing_bps"] == pytest.approx(facts["framing_bits"] / row["duration_s"])
        assert entry["claim_check"]["measured_bps"] == pytest.approx(facts["codec_bits"] / row["duration_s"])


def _user_codec(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """`mine` added as the user's own command-line codec (`codecarena codec add`, which pins its
    tool), and its tool."""
    tool = _script(tmp_path / "quantise8", TOOL)
    declaration = tmp_path / "mine.codec.toml"
    declaration.write_text(user_declaration(tool))
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    added = codecarena("codec", "add", "mine", "--declaration", declaration, env=env)
    assert added.returncode == 0, added.stdout + added.stderr
    return env, tool


#: How a program is pinned, as every refusal about it and docs/plugins.md state it (issue 38, 6: two
#: errors said "`codec add` takes it" and "sha256 is required").
PIN_RULE = ("a built-in unit pins a program by its Debian package, whose version its registry entry pins; your own "
            "codec names no package: `codec add` pins the program by the sha256 it takes of the file, and a sha256 "
            "your declaration gives must be that one")


def test_every_refusal_about_a_programs_pin_states_the_one_rule(tmp_path: Path) -> None:
    """Issue 38 (6): a built-in unit that pins a program neither way, and a user's declaration that names
    a package, are refused with the same rule, which docs/plugins.md states."""
    unpinned = SCRIPT_DECLARATION.replace('sha256 = "' + "0" * 64 + '"', "")
    with pytest.raises(RegistryError) as caught:
        parse_declaration(unpinned, "gsm/codec.toml", "ignored")
    assert str(caught.value) == ("gsm/codec.toml: command.binaries[0]: package or sha256 must be given "
                                 f"({PIN_RULE})")
    tool = _script(tmp_path / "quantise8", TOOL)
    declaration = tmp_path / "mine.codec.toml"
    declaration.write_text(user_declaration(tool).replace(f'path = "{tool}"', f'path = "{tool}"\npackage = "ffmpeg"'))
    refused = codecarena("codec", "add", "mine", "--declaration", declaration, env={"XDG_DATA_HOME": str(tmp_path)})
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"codecarena: error: {declaration}: command.binaries[0]: package is for built-in units ({PIN_RULE})"]
    guide = " ".join((Path(__file__).parents[1] / "docs" / "plugins.md").read_text().split())
    assert PIN_RULE.replace("a built-in unit pins", "A built-in unit pins") in guide


def test_codec_add_pins_the_sha256_a_declaration_leaves_out_and_refuses_one_that_differs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/plugins.md: each binary is pinned by the sha256 `codec add` takes; one the declaration
    gives must match it (the parser required it in the declaration)."""
    from codecarena.registry import catalog

    tool = _script(tmp_path / "quantise8", TOOL)
    sha256 = hashlib.sha256(tool.read_bytes()).hexdigest()
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    declaration = tmp_path / "mine.codec.toml"
    declaration.write_text(user_declaration(tool, "0" * 64))
    refused = codecarena("codec", "add", "mine", "--declaration", declaration, env=env)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"codecarena: error: {declaration}: binary tool ({tool}) has sha256 {sha256}, not the {'0' * 64} its "
        f"declaration pins ({PIN_RULE})"], refused.stderr
    declaration.write_text(user_declaration(tool))
    added = codecarena("codec", "add", "mine", "--declaration", declaration, env=env)
    assert added.returncode == 0 and f"tool (sha256 {sha256[:12]}...)" in added.stdout, added.stdout + added.stderr
    monkeypatch.setenv("XDG_DATA_HOME", env["XDG_DATA_HOME"])
    families, problems = catalog._user_families()
    assert problems == {}
    assert families["mine"].command.binaries == (Binary("tool", str(tool), "", sha256),)  # type: ignore[union-attr]


def test_a_users_command_line_codec_added_again_with_another_program_reruns_its_rows_only(
        speech_dir: Path, tmp_path: Path) -> None:
    """Issue 38 (2): the program of a command-line user codec changes and the codec is added again; `run
    --add` computes its rows again with the new program (whose identity differs from the one run.json
    recorded, which otherwise stops a resume) and keeps the baseline rows."""
    env, tool = _user_codec(tmp_path)
    out = tmp_path / "run"
    base = ("run", "--input", speech_dir, "--codec", "mine:ok", "--codec", "pcm:16", "--metrics", "none", "--out", out)
    assert codecarena(*base, env=env).returncode == 0
    baseline = sorted((r for r in rows_of(out) if r["codec"] == "pcm:16"), key=lambda r: r["utterance"])
    tool.write_text(tool.read_text() + "# a new build\n")
    assert codecarena("codec", "add", "mine", "--declaration", tmp_path / "mine.codec.toml", env=env).returncode == 0
    again = codecarena(*base, "--add", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "user codec mine was added again since the run" in again.stdout
    rows = rows_of(out)
    assert sorted((r for r in rows if r["codec"] == "pcm:16"), key=lambda r: r["utterance"]) == baseline
    new_tool = identify("tool", tool).sha256
    assert {r["model"]["binaries"][0]["sha256"] for r in rows if r["codec"] == "mine:ok"} == {new_tool}
    assert codecarena("audit", out, env=env).returncode == 0


@pytest.mark.slow
def test_a_users_command_line_codec_runs_and_its_failures_stay_in_their_rows(speech_dir: Path, tmp_path: Path) -> None:
    env, tool = _user_codec(tmp_path)
    out = tmp_path / "run"
    done = codecarena("run", "--input", speech_dir, "--codec", "mine:ok", "--codec", "mine:fail",
                      "--codec", "mine:empty", "--metrics", "none", "--out", out, env=env)
    assert done.returncode == 1, done.stdout + done.stderr  # rows failed; the harness did not
    rows = {(r["codec"], r["utterance"]): r for r in rows_of(out)}
    assert sorted(rows) == sorted((codec, clip) for codec in ("mine:ok", "mine:fail", "mine:empty")
                                  for clip in ("clip0", "clip1"))
    for (codec, _), row in rows.items():
        if codec == "mine:ok":
            assert row["status"] == "ok" and row["replay_identical"] and row["decoded_samples"] == row["num_samples"]
            samples = math.ceil(row["num_samples"] / 2)
            assert row["representation_bits"] == 8 * samples == 8 * _bitstream_bytes(out, row)
            assert row["representation_bps"] == pytest.approx(8 * samples / row["duration_s"])
            assert row["model"]["binaries"][0]["sha256"] == identify("tool", tool).sha256
        elif codec == "mine:fail":
            assert row["status"] == "failed" and row["error"].endswith(
                "exited with status 3: quantiser: cannot open the input boom: giving up"), row["error"]
            assert f"encode command {tool} encode fail input.wav bitstream" in row["error"]
        else:
            assert row["status"] == "failed" and "exited 0 but its bitstream (bitstream) is empty" in row["error"]
    audit = codecarena("audit", out, env=env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # The ledger (#32): a user's command-line codec claims the rate its declaration gives.
    ledger = {e["codec"]: e for e in json.loads((out / "summary.json").read_text())["ledger"]["codecs"]}
    assert ledger["mine:ok"]["claim"]["bps"] == 64000 and ledger["mine:ok"]["claim"]["source"] == "declaration"
    assert ledger["mine:ok"]["claim_check"]["flag"] == "ok"  # a byte per two samples at 16 kHz: 64 kbit/s
    # The tool changes after its pin: refused before any row, with one line.
    _script(tool, TOOL + "# edited\n")
    refused = codecarena("run", "--input", speech_dir, "--codec", "mine:ok", "--metrics", "none",
                         "--out", tmp_path / "run2", env=env)
    assert refused.returncode == 2 and not (tmp_path / "run2" / "rows.jsonl").exists()
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "mine: binary tool" in lines[0] and "differs from its pin" in lines[0], refused.stderr


@pytest.mark.slow
@needs_tools
def test_a_resume_refuses_a_run_whose_binary_changed_since_it_started(speech_dir: Path, tmp_path: Path) -> None:
    (speech_dir / "clip1.wav").unlink()
    out = tmp_path / "run"
    first = codecarena("run", "--input", speech_dir, "--codec", "gsm", "--metrics", "none", "--out", out)
    assert first.returncode == 0, first.stdout + first.stderr
    record = json.loads((out / "run.json").read_text())
    # As if the run had started under another build of toast.
    record["runtimes"]["gsm"]["binaries"][0]["sha256"] = "0" * 64
    (out / "run.json").write_text(json.dumps(record))
    again = codecarena("run", "--input", speech_dir, "--codec", "gsm", "--metrics", "none", "--out", out)
    lines = again.stderr.strip().splitlines()
    assert again.returncode != 0 and len(lines) == 1, again.stdout + again.stderr
    assert "binary toast of gsm changed (sha256 " + "0" * 64 in lines[0] and "since the run started" in lines[0]
