"""Input conditions through the command line (docs/conditions.md): `run --condition` on two short clips of
two speakers, twice with the same seed; what `audit` re-derives; what a resume keeps; the tandem's two
payloads; the lossless control through a condition; the summary and the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of
from codecarena.files import sha256_file

CODECS = ("codec2:3200", "pcm:16")
CONDITIONS = ("noise=babble,snr=5,talkers=1", "noise=hum,snr=10", "rt60=0.3", "level=-16", "tandem=opus:12k",
              "generations=2")


def _run(folder: Path, noise: Path, out: Path, *extra: str) -> str:
    result = codecarena("run", "--input", folder, *(a for c in CODECS for a in ("--codec", c)),
                        *(a for c in CONDITIONS for a in ("--condition", c)), "--noise-dir", noise,
                        "--metrics", "stoi,pesq_wb", "--workers", "2", "--out", out, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("condition-in")
    for i, name in enumerate(SHORT_CLIPS):
        shutil.copy(need_mirror() / name, folder / f"clip{i}.wav")
    (folder / "manifest.json").write_text(json.dumps(
        [{"file": f"clip{i}.wav", "language": "en", "speaker": speaker} for i, speaker in enumerate("AB")]))
    noise = tmp_path_factory.mktemp("noise") / "hum"
    noise.mkdir()
    t = np.arange(3 * 16000) / 16000
    sf.write(noise / "hum.wav", 0.1 * np.sin(2 * np.pi * 120 * t) + 0.02 * np.sin(2 * np.pi * 2400 * t), 16000,
             subtype="PCM_16")
    return folder, noise


@pytest.fixture(scope="module")
def runs(inputs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first, second = (tmp_path_factory.mktemp(name) / "run" for name in ("first", "second"))
    _run(*inputs, first)
    _run(*inputs, second)
    return first, second


def _expected() -> list[str]:
    conditions = [c for c in CONDITIONS if not c.startswith("generations")] + ["gen=2"]
    return sorted(f"{codec}%{c}" if c else codec for codec in CODECS for c in ["", *conditions])


@pytest.mark.slow
def test_two_runs_with_the_same_seed_give_identical_conditioned_inputs_payloads_and_scores(
        runs: tuple[Path, Path]) -> None:
    first, second = (rows_of(run) for run in runs)
    assert sorted({r["codec"] for r in first}) == _expected()
    assert len(first) == len(second) == 2 * len(_expected())
    by_key = {(r["codec"], r["utterance"]): r for r in second}
    conditioned = 0
    for a in first:
        b = by_key[(a["codec"], a["utterance"])]
        assert a["status"] == b["status"] == "ok", (a["codec"], a["error"], b["error"])
        assert (a["condition"] is None) == (a["codec"] in CODECS)
        assert (a["payload_sha256"], a["decoded_sha256"]) == (b["payload_sha256"], b["decoded_sha256"])
        assert a["metrics"] == b["metrics"] and a["input_metrics"] == b["input_metrics"]
        if a["condition"] is not None:
            conditioned += 1
            for key in ("input_sha256", "trace_sha256", "hops", "agreement", "realised", "clipped_samples"):
                assert a["condition"][key] == b["condition"][key], key
            assert (runs[0] / a["condition"]["trace"]).read_bytes() == (runs[1] / b["condition"]["trace"]).read_bytes()
    assert conditioned == 2 * len(CODECS) * (len(CONDITIONS))


@pytest.mark.slow
def test_the_audit_rederives_every_conditioned_input_and_decodes_every_hop_again(runs: tuple[Path, Path]) -> None:
    from codecarena.results.audit import audit

    assert audit(runs[0], replay=True, rescore=1) == []


@pytest.mark.slow
def test_a_tandem_row_keeps_both_payloads_and_both_bitrates(runs: tuple[Path, Path]) -> None:
    from codecarena.payload import read_payload

    rows = [r for r in rows_of(runs[0]) if r["codec"] == "codec2:3200%tandem=opus:12k"]
    assert len(rows) == 2
    for row in rows:
        (hop,) = row["condition"]["hops"]
        assert read_payload(runs[0] / hop["payload"]).codec == "opus:12k"
        assert read_payload(runs[0] / row["payload"]).codec == "codec2:3200"
        assert 9000 < hop["representation_bps"] < 13000 and 3200 <= row["representation_bps"] < 3500
        assert hop["decoded"] == row["condition"]["input"]
        assert [s["name"] for s in row["stages"]][:2] == ["hop1-encode", "hop1-decode"]
    summary = json.loads((runs[0] / "summary.json").read_text())["conditions"]
    (point,) = [p for p in summary["points"] if p["configuration"] == "codec2:3200%tandem=opus:12k"]
    assert len(point["hops_bps"]) == 1 and point["representation_bps"] == pytest.approx(
        sum(r["representation_bps"] for r in rows) / 2)


@pytest.mark.slow
def test_the_lossless_control_through_a_condition_is_the_condition_alone(runs: tuple[Path, Path]) -> None:
    rows = [r for r in rows_of(runs[0]) if r["codec"].startswith("pcm:16%")]
    assert rows
    for row in rows:
        given = sf.read(runs[0] / row["condition"]["input"], dtype="int16")[0]
        decoded = sf.read(runs[0] / row["decoded"], dtype="int16")[0]
        assert np.array_equal(given, decoded)
        assert row["input_metrics"]["stoi"]["value"] == pytest.approx(1.0, abs=1e-9)
    noisy = [r for r in rows if r["codec"] == "pcm:16%noise=babble,snr=5,talkers=1"]
    assert noisy and all(r["metrics"]["stoi"]["value"] < 0.95 for r in noisy)


@pytest.mark.slow
def test_generations_count_what_each_re_encode_kept(runs: tuple[Path, Path]) -> None:
    rows = {r["codec"]: r for r in rows_of(runs[0]) if r["utterance"] == "clip0"}
    pcm, codec2 = rows["pcm:16%gen=2"]["condition"]["agreement"], rows["codec2:3200%gen=2"]["condition"]["agreement"]
    # PCM codes its samples again exactly; Codec 2 does not keep every frame's code.
    assert pcm["fraction"] == 1.0 and pcm["unit"] == "code" and pcm["compared"] > 20000
    assert codec2["unit"] == "code" and 0 <= codec2["fraction"] < 1 and codec2["compared"] > 50
    curves = json.loads((runs[0] / "summary.json").read_text())["conditions"]["curves"]
    (gen,) = [c for c in curves if c["codec"] == "codec2:3200" and c["curve"] == "gen=X"]
    assert gen["points"][0]["agreement"]["compared"] == sum(
        r["condition"]["agreement"]["compared"] for r in rows_of(runs[0]) if r["codec"] == "codec2:3200%gen=2")


@pytest.mark.slow
def test_an_edited_trace_or_conditioned_input_fails_the_audit(runs: tuple[Path, Path], tmp_path: Path) -> None:
    from codecarena.results.audit import audit
    from codecarena.results.run import Run
    from codecarena.results.schema import parse_row
    from codecarena.results.summary import summarize

    run = tmp_path / "run"
    shutil.copytree(runs[0], run)
    rows = rows_of(run)
    noisy = next(r for r in rows if r["codec"] == "codec2:3200%noise=babble,snr=5,talkers=1")
    trace_path = run / noisy["condition"]["trace"]
    trace = json.loads(trace_path.read_text())
    trace["details"]["gain"] *= 0.5  # a forger claims half the noise ...
    trace_path.write_text(json.dumps(trace))
    levelled = next(r for r in rows if r["codec"] == "pcm:16%level=-16")
    given = run / levelled["condition"]["input"]
    samples = sf.read(given, dtype="int16")[0]
    sf.write(given, (samples // 2).astype(np.int16), 16000, subtype="PCM_16")  # ... and a quieter input
    # ... and makes the rows and the summary agree with the edited files.
    noisy["condition"]["trace_sha256"] = sha256_file(trace_path)
    levelled["condition"]["input_sha256"] = sha256_file(given)
    rows = [parse_row({**r, "row_sha256": None}).sealed().to_dict() for r in rows]
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps({**summarize(Run.open(run).rows),
                                                  "ledger": json.loads((runs[0] / "summary.json").read_text())["ledger"]}))
    problems = audit(run)
    where = f"{noisy['codec']} {noisy['utterance']}"
    assert any(p.startswith(where) and "details.gain" in p for p in problems), problems
    where = f"{levelled['codec']} {levelled['utterance']}"
    assert any(p.startswith(where) and "made again from the run's files is not" in p for p in problems), problems


@pytest.mark.slow
def test_a_resume_computes_again_a_row_whose_conditioned_input_changed(
        inputs: tuple[Path, Path], runs: tuple[Path, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs[0], run)
    row = next(r for r in rows_of(run) if r["codec"] == "codec2:3200%rt60=0.3")
    (run / row["condition"]["input"]).write_bytes(b"RIFF garbage")
    out = _run(*inputs, run)
    assert f"{2 * len(_expected()) - 1} complete rows resumed" in out
    again = next(r for r in rows_of(run) if (r["codec"], r["utterance"]) == (row["codec"], row["utterance"]))
    assert again["condition"]["input_sha256"] == row["condition"]["input_sha256"]
    assert sha256_file(run / again["condition"]["input"]) == row["condition"]["input_sha256"]


@pytest.mark.slow
def test_the_report_shows_quality_against_each_condition_with_both_references(
        runs: tuple[Path, Path], tmp_path: Path) -> None:
    result = codecarena("report", runs[0], "--out", tmp_path / "report.html", "--audio", "none")
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "report.html").read_text()
    assert 'id="conditions"' in page and 'data-condition="rt60=X"' in page and 'data-condition="gen=X"' in page
    assert "vs conditioned input (the codec alone)" in page and "vs clean reference (end to end)" in page
    markdown = (tmp_path / "report.md").read_text()
    assert "## Quality against input conditions" in markdown and "codec2:3200%tandem=opus:12k" in markdown
