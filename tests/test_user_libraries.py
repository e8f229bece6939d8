"""The shared libraries a user's command-line codec loads are pinned with its programs (issue 38, 6):
`codec add` pins each by path, size and sha256, and a changed one stops a run, fails the audit and
shows in `codec list`, in one line naming the library and both hashes.

Two real programs: ffmpeg (Debian's, whose codecs live in libavcodec) and a program compiled here that
loads a library of its own from a temporary folder (its RUNPATH), so that the test can change the very
file the loader maps. Expected hashes are taken with hashlib of the files themselves.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from codecarena.files import sha256_json
from codecarena.registry.libraries import Library, LibraryError, check, pin
from codecarena.results.record import PlanUserCodec, parse_run_record
from codecarena.results.schema import SchemaError

from conftest import codecarena, rows_of

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the test's program")
needs_ffmpeg = pytest.mark.skipif(not Path("/usr/bin/ffmpeg").is_file(), reason="ffmpeg is not installed")

LIBRARY_C = r"""
#include <stdio.h>
int tiny_copy(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    char block[4096];
    size_t n;
    if (!in || !out) return 1;
    while ((n = fread(block, 1, sizeof block, in)) > 0) fwrite(block, 1, n, out);
    fclose(in);
    return fclose(out) != 0;
}
"""
PROGRAM_C = r"""
int tiny_copy(const char *src, const char *dst);
int main(int argc, char **argv) { return argc == 4 ? tiny_copy(argv[2], argv[3]) : 2; }
"""


def _build(folder: Path) -> tuple[Path, Path]:
    """A program `tool` that copies its input to its output through libtiny.so, which it loads from
    `folder/lib` (RUNPATH): the program and the library."""
    lib = folder / "lib"
    lib.mkdir(parents=True)
    (folder / "tiny.c").write_text(LIBRARY_C)
    (folder / "tool.c").write_text(PROGRAM_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib / "libtiny.so", folder / "tiny.c"], check=True)
    subprocess.run(["cc", "-o", folder / "tool", folder / "tool.c", f"-L{lib}", "-ltiny", f"-Wl,-rpath,{lib}"],
                   check=True)
    return folder / "tool", lib / "libtiny.so"


def _declaration(program: str, name: str, encode: list[str], decode: list[str]) -> str:
    return textwrap.dedent(f"""\
        api_version = 1
        kind = "command"
        name = "mine"
        description = "a test's own program"
        configs = ["ok"]
        default_config = "ok"

        [command]
        bandwidth = "narrowband"
        audio = "s16le"
        framing = "raw"
        encode = {json.dumps(encode)}
        decode = {json.dumps(decode)}
        length_tolerance = 0

        [[command.binaries]]
        name = "{name}"
        path = "{program}"

        [command.configs.ok]
        nominal_bps = 128000
        """)


def _add(tmp_path: Path, declaration: str) -> dict[str, str]:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    (tmp_path / "mine.toml").write_text(declaration)
    added = codecarena("codec", "add", "mine", "--declaration", tmp_path / "mine.toml", env=env)
    assert added.returncode == 0, added.stdout + added.stderr
    return env


def _record(env: dict[str, str]) -> Path:
    return Path(env["XDG_DATA_HOME"]) / "codecarena" / "codecs" / "mine" / "unit.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_ffmpeg
def test_codec_add_pins_the_libraries_ffmpeg_loads_libavcodec_among_them(tmp_path: Path) -> None:
    """ffmpeg as a G.711 codec of one's own: its codec is in libavcodec, which is pinned by its size and
    the sha256 of the file (links followed), and `codec show` lists it."""
    common = ["-nostdin", "-loglevel", "error", "-f", "s16le", "-ar", "8000", "-ac", "1"]
    env = _add(tmp_path, _declaration("/usr/bin/ffmpeg", "ffmpeg",
                                      ["{ffmpeg}", *common, "-i", "{input}", "-f", "mulaw", "{output}"],
                                      ["{ffmpeg}", "-nostdin", "-loglevel", "error", "-f", "mulaw", "-ar", "8000",
                                       "-ac", "1", "-i", "{input}", "-f", "s16le", "{output}"]))
    record = json.loads(_record(env).read_text())
    assert record["version"] == 2
    pinned = {Path(lib["path"]).name: lib for lib in record["libraries"]}
    (avcodec,) = [name for name in pinned if name.startswith("libavcodec.so.")]
    path = Path(pinned[avcodec]["path"])
    assert pinned[avcodec] == {"binary": "ffmpeg", "path": str(path), "bytes": path.stat().st_size,
                               "sha256": _sha256(path.resolve())}
    assert "libc.so.6" in pinned and len(pinned) > 20
    shown = codecarena("codec", "show", "mine", env=env)
    assert shown.returncode == 0 and f"    {path}: {path.stat().st_size} bytes, sha256 {_sha256(path)}" in shown.stdout


@needs_cc
def test_a_changed_library_stops_the_run_fails_the_audit_and_shows_in_codec_list(
        speech_dir: Path, tmp_path: Path) -> None:
    """The program's own library changes after the codec was added and a run made with it: a new run is
    refused before any row, the audit of the earlier run fails, `codec list` says changed; each names
    the library and both hashes."""
    tool, library = _build(tmp_path / "build")
    env = _add(tmp_path, _declaration(str(tool), "tool", ["{tool}", "encode", "{input}", "{output}"],
                                      ["{tool}", "decode", "{input}", "{output}"]))
    out = tmp_path / "run"
    made = codecarena("run", "--input", speech_dir, "--codec", "mine:ok", "--metrics", "none", "--out", out, env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    assert {r["status"] for r in rows_of(out)} == {"ok"}
    assert codecarena("audit", out, env=env).returncode == 0
    before, size = _sha256(library), library.stat().st_size
    record = json.loads((out / "run.json").read_text())
    assert record["version"] == 10 and [lib for lib in record["plan"]["user_codecs"][0]["libraries"]
                                       if lib["path"] == str(library)] == [
        {"binary": "tool", "path": str(library), "sha256": before, "bytes": size}]
    with pytest.raises(SchemaError, match="unexpected key 'libraries' in a version 8 record"):
        parse_run_record({**record, "version": 8})
    data = bytearray(library.read_bytes())
    data[-1] ^= 0xFF  # one byte of the library's last section table entry
    library.write_bytes(bytes(data))
    after = _sha256(library)
    line = (f"library {library} (loaded by tool): sha256 {after} ({size} bytes) differs from its pin {before} "
            f"({size} bytes)")

    refused = codecarena("run", "--input", speech_dir, "--codec", "mine:ok", "--metrics", "none",
                         "--out", tmp_path / "run2", env=env)
    assert refused.returncode == 2 and not (tmp_path / "run2" / "rows.jsonl").exists()
    assert refused.stderr.strip().splitlines() == [f"codecarena: error: mine: {line}"], refused.stderr
    audit = codecarena("audit", out, env=env)
    assert audit.returncode == 1 and f"user codec mine: {line}; the run's payloads were made by the library it " \
                                     "had then" in audit.stdout, audit.stdout + audit.stderr
    listed = codecarena("codec", "list", env=env)
    assert listed.returncode == 0 and f"mine changed: {line}; to do: codecarena codec add mine --declaration FILE" \
        in listed.stdout.splitlines(), listed.stdout


@needs_cc
def test_a_library_loaded_but_not_pinned_or_pinned_but_not_loaded_is_refused(tmp_path: Path) -> None:
    tool, library = _build(tmp_path)
    pins = pin("tool", str(tool))
    assert Library("tool", str(library), _sha256(library), library.stat().st_size) in pins
    check("tool", str(tool), pins)
    others = tuple(p for p in pins if p.path != str(library))
    with pytest.raises(LibraryError, match=f"^binary tool \\({tool}\\) now loads {library}, which was not pinned$"):
        check("tool", str(tool), others)
    source = tmp_path / "tool.c"
    ghost = Library("tool", str(source), _sha256(source), source.stat().st_size)
    with pytest.raises(LibraryError, match="no longer loads .*tool.c, which was pinned$"):
        check("tool", str(tool), (*pins, ghost))
    library.unlink()
    with pytest.raises(LibraryError, match="needs libtiny.so, which the dynamic loader does not find$"):
        pin("tool", str(tool))


def test_a_script_loads_no_library_and_a_version_1_command_codec_must_be_added_again(tmp_path: Path) -> None:
    """A script is no ELF file: it pins no library. A command-line codec recorded before libraries were
    pinned (unit.json version 1) is refused, naming the command that pins it again."""
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\nexec cp \"$3\" \"$4\"\n")
    script.chmod(0o755)
    assert pin("tool", str(script)) == ()
    env = _add(tmp_path, _declaration(str(script), "tool", ["{tool}", "encode", "{input}", "{output}"],
                                      ["{tool}", "decode", "{input}", "{output}"]))
    record = json.loads(_record(env).read_text())
    assert record["libraries"] == []
    del record["libraries"]
    _record(env).write_text(json.dumps({**record, "version": 1}))
    refused = codecarena("run", "--input", tmp_path, "--codec", "mine:ok", "--out", tmp_path / "run", env=env)
    assert refused.returncode == 2 and "added before codecarena pinned the shared libraries its programs load; " \
        "add the codec again (codecarena codec add mine --declaration FILE)" in refused.stderr, refused.stderr
    assert not os.path.exists(tmp_path / "run" / "rows.jsonl")


def test_the_pin_of_a_codec_without_libraries_is_written_and_hashed_as_before() -> None:
    """run.json version 9 adds `libraries` only to a pin that has them: a Python codec's pin, and so the
    plan of a run made before, hash as they did."""
    before = {"name": "adpcm", "declaration_sha256": "1" * 64, "source_sha256": "2" * 64, "checkpoints": {},
              "requirements_sha256": None, "binaries": {}}
    pinned = PlanUserCodec(**before)
    assert pinned.to_dict() == before and pinned.sha256 == sha256_json(before)
    library = Library("tool", "/lib/libtiny.so", "3" * 64, 10)
    assert PlanUserCodec(**before, libraries=[library]).to_dict() == {
        **before, "libraries": [{"binary": "tool", "path": "/lib/libtiny.so", "sha256": "3" * 64, "bytes": 10}]}
