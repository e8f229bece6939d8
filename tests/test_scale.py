"""Scale-out: corpus readers, --limit/--shard, warm mode, the local pool, crash recovery and Ray."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import soundfile as sf

from codecarena.corpora import detect_layout, load_corpus, parse_shard
from codecarena.datasets import DatasetError
from codecarena.runtime.limits import StageLimits
from conftest import REPO, SHORT_CLIPS, codecarena, need_mirror, rows_of


def _wav(path: Path, seconds: float = 0.5, rate: int = 16000, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(seed).standard_normal(int(seconds * rate)) * 0.1
    sf.write(path, noise, rate, subtype="PCM_16")


# ---------------------------------------------------------------------------------------- corpora


def test_kaldi_dir_reads_scp_text_and_speakers(tmp_path: Path) -> None:
    for i in range(3):
        _wav(tmp_path / "audio" / f"u{i}.wav", seed=i)
    (tmp_path / "wav.scp").write_text("u2 audio/u2.wav\nu0 audio/u0.wav\nu1 " + str(tmp_path / "audio/u1.wav") + "\n")
    (tmp_path / "text").write_text("u0 HELLO THERE\nu1 ONE TWO\nu2 NOT THIS\n")
    (tmp_path / "utt2spk").write_text("u0 spkA\nu1 spkB\nu2 spkA\n")
    assert detect_layout(tmp_path) == "kaldi"
    evalset = load_corpus(tmp_path)
    assert [u.id for u in evalset.utterances] == ["u0", "u1", "u2"]
    assert [u.transcript for u in evalset.utterances] == ["HELLO THERE", "ONE TWO", "NOT THIS"]
    assert [u.speaker for u in evalset.utterances] == ["spkA", "spkB", "spkA"]
    assert evalset.name == f"kaldi:{tmp_path.name}"


def test_kaldi_refuses_pipes_and_missing_transcripts(tmp_path: Path) -> None:
    _wav(tmp_path / "a.wav")
    (tmp_path / "wav.scp").write_text("a sox a.flac -t wav - |\n")
    (tmp_path / "text").write_text("a X\n")
    with pytest.raises(DatasetError, match="is a command"):
        load_corpus(tmp_path)
    (tmp_path / "wav.scp").write_text("a a.wav\nb a.wav\n")
    with pytest.raises(DatasetError, match="no transcript for 1 utterance of"):
        load_corpus(tmp_path)
    (tmp_path / "text").write_text("a X\na Y\n")
    with pytest.raises(DatasetError, match="appears twice"):
        load_corpus(tmp_path)


def test_librispeech_layout(tmp_path: Path) -> None:
    chapter = tmp_path / "test-clean" / "1089" / "134686"
    for i in range(3):
        _wav(chapter / f"1089-134686-000{i}.flac", seed=i)
    (chapter / "1089-134686.trans.txt").write_text(
        "1089-134686-0000 HE HOPED\n1089-134686-0001 STUFF IT\n1089-134686-0002 AFTER EARLY\n")
    evalset = load_corpus(tmp_path, "auto")
    assert evalset.name.startswith("librispeech:")
    assert [(u.id, u.transcript, u.speaker, u.language) for u in evalset.utterances][1] == \
        ("1089-134686-0001", "STUFF IT", "1089", "en")


def test_aishell_layout_joins_words_and_keeps_untranscribed(tmp_path: Path) -> None:
    _wav(tmp_path / "wav" / "test" / "S0764" / "BAC009S0764W0121.wav", seed=1)
    _wav(tmp_path / "wav" / "test" / "S0764" / "BAC009S0764W0122.wav", seed=2)
    (tmp_path / "transcript").mkdir()
    (tmp_path / "transcript" / "aishell_transcript_v0.8.txt").write_text(
        "BAC009S0764W0121 甚至 出现 交易 几乎 停滞 的 情况\n", encoding="utf-8")
    evalset = load_corpus(tmp_path)
    assert evalset.name.startswith("aishell:")
    first, second = evalset.utterances
    assert (first.transcript, first.speaker, first.language) == ("甚至出现交易几乎停滞的情况", "S0764", "zh")
    assert second.transcript is None


def test_limit_and_shard_select_before_reading_audio(tmp_path: Path) -> None:
    for i in range(7):
        _wav(tmp_path / f"c{i}.wav", seed=i)
    (tmp_path / "wav.scp").write_text("".join(f"c{i} c{i}.wav\n" for i in range(7)))
    (tmp_path / "text").write_text("".join(f"c{i} W{i}\n" for i in range(7)))
    # A broken file outside the selection is never opened.
    (tmp_path / "c6.wav").write_bytes(b"RIFF not audio")
    limited = load_corpus(tmp_path, "kaldi", limit=6)
    assert [u.id for u in limited.utterances] == [f"c{i}" for i in range(6)]
    shards = [load_corpus(tmp_path, "kaldi", limit=6, shard=parse_shard(f"{k}/3")) for k in range(3)]
    assert [[u.id for u in s.utterances] for s in shards] == [["c0", "c3"], ["c1", "c4"], ["c2", "c5"]]
    assert len({s.manifest_sha256 for s in shards} | {limited.manifest_sha256}) == 4
    assert shards[1].name.endswith("[limit=6,shard=1/3]")
    with pytest.raises(DatasetError, match="unreadable audio"):
        load_corpus(tmp_path, "kaldi")
    for bad in ("3/3", "1", "a/b", "-1/2"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)


def test_plain_folder_with_limit(tmp_path: Path) -> None:
    for i in range(3):
        _wav(tmp_path / f"x{i}.wav", seed=i)
    assert detect_layout(tmp_path) == "plain"
    evalset = load_corpus(tmp_path, limit=2)
    assert [u.id for u in evalset.utterances] == ["x0", "x1"]
    with pytest.raises(DatasetError, match="leaves no utterances"):
        load_corpus(tmp_path, shard=parse_shard("3/4"), limit=3)


# The smoke set in its manifest's order: six English clips, then four Mandarin ones.
_SMOKE_EN = ["en_librispeech_1089-134686-0000", "en_librispeech_1089-134686-0001"]
_SMOKE_ZH = ["zh_aishell1_BAC009S0002W0122", "zh_aishell1_BAC009S0002W0123"]


def _smoke_ids(**subset: object) -> tuple[str, list[str], str]:
    from codecarena.selection import evaluation_set

    limit, shard = subset.pop("limit", None), subset.pop("shard", None)
    chosen = evaluation_set(None, "auto", "", need_mirror(), False, limit, shard, **subset)  # type: ignore[arg-type]
    return chosen.name, [u.id for u in chosen.utterances], chosen.manifest_sha256


def test_limit_per_language_takes_the_first_n_of_each_language_in_the_sets_order() -> None:
    # Issue 38, 13: --limit 3 takes three English clips of the smoke set, and no option took some of each language.
    assert _smoke_ids(limit=3)[1] == [*_SMOKE_EN, "en_librispeech_2412-153948-0000"]
    name, two, digest = _smoke_ids(limit_per_language=2)
    assert (name, two) == ("smoke[limit_per_language=2]", _SMOKE_EN + _SMOKE_ZH)
    assert _smoke_ids(limit_per_language=1)[1] == [_SMOKE_EN[0], _SMOKE_ZH[0]]
    # It comes first: --limit caps what it chose, and --shard splits that into disjoint strides.
    name, capped, capped_digest = _smoke_ids(limit_per_language=2, limit=3)
    assert (name, capped) == ("smoke[limit_per_language=2,limit=3]", [*_SMOKE_EN, _SMOKE_ZH[0]])
    shards = [_smoke_ids(limit_per_language=2, shard=f"{k}/2") for k in (0, 1)]
    assert [ids for _, ids, _ in shards] == [[_SMOKE_EN[0], _SMOKE_ZH[0]], [_SMOKE_EN[1], _SMOKE_ZH[1]]]
    assert shards[1][0] == "smoke[limit_per_language=2,shard=1/2]"
    # Each is a set of its own, so a run of one never resumes into another's directory.
    assert len({digest, capped_digest, *(d for _, _, d in shards)}) == 4


def test_an_utterance_without_a_language_counts_as_the_one_language_gives_it() -> None:
    from codecarena.corpora import Subset

    entries = [("a", "en"), ("b", ""), ("c", "zh"), ("d", ""), ("e", "zh")]
    assert Subset(per_language=1, language="en").choose(entries) == ["a", "c"]
    assert Subset(per_language=1).choose(entries) == ["a", "b", "c"]
    assert Subset(per_language=2, language="en").choose(entries) == ["a", "b", "c", "e"]


def test_a_limit_per_language_below_one_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from codecarena import cli

    need_mirror()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--limit-per-language", "0", "--codec", "pcm:16", "--metrics", "none", "--out", "r"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "codecarena: error: --limit-per-language 0: expected at least 1"]
    assert list(tmp_path.iterdir()) == []


def test_limit_per_language_is_part_of_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena.pipeline.prepare import Selection, prepare

    need_mirror()
    monkeypatch.chdir(tmp_path)
    one = prepare(Selection(codecs=("pcm:16",), metrics="none", limit_per_language=1))
    assert one.plan.set == "smoke[limit_per_language=1]"
    assert [u for u, _ in one.plan.utterances] == [_SMOKE_EN[0], _SMOKE_ZH[0]]
    assert [r.language for r in one.plan.references or ()] == ["en", "zh"]
    two = prepare(Selection(codecs=("pcm:16",), metrics="none", limit_per_language=2))
    assert one.out.parent == two.out.parent == Path("runs") and one.out != two.out
    assert one.out.name.startswith("smoke[limit_per_language=1]-")


@pytest.mark.slow
def test_a_run_with_limit_per_language_covers_each_language_resumes_and_audits(tmp_path: Path) -> None:
    need_mirror()
    out = tmp_path / "run"
    args = ("run", "--limit-per-language", "1", "--codec", "pcm:16", "--metrics", "none", "--out", out)
    first = codecarena(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "set smoke[limit_per_language=1] (2 utterances" in first.stdout
    assert sorted((r["utterance"], r["language"]) for r in rows_of(out)) == [(_SMOKE_EN[0], "en"), (_SMOKE_ZH[0], "zh")]
    again = codecarena(*args)
    assert again.returncode == 0 and "2 complete rows resumed" in again.stdout, again.stdout + again.stderr
    other = codecarena("run", "--limit-per-language", "2", "--codec", "pcm:16", "--metrics", "none", "--out", out)
    assert other.returncode == 2 and "holds a run with a different plan" in other.stderr
    assert codecarena("audit", out).returncode == 0


# ----------------------------------------------------------------------------- planning


def _set(tmp_path: Path, n: int):  # type: ignore[no-untyped-def]
    for i in range(n):
        _wav(tmp_path / f"u{i}.wav", seed=i)
    return load_corpus(tmp_path)


def test_plan_samples_cold_rows_and_replays_by_index(tmp_path: Path) -> None:
    from codecarena.pipeline.execute import plan_tasks
    from codecarena.pipeline.plan import assemble
    from codecarena.references import prepare_reference
    from codecarena.specs import parse_spec

    evalset = _set(tmp_path / "in", 4)
    specs = (parse_spec("opus:12k"), parse_spec("pcm:16"))
    plan = assemble(evalset, specs, tmp_path / "run", StageLimits(1 << 30), mode="warm", cold_sample=1,
                    replay_sample=2)
    tasks = plan_tasks(plan, skip={("pcm:16", "u0")}, reference=lambda u: prepare_reference(u, plan.run))
    got = [(t.spec.canonical, t.ref.utterance.id, t.mode, t.replay) for t in tasks]
    assert got == [("opus:12k", "u0", "cold", True), ("opus:12k", "u1", "warm", True),
                   ("opus:12k", "u2", "warm", False), ("opus:12k", "u3", "warm", False),
                   # A resumed row is skipped; the others keep the sample membership of their index.
                   ("pcm:16", "u1", "warm", True), ("pcm:16", "u2", "warm", False), ("pcm:16", "u3", "warm", False)]
    cold = assemble(evalset, specs, tmp_path / "run", StageLimits(1 << 30), mode="cold", replay_sample=None)
    assert {(t.mode, t.replay) for t in plan_tasks(cold, (), lambda u: prepare_reference(u, plan.run))} \
        == {("cold", True)}


def test_a_row_lost_with_its_executor_is_a_failed_row_with_the_reason(tmp_path: Path) -> None:
    from codecarena.pipeline.plan import assemble
    from codecarena.pipeline.row import Task, failed_row
    from codecarena.references import prepare_reference
    from codecarena.results.schema import parse_row
    from codecarena.specs import parse_spec

    evalset = _set(tmp_path / "in", 1)
    plan = assemble(evalset, (parse_spec("opus:12k"),), tmp_path / "run", StageLimits(1 << 30))
    task = Task(plan.codecs[0], prepare_reference(evalset.utterances[0], plan.run), "warm", False, False)
    row = parse_row(failed_row(task, plan, "a local executor process died before the row finished").to_dict())
    assert (row.status, row.mode, row.replay_sampled, row.stages) == ("failed", "warm", False, [])
    assert row.error == "a local executor process died before the row finished" and row.payload is None


def test_a_runtime_that_cannot_start_fails_its_rows_not_the_run(tmp_path: Path) -> None:
    from codecarena.executors.local import LocalExecutor
    from codecarena.pipeline.execute import plan_tasks
    from codecarena.pipeline.plan import assemble
    from codecarena.references import prepare_reference
    from codecarena.specs import parse_spec

    evalset = _set(tmp_path / "in", 2)
    plan = assemble(evalset, (parse_spec("pcm:16"),), tmp_path / "run", StageLimits(1 << 30),
                    python=str(tmp_path / "missing" / "python"))
    tasks = plan_tasks(plan, (), lambda u: prepare_reference(u, plan.run))
    rows = list(LocalExecutor(workers=1).rows(tasks, plan))
    assert [r.status for r in rows] == ["failed", "failed"]
    assert all("FileNotFoundError" in r.error and "missing/python" in r.error for r in rows)


# ----------------------------------------------------------------------------- warm mode and pools


def _by_key(run_dir: Path) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    return {(r["codec"], r["utterance"]): r for r in rows_of(run_dir)}


def _identical(a: Path, b: Path) -> None:
    rows_a, rows_b = _by_key(a), _by_key(b)
    assert rows_a and rows_a.keys() == rows_b.keys()
    for key, row in rows_a.items():
        assert row["status"] == rows_b[key]["status"] == "ok", (key, row["error"], rows_b[key]["error"])
        assert row["payload_sha256"] == rows_b[key]["payload_sha256"], key
        assert row["decoded_sha256"] == rows_b[key]["decoded_sha256"], key
        assert (a / row["payload"]).read_bytes() == (b / rows_b[key]["payload"]).read_bytes()
        assert (a / row["decoded"]).read_bytes() == (b / rows_b[key]["decoded"]).read_bytes()


@pytest.fixture(scope="module")
def cold_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: today's behaviour, every stage in a fresh process, one row at a time."""
    need_mirror()
    out = tmp_path_factory.mktemp("cold") / "run"
    result = codecarena("run", "--codec", "opus:12k", "--codec", "codec2:3200", "--metrics", "none",
                        "--workers", "1", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.mark.slow
def test_warm_pool_matches_cold_byte_for_byte(cold_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "warm"
    result = codecarena("run", "--codec", "opus:12k", "--codec", "codec2:3200", "--metrics", "none",
                        "--mode", "warm", "--workers", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    _identical(out, cold_run)
    rows = rows_of(out)
    by_codec: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for row in rows:
        by_codec.setdefault(row["codec"], []).append(row)
    for codec, group in by_codec.items():
        assert sum(r["mode"] == "cold" for r in group) == 1, codec  # the cold-start sample
        assert all(r["replay_sampled"] and r["replay_identical"] for r in group)  # smoke set: all replayed
        warm = [r for r in group if r["mode"] == "warm"]
        encode = [next(s for s in r["stages"] if s["name"] == "encode") for r in warm]
        assert all(s["process_start_s"] == 0.0 and s["cold_rtf"] is None for s in encode)
        # One model load per pool process: most warm rows find the model already loaded.
        assert sum(s["load_s"] == 0.0 for s in encode) >= len(encode) - 2
    # Codec 2's decoder has process-wide state, so even in warm mode it decodes in a fresh process.
    codec2_decodes = [s for r in by_codec["codec2:3200"] for s in r["stages"] if s["name"] == "decode"]
    assert all(s["process_start_s"] > 0 for s in codec2_decodes)
    import json

    execution = json.loads((out / "run.json").read_text())["execution"]
    assert execution["executor"] == "local" and execution["workers"] == 2 and execution["rows_computed"] == 20
    assert codecarena("audit", out).returncode == 0


@pytest.mark.slow
def test_warm_replay_sample_outside_the_smoke_set(tmp_path: Path, speech_dir: Path) -> None:
    out = tmp_path / "run"
    result = codecarena("run", "--input", speech_dir, "--codec", "opus:6k", "--metrics", "none", "--mode", "warm",
                        "--workers", "1", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = sorted(rows_of(out), key=lambda r: r["utterance"])
    assert [(r["mode"], r["replay_sampled"], r["replay_identical"]) for r in rows] == \
        [("cold", True, True), ("warm", False, None)]
    assert [s["name"] for s in rows[1]["stages"]] == ["encode", "decode"]
    assert codecarena("audit", out).returncode == 0
    assert codecarena("audit", out, "--replay").returncode == 0


def _persistent_workers(root: psutil.Process) -> list[psutil.Process]:
    found = []
    for proc in root.children(recursive=True):
        try:
            if "--persistent" in proc.cmdline():
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_killed_warm_worker_fails_only_its_row_and_a_rerun_completes_it(tmp_path: Path) -> None:
    mirror = need_mirror()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(24):
        shutil.copy(mirror / SHORT_CLIPS[i % 2], corpus / f"c{i:02d}.wav")
    out = tmp_path / "run"
    args = [sys.executable, "-m", "codecarena", "run", "--input", str(corpus), "--codec", "opus:12k",
            "--metrics", "none", "--mode", "warm", "--workers", "1", "--out", str(out)]
    harness = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        root = psutil.Process(harness.pid)
        deadline = time.monotonic() + 120
        victims: list[psutil.Process] = []
        while time.monotonic() < deadline and harness.poll() is None:
            lines = (out / "rows.jsonl").read_text().count("\n") if (out / "rows.jsonl").exists() else 0
            victims = _persistent_workers(root)
            if victims and lines >= 3:
                break
            time.sleep(0.02)
        assert victims, "the warm run never started a persistent worker"
        os.killpg(victims[0].pid, signal.SIGKILL)
        assert harness.wait(timeout=300) == 1
    finally:
        if harness.poll() is None:
            harness.kill()
    first = rows_of(out)
    failed = [r for r in first if r["status"] == "failed"]
    assert len(first) == 24 and len(failed) == 1, [r["error"] for r in failed]
    assert "persistent worker exited while running" in failed[0]["error"]
    ok_before = {r["utterance"]: r["payload_sha256"] for r in first if r["status"] == "ok"}

    rerun = codecarena("run", "--input", corpus, "--codec", "opus:12k", "--metrics", "none", "--mode", "warm",
                       "--workers", "1", "--out", out)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    second = rows_of(out)
    assert len(second) == 24 and all(r["status"] == "ok" for r in second)
    assert {r["utterance"]: r["payload_sha256"] for r in second if r["utterance"] in ok_before} == ok_before
    assert "23 complete rows resumed" in rerun.stdout


# --------------------------------------------------------------------------------------------- Ray

RAY_SCRIPT = """
set -e
ip link set lo up
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
trap '"$RAY" stop --force >/dev/null 2>&1 || true' EXIT
"$RAY" start --head --node-ip-address=127.0.0.1 --port=6391 --num-cpus=2 --include-dashboard=false \
  --object-store-memory=104857600 --temp-dir="$TEMP" --disable-usage-stats >/dev/null
"$PY" -m codecarena run --codec opus:12k --codec codec2:3200 --metrics none --executor ray \
  --ray-address 127.0.0.1:6391 --out "$OUT"
"""


@pytest.mark.slow
def test_ray_executor_matches_local_byte_for_byte(cold_run: Path, tmp_path: Path) -> None:
    """A Ray cluster started on 127.0.0.1 inside a network namespace that has only a loopback
    interface (Ray probes cloud metadata addresses; nothing may leave the machine)."""
    ray_bin = Path(sys.executable).parent / "ray"
    pytest.importorskip("ray")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the Ray test in a loopback-only namespace: unshare failed: {probe.stderr!r}")
        pytest.skip("unshare --net is not permitted here (needs root)")
    out = tmp_path / "ray"
    temp = Path("/tmp") / f"ccray-test-{os.getpid()}"
    env = {**os.environ, "RAY": str(ray_bin), "PY": sys.executable, "OUT": str(out), "TEMP": str(temp)}
    try:
        result = subprocess.run(["unshare", "--net", "sh", "-c", RAY_SCRIPT], env=env, capture_output=True,
                                text=True, timeout=600, cwd=REPO)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _identical(out, cold_run)
    import json

    execution = json.loads((out / "run.json").read_text())["execution"]
    assert execution["executor"] == "ray" and execution["address"] == "127.0.0.1:6391"
    assert execution["workers"] == 2 and execution["rows_computed"] == 20
    assert codecarena("audit", out).returncode == 0


# Two raylets on 127.0.0.1, one CPU each. Ray refuses to join a node with
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ("Multi-node Ray clusters are not supported on Windows and
# OSX"), so the second `ray start` alone sets it to 1; --node-ip-address=127.0.0.1 keeps it on loopback.
RAY_TWO_NODE_SCRIPT = """
set -e
ip link set lo up
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
trap '"$RAY" stop --force >/dev/null 2>&1 || true' EXIT
"$RAY" start --head --node-ip-address=127.0.0.1 --port=6392 --num-cpus=1 --include-dashboard=false \
  --object-store-memory=104857600 --temp-dir="$TEMP" --disable-usage-stats >/dev/null
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 "$RAY" start --address=127.0.0.1:6392 --node-ip-address=127.0.0.1 \
  --num-cpus=1 --object-store-memory=104857600 --disable-usage-stats >/dev/null
"$PY" -m codecarena run --input "$INPUT" --codec opus:12k --codec pcm:16 --metrics none --executor ray \
  --ray-address 127.0.0.1:6392 --workers 2 --out "$OUT"
"""


@pytest.mark.slow
def test_ray_two_node_cluster_on_one_machine(tmp_path: Path, speech_dir: Path) -> None:
    """A head and a second raylet on 127.0.0.1 in a loopback-only network namespace (and a private
    PID namespace, so `ray stop` sees only this cluster and nothing outlives the shell): rows run
    as actors on both nodes and the run audits clean."""
    import json

    ray_bin = Path(sys.executable).parent / "ray"
    pytest.importorskip("ray")
    isolate = ["unshare", "--net", "--pid", "--mount-proc", "--kill-child"]
    probe = subprocess.run([*isolate, "true"], capture_output=True)
    if probe.returncode != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the Ray test in a loopback-only namespace: unshare failed: {probe.stderr!r}")
        pytest.skip("unshare --net --pid is not permitted here (needs root)")
    out = tmp_path / "ray2"
    temp = Path("/tmp") / f"ccray2-test-{os.getpid()}"
    env = {**os.environ, "RAY": str(ray_bin), "PY": sys.executable, "OUT": str(out), "TEMP": str(temp),
           "INPUT": str(speech_dir)}
    try:
        result = subprocess.run([*isolate, "sh", "-c", RAY_TWO_NODE_SCRIPT], env=env, capture_output=True,
                                text=True, timeout=300, cwd=REPO)
    finally:
        leftover = subprocess.run(["pgrep", "-af", str(temp)], capture_output=True, text=True).stdout
        shutil.rmtree(temp, ignore_errors=True)
    assert not leftover, f"Ray processes left running: {leftover}"
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = rows_of(out)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    execution = json.loads((out / "run.json").read_text())["execution"]
    assert execution["executor"] == "ray" and execution["address"] == "127.0.0.1:6392"
    assert execution["workers"] == 2 and execution["cluster_cpus"] == 2
    nodes = execution["nodes"]
    assert len(nodes) == 2 and all(keys for keys in nodes.values()), nodes
    ran = sorted(tuple(key) for keys in nodes.values() for key in keys)
    assert ran == sorted((r["codec"], r["utterance"]) for r in rows)
    assert codecarena("audit", out).returncode == 0


@pytest.mark.slow
def test_rows_in_completion_order_are_read_in_plan_order(tmp_path: Path, speech_dir: Path) -> None:
    """rows.jsonl is in completion order; every reader (and the audit's summary) uses the plan's."""
    from codecarena.results.run import Run

    out = tmp_path / "run"
    result = codecarena("run", "--input", speech_dir, "--codec", "pcm:16", "--codec", "opus:6k", "--metrics", "none",
                        "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    (out / "rows.jsonl").write_text("".join(reversed(lines)))
    rows = Run.open(out).rows
    assert [r.key for r in rows] == [(c, u) for c in ("pcm:16", "opus:6k") for u in ("clip0", "clip1")]
    assert codecarena("audit", out).returncode == 0
