"""A user codec's sandbox (issue 36; docs/security.md, "User codecs: what is confined and how each
promise is tested").

The mechanisms one by one, each in a fresh process (Landlock, seccomp and a capability drop cannot be
undone): Landlock's TCP rights and scoping, the seccomp filter, the capability drop, the PID
namespace, imports from the pinned bytes, a stage's private folder, and the worker's refusals. Then
whole runs with hostile codecs: tests/test_hostile_codecs.py, which takes its helpers from here.
Modules of the sandbox are imported inside the tests, so that those also run against a codecarena
without them (PYTHONPATH=/work/main/src), where each of them fails.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import marshal
import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror

HOSTILE = Path(__file__).resolve().parent / "fixtures" / "hostile"


def _python(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter: what it confines stays confined to it."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def _landlock_abi() -> int:
    from codecarena.sandbox.landlock import abi_version

    return abi_version()


# --- Landlock: TCP and scoping ---------------------------------------------------------------------

def test_tcp_connect_and_bind_are_refused_unless_the_declaration_asks_for_network(tmp_path: Path) -> None:
    if _landlock_abi() < 4:
        pytest.skip("Landlock ABI < 4 has no network rights here: the seccomp filter alone refuses sockets")
    script = """
        import socket, sys
        from pathlib import Path
        from codecarena.sandbox.landlock import restrict
        done = restrict([Path(sys.argv[1])], network=sys.argv[3] == "network")
        outcome = []
        for what in ("connect", "bind"):
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", int(sys.argv[2]))) if what == "connect" else s.bind(("127.0.0.1", 0))
                outcome.append(what + " ok")
            except PermissionError:
                outcome.append(what + " refused")
        print(done.tcp, *outcome)
    """
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = str(listener.getsockname()[1])
        confined = _python(script, str(tmp_path), port, "none")
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection arrived
        declared = _python(script, str(tmp_path), port, "network")
    assert confined.stdout.split() == ["True", "connect", "refused", "bind", "refused"], confined.stderr
    assert declared.stdout.split() == ["False", "connect", "ok", "bind", "ok"], declared.stderr


def test_signals_and_abstract_unix_sockets_reach_only_the_sandboxs_own_processes(tmp_path: Path) -> None:
    if _landlock_abi() < 6:
        pytest.skip("Landlock ABI < 6 has no scoping here: only the PID namespace keeps the harness out of reach")
    name = f"codecarena-test-{secrets.token_hex(4)}"  # abstract: a leading NUL byte
    script = """
        import os, signal, socket, subprocess, sys
        from pathlib import Path
        from codecarena.sandbox.landlock import restrict
        done = restrict([Path(sys.argv[1])], network=False)
        outcome = [str(done.scoped)]
        try:
            os.kill(os.getppid(), 0)
            outcome.append("parent-signalled")
        except PermissionError:
            outcome.append("parent-refused")
        child = subprocess.Popen(["sleep", "30"])
        os.kill(child.pid, signal.SIGKILL)  # its own child: in its domain
        outcome.append(f"child-{child.wait()}")
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect("\\0" + sys.argv[2])
            outcome.append("abstract-connected")
        except PermissionError:
            outcome.append("abstract-refused")
        print(*outcome)
    """
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("\0" + name)
        listener.listen()
        done = _python(script, str(tmp_path), name)
    assert done.stdout.split() == ["True", "parent-refused", "child--9", "abstract-refused"], done.stderr


# --- seccomp --------------------------------------------------------------------------------------

SECCOMP = """
    import ctypes, errno, os, socket, sys
    from codecarena.sandbox.syscalls import install
    victim = sys.argv[1]
    install(network=sys.argv[2] == "network")
    libc = ctypes.CDLL(None, use_errno=True)
    outcome = []
    def attempt(what, action):
        try:
            action()
            outcome.append(what + ":ok")
        except PermissionError:
            outcome.append(what + ":refused")
    def raw(number, *args):  # a call the C library may not wrap, by its number (x86-64 and arm64 alike)
        if libc.syscall(number, *args) != 0 and ctypes.get_errno() == errno.EPERM:
            raise PermissionError
    attempt("chmod", lambda: os.chmod(victim, 0))
    attempt("fchmodat2", lambda: raw(452, -100, victim.encode(), 0, 0))
    attempt("utime", lambda: os.utime(victim, (0, 0)))
    attempt("chown", lambda: os.chown(victim, 1234, 1234))
    attempt("setxattr", lambda: os.setxattr(victim, "user.x", b"1"))
    attempt("io_uring", lambda: raw(425, 8, ctypes.create_string_buffer(120)))
    attempt("inet", lambda: socket.socket(socket.AF_INET).close())
    attempt("unix", lambda: socket.socket(socket.AF_UNIX).close())
    attempt("socketpair", lambda: [s.close() for s in socket.socketpair()])
    attempt("write", lambda: open(victim, "a").write("still writable without Landlock"))
    print(*outcome)
"""


def test_seccomp_refuses_metadata_io_uring_and_sockets_unless_network_is_declared(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("x")
    before = victim.stat()
    confined = _python(SECCOMP, str(victim), "none")
    assert confined.stdout.split() == ["chmod:refused", "fchmodat2:refused", "utime:refused", "chown:refused",
                                       "setxattr:refused", "io_uring:refused", "inet:refused", "unix:refused",
                                       "socketpair:ok", "write:ok"], confined.stderr
    after = victim.stat()
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
    assert os.listxattr(victim) == []
    declared = _python(SECCOMP, str(victim), "network")
    assert declared.stdout.split()[:6] == ["chmod:refused", "fchmodat2:refused", "utime:refused", "chown:refused",
                                           "setxattr:refused", "io_uring:refused"], declared.stderr
    assert declared.stdout.split()[6:8] == ["inet:ok", "unix:ok"]


# --- capabilities ---------------------------------------------------------------------------------

def test_every_capability_is_dropped_and_root_still_reads_its_own_files(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "checkpoint.bin").write_bytes(b"weights")
    os.chmod(private, 0o700)
    script = """
        import os, sys
        from codecarena.sandbox.capabilities import drop_all, held
        how = drop_all()
        sets = held()
        data = open(sys.argv[1], "rb").read()
        try:
            os.chown(sys.argv[1], 1234, 1234)
            chown = "changed"
        except PermissionError:
            chown = "refused"
        print(os.getuid(), hex(sets["CapEff"] | sets["CapPrm"] | sets["CapInh"] | sets["CapAmb"]), hex(sets["CapBnd"]),
              data.decode(), chown, how.split(":")[0])
    """
    done = _python(script, str(private / "checkpoint.bin"))
    if os.geteuid() == 0:
        # uid 0 kept, no capability in any set, the 0700 folder of root still readable, another's chown refused
        assert done.stdout.split() == ["0", "0x0", "0x0", "weights", "refused", "all", "dropped"], done.stderr
    else:
        assert done.stdout.split()[:2] == [str(os.geteuid()), "0x0"] and "none held" in done.stdout, done.stderr


# --- the PID namespace ----------------------------------------------------------------------------

def _launcher() -> tuple[str, ...]:
    from codecarena.sandbox.namespace import launcher

    prefix, why = launcher()
    if why:
        pytest.skip(f"no PID namespace here ({why}): the rows say so")
    return prefix


def sleepers(marker: str) -> list[int]:
    """Processes running `sleep MARKER`, anywhere on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and argv[0].endswith(b"sleep") and argv[1] == marker.encode():
                found.append(int(entry.name))
    return found


@pytest.fixture
def marker() -> str:  # type: ignore[misc]
    """The seconds a daemon sleeps: unique to this test, and whatever is left of it is killed after."""
    value = f"1234.{secrets.randbelow(10**6):06d}"
    yield value
    for pid in sleepers(value):
        os.kill(pid, 9)


DAEMON = "subprocess.run(['sh', '-c', 'setsid sleep {} >/dev/null 2>&1 </dev/null &'], check=True)"


def test_a_setsid_daemon_ends_with_the_namespace_of_its_stage(marker: str) -> None:
    prefix = _launcher()
    script = f"import os, subprocess, time\n{DAEMON.format(marker)}\ntime.sleep(0.3)\nprint(os.getpid())\n"
    done = subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["1"], done.stderr  # the worker is the namespace's init
    deadline = time.monotonic() + 5
    while sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleepers(marker) == []


def test_a_persistent_worker_ends_what_a_job_started_and_sees_no_other_process(marker: str) -> None:
    prefix = _launcher()
    script = f"""
import os, subprocess, time
from codecarena.sandbox.namespace import end_descendants
{DAEMON.format(marker)}
time.sleep(0.3)
seen = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
end_descendants()
print(len(seen) > 1, sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
"""
    done = subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    # Before: itself and the daemon, and nothing of the machine; after: itself alone, the daemon gone meanwhile.
    assert done.stdout.strip().split(maxsplit=1) == ["True", "[1]"], done.stdout + done.stderr


# --- imports from the pinned bytes ----------------------------------------------------------------

def plant_bytecode(source: Path, planted: str) -> Path:
    """A pyc of `planted` where Python's loader looks for `source`'s, its header claiming `source`'s
    mtime and size: what the bytecode cache trusts."""
    info = source.stat()
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + (int(info.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") \
        + (info.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.write_bytes(header + marshal.dumps(compile(planted, str(source), "exec")))
    return pyc


def test_a_package_is_compiled_from_its_pinned_bytes_never_from_a_planted_pyc(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    shutil.copytree(HOSTILE / "pycpkg", package)
    (package / "table.txt").write_text("data of the package")
    planted = plant_bytecode(package / "quantise.py", "raise RuntimeError('planted bytecode ran')")
    script = """
        import importlib.util, sys
        from pathlib import Path
        from codecarena.codecs.pinned_source import import_package
        from codecarena.files import tree_sha256
        root = Path(sys.argv[1])
        pinned = tree_sha256(root)
        seen = []
        module = import_package("codecarena_user_codec_pyc", root, seen.append)
        print(seen == [pinned], module.ADAPTER.__name__, module.__file__ == str(root / "__init__.py"))
        print(module.__loader__.get_data(str(root / "table.txt")).decode())
        (root / "added.py").write_text("X = 1")  # after the pinned bytes were read: not part of them
        for name in ("added", "nonesuch"):
            try:
                __import__(f"codecarena_user_codec_pyc.{name}")
            except ModuleNotFoundError as exc:
                print(name, "refused:", "not a Python source file of the pinned package" in str(exc))
    """
    done = _python(script, str(package))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True Top8 True", "data of the package", "added refused: True",
                                        "nonesuch refused: True"]
    assert sorted(p.name for p in planted.parent.iterdir()) == [planted.name]  # and no bytecode written


def test_a_package_changed_since_its_pin_is_refused_before_any_of_it_runs(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    shutil.copytree(HOSTILE / "pycpkg", package)
    script = """
        import sys
        from pathlib import Path
        from codecarena.codecs.pinned_source import import_package
        def check(digest):
            raise ValueError("changed since its pin")
        try:
            import_package("codecarena_user_codec_pyc", Path(sys.argv[1]), check)
        except ValueError as exc:
            print(exc, "codecarena_user_codec_pyc" in sys.modules, "numpy" in sys.modules)
    """
    assert _python(script, str(package)).stdout.strip() == "changed since its pin False False"


# --- a stage's private folder ---------------------------------------------------------------------

def test_an_output_is_placed_as_a_new_file_a_kept_descriptor_cannot_change(tmp_path: Path) -> None:
    from codecarena.runtime.private import PlaceError, place, prepare

    folder = tmp_path / "private"
    prepare(folder)
    output = folder / "clip.ccap"
    output.write_bytes(b"payload")
    kept = open(output, "r+b")  # as a codec's thread could keep it
    dest = tmp_path / "payloads" / "clip.ccap"
    place(output, dest)
    kept.write(b"FORGED!")
    kept.close()
    assert dest.read_bytes() == b"payload" and dest.stat().st_ino != output.stat().st_ino
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    (folder / "link.ccap").symlink_to(outside)
    with pytest.raises(PlaceError, match="cannot be read without following a link"):
        place(folder / "link.ccap", tmp_path / "placed-link")
    os.mkfifo(folder / "fifo.ccap")
    with pytest.raises(PlaceError, match="not a regular file"):
        place(folder / "fifo.ccap", tmp_path / "placed-fifo")  # and no wait on the pipe
    with pytest.raises(PlaceError, match="wrote no nothing.ccap"):
        place(folder / "nothing.ccap", tmp_path / "placed-nothing")
    # What a codec left, a folder it shut (mode 0) included, is emptied; a link's target is left alone.
    (folder / "shut").mkdir(mode=0)
    inode = folder.stat().st_ino
    prepare(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["tmp"] and folder.stat().st_ino == inode
    assert outside.read_text() == "someone else's"


# --- the worker's refusals, and who shares a persistent worker ------------------------------------

def test_a_declaration_asks_for_network_with_a_strict_boolean() -> None:
    from codecarena.registry.catalog import parse_declaration
    from codecarena.registry.strict import RegistryError

    text = 'api_version = 1\nname = "mine"\ndescription = "d"\nconfigs = ["a"]\ndefault_config = "a"\n'
    assert parse_declaration(text, "mine.toml", "").network is False
    assert parse_declaration(text + "network = true\n", "mine.toml", "").network is True
    with pytest.raises(RegistryError, match=r"^mine.toml: .*network") as caught:
        parse_declaration(text + 'network = "yes"\n', "mine.toml", "")
    assert "\n" not in str(caught.value)


def test_a_user_codec_never_shares_a_persistent_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.registry.catalog import FAMILIES
    from codecarena.rundir import WorkerFiles
    from codecarena.runtime.persistent import WorkerSet
    from codecarena.specs import parse_spec

    monkeypatch.setitem(FAMILIES, "mine", dataclasses.replace(FAMILIES["pcm"], name="mine", origin="user",
                                                              configs=("16", "8")))
    workers = WorkerSet(1 << 30, functools.partial(WorkerFiles.scratch, tmp_path))
    opus, pcm = workers.get("py", parse_spec("opus:6k")), workers.get("py", parse_spec("pcm:16"))
    mine16, mine8 = workers.get("py", parse_spec("mine:16")), workers.get("py", parse_spec("mine:8"))
    assert opus is pcm and opus.sandbox == ""  # built-in units share their runtime's worker
    assert len({id(opus), id(mine16), id(mine8)}) == 3 and (mine16.sandbox, mine8.sandbox) == ("mine", "mine")
    assert workers.get("py", parse_spec("mine:16")) is mine16 and mine16.folder != mine8.folder


def test_a_thread_started_before_the_sandbox_makes_it_refuse(tmp_path: Path) -> None:
    script = """
        import sys, threading
        from pathlib import Path
        from codecarena.sandbox.enter import SandboxError, enter
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        try:
            enter("anything", Path(sys.argv[1]))
        except SandboxError as exc:
            print(exc)
    """
    assert "the worker has 2 threads; it must confine itself before any starts" in _python(script, str(tmp_path)).stdout


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


def add_hostile(env: dict[str, str], tmp_path: Path, name: str, configs: tuple[str, ...] = ("q8",)) -> None:
    """tests/fixtures/hostile/hostile.py added as user codec `name` (which names its attack)."""
    folder = tmp_path / "codecs"
    folder.mkdir(exist_ok=True)
    module = folder / "hostile.py"
    shutil.copy(HOSTILE / "hostile.py", module)
    declaration = folder / f"{name}.toml"
    declaration.write_text(f'api_version = 1\nname = "{name}"\ndescription = "a hostile test codec"\n'
                           f'configs = {list(configs)!r}\ndefault_config = "{configs[0]}"\nsupported_weights = "none"\n'
                           .replace("'", '"'))
    added = codecarena("codec", "add", name, "--module", module, "--declaration", declaration, env=env)
    assert added.returncode == 0, added.stdout + added.stderr


def test_a_sandboxed_worker_runs_its_own_configuration_only(tmp_path: Path, home: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.runtime.persistent import PersistentWorker
    from codecarena.runtime.limits import StageLimits
    from codecarena.runtime.protocol import Job
    from codecarena.rundir import StageFiles
    from codecarena.runtime.stages import run_stage

    need_mirror()
    add_hostile(home, tmp_path, "plain", ("q8", "q4"))
    monkeypatch.setenv("XDG_DATA_HOME", home["XDG_DATA_HOME"])
    clip = MIRROR / SHORT_CLIPS[0]

    def job(codec: str, name: str, device: str = "cpu") -> Job:
        return Job.encode(clip, tmp_path / f"{name}.ccap", tmp_path / f"{name}.report.json", codec, device=device)

    # Outside its sandbox a user codec is refused, even by a worker started by hand.
    stage, _ = run_stage("encode", job("plain:q8", "bare"), StageLimits(1 << 30), StageFiles.scratch(tmp_path, "encode"),
                         sys.executable)
    assert "user codec plain runs only in its sandbox" in stage.error
    worker = PersistentWorker(sys.executable, 1 << 30, tmp_path / "plain.log", folder=tmp_path / "plain-worker",
                              sandbox="plain")
    try:
        first, again = worker.submit(job("plain:q8", "a"), tmp_path / "a.job.json"), \
            worker.submit(job("plain:q8", "b"), tmp_path / "b.job.json")
        other_config = worker.submit(job("plain:q4", "c"), tmp_path / "c.job.json")
        other_family = worker.submit(job("pcm:16", "d"), tmp_path / "d.job.json")
        gpu = worker.submit(job("plain:q8", "e", "cuda"), tmp_path / "e.job.json")
    finally:
        worker.stop()
    assert first.ok and again.ok and (tmp_path / "b.ccap").is_file(), first.error + again.error
    assert first.model["confined"]["writable"] == [str((tmp_path / "plain-worker").resolve())]
    assert other_config.error == ("PermissionError: this persistent worker is the sandbox of user codec configuration "
                                  "plain:q8; it serves no other (plain:q4)")
    assert other_family.error == ("PermissionError: this worker is the sandbox of user codec plain; it runs no other "
                                  "family (pcm)")
    assert gpu.error == ("PermissionError: a user codec's sandbox opens no device but /dev/null: it runs on the CPU, "
                         "not on cuda")
    assert worker.starts == 1 and not (tmp_path / "plain-worker").exists()  # one process; its folder gone with it


def test_serve_and_the_determinism_doctor_refuse_a_user_codec(tmp_path: Path, home: dict[str, str]) -> None:
    add_hostile(home, tmp_path, "plain")
    for command in (("serve", "--codec", "plain:q8", "--port", "0"), ("determinism", "plain:q8")):
        done = codecarena(*command, env=home)
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("codecarena: error: plain is a user codec: ") and "runs only in its sandbox" in line


def test_the_determinism_probe_loads_a_user_codec_only_through_the_loading_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe takes the worker's one loading path (codecs/loading.py), which refuses a user codec
    outside its sandbox before any of its code is imported; before #37 the probe imported the module
    the declaration names itself (here pcm's adapter, which it then loaded)."""
    from codecarena.determinism.probe import PROBE_VERSION, ProbeJob, run
    from codecarena.registry.catalog import FAMILIES

    monkeypatch.setitem(FAMILIES, "mine", dataclasses.replace(FAMILIES["pcm"], name="mine", origin="user"))
    job = ProbeJob(version=PROBE_VERSION, mode="load", codec="mine:16", weights="real", variant="", jit_fusion="off",
                   input="", start_s=0.0, seconds=1.0, output="")
    with pytest.raises(PermissionError, match=r"^user codec mine runs only in its sandbox \(python -m "
                                              r"codecarena\.worker --sandbox mine \.\.\.\)$"):
        run(job)
