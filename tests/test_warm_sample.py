"""--warm-sample (issue 39): only the first N rows of each codec configuration that run cold repeat the
codec call for the warm RTF; the rest have none, the summary's warm RTF says its n, and a run made
when every row repeated (run.json before version 10) hashes as before and resumes with --warm-sample all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from codecarena.runtime.limits import StageLimits
from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror, rows_of

FIXTURES = Path(__file__).parent / "fixtures"


def _set(folder: Path, n: int):  # type: ignore[no-untyped-def]
    from codecarena.corpora import load_corpus

    folder.mkdir(parents=True)
    for i in range(n):
        sf.write(folder / f"u{i}.wav", np.random.default_rng(i).standard_normal(8000) * 0.1, 16000, subtype="PCM_16")
    return load_corpus(folder)


def _repeating(plan, skip=()) -> list[tuple[str, str, str, bool]]:  # type: ignore[no-untyped-def]
    from codecarena.pipeline.execute import plan_tasks
    from codecarena.references import prepare_reference

    return [(t.spec.canonical, t.ref.utterance.id, t.mode, t.repeats)
            for t in plan_tasks(plan, skip, lambda u: prepare_reference(u, plan.run))]


def test_the_first_n_rows_of_each_configuration_repeat_in_cold_and_in_warm_mode(tmp_path: Path) -> None:
    from codecarena.pipeline.plan import assemble
    from codecarena.specs import parse_spec

    evalset = _set(tmp_path / "in", 5)
    specs = (parse_spec("opus:12k"), parse_spec("pcm:16"))

    def plan(**options):  # type: ignore[no-untyped-def]
        return assemble(evalset, specs, tmp_path / "run", StageLimits(1 << 30), **options)

    cold = plan(warm_sample=2)
    assert cold.plan.warm_sample == 2
    # A resumed row is skipped; the others keep the membership of their index.
    assert _repeating(cold, {("pcm:16", "u0")}) == [
        ("opus:12k", "u0", "cold", True), ("opus:12k", "u1", "cold", True), ("opus:12k", "u2", "cold", False),
        ("opus:12k", "u3", "cold", False), ("opus:12k", "u4", "cold", False),
        ("pcm:16", "u1", "cold", True), ("pcm:16", "u2", "cold", False), ("pcm:16", "u3", "cold", False),
        ("pcm:16", "u4", "cold", False)]
    assert {t[3] for t in _repeating(plan(warm_sample=None))} == {True}
    assert [t[3] for t in _repeating(plan(warm_sample=0))] == [False] * 10
    # Warm mode: the cold sample's rows repeat if they are in the warm sample too; warm rows never do.
    warm = plan(mode="warm", cold_sample=3, warm_sample=2)
    assert [t[2:] for t in _repeating(warm) if t[0] == "pcm:16"] == [
        ("cold", True), ("cold", True), ("cold", False), ("warm", False), ("warm", False)]
    assert [t[2:] for t in _repeating(plan(mode="warm", cold_sample=2, warm_sample=None)) if t[0] == "opus:12k"] == [
        ("cold", True), ("cold", True), ("warm", False), ("warm", False), ("warm", False)]
    # A sample that leaves out no row that would repeat is no sample: the plan is the one every cold row
    # repeating makes (and every older run made), so it hashes as that one.
    every = plan(warm_sample=None).plan
    assert every.warm_sample is None and "warm_sample" not in every.to_dict()
    for same in (plan(warm_sample=5), plan(warm_sample=9), plan(warm_sample=2, warm_repeats=0)):
        assert same.plan.warm_sample is None
    assert plan(warm_sample=5).plan.sha256 == every.sha256 and cold.plan.sha256 != every.sha256
    assert plan(mode="warm", cold_sample=2, warm_sample=2).plan.warm_sample is None


def test_a_version_9_plan_reads_with_every_row_repeating_and_hashes_as_before() -> None:
    from codecarena.results.record import RUN_VERSION, parse_run_record
    from codecarena.results.schema import SchemaError

    record = json.loads((FIXTURES / "run_v9.json").read_text())
    assert record["version"] == 9 and RUN_VERSION == 10
    parsed = parse_run_record(record)
    assert parsed.plan.warm_sample is None and "warm_sample" not in parsed.plan.to_dict()
    assert parsed.plan.sha256 == record["plan_sha256"]
    with pytest.raises(SchemaError, match=r"unexpected keys \['warm_sample'\] in a version 9 record"):
        parse_run_record({**record, "plan": {**record["plan"], "warm_sample": 1}})
    current = parse_run_record({**record, "version": 10, "plan": {**record["plan"], "warm_sample": 1}})
    assert current.plan.warm_sample == 1 and current.plan.sha256 != record["plan_sha256"]
    with pytest.raises(SchemaError, match="plan.warm_sample -1 is not a count of rows"):
        parse_run_record({**record, "version": 10, "plan": {**record["plan"], "warm_sample": -1}})


def _clips(folder: Path, names: tuple[str, ...]) -> Path:
    need_mirror()
    folder.mkdir()
    for name in names:
        shutil.copy(MIRROR / name, folder / name)
    return folder


def test_a_cold_run_repeats_only_in_the_warm_sample_and_its_warm_rtf_says_n(tmp_path: Path) -> None:
    from codecarena.results import leaderboard as lb
    from codecarena.results.formatting import fmt_rtf

    folder = _clips(tmp_path / "in", (*SHORT_CLIPS, "en_ljspeech_LJ001-0005.wav"))
    out = tmp_path / "run"
    run = codecarena("run", "--input", folder, "--codec", "pcm:16", "--codec", "opus:12k", "--metrics", "none",
                     "--warm-sample", "1", "--out", out)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = rows_of(out)
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok"}
    first = sorted(r["utterance"] for r in rows)[0]
    for row in rows:
        for stage in row["stages"]:
            if row["utterance"] == first:
                assert len(stage["warm_compute_s"]) == 2 and stage["warm_rtf"] > 0, (row["codec"], stage)
            else:
                assert stage["warm_compute_s"] == [] and stage["warm_rtf"] is None, (row["codec"], stage)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["version"] == 6
    board = lb.compute([out])
    for c in summary["codecs"]:
        (own,) = [r for r in rows if r["codec"] == c["codec"] and r["utterance"] == first]
        entry = next(e for e in board.entries if e["codec"] == c["codec"])
        for name in ("encode", "decode"):
            (stage,) = [s for s in own["stages"] if s["name"] == name]
            assert (c[name]["warm_rtf_median"], c[name]["warm_rtf_n"]) == (stage["warm_rtf"], 1)
            assert entry[name]["warm_rtf_n"] == 1
        assert fmt_rtf(c, "warm", " ").endswith(" n=1")
    assert run.stdout.count("n=1") == 2  # the console's warm RTF cell of each configuration
    assert codecarena("audit", out).returncode == 0


def test_an_older_run_resumes_with_warm_sample_all_and_the_default_says_so(tmp_path: Path) -> None:
    from codecarena.results.record import parse_run_record

    folder = _clips(tmp_path / "in", (*SHORT_CLIPS, "en_ljspeech_LJ001-0005.wav",
                                      "en_librispeech_1089-134686-0000.wav"))
    out = tmp_path / "run"
    args = ("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--out", out)
    made = codecarena(*args, "--warm-sample", "all")
    assert made.returncode == 0, made.stdout + made.stderr
    # As version 9 wrote it: every row repeated, and the plan had no warm_sample.
    record = json.loads((out / "run.json").read_text())
    assert record["version"] == 10 and "warm_sample" not in record["plan"]
    record["version"] = 9
    assert parse_run_record(record).plan.sha256 == record["plan_sha256"]
    (out / "run.json").write_text(json.dumps(record))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    refused = codecarena(*args)
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        "holds a run with a different plan (warm_sample) (the run repeats the codec call for the warm RTF in "
        "every row, this command in the first 3 rows of each configuration: to resume it, rerun with "
        "--warm-sample all); use another --out directory"), refused.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    added = codecarena("run", "--input", folder, "--codec", "opus:12k", "--metrics", "none", "--out", out, "--add")
    assert added.returncode == 2 and "rerun with --warm-sample all" in added.stderr, added.stderr

    resumed = codecarena(*args, "--warm-sample", "all")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = json.loads((out / "run.json").read_text())
    assert again["version"] == 10 and again["plan_sha256"] == record["plan_sha256"]
    assert (again["execution"]["rows_resumed"], again["execution"]["rows_computed"]) == (4, 0)


@pytest.mark.parametrize("value, message", [
    ("-1", "--warm-sample -1: must be >= 0 (or 'all')"),
    ("some", "--warm-sample 'some': expected a number or 'all'"),
])
def test_a_warm_sample_that_is_no_count_is_refused_in_one_line(tmp_path: Path, value: str, message: str) -> None:
    run = codecarena("run", "--input", tmp_path / "nowhere", "--codec", "pcm:16", "--warm-sample", value,
                     "--out", tmp_path / "run")
    assert run.returncode == 2 and run.stderr.strip() == f"codecarena: error: {message}", run.stderr
