"""The codec registry: schema v1 parsing, the shipped entries, and every auditor rule."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import types
from pathlib import Path

import pytest

from codecarena.registry_rules import list_rows, pins_complete, rule_problems
from codecarena.registry.entries import (
    Entry,
    PartialCheckpoint,
    RegistryError,
    Runtime,
    entry_for_family,
    load_all,
    load_entry,
    lock_file,
    parse_entry,
)

CENSUS_IDS = {
    "opus", "codec2", "lyra_v2", "encodec", "dac", "snac", "mimi", "focalcodec_stream", "stable_codec", "lpcnet",
    "xcodec2", "bigcodec", "wavtokenizer_small_40", "wavtokenizer_large_unify_40", "wavtokenizer_large_speech_75",
    "moss_audio_tokenizer_nano", "moss_audio_tokenizer_full_v1", "moss_audio_tokenizer_full_v2", "hcodec_1_0",
    "hcodec_1_5", "fish_s2_codec",
}
# Copied by hand from /work/shared/models/lyra_v2/PROVENANCE.md.
LYRA_SHA256 = {
    "soundstream_encoder.tflite": "237da0b16226fb0a68d49551c81bebf614e42142af72764448359f68581e88f1",
    "quantizer.tflite": "841ee05989687d32d1f616a8ad1419fc7eda37599d3c05c7cf5a0d60ccf8ac5c",
    "lyragan.tflite": "50e7839cda4f30599a3a34cfaddcd9c98449b049eee884e1a74295780448ad06",
}
LYRA_COMMIT = "47698dadf0010abff6a848e02642f55f806d4842"

MINIMAL = """\
schema_version = 1
id = "toy"
display_name = "Toy"
codec_family = ""
adapter_blocker = "a test entry"
roles = ["low_bit_teacher"]
status = "{status}"
status_reason = "test"
license = "unrecorded"
{extra_top}
[source]
repository = "someone/toy"
{source}

{tables}
[runtime]
python = "3.11"
environment = "main"
packages = []

[reference_hardware]
quoted_figures = "none quoted"
"""


def toml(status: str = "registered", source: str = f'commit = "{LYRA_COMMIT}"', tables: str = "",
         extra_top: str = "") -> str:
    return MINIMAL.format(status=status, source=source, tables=tables, extra_top=extra_top)


def lyra(**changes: object) -> Entry:
    return dataclasses.replace(load_entry("lyra_v2"), **changes)  # type: ignore[arg-type]


def own(problems: list[str]) -> list[str]:
    """Problems about entries, without the registry-wide role rules a one-entry audit always trips."""
    return [p for p in problems if not p.startswith("registry:")]


def mentions(problems: list[str], *needles: str) -> bool:
    return any(all(n in p for n in needles) for p in problems)


# --- the shipped registry ---------------------------------------------------------------------------

def test_shipped_registry_parses_and_passes_the_audit() -> None:
    entries = load_all()
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    assert rule_problems(entries) == []


def test_shipped_registry_has_every_census_system_and_the_pcm_control() -> None:
    entries = {e.id: e for e in load_all()}
    # Beside the census: the control and the telephony baselines (command-line codecs, #29).
    telephony = {"g722", "g726", "gsm", "speex", "lc3"}
    assert set(entries) == CENSUS_IDS | {"pcm"} | telephony
    assert all(entries[i].status == "smoked" and entries[i].source_debian_packages for i in telephony)
    assert entries["pcm"].kind == "control" and entries["pcm"].roles == ()
    assert {i for i, e in entries.items() if e.status == "scored"} == {"opus", "codec2", "pcm"}
    assert entries["lyra_v2"].status == "streaming_verified"
    # Pinned from docs/pins.md: registered (pinned, not yet run here with real weights).
    pinned = {"encodec", "dac", "snac", "mimi", "bigcodec", "wavtokenizer_large_speech_75"}
    assert all(entries[i].status == "registered" and pins_complete(entries[i]) for i in pinned)
    others = CENSUS_IDS - {"opus", "codec2", "lyra_v2"} - pinned
    assert all(entries[i].status == "unpinned" and not pins_complete(entries[i]) for i in others)
    assert "platform_deferred" in entries["stable_codec"].status_reason
    assert (entries["opus"].source_release, entries["opus"].source_bundled_by) == ("1.6.1", "av==18.1.0")
    assert (entries["codec2"].source_release, entries["codec2"].source_bundled_by) == ("1.2.0", "pycodec2==4.1.1")
    for registry_id in others:
        assert entries[registry_id].runtime.environment == "isolated"
        lock = "lock.txt" if entries[registry_id].codec_family else f"{registry_id}.lock.txt"
        assert entries[registry_id].runtime.lock == lock
    # A built-in family's runtime lock lives in its unit folder, beside its registry.toml.
    assert entries["dac"].runtime.lock == "lock.txt" and lock_file(entries["dac"]).is_file()


def test_lyra_entry_keeps_its_checkpoint_identity() -> None:
    entry = load_entry("lyra_v2")
    assert entry.source_commit == LYRA_COMMIT and entry.checkpoint is not None
    assert entry.checkpoint.identity("lyra_v2") == {"registry": "lyra_v2", "revision": LYRA_COMMIT, **LYRA_SHA256}
    assert [(f.name, f.side) for f in entry.checkpoint.files] == [
        ("soundstream_encoder.tflite", "encoder"), ("quantizer.tflite", "both"), ("lyragan.tflite", "decoder")]


def test_registry_list_is_one_whole_line_per_entry(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 30: `registry list` was 249 lines at 120 columns, with ids cut into look-alikes.
    from codecarena import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["registry", "list"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    entries = load_all()
    assert lines[0] == f"codec registry: {len(entries)} entries"
    assert lines[1].split() == ["id", "family", "status", "pins", "runtime", "roles", "weights"]
    table = lines[2:2 + len(entries)]
    assert [line.split()[0] for line in table] == [e.id for e in entries]
    assert max(len(line) for line in lines[:2 + len(entries)]) <= 120
    by_id = {line.split()[0]: line.split() for line in table}
    assert by_id["lyra_v2"] == ["lyra_v2", "lyra", "streaming_verified", "yes", "main", "deploy,low-bit", "Apache-2.0"]
    assert by_id["encodec"][-3:] == ["see", "show", "[NC]"]  # a licence too long for a cell, non-commercial
    assert "codecarena registry show ID" in " ".join(lines[2 + len(entries):])


def test_registry_show_says_an_entry_whole(capsys: pytest.CaptureFixture[str]) -> None:
    from codecarena import cli

    for name in ("encodec", "fish_dac"):  # a registry id, and a family (its entry is fish_s2_codec)
        with pytest.raises(SystemExit) as exited:
            cli.main(["registry", "show", name])
        assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("encodec: EnCodec 24 kHz (family encodec, codec)\n"
                          "  roles: frontier_teacher, low_bit_teacher\n")
    assert "[NON-COMMERCIAL]" in out and "encodec_24khz-d7cc33bc.th: 93171529 bytes, sha256 d7cc33bc" in out
    assert "\nfish_s2_codec: " in out and "pins complete: no: checkpoint is partial (partial = true)" in out
    with pytest.raises(SystemExit) as exited:
        cli.main(["registry", "show", "nonesuch"])
    assert exited.value.code == 2


def test_entry_for_family_and_list_rows() -> None:
    assert entry_for_family("lyra").id == "lyra_v2"
    assert entry_for_family("opus").id == "opus"
    with pytest.raises(RegistryError, match="'nonesuch'"):
        entry_for_family("nonesuch")
    rows = {r["id"]: r for r in list_rows(load_all())}
    assert rows["lyra_v2"] == {"id": "lyra_v2", "roles": ["deployment_teacher", "low_bit_teacher"],
                               "status": "streaming_verified", "pins_complete": True, "codec_family": "lyra",
                               "environment": "main", "weights_license": "Apache-2.0", "non_commercial": False,
                               "files": 3, "sizes_unpublished": [],
                               "why": "adapter codecarena.codecs.lyra.adapter"}
    assert rows["encodec"]["pins_complete"] is True and rows["encodec"]["environment"] == "isolated"
    assert rows["encodec"]["non_commercial"] is True
    assert rows["dac"]["sizes_unpublished"] == ["weights_24khz.pth"]
    assert rows["xcodec2"]["pins_complete"] is False
    # Every entry says why it has its status and what runs it, or what keeps an adapter from running it.
    assert all(row["why"] for row in rows.values())
    assert rows["bigcodec"]["why"] == "adapter codecarena.codecs.bigcodec.adapter"
    assert rows["wavtokenizer_large_speech_75"]["why"] == "adapter codecarena.codecs.wavtokenizer.adapter"
    assert "no adapter: the checkpoint is known only by prefix" in rows["wavtokenizer_small_40"]["why"]


def test_a_no_deps_pin_must_be_one_of_the_runtime_packages() -> None:
    isolated = 'environment = "isolated"\nlock = "toy.lock.txt"\npackages = ["a==1.0"]'
    text = toml().replace('environment = "main"\npackages = []', isolated)
    assert parse_entry(text, "toy.toml").runtime.no_deps == ()
    with_no_deps = text.replace('packages = ["a==1.0"]', 'packages = ["a==1.0"]\nno_deps = ["a==1.0"]')
    assert parse_entry(with_no_deps, "toy.toml").runtime.no_deps == ("a==1.0",)
    with pytest.raises(RegistryError, match="toy.toml.runtime: no_deps entry 'b==2.0' is not one of the runtime's packages"):
        parse_entry(text.replace('packages = ["a==1.0"]', 'packages = ["a==1.0"]\nno_deps = ["b==2.0"]'), "toy.toml")


def test_an_entry_without_an_adapter_says_what_blocks_one() -> None:
    with pytest.raises(RegistryError, match="adapter_blocker is required when codec_family is"):
        parse_entry(toml().replace('adapter_blocker = "a test entry"\n', ""), "toy.toml")
    with pytest.raises(RegistryError, match="adapter_blocker is only for entries without an adapter"):
        parse_entry(toml().replace('codec_family = ""', 'codec_family = "opus"'), "toy.toml")


# --- parsing ------------------------------------------------------------------------------------------

def test_a_minimal_entry_parses_and_is_pinned() -> None:
    entry = parse_entry(toml(), "toy.toml")
    assert entry.id == "toy" and entry.kind == "codec" and pins_complete(entry)
    assert rule_problems([entry, *load_all()]) == []


@pytest.mark.parametrize(("text", "key"), [
    (toml(extra_top='colour = "red"'), "'colour'"),
    (toml(source=f'commit = "{LYRA_COMMIT}"\nbranch = "main"'), "'branch'"),
    (toml(tables='[rate_knobs]\nbitrate_bps = 3200\n'), "bitrate_bps"),
    (toml(tables="[checkpoint]\npartial = true\nknown = \"x\"\nsize = 3\n"), "'size'"),
])
def test_unknown_keys_and_wrong_types_are_rejected_naming_file_and_key(text: str, key: str) -> None:
    with pytest.raises(RegistryError, match=f"^toy.toml.*{key}") as info:
        parse_entry(text, "toy.toml")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("source", ['release = ">=1.0"', 'release = "latest"', 'release = "1.*"',
                                    'commit = "main"', 'commit = "47698da"'])
def test_the_parser_refuses_a_floating_source_value(source: str) -> None:
    with pytest.raises(RegistryError, match=r"toy.toml.source: (commit|release) must be"):
        parse_entry(toml(source=source), "toy.toml")


def test_unpinned_needs_a_reason_and_a_codec_needs_a_role() -> None:
    with pytest.raises(RegistryError, match="status_reason is required"):
        parse_entry(toml(status="unpinned").replace('status_reason = "test"\n', ""), "toy.toml")
    with pytest.raises(RegistryError, match="roles may be empty only when kind is 'control'"):
        parse_entry(toml().replace('roles = ["low_bit_teacher"]', "roles = []"), "toy.toml")
    with pytest.raises(RegistryError, match="status 'bogus' is not one of"):
        parse_entry(toml(status="bogus"), "toy.toml")


# --- one failing case per auditor rule ----------------------------------------------------------------

def test_duplicate_id() -> None:
    assert mentions(rule_problems([*load_all(), lyra()]), "lyra_v2: duplicate id")


def test_a_role_no_entry_covers() -> None:
    entries = [e for e in load_all() if "communication_anchor" not in e.roles]
    assert rule_problems(entries) == ["registry: no entry covers role 'communication_anchor'"]


def test_frontier_teachers_that_are_all_low_bit() -> None:
    entries = [e for e in load_all() if not ("frontier_teacher" in e.roles and "low_bit_teacher" not in e.roles)]
    assert any("frontier_teacher" in e.roles for e in entries)
    assert rule_problems(entries) == ["registry: every frontier_teacher is also a low_bit_teacher (need one that is not)"]


@pytest.mark.parametrize(("changes", "gap"), [
    ({"source_commit": "", "source_release": ">=1.0"}, "is not an exact version"),
    ({"source_commit": "main"}, "is not a full 40-hex commit"),
    ({"source_commit": "47698da"}, "is not a full 40-hex commit"),
    ({"source_commit": "", "source_commit_prefix": "47698da"}, "no full commit or exact release"),
    ({"source_repository": ""}, "source repository not recorded"),
])
def test_a_floating_source_above_unpinned(changes: dict[str, str], gap: str) -> None:
    assert mentions(rule_problems([lyra(status="registered", **changes)]), "lyra_v2: status 'registered' but", gap)
    # The same entry marked unpinned is honest about it.
    assert not mentions(rule_problems([lyra(status="unpinned", status_reason="x", **changes)]), gap)


def test_commit_prefix_parses_but_is_refused_above_unpinned() -> None:
    entry = parse_entry(toml(status="scored", source='commit_prefix = "47698da"'), "toy.toml")
    assert mentions(rule_problems([entry]), "toy: status 'scored' but source records commit_prefix")


def test_a_partial_checkpoint_above_unpinned() -> None:
    tables = '[checkpoint]\npartial = true\nknown = "revision 47698da…, no URL"\n'
    entry = parse_entry(toml(status="scored", tables=tables), "toy.toml")
    assert entry.checkpoint is None and entry.partial_checkpoint == PartialCheckpoint("revision 47698da…, no URL")
    assert mentions(rule_problems([entry]), "toy: status 'scored' but checkpoint is partial")
    unpinned = parse_entry(toml(status="unpinned", tables=tables), "toy.toml")
    assert not mentions(rule_problems([unpinned]), "checkpoint is partial")


@pytest.mark.parametrize(("change", "gap"), [
    ({"url": ""}, "has no https URL"),
    ({"sha256": "237da0b1"}, "has no full sha256"),
    ({"sha256": ""}, "has no full sha256"),
    # A floating revision: a branch name where the commit belongs.
    ({"url": "https://raw.githubusercontent.com/google/lyra/main/lyra/model_coeffs/soundstream_encoder.tflite"},
     "is not at a fixed revision"),
    ({"url": "https://huggingface.co/google/lyra/resolve/main/soundstream_encoder.tflite"}, "is not at a fixed revision"),
    # A release tag without the commit it stands for.
    ({"url": "https://github.com/google/lyra/releases/download/v1.3.2/soundstream_encoder.tflite"},
     "is not at a fixed revision"),
])
def test_an_incomplete_checkpoint_file_above_unpinned(change: dict[str, object], gap: str) -> None:
    checkpoint = load_entry("lyra_v2").checkpoint
    assert checkpoint is not None
    files = (dataclasses.replace(checkpoint.files[0], **change), *checkpoint.files[1:])  # type: ignore[arg-type]
    entry = lyra(checkpoint=dataclasses.replace(checkpoint, files=files))
    assert mentions(rule_problems([entry]), "lyra_v2: status 'streaming_verified' but", gap)


@pytest.mark.parametrize("change", [
    # An immutable, hash-named URL (EnCodec's form), a release tag with its commit (DAC's form).
    {"url": "https://dl.example.org/v0/soundstream_encoder-237da0b1.tflite"},
    {"url": "https://github.com/google/lyra/releases/download/v1.3.2/soundstream_encoder.tflite", "tag": "v1.3.2",
     "revision": "a436c61015ee2c8dd92a2ed121cf15e13fe38789"},
    # A size never published: the sha256 alone is the identity.
    {"bytes": 0},
])
def test_fixed_urls_and_unpublished_sizes_are_complete_pins(change: dict[str, object]) -> None:
    checkpoint = load_entry("lyra_v2").checkpoint
    assert checkpoint is not None
    files = (dataclasses.replace(checkpoint.files[0], **change), *checkpoint.files[1:])  # type: ignore[arg-type]
    assert own(rule_problems([lyra(checkpoint=dataclasses.replace(checkpoint, files=files))])) == []


def test_a_release_tag_needs_its_commit_and_a_given_size_must_be_positive() -> None:
    checkpoint = """[checkpoint]
revision = "{rev}"
license = "MIT"
gated = false
mirror_dir = "toy"

[[checkpoint.files]]
name = "w.pth"
url = "https://example.org/w.pth"
sha256 = "{sha}"
side = "both"
{extra}
"""
    def parse(extra: str) -> Entry:
        return parse_entry(toml(tables=checkpoint.format(rev="a" * 40, sha="0" * 64, extra=extra)), "toy.toml")
    with pytest.raises(RegistryError, match="tag needs the revision"):
        parse('tag = "0.0.1"')
    with pytest.raises(RegistryError, match="bytes must be positive"):
        parse("bytes = 0")
    assert parse("").checkpoint.files[0].bytes == 0  # type: ignore[union-attr]


def test_per_configuration_files() -> None:
    checkpoint = load_entry("dac").checkpoint
    assert checkpoint is not None
    assert [f.name for f in checkpoint.for_config("16khz").files] == ["weights_16khz.pth"]
    assert [f.name for f in checkpoint.for_config("44khz").files] == ["weights.pth"]
    assert checkpoint.for_config("24khz").files[0].bytes == 0  # never published
    assert load_entry("encodec").checkpoint.non_commercial  # type: ignore[union-attr]
    assert not checkpoint.non_commercial


def test_a_checkpoint_revision_that_is_not_a_commit() -> None:
    checkpoint = load_entry("lyra_v2").checkpoint
    assert checkpoint is not None
    entry = lyra(checkpoint=dataclasses.replace(checkpoint, revision="v1.3.2"))
    assert mentions(rule_problems([entry]), "lyra_v2:", "revision 'v1.3.2' is not a full 40-hex commit")


def test_an_unknown_status() -> None:
    assert mentions(rule_problems([lyra(status="benchmarked")]), "lyra_v2: unknown status 'benchmarked'")


def test_unpinned_with_every_pin_complete_must_be_promoted() -> None:
    assert mentions(rule_problems([lyra(status="unpinned", status_reason="x")]), "promote it to 'registered'")


def test_an_isolated_runtime_without_its_lock() -> None:
    entry = lyra(runtime=Runtime("3.11", "isolated", "nonesuch.txt"))
    assert mentions(rule_problems([entry]), "lyra_v2: isolated runtime lock", "missing")
    encodec = load_entry("encodec")
    pinned = dataclasses.replace(encodec, runtime=dataclasses.replace(encodec.runtime, packages=("torch==2.12.0",)))
    assert mentions(rule_problems([pinned]), "encodec: runtime package 'torch==2.12.0' is not in its lock")


# --- check_local --------------------------------------------------------------------------------------

def _models() -> Path:
    models = Path(os.environ.get("CODECARENA_MODELS", "/work/shared/models"))
    if not (models / "lyra_v2").is_dir():
        pytest.skip(f"no Lyra v2 model mirror at {models / 'lyra_v2'} (set CODECARENA_MODELS)")
    return models


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    target = tmp_path / "models"
    shutil.copytree(_models() / "lyra_v2", target / "lyra_v2")
    for path in (target / "lyra_v2").iterdir():
        path.chmod(0o644)
    return target


def test_check_local_passes_on_the_real_mirror(mirror: Path) -> None:
    assert rule_problems(load_all(), check_local=True, models_dir=mirror) == []


def test_check_local_a_missing_checkpoint_file(mirror: Path) -> None:
    (mirror / "lyra_v2" / "lyragan.tflite").unlink()
    problems = rule_problems([lyra(status="scored")], check_local=True, models_dir=mirror)
    assert mentions(problems, "lyra_v2: status 'scored' but checkpoint absent or different",
                    "lyragan.tflite: checkpoint file missing")


def test_check_local_a_tampered_checkpoint_file(mirror: Path) -> None:
    victim = mirror / "lyra_v2" / "quantizer.tflite"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    problems = rule_problems([lyra(status="scored")], check_local=True, models_dir=mirror)
    assert mentions(problems, "lyra_v2: status 'scored' but", "quantizer.tflite: sha256 mismatch")
    # Below `installed` nothing local is claimed, so nothing local is checked.
    assert own(rule_problems([lyra(status="registered")], check_local=True, models_dir=mirror)) == []


def test_check_local_a_main_package_at_another_version() -> None:
    entry = dataclasses.replace(load_entry("opus"), status="installed",
                                runtime=Runtime("3.11", "main", "", ("av==0.0.1", "no-such-package-xyz==1.0")))
    problems = rule_problems([entry], check_local=True)
    assert mentions(problems, "opus: status 'installed' but runtime package av==0.0.1 is not installed (found ")
    assert mentions(problems, "no-such-package-xyz==1.0 is not installed (found nothing)")
    assert own(rule_problems([load_entry("opus"), load_entry("codec2"), load_entry("pcm")], check_local=True)) == []


def test_check_local_an_isolated_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = dataclasses.replace(load_entry("encodec"), status="installed", checkpoint=None)
    fake = types.ModuleType("codecarena.runtime.venvs")
    fake.env_dir = lambda registry_id: tmp_path / "envs" / registry_id  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "codecarena.runtime.venvs", fake)
    assert mentions(rule_problems([entry], check_local=True), "encodec: status 'installed' but isolated runtime absent")
    (tmp_path / "envs" / "encodec").mkdir(parents=True)
    (tmp_path / "envs" / "encodec" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert own(rule_problems([entry], check_local=True)) == []
