"""Channels through the command line (docs/channel.md): `run --channel` on one short clip, twice with the
same seed, and what `audit` re-derives of the impaired payloads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of
from codecarena.files import sha256_file

CODECS = ("opus:12k", "codec2:3200")
CHANNELS = ("loss=20%", "ber=1e-3")


def _run(folder: Path, out: Path) -> None:
    result = codecarena("run", "--input", folder, *(a for c in CODECS for a in ("--codec", c)),
                        *(a for c in CHANNELS for a in ("--channel", c)), "--metrics", "stoi", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("channel-in")
    shutil.copy(need_mirror() / SHORT_CLIPS[0], folder / "clip0.wav")
    first, second = (tmp_path_factory.mktemp(name) / "run" for name in ("first", "second"))
    _run(folder, first)
    _run(folder, second)
    return first, second


@pytest.mark.slow
def test_two_runs_with_the_same_seed_give_identical_impaired_payloads_and_scores(runs: tuple[Path, Path]) -> None:
    first, second = ({r["codec"]: r for r in rows_of(run)} for run in runs)
    assert sorted(first) == sorted(second) == sorted(["opus:12k", "opus:12k@loss=20%", "opus:12k@ber=1e-3",
                                                      "codec2:3200", "codec2:3200@loss=20%", "codec2:3200@ber=1e-3"])
    for a, b in ((first[codec], second[codec]) for codec in first):
        assert a["status"] == b["status"] == "ok", (a["error"], b["error"])
        assert (a["channel"] is None) == (a["codec"] in CODECS)
        if a["channel"] is not None:
            assert a["channel"]["payload_sha256"] == b["channel"]["payload_sha256"]
            assert a["channel"]["trace_sha256"] == b["channel"]["trace_sha256"]
            assert a["channel"]["lost"] + a["channel"]["flipped_bits"] > 0
        assert a["decoded_sha256"] == b["decoded_sha256"]
        assert a["metrics"]["stoi"]["value"] == b["metrics"]["stoi"]["value"]


@pytest.mark.slow
def test_impaired_payloads_are_decoded_in_fresh_processes_and_the_audit_rederives_them(
        runs: tuple[Path, Path]) -> None:
    from codecarena.payload import read_payload
    from codecarena.results.audit import audit

    run = runs[0]
    rows = [row for row in rows_of(run) if row["channel"] is not None]
    assert sorted(row["codec"] for row in rows) == sorted(f"{codec}@{channel}" for codec in CODECS
                                                          for channel in CHANNELS)
    for row in rows:
        impaired = read_payload(run / row["channel"]["payload"])  # the payload parser accepts it
        assert impaired.codec == row["codec"].partition("@")[0]
        assert row["replay_sampled"] and row["replay_identical"] is True  # decoded again in a fresh process
        receiver = row["codec_facts"]["decode"]["receiver"]
        assert receiver["by"] == {"opus": "codec", "codec2": "arena"}[row["family"]]
    assert audit(run, replay=True) == []


@pytest.mark.slow
def test_the_audit_refuses_a_trace_that_is_not_the_channels_own(runs: tuple[Path, Path], tmp_path: Path) -> None:
    from codecarena.results.audit import audit
    from codecarena.results.run import Run
    from codecarena.results.schema import parse_row
    from codecarena.results.summary import summarize

    run = tmp_path / "run"
    shutil.copytree(runs[0], run)
    rows = rows_of(run)
    row = next(r for r in rows if r["codec"] == "opus:12k@loss=20%")
    trace_path = run / row["channel"]["trace"]
    trace = json.loads(trace_path.read_text())
    kept = trace["lost"][1:]  # a forger "recovers" the first lost packet in the trace
    trace_path.write_text(json.dumps({**trace, "lost": kept}))
    # ... and makes the row and the summary agree with the edited trace.
    row["channel"] = {**row["channel"], "trace_sha256": sha256_file(trace_path), "lost": len(kept)}
    rows = [parse_row({**r, "row_sha256": None}).sealed().to_dict() for r in rows]
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps(summarize(Run.open(run).rows)))
    problems = audit(run)
    assert any("is not what loss=20% draws for this utterance" in p for p in problems), problems
    assert any("is not the impaired payload the trace names" in p for p in problems), problems


@pytest.mark.slow
def test_the_report_draws_quality_against_loss_per_codec(runs: tuple[Path, Path], tmp_path: Path) -> None:
    result = codecarena("report", runs[0], "--out", tmp_path / "report.html", "--audio", "none")
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "report.html").read_text()
    assert 'id="channel"' in page and 'data-channel="loss=R%"' in page and 'data-channel="ber=X"' in page
    summary = json.loads((runs[0] / "summary.json").read_text())["channels"]
    assert [(c["codec"], c["curve"], [p["configuration"] for p in c["points"]]) for c in summary["curves"]] == [
        ("opus:12k", "loss=R%", ["opus:12k", "opus:12k@loss=20%"]),
        ("opus:12k", "ber=X", ["opus:12k", "opus:12k@ber=1e-3"]),
        ("codec2:3200", "loss=R%", ["codec2:3200", "codec2:3200@loss=20%"]),
        ("codec2:3200", "ber=X", ["codec2:3200", "codec2:3200@ber=1e-3"])]
