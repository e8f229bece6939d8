"""Cold stages forked from a runtime's template (runtime/templates.py, codecarena/worker_template.py).

A forked child must be the same fresh decoder a new interpreter is (byte-identical payloads and
decoded audio for every built-in family that runs here), each record must say which process ran
it, a template that dies mid-stage is restarted and the stage retried once (recorded), a child that
dies fails its own stage only, a template whose imports leave threads running refuses to serve (its
stages then run in new interpreters, saying why), and nothing outlives a SIGKILLed harness.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import soundfile as sf

from codecarena.framing import _ogg_pages
from codecarena.payload import read_payload
from codecarena.rundir import StageFiles, WorkerFiles
from codecarena.runtime.limits import StageLimits
from codecarena.runtime.protocol import Job
from codecarena.runtime.stages import run_stage
from codecarena.runtime.templates import TemplateSet
from conftest import SHORT_CLIPS, codecarena, need_mirror

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="templates are Linux-only")

# Every built-in family whose runtime is the harness's own here (torch families need their runtimes).
CODECS = ("opus:12k", "codec2:3200", "codec2:700C", "pcm:16", "lyra:6000", "g722:64k", "g726:32k", "gsm:13k",
          "speex:q8", "lc3:32k")
CLIPS = ("en_librispeech_1089-134686-0001.wav", "en_ljspeech_LJ002-0020.wav")
LIMITS = StageLimits(memory_limit_bytes=4 * 2**30, guard_poll_s=0.02, stage_timeout_s=120.0)


def _run(tmp_path: Path, name: str, *extra: str) -> Path:
    folder = tmp_path / "in"
    if not folder.exists():
        folder.mkdir()
        for clip in CLIPS:
            (folder / clip).write_bytes((need_mirror() / clip).read_bytes())
    out = tmp_path / name
    result = codecarena("run", "--input", folder, *(a for c in CODECS for a in ("--codec", c)), "--metrics", "none",
                        "--workers", "1", "--out", out, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _files(out: Path, kind: str) -> dict[str, bytes]:
    return {str(p.relative_to(out / kind)): p.read_bytes() for p in sorted((out / kind).rglob("*")) if p.is_file()}


def _processes(out: Path) -> list[str]:
    return [stage["process"] for line in (out / "rows.jsonl").read_text().splitlines()
            for stage in json.loads(line)["stages"]]


def _speex_packets(payload: bytes, tmp_path: Path) -> list[bytes]:
    path = tmp_path / "speex.ccap"
    path.write_bytes(payload)
    return _ogg_pages(b"".join(read_payload(path).packet_stream("bitstream").packets))[0]


def test_forked_children_write_the_same_bytes_as_new_interpreters(tmp_path: Path) -> None:
    forked, fresh = _run(tmp_path, "forked"), _run(tmp_path, "fresh", "--fresh-interpreter")
    payloads, fresh_payloads, decoded = _files(forked, "payloads"), _files(fresh, "payloads"), _files(forked, "decoded")
    assert len(payloads) == len(decoded) == len(CODECS) * len(CLIPS)
    # speexenc seeds its Ogg stream serial from the clock (two runs a second apart differ, new
    # interpreters or not): its payloads are compared packet by packet, the rest byte by byte.
    speex = sorted(name for name in payloads if name.startswith("speex_"))
    assert len(speex) == len(CLIPS)
    for name in speex:
        assert _speex_packets(payloads.pop(name), tmp_path) == _speex_packets(fresh_payloads.pop(name), tmp_path)
    assert payloads == fresh_payloads
    assert decoded == _files(fresh, "decoded")
    assert all(p.startswith("forked from template ") and "(imports: numpy, soundfile, soxr" in p
               for p in _processes(forked)), _processes(forked)
    assert set(_processes(fresh)) == {"fresh interpreter"}


def _reference(tmp_path: Path, seconds: float) -> Path:
    """Speech long enough that a Lyra encode is still running when the test acts on it."""
    clip, rate = sf.read(need_mirror() / CLIPS[1], dtype="float32")
    path = tmp_path / "long.wav"
    sf.write(path, np.tile(clip, int(seconds * rate / len(clip)) + 1), rate)
    return path


def _encode(templates: TemplateSet, tmp_path: Path, name: str, reference: Path,
            codec: str = "lyra:6000") -> tuple[object, Path]:
    files = StageFiles.scratch(tmp_path / "stages", name)
    files.folder.parent.mkdir(parents=True, exist_ok=True)
    payload = tmp_path / f"{name}.ccap"
    job = Job.encode(reference, payload, files.report, codec)
    stage, _ = run_stage("encode", job, LIMITS, files, sys.executable, "", templates)
    return stage, payload


def _templates(tmp_path: Path, *modules: str) -> TemplateSet:
    templates = TemplateSet({sys.executable: modules}, lambda name: WorkerFiles.scratch(tmp_path / "templates", name))
    templates.start()
    return templates


def _child_of_template(templates: TemplateSet, action: str, delay_s: float = 0.3) -> threading.Thread:
    """Once the template has forked a stage, SIGKILL the template ("template") or the child ("child")."""
    template = templates.get(sys.executable)  # here: a TemplateSet serves one thread
    assert not isinstance(template, str), template

    def act() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            children = psutil.Process(template.proc.pid).children()
            if children:
                time.sleep(delay_s)
                os.kill(template.proc.pid if action == "template" else children[0].pid, signal.SIGKILL)
                return
            time.sleep(0.01)
    thread = threading.Thread(target=act)
    thread.start()
    return thread


def test_a_template_killed_mid_stage_is_restarted_and_the_stage_retried_once(tmp_path: Path) -> None:
    templates = _templates(tmp_path, "codecarena.codecs.lyra.adapter")
    try:
        first = templates.get(sys.executable)
        assert not isinstance(first, str), first
        killer = _child_of_template(templates, "template")
        stage, payload = _encode(templates, tmp_path, "encode", _reference(tmp_path, 60))
        killer.join()
        assert stage.ok, stage.error  # type: ignore[attr-defined]
        process = stage.process  # type: ignore[attr-defined]
        assert "retried in a new template after the first died" in process, process
        assert f"template {first.proc.pid} of {sys.executable} exited with status -9" in process, process
        assert templates.starts == 2 and payload.stat().st_size > 0
    finally:
        templates.stop()


def test_a_child_killed_mid_stage_fails_that_stage_only(tmp_path: Path) -> None:
    templates = _templates(tmp_path, "codecarena.codecs.lyra.adapter")
    try:
        killer = _child_of_template(templates, "child")
        reference = _reference(tmp_path, 60)
        failed, _ = _encode(templates, tmp_path, "killed", reference)
        killer.join()
        assert not failed.ok and failed.exit_status == -9, failed  # type: ignore[attr-defined]
        after, payload = _encode(templates, tmp_path, "after", need_mirror() / CLIPS[0])
        assert after.ok and payload.stat().st_size > 0, after  # type: ignore[attr-defined]
        assert templates.starts == 1 and "retried" not in after.process  # type: ignore[attr-defined]
    finally:
        templates.stop()


def test_the_memory_guard_kills_a_forked_child_over_its_own_limit(tmp_path: Path) -> None:
    templates = _templates(tmp_path, "codecarena.codecs.lyra.adapter")
    try:
        files = StageFiles.scratch(tmp_path / "stages", "guarded")
        files.folder.parent.mkdir(parents=True)
        job = Job.encode(_reference(tmp_path, 600), tmp_path / "p.ccap", files.report, "pcm:16")
        limits = StageLimits(memory_limit_bytes=64 * 2**20, guard_poll_s=0.01, stage_timeout_s=120.0)
        stage, _ = run_stage("encode", job, limits, files, sys.executable, "", templates)
        assert stage.guard.fired and not stage.ok and "memory" in stage.error, stage
        assert stage.process.startswith("forked from template"), stage.process
        # The template's pages are not the child's: a stage under the template's own RSS still runs.
        template = templates.get(sys.executable)
        assert not isinstance(template, str)
        small = StageLimits(memory_limit_bytes=template.ready["rss_bytes"], guard_poll_s=0.01, stage_timeout_s=120)
        ok, _ = run_stage("encode", Job.encode(need_mirror() / CLIPS[0], tmp_path / "q.ccap", files.report, "pcm:16"),
                          small, files, sys.executable, "", templates)
        assert ok.ok and ok.peak_rss_bytes < template.ready["rss_bytes"], (ok, template.ready)
    finally:
        templates.stop()


def test_a_template_whose_imports_leave_a_thread_running_refuses_and_stages_run_fresh(tmp_path: Path,
                                                                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "threaded_import.py").write_text(textwrap.dedent("""
        import threading, time
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    """))
    monkeypatch.setenv("PYTHONPATH", f"{lib}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    templates = _templates(tmp_path, "threaded_import")
    try:
        stage, payload = _encode(templates, tmp_path, "encode", need_mirror() / CLIPS[0], "pcm:16")
        assert stage.ok and payload.stat().st_size > 0, stage  # type: ignore[attr-defined]
        process = stage.process  # type: ignore[attr-defined]
        assert process.startswith("fresh interpreter (template of ") and "2 threads running" in process, process
    finally:
        templates.stop()


def test_a_torch_template_has_imported_torch_and_started_no_thread(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    templates = _templates(tmp_path, "torch")
    try:
        template = templates.get(sys.executable)
        assert not isinstance(template, str), template
        assert "torch" in template.ready["imports"] and "codecarena.device_probe" in template.ready["imports"]
        assert psutil.Process(template.proc.pid).num_threads() == 1
    finally:
        templates.stop()


@pytest.mark.slow
def test_sigkill_of_the_harness_leaves_no_template_or_forked_child(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(20):
        (folder / f"u{i:02d}.wav").write_bytes((need_mirror() / CLIPS[i % 2]).read_bytes())
    out = tmp_path / "run"
    with open(tmp_path / "run.log", "wb") as log:
        proc = psutil.Popen([sys.executable, "-m", "codecarena", "run", "--input", str(folder), "--codec", "lyra:6000",
                             "--metrics", "none", "--workers", "2", "--out", str(out)], stdout=log, stderr=log,
                            start_new_session=True)
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 120
    forked = False
    while not forked and time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "run.log").read_text()
        for child in proc.children(recursive=True):
            seen[child.pid] = child
            try:
                # A forked stage: a child of a template, with the template's command line.
                forked = forked or "codecarena.worker_template" in " ".join(child.parent().cmdline()
                                                                            if child.parent() else [])
            except psutil.Error:
                pass
        time.sleep(0.02)
    assert forked, "no stage was forked from a template within 120 s"
    templates = [p for p in seen.values() if "codecarena.worker_template" in " ".join(_cmdline(p))]
    assert templates
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    alive = list(seen.values())
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if not _dead(p)]
        time.sleep(0.1)
    assert not alive, [_cmdline(p) for p in alive]


def _dead(process: psutil.Process) -> bool:
    try:
        # A killed orphan may stay a zombie until init reaps it; it runs nothing.
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def test_a_version_9_row_reads_with_no_process_and_still_hashes_to_its_digest() -> None:
    from test_channel import _V5_ROW

    from codecarena.files import sha256_json
    from codecarena.results.schema import SchemaError, parse_row

    stage = {"name": "encode", "exit_status": 0, "ok": True, "error": "", "wall_s": 0.3, "process_start_s": 0.02,
             "imports_s": 0.2, "load_s": 0.0, "io_s": 0.01, "compute_s": 0.01, "warm_compute_s": [], "cold_rtf": 0.24,
             "warm_rtf": None, "peak_rss_bytes": 2**25,
             "guard": {"limit_bytes": 2**30, "poll_s": 0.05, "fired": False, "peak_rss_bytes": 2**25, "polls": 3,
                       "timed_out": False}}
    v9 = {**_V5_ROW, "version": 9, "channel": None, "device": None, "metric_devices": None, "condition": None,
          "input_metrics": None, "stages": [stage]}
    row = parse_row({**v9, "row_sha256": None}).to_dict()
    del row["row_sha256"]
    for stage in row["stages"]:
        del stage["process"]
    parsed = parse_row({**v9, "row_sha256": sha256_json(row)})
    assert parsed.intact and {stage.process for stage in parsed.stages} == {None}
    with pytest.raises(SchemaError, match="process"):
        parse_row({**v9, "version": 10, "row_sha256": None})


_RESEED_PROBE = textwrap.dedent("""
    import json, os, sys
    {setup}
    from codecarena.worker_template import _reseed
    draws = []
    for _ in range(2):
        read, write = os.pipe()
        if os.fork() == 0:
            _reseed()
            value = float(sys.modules["numpy.random"].rand()) if "numpy.random" in sys.modules else None
            os.write(write, json.dumps([value, "numpy.random" in sys.modules]).encode())
            os._exit(0)
        os.close(write)
        draws.append(json.loads(os.read(read, 200)))
        os.wait()
    print(json.dumps(draws))
""")


def _probe(setup: str) -> list[list]:
    done = __import__("subprocess").run([sys.executable, "-c", _RESEED_PROBE.format(setup=setup)],
                                        capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_children_of_a_template_that_imported_numpy_random_draw_from_fresh_seeds() -> None:
    # The template's own generator is seeded to a known state: a child that kept it would draw 0.5488...
    (first, imported), (second, _) = _probe("import numpy.random\nnumpy.random.seed(0)")
    assert imported and first != second
    assert 0.5488135039273248 not in (first, second)


def test_a_child_does_not_import_numpy_random_for_a_template_that_never_did() -> None:
    # numpy imports numpy.random lazily; importing it in every child costs a stage 10-30 ms.
    (value, imported), _ = _probe("import numpy")
    assert value is None and not imported


# Each torch family at its default configuration (mimi at 8 codebooks, encodec at 1.5k: the cheapest),
# keyed by the runtime its test files build.
TORCH_CODECS = (("encodec", "encodec:1.5k"), ("dac", "dac"), ("snac", "snac"), ("mimi", "mimi:8"),
                ("bigcodec", "bigcodec"), ("xcodec2", "xcodec2"), ("wavtokenizer_large_speech_75", "wavtokenizer"),
                ("fish_s2_codec", "fish_dac"))


@pytest.mark.slow
@pytest.mark.parametrize(("runtime", "codec"), TORCH_CODECS, ids=[c for _, c in TORCH_CODECS])
def test_a_torch_family_forked_from_its_template_writes_the_bytes_of_new_interpreters(
        runtime: str, codec: str, runtime_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Synthetic weights: the template imported torch and the adapter, ran no torch operation, so a
    forked child's first operation starts torch's thread pool and JIT as a new interpreter's does."""
    env = runtime_env(runtime)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / SHORT_CLIPS[0]).write_bytes((need_mirror() / SHORT_CLIPS[0]).read_bytes())
    outs = []
    for name, extra in (("forked", ()), ("fresh", ("--fresh-interpreter",))):
        out = tmp_path / name
        result = codecarena("run", "--input", folder, "--weights", "synthetic", "--codec", codec, "--metrics", "none",
                            "--workers", "1", "--out", out, *extra, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        outs.append(out)
    forked, fresh = outs
    assert _files(forked, "payloads") and _files(forked, "payloads") == _files(fresh, "payloads")
    assert _files(forked, "decoded") and _files(forked, "decoded") == _files(fresh, "decoded")
    assert all(p.startswith("forked from template ") for p in _processes(forked)), _processes(forked)
    assert set(_processes(fresh)) == {"fresh interpreter"}
