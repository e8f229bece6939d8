"""Whole runs with hostile user codecs (issue 36; docs/security.md, "User codecs: what is confined and
how each promise is tested"): the codecs of tests/fixtures/hostile/, one per defect of the issue, each
refused, contained or caught with its row failed and every other row intact (and the run's files what
its rows say: the plain audit passes); and the issue's "done when": Opus beside a codec that tries all
of it, in cold and in warm mode, gives the payloads and scores it gives alone.

Each test fails on codecarena before its sandbox (run them with PYTHONPATH=/work/main/src): no module
of the sandbox is imported here, only the command line is run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror, rows_of
from test_sandbox import HOSTILE, add_hostile, home, marker, plant_bytecode, sleepers  # noqa: F401 (fixtures)

def _clips(tmp_path: Path, n: int = 2) -> Path:
    need_mirror()
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    for i, name in enumerate(SHORT_CLIPS[:n]):
        shutil.copy(MIRROR / name, folder / f"clip{i}.wav")
    return folder


def _hostile_run(tmp_path: Path, env: dict[str, str], out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`codecarena run` with the hostile codecs' targets in its environment, the harness's own pid included."""
    wrapper = 'HOSTILE_HARNESS_PID=$$; export HOSTILE_HARNESS_PID; exec "$@"'
    command = ["sh", "-c", wrapper, "sh", sys.executable, "-m", "codecarena", "run", "--input", str(_clips(tmp_path)),
               "--workers", "1", "--out", str(out), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **env, "HOSTILE_RUN": str(out), "COLUMNS": "200"})


def _by_family(out: Path) -> dict[str, list[dict]]:  # type: ignore[type-arg]
    rows: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for row in rows_of(out):
        rows.setdefault(row["family"], []).append(row)
    return rows


def _intact(out: Path, env: dict[str, str], family: str, rows: dict[str, list[dict]]) -> None:  # type: ignore[type-arg]
    """Every row of `family` ok, and the run's files what its rows say (the plain audit)."""
    assert len(rows[family]) == 2 and all(r["status"] == "ok" for r in rows[family]), rows[family]
    audit = codecarena("audit", out, env=env)
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.slow
def test_defect_1_metadata_outside_the_run_cannot_be_changed(tmp_path: Path, home: dict[str, str]) -> None:
    add_hostile(home, tmp_path, "meta")
    folder = tmp_path / "outside"
    folder.mkdir(mode=0o755)
    victim = folder / "victim.txt"
    victim.write_text("someone else's")
    before = [(p.stat().st_mode, p.stat().st_mtime_ns, p.stat().st_uid, p.stat().st_gid) for p in (folder, victim)]
    env = {**home, "HOSTILE_VICTIM": str(victim), "HOSTILE_VICTIM_DIR": str(folder)}
    out = tmp_path / "run"
    done = _hostile_run(tmp_path, env, out, "--codec", "meta:q8", "--codec", "pcm:16", "--metrics", "none")
    assert done.returncode == 1, done.stdout + done.stderr
    rows = _by_family(out)
    for row in rows["meta"]:
        assert row["status"] == "failed" and row["error"] == (
            "encode: PermissionError: hostile meta: refused: chmod 000 (PermissionError), utime 1970 (PermissionError), "
            "chown 1234 (PermissionError), chmod a folder 777 (PermissionError), setxattr (PermissionError)")
    after = [(p.stat().st_mode, p.stat().st_mtime_ns, p.stat().st_uid, p.stat().st_gid) for p in (folder, victim)]
    assert after == before and os.listxattr(victim) == []
    _intact(out, env, "pcm", rows)


@pytest.mark.slow
def test_defect_2_in_warm_mode_a_codec_writes_nowhere_in_the_run_but_its_own_folder(tmp_path: Path,
                                                                                   home: dict[str, str]) -> None:
    add_hostile(home, tmp_path, "runwriter")
    out = tmp_path / "run"
    done = _hostile_run(tmp_path, home, out, "--codec", "opus:6k", "--codec", "runwriter:q8", "--mode", "warm",
                        "--cold-sample", "0", "--metrics", "none")
    assert done.returncode == 1, done.stdout + done.stderr
    rows = _by_family(out)
    for row in rows["runwriter"]:
        assert row["status"] == "failed" and row["mode"] == "warm"
        assert row["error"] == (
            "encode: PermissionError: hostile runwriter: refused: create references/planted.wav (PermissionError), "
            "create payloads/opus_6k/planted.ccap (PermissionError), create beside its own output, "
            "payloads/runwriter_q8/planted.ccap (PermissionError), open rows.jsonl for writing (PermissionError), "
            "open run.json for writing (PermissionError)"), row["error"]
    assert not list(out.rglob("planted*"))
    _intact(out, home, "opus", rows)


@pytest.mark.slow
def test_defect_3_in_warm_mode_a_codec_cannot_patch_the_codecs_beside_it(tmp_path: Path, home: dict[str, str]) -> None:
    add_hostile(home, tmp_path, "patcher")
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    warm = ("--mode", "warm", "--cold-sample", "0", "--metrics", "none")
    assert _hostile_run(tmp_path, home, alone, "--codec", "opus:6k", *warm).returncode == 0
    done = _hostile_run(tmp_path, home, beside, "--codec", "patcher:q8", "--codec", "opus:6k", *warm)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _by_family(beside)
    assert all(r["status"] == "ok" for r in rows["patcher"])  # it may patch its own process
    _same_opus(alone, beside, ("payload_sha256", "decoded_sha256", "replay_identical"))
    replay = codecarena("audit", beside, "--replay", env=home)
    assert replay.returncode == 0, replay.stdout + replay.stderr


def _same_opus(alone: Path, beside: Path, fields: tuple[str, ...]) -> None:
    expected = {r["utterance"]: r for r in rows_of(alone)}
    found = {r["utterance"]: r for r in rows_of(beside) if r["family"] == "opus"}
    assert sorted(found) == sorted(expected)
    for utt, row in found.items():
        assert row["status"] == "ok", row["error"]
        for field in fields:
            assert row[field] == expected[utt][field], (utt, field)


@pytest.mark.slow
def test_defect_5_in_cold_mode_a_codec_cannot_overwrite_another_utterances_payload(tmp_path: Path,
                                                                                   home: dict[str, str]) -> None:
    add_hostile(home, tmp_path, "neighbour")
    out = tmp_path / "run"
    done = _hostile_run(tmp_path, home, out, "--codec", "neighbour:q8", "--codec", "pcm:16", "--metrics", "none")
    assert done.returncode == 1, done.stdout + done.stderr  # not "2/2 ok"
    rows = _by_family(out)
    first, second = sorted(rows["neighbour"], key=lambda r: r["status"] != "ok")
    assert first["status"] == "ok" and second["status"] == "failed"
    assert second["error"] == (f"encode: PermissionError: hostile neighbour: refused: overwrite "
                               f"{first['utterance']}.ccap (PermissionError)")
    payload = out / first["payload"]
    assert payload.read_bytes() != b"forged" and _sha256(payload) == first["payload_sha256"]
    _intact(out, home, "pcm", rows)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_defect_6_a_setsid_daemon_does_not_outlive_its_stage(tmp_path: Path, home: dict[str, str], marker: str,
                                                             mode: str) -> None:
    add_hostile(home, tmp_path, "daemon")
    out = tmp_path / "run"
    done = _hostile_run(tmp_path, {**home, "HOSTILE_SLEEP": marker}, out, "--codec", "daemon:q8", "--codec", "pcm:16",
                        "--mode", mode, "--cold-sample", "0", "--metrics", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sleepers(marker) == []  # contained: both daemons, one a row, ended with their stage
    rows = _by_family(out)
    assert all(r["status"] == "ok" for r in rows["daemon"])
    _intact(out, home, "pcm", rows)


@pytest.mark.slow
def test_defect_7_a_codec_cannot_kill_the_harness(tmp_path: Path, home: dict[str, str]) -> None:
    add_hostile(home, tmp_path, "killer")
    out = tmp_path / "run"
    done = _hostile_run(tmp_path, home, out, "--codec", "killer:q8", "--codec", "pcm:16", "--metrics", "none")
    assert done.returncode in (0, 1), done.stdout + done.stderr  # not 137: the harness lived
    assert json.loads((out / "run.json").read_text())["finished"] is True
    rows = _by_family(out)
    assert len(rows["killer"]) == 2  # contained: the harness is beyond its reach; its row as it went
    _intact(out, home, "pcm", rows)


@pytest.mark.slow
def test_defect_8_a_planted_bytecode_cache_never_runs(tmp_path: Path, home: dict[str, str]) -> None:
    package = tmp_path / "pyc"
    shutil.copytree(HOSTILE / "pycpkg", package)
    added = codecarena("codec", "add", "pyc", "--module", package, env=home)
    assert added.returncode == 0, added.stdout + added.stderr
    for name in ("__init__.py", "quantise.py"):
        plant_bytecode(package / name, "raise RuntimeError('planted bytecode ran')")
    out = tmp_path / "run"
    done = _hostile_run(tmp_path, home, out, "--codec", "pyc:q8", "--codec", "pcm:16", "--metrics", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _by_family(out)
    assert all(r["status"] == "ok" for r in rows["pyc"]), [r["error"] for r in rows["pyc"]]
    _intact(out, home, "pcm", rows)


@pytest.mark.slow
def test_defect_9_a_command_line_codec_is_confined_too(tmp_path: Path, home: dict[str, str]) -> None:
    outside = tmp_path / "outside" / "escaped.txt"
    outside.parent.mkdir()
    tool = tmp_path / "escape-tool"
    tool.write_text(f"#!{sys.executable}\n" + (HOSTILE / "escape_tool.py").read_text().replace("ESCAPE_TO",
                                                                                               repr(str(outside))))
    tool.chmod(0o755)
    from codecarena.registry.binaries import identify

    declaration = tmp_path / "escape.toml"
    declaration.write_text(textwrap.dedent(f"""\
        api_version = 1
        kind = "command"
        name = "escape"
        description = "a command-line codec that writes outside the run"
        configs = ["ok"]
        default_config = "ok"

        [command]
        bandwidth = "narrowband"
        framing = "raw"
        encode = ["{{tool}}", "encode", "{{input}}", "{{output}}"]
        decode = ["{{tool}}", "decode", "{{input}}", "{{output}}"]
        length_tolerance = 0

        [[command.binaries]]
        name = "tool"
        path = "{tool}"
        sha256 = "{identify('tool', tool).sha256}"

        [command.configs.ok]
        nominal_bps = 64000
        """))
    added = codecarena("codec", "add", "escape", "--declaration", declaration, env=home)
    assert added.returncode == 0, added.stdout + added.stderr
    out = tmp_path / "run"
    done = _hostile_run(tmp_path, home, out, "--codec", "escape:ok", "--codec", "pcm:16", "--metrics", "none")
    assert done.returncode == 1, done.stdout + done.stderr
    assert not outside.exists()
    rows = _by_family(out)
    for row in rows["escape"]:
        assert row["status"] == "failed" and "encode command" in row["error"] and "exited with status 1" in row["error"]
        assert f"PermissionError: [Errno 13] Permission denied: '{outside}'" in row["error"], row["error"]
    _intact(out, home, "pcm", rows)


@pytest.mark.slow
def test_defect_12_a_codec_has_no_network_and_cannot_signal_the_harness(tmp_path: Path, home: dict[str, str]) -> None:
    add_hostile(home, tmp_path, "reach")
    out = tmp_path / "run"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        env = {**home, "HOSTILE_PORT": str(listener.getsockname()[1])}
        done = _hostile_run(tmp_path, env, out, "--codec", "reach:q8", "--codec", "pcm:16", "--metrics", "none")
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection arrived
    assert done.returncode == 1, done.stdout + done.stderr
    rows = _by_family(out)
    for row in rows["reach"]:
        assert row["status"] == "failed"
        assert row["error"].startswith("encode: PermissionError: hostile reach: refused: connect to the loopback "
                                       "listener (PermissionError), signal 0 to the harness ("), row["error"]
    _intact(out, home, "pcm", rows)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_opus_beside_a_codec_that_tries_everything_gives_what_it_gives_alone(tmp_path: Path, home: dict[str, str],
                                                                            marker: str, mode: str) -> None:
    """The issue's "done when": the codec patches Opus and the worker at import, writes beside its own
    output and into the run's files, changes metadata outside, connects to a loopback listener, signals
    its parent and the harness, and daemonises; Opus's payloads and scores are those of a run without it."""
    add_hostile(home, tmp_path, "everything")
    folder = tmp_path / "outside"
    folder.mkdir(mode=0o755)
    victim = folder / "victim.txt"
    victim.write_text("someone else's")
    before = [(p.stat().st_mode, p.stat().st_mtime_ns, p.stat().st_uid) for p in (folder, victim)]
    options = ("--mode", mode, "--cold-sample", "0", "--metrics", "stoi,pesq_wb")
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    assert _hostile_run(tmp_path, home, alone, "--codec", "opus:6k", *options).returncode == 0
    with socket.create_server(("127.0.0.1", 0)) as listener:
        env = {**home, "HOSTILE_VICTIM": str(victim), "HOSTILE_VICTIM_DIR": str(folder), "HOSTILE_SLEEP": marker,
               "HOSTILE_PORT": str(listener.getsockname()[1])}
        done = _hostile_run(tmp_path, env, beside, "--codec", "everything:q8", "--codec", "opus:6k", *options)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert done.returncode == 0, done.stdout + done.stderr
    # Every attack ran, and none got through (a kill(0) of its own group is nothing: see the fixture).
    scores = [line for log in (beside / "work").rglob("*.log") for line in log.read_text().splitlines()
              if line.startswith("hostile everything: escaped ")]
    assert len(scores) >= 2 and all(line.startswith("hostile everything: escaped [], ") or line.startswith(
        "hostile everything: escaped ['SIGKILL its parent (getppid() is 0)'], ") for line in scores), scores
    assert all("connect to the loopback listener (PermissionError)" in line and "chown 1234 (PermissionError)" in line
               for line in scores)
    assert all(r["status"] == "ok" for r in _by_family(beside)["everything"])
    _same_opus(alone, beside, ("payload_sha256", "decoded_sha256", "replay_identical", "metrics"))
    assert [(p.stat().st_mode, p.stat().st_mtime_ns, p.stat().st_uid) for p in (folder, victim)] == before
    assert sleepers(marker) == [] and not list(beside.rglob("planted*"))
    audit = codecarena("audit", beside, "--replay", env=home)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert not [p for p in beside.rglob("*") if stat.S_ISREG(p.lstat().st_mode) and p.read_bytes() == b"forged"]
