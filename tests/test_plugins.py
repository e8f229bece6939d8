"""Bring your own codec (issue 29): a Python codec added with `codecarena codec add` from a folder outside
the repository gets every guarantee a built-in family has (payload file, fresh-process decode, replay,
exact length, audit), is labelled "user codec" with its source hash, and an edit of its source after a
run is reported by the audit. A codec that misbehaves fails its own rows with the reason, never the
harness or another codec's rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from conftest import MIRROR, REPO, SHORT_CLIPS, codecarena, need_mirror, rows_of

# An 8-bit codec: each 16 kHz sample quantised to its top 8 bits (128 kbps), written for this test.
TOP8 = '''
import numpy as np

from codecarena.plugin import Adapter, CodeStream, Decoded, Encoded, Payload, from_int16, to_int16


class Top8(Adapter):
    input_rate = 16000

    def load(self):
        return {"parameters": 0}

    def encode(self, audio):
        codes = (to_int16(audio).astype(np.int32) + 32768) >> 8
        return Encoded(streams=(CodeStream("codes", 8, (len(codes),), codes.astype(np.uint64)),), side_info={})

    def decode(self, payload: Payload):
        values = payload.code_stream("codes").values.astype(np.int32)
        return Decoded(from_int16(((values << 8) - 32768 + 128).astype(np.int16)), self.input_rate)
{extra}

ADAPTER = {adapter}
'''

DECLARATION = '''api_version = 1
name = "{name}"
description = "a test codec"
configs = ["q8"]
default_config = "q8"
supported_weights = "none"
'''


def _codec(folder: Path, name: str, extra: str = "", adapter: str = "Top8") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    module = folder / f"{name}.py"
    module.write_text(TOP8.replace("{extra}", textwrap.dedent(extra)).replace("{adapter}", adapter))
    (folder / f"{name}.toml").write_text(DECLARATION.replace("{name}", name))
    return module


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A data home of its own: user codecs are kept per user."""
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


def _clips(tmp_path: Path, n: int = 1) -> Path:
    need_mirror()
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    for i, name in enumerate(SHORT_CLIPS[:n]):
        shutil.copy(MIRROR / name, folder / f"clip{i}.wav")
    return folder


def _add(env: dict[str, str], name: str, module: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return codecarena("codec", "add", name, "--module", module, *extra, env=env)


def test_a_codec_from_outside_the_repository_runs_audits_and_an_edit_is_reported(tmp_path: Path,
                                                                                 home: dict[str, str]) -> None:
    module = _codec(tmp_path / "elsewhere" / "mine", "top8")
    added = _add(home, "top8", module)
    assert added.returncode == 0, added.stdout + added.stderr
    out = tmp_path / "run"
    run = codecarena("run", "--input", _clips(tmp_path, 2), "--codec", "top8:q8", "--codec", "pcm:16",
                     "--metrics", "none", "--out", out, env=home)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [r for r in rows_of(out) if r["family"] == "top8"]
    assert len(rows) == 2 and all(r["status"] == "ok" and r["replay_identical"] for r in rows)
    for row in rows:
        assert row["decoded_samples"] == row["num_samples"]  # the exact length restored
        assert row["representation_bits"] == 8 * row["num_samples"]  # 8 bits a sample, counted from the payload
        assert row["registry"] == "user-top8" and row["model"]["user_codec"]["name"] == "top8"
        _assert_confined(row["model"]["confined"], out / "work" / "top8_q8" / row["utterance"] / "encode")
    assert rows[0]["model"]["user_codec"]["source_sha256"] == _sha256(module)
    plan = json.loads((out / "run.json").read_text())["plan"]
    assert [c["name"] for c in plan["user_codecs"]] == ["top8"]
    assert codecarena("audit", out, "--replay", env=home).returncode == 0
    board = codecarena("leaderboard", out, env=home)
    assert f"user codec {_sha256(module)[:12]}" in board.stdout

    module.write_text(module.read_text() + "\n# tuned\n")
    audit = codecarena("audit", out, env=home)
    assert audit.returncode == 1
    assert f"user codec top8: its source {module} changed since the run" in audit.stdout
    refused = codecarena("run", "--input", tmp_path / "in", "--codec", "top8:q8", "--metrics", "none",
                         "--out", tmp_path / "again", env=home)
    assert refused.returncode == 2 and "source changed since `codecarena codec add`" in refused.stderr
    assert not (tmp_path / "again").exists()


def _assert_confined(record: dict, folder: Path) -> None:  # type: ignore[type-arg]
    """What a row of a user codec records of its sandbox: exactly this kernel's Landlock ABI, writes
    only into the stage's private folder, and every protection named as applied or absent with why."""
    from codecarena.sandbox.landlock import abi_version

    abi = abi_version()
    assert record["version"] == 2 and record["landlock_abi"] == abi and record["network_declared"] is False
    named = {"writes", "tcp", "signals", "metadata", "sockets", "capabilities", "descendants", "bytecode"}
    assert set(record["applied"]) | set(record["absent"]) == named
    assert not set(record["applied"]) & set(record["absent"])
    if abi:
        assert record["writable"] == [str(folder.resolve())] and str(folder.resolve()) in record["applied"]["writes"]
    else:
        assert record["writable"] == [] and "not available" in record["absent"]["writes"]


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_example_adpcm_codec_is_64_kbps_exact_and_replays(tmp_path: Path, home: dict[str, str]) -> None:
    example = tmp_path / "adpcm"
    shutil.copytree(REPO / "examples" / "adpcm", example)
    assert _add(home, "adpcm", example / "adpcm.py").returncode == 0
    out = tmp_path / "run"
    run = codecarena("run", "--input", _clips(tmp_path, 2), "--codec", "adpcm:16k", "--codec", "adpcm:8k",
                     "--metrics", "none", "--out", out, env=home)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = rows_of(out)
    assert all(r["status"] == "ok" and r["replay_identical"] and r["decoded_samples"] == r["num_samples"] for r in rows)
    bps = {r["codec"]: r["representation_bps"] for r in rows}
    assert bps == {"adpcm:16k": 64000.0, "adpcm:8k": pytest.approx(32000.0, abs=20)}
    assert codecarena("audit", out, env=home).returncode == 0


def _guide_block(marker: str, language: str) -> str:
    """The code block of docs/plugins.md right after `<!-- marker -->`, as written."""
    text = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    return text.split(f"<!-- {marker} -->\n```{language}\n", 1)[1].split("```", 1)[0]


def test_the_guides_minimal_adapter_adds_runs_and_replays_as_written(tmp_path: Path, home: dict[str, str]) -> None:
    """Issue 38 (8): the guide's complete minimal adapter and its declaration, taken from the page, are a
    codec: added, run on one clip, its payload 8 bits a sample at its own 8 kHz, replayed identically,
    its claim read by the ledger. A guide whose code no longer runs fails here."""
    folder = tmp_path / "mulaw"
    folder.mkdir()
    (folder / "mulaw.py").write_text(_guide_block("minimal-adapter", "python"))
    (folder / "mulaw.toml").write_text(_guide_block("minimal-declaration", "toml"))
    added = _add(home, "mulaw", folder / "mulaw.py")
    assert added.returncode == 0, added.stdout + added.stderr
    out = tmp_path / "run"
    run = codecarena("run", "--input", _clips(tmp_path), "--codec", "mulaw:64k", "--metrics", "none", "--out", out,
                     env=home)
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = rows_of(out)
    assert row["status"] == "ok" and row["replay_identical"] and row["decoded_samples"] == row["num_samples"]
    assert row["codec_facts"]["resampled_to"] == 8000 and row["model"]["parameters"] == 0
    codes = row["codec_facts"]["codes"]
    assert row["representation_bits"] == 8 * codes and codes == pytest.approx(row["num_samples"] / 2, abs=1)
    (entry,) = json.loads((out / "summary.json").read_text())["ledger"]["codecs"]
    assert (entry["claim"]["bps"], entry["claim"]["source"], entry["claim_check"]["flag"]) == (64000, "standard", "ok")
    assert codecarena("audit", out, "--replay", env=home).returncode == 0


MISBEHAVING = {
    # a stage that raises: its rows fail with the exception, one line
    "broken": ("def load(self):\n    raise RuntimeError('the model file is corrupt')\n", "Broken"),
    # decoded audio 1000 samples short of the original: beyond the declared tolerance of 0
    "short": ("def decode(self, payload):\n    d = Top8.decode(self, payload)\n"
              "    return Decoded(d.audio[:-1000], d.sample_rate)\n", "Short"),
    # a sample rate that is not one
    "norate": ("def decode(self, payload):\n    d = Top8.decode(self, payload)\n    return Decoded(d.audio, 0)\n",
               "NoRate"),
    # the 16-bit samples themselves, not floats in [-1, 1]: 99.6% of them clipped
    "pcm16": ("def decode(self, payload):\n    d = Top8.decode(self, payload)\n"
              "    return Decoded((d.audio * 32768).astype(np.int16), d.sample_rate)\n", "Pcm16"),
    # complex samples, whose imaginary part a conversion would drop
    "complex": ("def decode(self, payload):\n    d = Top8.decode(self, payload)\n"
                "    return Decoded(d.audio + 0.5j, d.sample_rate)\n", "Complex"),
    # an error message that clears the terminal and prints a green all-clear (console spoofing)
    "escapes": ("def encode(self, audio):\n    raise RuntimeError('\\x1b[2J\\x1b[1;32mall rows ok\\x1b[0m\\x07')\n",
                "Escapes"),
    # a write outside the folders of its job
    "writer": ("def encode(self, audio):\n    open(OUTSIDE, 'w').write('x')\n    return Top8.encode(self, audio)\n",
               "Writer"),
    # a codec that never returns
    "hang": ("def encode(self, audio):\n    import time\n    time.sleep(3600)\n", "Hang"),
    # 1.6 GB in one go, beyond the memory limit
    "hog": ("def encode(self, audio):\n    import numpy as np\n    self.kept = np.ones(200_000_000)\n"
            "    return Top8.encode(self, audio)\n", "Hog"),
}


def test_a_user_codec_added_again_reruns_its_own_rows_only_and_each_row_is_tied_to_its_pin(
        tmp_path: Path, home: dict[str, str]) -> None:
    """Issue 38 (2): a user codec joins a baseline run with --add, and after it is added again (here its
    declaration edited) `run --add` computes its rows again and keeps every baseline row as it was; the
    plan holds the new pin, run.json's history the old one, and a row of the old pin fails the audit."""
    module = _codec(tmp_path / "mine", "top8")
    assert _add(home, "top8", module).returncode == 0
    out = tmp_path / "run"
    inputs = _clips(tmp_path, 2)
    base = ("run", "--input", inputs, "--metrics", "none", "--out", out)
    first = codecarena(*base, "--codec", "pcm:16", env=home)
    assert first.returncode == 0, first.stdout + first.stderr
    baseline = _by_utterance(rows_of(out))
    joined = codecarena(*base, "--codec", "top8:q8", "--add", env=home)
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert "adding 1 codec configuration (top8:q8) to the 1 of the run" in joined.stdout
    assert _by_utterance(r for r in rows_of(out) if r["codec"] == "pcm:16") == baseline
    old_rows = _by_utterance(r for r in rows_of(out) if r["codec"] == "top8:q8")
    old_pin = json.loads((out / "run.json").read_text())["plan"]["user_codecs"]

    declaration = module.with_suffix(".toml")
    declaration.write_text(declaration.read_text().replace("a test codec", "a test codec, described anew"))
    assert _add(home, "top8", module).returncode == 0
    plain = codecarena(*base, "--codec", "top8:q8", env=home)
    assert plain.returncode == 2 and "(user codec top8 was added again since the run: rerun with --add to compute " \
                                     "its rows again and keep every other row)" in plain.stderr
    again = codecarena(*base, "--codec", "top8:q8", "--add", env=home)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "user codec top8 was added again since the run: the rows of top8:q8 (2 rows) are computed again with its " \
           "new pin; every other row is kept" in again.stdout
    record = json.loads((out / "run.json").read_text())
    assert (record["execution"]["rows_resumed"], record["execution"]["rows_computed"]) == (2, 2)
    rows = rows_of(out)
    assert _by_utterance(r for r in rows if r["codec"] == "pcm:16") == baseline  # every baseline row kept as it was
    new_rows = _by_utterance(r for r in rows if r["codec"] == "top8:q8")
    (new_pin,) = record["plan"]["user_codecs"]
    assert new_pin["declaration_sha256"] == _sha256(declaration) != old_pin[0]["declaration_sha256"]
    assert record["history"][-1]["user_codecs"] == old_pin
    for old, new in zip(old_rows, new_rows):
        assert new["model"]["user_codec"]["declaration_sha256"] == new_pin["declaration_sha256"]
        assert new["model"]["user_codec"]["pin_sha256"] != old["model"]["user_codec"]["pin_sha256"]
    assert "pcm" in record["runtimes"] and "user-top8" in record["runtimes"]  # --add keeps the run's runtime records
    audited = codecarena("audit", out, "--replay", env=home)
    assert audited.returncode == 0, audited.stdout

    # A row the old pin made cannot pass as the new pin's.
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*baseline, old_rows[0], new_rows[1]]))
    audit = codecarena("audit", out, env=home)
    assert audit.returncode == 1
    where = f"top8:q8 {old_rows[0]['utterance']}"
    assert f"{where}: it was made by user codec declaration {old_pin[0]['declaration_sha256']}, the plan pins " \
           f"{new_pin['declaration_sha256']}" in audit.stdout
    assert f"{where}: it was made by user codec pin {old_rows[0]['model']['user_codec']['pin_sha256']}" in audit.stdout


def _by_utterance(rows: Iterable[dict]) -> list[dict]:  # type: ignore[type-arg]
    """Rows in utterance order (rows.jsonl holds them in the order they were done)."""
    return sorted(rows, key=lambda r: r["utterance"])


def test_codecs_that_misbehave_fail_their_own_rows_with_the_reason(tmp_path: Path, home: dict[str, str]) -> None:
    outside = tmp_path / "outside" / "written-by-a-codec.txt"
    outside.parent.mkdir()
    folder = tmp_path / "codecs"
    for name, (body, cls) in MISBEHAVING.items():
        extra = f"\nOUTSIDE = {str(outside)!r}\n\n\nclass {cls}(Top8):\n" + textwrap.indent(body, "    ")
        module = _codec(folder, name, extra, cls)
        added = _add(home, name, module)
        assert added.returncode == 0, added.stdout + added.stderr
    out = tmp_path / "run"
    codecs = [arg for name in MISBEHAVING for arg in ("--codec", f"{name}:q8")]
    run = codecarena("run", "--input", _clips(tmp_path), "--codec", "pcm:16", *codecs, "--metrics", "none",
                     "--stage-timeout", "20", "--memory-limit", "600M", "--out", out, env=home)
    assert run.returncode == 1, run.stdout + run.stderr  # rows failed; the harness finished the run
    errors = {r["family"]: r["error"] for r in rows_of(out)}
    assert errors["pcm"] == ""
    assert "RuntimeError: the model file is corrupt" in errors["broken"]
    assert "decoded length was off by 1000 samples" in errors["short"]
    assert "the decoder returned a sample rate of 0, not a rate" in errors["norate"]
    float_audio = "not audio: return a numpy array of float samples in [-1, 1]"
    assert errors["pcm16"] == f"decode: ValueError: the decoder returned int16 samples, {float_audio}", errors["pcm16"]
    assert errors["complex"] == f"decode: ValueError: the decoder returned complex128 samples, {float_audio}"
    assert errors["escapes"] == "encode: RuntimeError: \\x1b[2J\\x1b[1;32mall rows ok\\x1b[0m\\x07"
    assert "\x1b" not in run.stdout + run.stderr and "\x07" not in run.stdout + run.stderr
    assert "PermissionError" in errors["writer"] and str(outside) in errors["writer"]
    assert not outside.exists()
    assert "timeout" in errors["hang"] or "timed out" in errors["hang"], errors["hang"]
    assert "memory guard killed the encode worker" in errors["hog"], errors["hog"]
    assert codecarena("audit", out, env=home).returncode == 0  # failed rows, each with its reason, audit clean


def test_a_reason_a_worker_reports_is_stored_as_one_printable_line(tmp_path: Path) -> None:
    """The worker runs the codec's code, which can write its own report: the harness reading it
    writes out control characters, whatever wrote them."""
    import dataclasses

    from codecarena.runtime.protocol import PROTOCOL_VERSION, ProtocolError, StageReport, read_report, write_report

    report = StageReport(version=PROTOCOL_VERSION, stage="decode", ok=False, error="x\x1b]0;owned\x07\nFAKE\rline\x9b",
                         pid=1, started_at=0.0, imports_s=0.0, load_s=0.0, io_s=0.0, compute_s=0.0, warm_compute_s=[],
                         maxrss_bytes=0, peak_device_memory_bytes=None, audio_s=0.0, model={}, facts={}, runtime={},
                         device=None)
    write_report(tmp_path / "r.json", report)
    assert read_report(tmp_path / "r.json").error == "x\\x1b]0;owned\\x07\\nFAKE\\rline\\x9b"
    write_report(tmp_path / "r.json", dataclasses.replace(report, error=["not", "text"]))  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="error is list, not a string"):
        read_report(tmp_path / "r.json")


@pytest.mark.parametrize("audio, got", [
    (np.zeros(4, dtype=np.int16), "int16 samples"), (np.zeros(4, dtype=np.uint8), "uint8 samples"),
    (np.zeros(4, dtype=bool), "bool samples"), (np.zeros(4, dtype=np.complex64), "complex64 samples"),
    (np.array([0.0, None]), "object samples"), ([0.0, 0.5], "a list"), (None, "a NoneType"),
])
def test_decoded_audio_that_is_not_float_samples_is_refused(audio: object, got: str) -> None:
    from codecarena.worker import _float_audio

    with pytest.raises(ValueError) as refused:
        _float_audio(audio)
    assert str(refused.value) == f"the decoder returned {got}, not audio: return a numpy array of float samples in [-1, 1]"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_decoded_float_samples_of_any_width_are_audio(dtype: type) -> None:
    from codecarena.worker import _float_audio

    audio = _float_audio(np.array([0.25, -0.5], dtype=dtype))
    assert audio.dtype == np.float64 and audio.tolist() == [0.25, -0.5]


def test_a_codec_that_does_not_load_is_refused_at_add_in_one_line(tmp_path: Path, home: dict[str, str]) -> None:
    module = _codec(tmp_path / "c", "typo", "\nimport no_such_package_xyz\n")
    added = _add(home, "typo", module)
    assert added.returncode == 2
    (line,) = added.stderr.strip().splitlines()
    assert line == "codecarena: error: user codec typo does not load: ModuleNotFoundError: No module named " \
                   "'no_such_package_xyz'"
    assert "typo" not in codecarena("codecs", env=home).stdout  # nothing half-added


@pytest.mark.parametrize("declaration, message", [
    ('name = "other"', "declares the family 'other', not 'q'"),
    ('unknown_key = 1', "unknown key 'unknown_key'"),
    ('default_config = "q9"', "default_config 'q9' is not one of configs"),
])
def test_a_declaration_is_parsed_strictly(tmp_path: Path, home: dict[str, str], declaration: str,
                                          message: str) -> None:
    module = _codec(tmp_path, "q")
    toml = module.with_suffix(".toml")
    key = declaration.split(" = ")[0]
    lines = [line for line in toml.read_text().splitlines() if not line.startswith(f"{key} =")]
    toml.write_text("\n".join([*lines, declaration]) + "\n")
    added = _add(home, "q", module)
    assert added.returncode == 2 and message in added.stderr, added.stderr


def test_a_built_in_name_and_an_unsafe_name_are_refused(tmp_path: Path, home: dict[str, str]) -> None:
    module = _codec(tmp_path, "opus")
    assert "opus is a built-in family" in _add(home, "opus", module).stderr
    assert "must be lower-case letters" in _add(home, "../x", module).stderr


def test_a_broken_record_names_itself_and_stops_no_other_command(tmp_path: Path, home: dict[str, str]) -> None:
    module = _codec(tmp_path, "fine")
    assert _add(home, "fine", module).returncode == 0
    record = Path(home["XDG_DATA_HOME"]) / "codecarena" / "codecs" / "fine" / "unit.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "version": 9}))
    listed = codecarena("codec", "list", env=home)
    assert listed.returncode == 0 and "cannot be read" in listed.stdout
    run = codecarena("run", "--input", _clips(tmp_path), "--codec", "fine:q8", "--out", tmp_path / "r", env=home)
    assert run.returncode == 2 and "user codec 'fine' cannot be read" in run.stderr
    assert codecarena("codecs", env=home).returncode == 0


def _row(listing: str, name: str) -> list[str]:
    """The cells of `name`'s row in `codec list`'s table."""
    (line,) = [line for line in listing.splitlines() if line.startswith(f"│ {name} ")]
    return [cell.strip() for cell in line.strip("│ ").split("│")]


def test_codec_list_says_in_one_word_whether_each_codec_runs_now_and_what_to_do(tmp_path: Path,
                                                                               home: dict[str, str]) -> None:
    """Issue 38 (14): `codec list` showed the pins of a codec whose source had changed as if nothing had."""
    module = _codec(tmp_path / "mine", "top8")
    assert _add(home, "top8", module).returncode == 0
    listed = codecarena("codec", "list", env=home)
    assert listed.returncode == 0 and _row(listed.stdout, "top8")[:2] == ["top8", "ready"]
    assert "to do" not in listed.stdout

    module.write_text(module.read_text() + "\n# tuned\n")
    listed = codecarena("codec", "list", env=home)
    assert _row(listed.stdout, "top8")[:2] == ["top8", "changed"]
    assert (f"top8 changed: its source {module} changed since it was added; to do: codecarena codec add top8 "
            f"--module {module}") in listed.stdout.splitlines()
    module.unlink()
    listed = codecarena("codec", "list", env=home)
    assert _row(listed.stdout, "top8")[:2] == ["top8", "gone"]
    assert f"to do: codecarena codec add top8 --module NEW_PATH (or codecarena codec remove top8)" in listed.stdout


def test_codec_show_is_a_summary_in_words_and_json_on_request(tmp_path: Path, home: dict[str, str]) -> None:
    """Issue 38 (14): `codec show` printed its record as JSON, then the declaration's TOML."""
    module = _codec(tmp_path / "mine", "top8")
    assert _add(home, "top8", module).returncode == 0
    shown = codecarena("codec", "show", "top8", env=home)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1:4] == ["kind: Python module file", f"source: {module}",
                          f"  sha256 {_sha256(module)} (not in a git repository, when added)"]
    assert "  configs: q8; default q8; weights: none" in lines and "runtime: codecarena's environment" in lines
    assert lines[-1] == "now: ready, it runs (codecarena run --codec top8:q8)"
    assert not shown.stdout.lstrip().startswith("{") and "api_version" not in shown.stdout

    module.write_text(module.read_text() + "\n# tuned\n")
    lines = codecarena("codec", "show", "top8", env=home).stdout.splitlines()
    assert lines[-2:] == [f"now: changed, it does not run: its source {module} changed since it was added",
                          f"to do: codecarena codec add top8 --module {module}"]
    record = Path(home["XDG_DATA_HOME"]) / "codecarena" / "codecs" / "top8" / "unit.json"
    as_json = codecarena("codec", "show", "top8", "--json", env=home)
    assert json.loads(as_json.stdout) == json.loads(record.read_text())


def test_the_public_api_is_what_its_version_promises() -> None:
    import codecarena.plugin as plugin

    assert plugin.API_VERSION == 1
    assert sorted(plugin.__all__) == sorted(
        ["API_VERSION", "Adapter", "CodeStream", "CodecSpec", "Decoded", "Encoded", "Family", "Option", "PacketStream",
         "Payload", "from_int16", "parse_declaration", "parse_weights", "to_int16"])
    assert all(hasattr(plugin, name) for name in plugin.__all__)


def test_landlock_confines_writes_to_the_given_folders(tmp_path: Path) -> None:
    from codecarena.sandbox.landlock import abi_version

    if abi_version() == 0:
        pytest.skip("Landlock is not available on this kernel: nothing confines writes here, and rows say so")
    (tmp_path / "ok").mkdir()
    script = (f"from pathlib import Path\nfrom codecarena.sandbox.landlock import restrict\n"
              f"done = restrict([Path({str(tmp_path / 'ok')!r})], network=False)\n"
              f"open({str(tmp_path / 'ok' / 'in.txt')!r}, 'w').write('x')\n"
              f"try:\n    open({str(tmp_path / 'out.txt')!r}, 'w').write('x')\n    print('written')\n"
              f"except PermissionError:\n    print('refused', done.abi)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"refused {abi_version()}" and not (tmp_path / "out.txt").exists()
    assert (tmp_path / "ok" / "in.txt").read_text() == "x"


@pytest.mark.slow
def test_the_guide_takes_a_new_user_from_nothing_to_a_leaderboard_row(tmp_path: Path, home: dict[str, str]) -> None:
    """The commands of docs/plugins.md's guide, exactly as written, from a copy of the repository's
    examples, on the built-in smoke set (its local mirror); then its iteration (issue 38, 2): the codec
    edited and added again, `run --add` computes its rows again and keeps every baseline row."""
    need_mirror()
    shutil.copytree(REPO / "examples", tmp_path / "examples")

    def follow(marker: str) -> subprocess.CompletedProcess[str]:
        block = _guide_block(marker, "bash")
        script = f'set -euo pipefail\ncodecarena() {{ {sys.executable} -m codecarena "$@"; }}\n{block}'
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=1800,
                              env={**os.environ, **home, "CODECARENA_DATA": str(MIRROR), "COLUMNS": "200"})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    done = follow("guide")
    out = tmp_path / "runs" / "adpcm"
    rows = rows_of(out)
    assert {r["codec"] for r in rows} == {"adpcm:16k", "g722:64k", "opus:12k"} and all(r["status"] == "ok" for r in rows)
    assert "user codec" in done.stdout and "audit passed" in done.stdout

    source = tmp_path / "my-codec" / "adpcm.py"
    before = _sha256(source)
    iterated = follow("iterate")
    assert _sha256(source) != before
    again = rows_of(out)
    assert sorted((r for r in again if r["family"] != "adpcm"), key=lambda r: r["row_sha256"]) == \
        sorted((r for r in rows if r["family"] != "adpcm"), key=lambda r: r["row_sha256"])  # baselines kept
    assert {r["model"]["user_codec"]["source_sha256"] for r in again if r["family"] == "adpcm"} == {_sha256(source)}
    execution = json.loads((out / "run.json").read_text())["execution"]
    smoke = len(rows) // 3
    assert (execution["rows_computed"], execution["rows_resumed"]) == (smoke, 2 * smoke)
    assert f"user codec {_sha256(source)[:12]}" in iterated.stdout and "audit passed" in iterated.stdout


@pytest.mark.slow
def test_a_codec_with_requirements_runs_in_a_runtime_of_its_own(tmp_path: Path, home: dict[str, str]) -> None:
    example = tmp_path / "adpcm"
    shutil.copytree(REPO / "examples" / "adpcm", example)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("six==1.16.0\n")
    added = _add(home, "adpcm", example / "adpcm.py", "--requirements", requirements)
    assert added.returncode == 0, added.stdout + added.stderr
    env_python = Path(home["XDG_DATA_HOME"]) / "codecarena" / "envs" / "user-adpcm" / "bin" / "python"
    assert str(env_python) in added.stdout
    out = tmp_path / "run"
    run = codecarena("run", "--input", _clips(tmp_path), "--codec", "adpcm:16k", "--metrics", "none", "--out", out,
                     env=home)
    assert run.returncode == 0, run.stdout + run.stderr
    (row,) = rows_of(out)
    assert row["status"] == "ok" and row["runtime"]["executable"] == str(env_python)
    runtime = json.loads((out / "run.json").read_text())["runtimes"]["user-adpcm"]
    assert runtime["environment"] == "isolated" and "six==1.16.0" in runtime["packages"]
    assert codecarena("audit", out, "--replay", env=home).returncode == 0
