"""Quality metrics through the real pipeline and the `score` command."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import SHORT_CLIPS, codecarena, need_mirror, rows_of
from codecarena.metrics.declarations import ASR_OUTPUTS, BY_NAME, METRICS, select
from codecarena.metrics.scorer import Scorer, UtteranceInfo, metrics_code_sha256
from codecarena.metrics.outputs import LOWER_IS_BETTER

pytestmark = pytest.mark.slow

ALL_OUTPUTS = [o for m in METRICS for o in m.outputs]


@pytest.fixture(scope="module")
def pcm_smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirror = need_mirror()
    out = tmp_path_factory.mktemp("pcm") / "run"
    result = codecarena("run", "--data-dir", mirror, "--codec", "pcm:16", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    (out.parent / "stdout.txt").write_text(result.stdout)
    return out


def test_every_installed_metric_is_selected_by_default() -> None:
    assert set(select("all")) == {m.name for m in METRICS}


def test_pcm_control_scores_as_transparent_on_the_smoke_set(pcm_smoke: Path) -> None:
    rows = rows_of(pcm_smoke)
    assert len(rows) == 10
    for row in rows:
        m = row["metrics"]
        assert set(m) == set(ALL_OUTPUTS)
        assert m["pesq_wb"]["value"] >= 4.4
        assert m["stoi"]["value"] >= 0.99 and m["estoi"]["value"] >= 0.99
        assert m["si_sdr"]["value"] > 60
        assert m["si_sdr"]["details"]["delay_samples"] == 0
        assert m["speaker_sim"]["value"] >= 0.99
        # The lattice mapper never gives a perfect copy 5: 3.94-4.61 here, lowest on 1.5 s clips.
        assert m["visqol"]["value"] >= 3.9 and m["visqol"]["details"]["vnsim"] > 0.99
        assert (m["f0_rmse_cents"]["value"], m["gpe"]["value"], m["vde"]["value"]) == (0.0, 0.0, 0.0)
        assert m["f0_corr"]["value"] == pytest.approx(1.0, abs=1e-12)
        assert m["mcd"]["status"] == "ok" and m["mcd"]["value"] == pytest.approx(0.0, abs=1e-9)
        # Not 0 for a copy: WARP-Q's published DTW steps have no diagonal one (0.55-0.71 on the smoke set).
        assert m["warp_q"]["status"] == "ok" and m["warp_q"]["value"] < 0.8
        for name in ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808"):
            assert 1.0 <= m[name]["value"] <= 5.0
        # The decoded audio is the reference: the same transcript, dCER (dWER) 0, the floor's error rates.
        # Mandarin, written without spaces, has character error rates only.
        words = ("wer", "ref_wer", "dwer")
        if row["language"] == "zh":
            assert {m[name]["status"] for name in words} == {"not_applicable"}
        else:
            assert m["dwer"]["value"] == 0.0 and m["wer"]["value"] == m["ref_wer"]["value"]
        assert m["dcer"]["value"] == 0.0 and m["cer"]["value"] == m["ref_cer"]["value"]
        # Whisper reads every smoke-set reference well enough: nothing is suspect.
        assert all(m[name]["status"] != "suspect" for name in ASR_OUTPUTS), row["utterance"]
        model = {"en": "tiny.en", "zh": "base"}[row["language"]]
        assert m["cer"]["details"]["asr"]["model"] == model
        assert m["cer"]["details"]["normalizer"] == {"en": "en-1", "zh": "zh-2"}[row["language"]]


@pytest.mark.parametrize("metric", ["distill_mos", "plcmos"])
def test_pcm_control_has_the_no_reference_score_of_its_reference(pcm_smoke: Path, metric: str) -> None:
    """A no-reference metric's best end for a codec is the score of the codec's input, not 5: pcm:16
    hands back the reference, so its Distill-MOS (PLCMOS) is the reference's own, scored here directly."""
    scorer = Scorer((metric,))
    tolerance = BY_NAME[metric].rescore_tolerance
    rows = rows_of(pcm_smoke)
    assert len(rows) == 10
    for row in rows:
        reference = pcm_smoke / row["reference"]
        own = scorer.score_files(UtteranceInfo(row["utterance"], row["language"], None, ()), reference, reference)
        assert row["metrics"][metric]["value"] == pytest.approx(own[metric]["value"], abs=tolerance)


def test_critical_entities_survive_transparent_coding(pcm_smoke: Path) -> None:
    lj = {r["utterance"]: r for r in rows_of(pcm_smoke)}["en_ljspeech_LJ002-0020"]
    record = lj["metrics"]["critical_survived"]
    assert record["value"] == 1.0
    assert record["details"]["entities"][0]["text"] == "EIGHTEEN THIRTEEN"
    librispeech = {r["utterance"]: r for r in rows_of(pcm_smoke)}["en_librispeech_1089-134686-0000"]
    assert librispeech["metrics"]["critical_survived"]["status"] == "not_applicable"
    mandarin = {r["utterance"]: r for r in rows_of(pcm_smoke)}["zh_aishell1_BAC009S0002W0124"]
    (entity,) = mandarin["metrics"]["critical_survived"]["details"]["entities"]
    # The reference says 六月, Whisper base writes 6月: the normaliser makes them meet.
    assert entity["text"] == "六月" and entity["survived"] and entity["hypothesis_text"] == "六月"
    assert mandarin["metrics"]["critical_survived"]["value"] == 1.0


def test_summary_averages_successes_and_counts_failures(pcm_smoke: Path) -> None:
    summary = json.loads((pcm_smoke / "summary.json").read_text())
    (codec,) = summary["codecs"]
    # Error rates per language only (six English clips, four Mandarin ones), WER only for English.
    english, mandarin = codec["by_language"]["en"]["metrics"], codec["by_language"]["zh"]["metrics"]
    for name in ("wer", "cer", "ref_cer", "dcer"):
        assert name not in codec["metrics"]
        stats = english[name]
        assert (stats["n_ok"], stats["n_failed"], stats["n_not_applicable"]) == (6, 0, 0)
    for name in ("cer", "ref_cer", "dcer"):
        stats = mandarin[name]
        assert (stats["n_ok"], stats["n_failed"], stats["n_not_applicable"]) == (4, 0, 0)
    assert "wer" not in mandarin and mandarin["dcer"]["corpus_rate"] == 0.0
    critical = codec["metrics"]["critical_survived"]
    assert (critical["n_ok"], critical["n_failed"], critical["n_not_applicable"]) == (4, 0, 6)
    # No real failure: the console shows no failure count and no failure reason.
    shown = (pcm_smoke.parent / "stdout.txt").read_text()
    assert re.search(r"\d+ failed", shown) is None and "metric values failed" not in shown
    assert codec["metrics"]["pesq_wb"]["n_ok"] == 10
    values = [r["metrics"]["pesq_wb"]["value"] for r in rows_of(pcm_smoke)]
    assert codec["metrics"]["pesq_wb"]["mean"] == pytest.approx(sum(values) / len(values), rel=1e-12)
    run = json.loads((pcm_smoke / "run.json").read_text())
    declared = {m["name"]: m for m in run["metrics"]}
    assert set(declared) == {m.name for m in METRICS}
    for name, entry in declared.items():
        assert entry["failure_policy"] and entry["unusable_because"] is None
        assert [model["file"] for model in entry["model_files"]] == [pin.name for pin in BY_NAME[name].models]
        for model in entry["model_files"]:
            assert model["sha256"] == model["pinned_sha256"]
    assert declared["asr"]["asr_models"]["en"]["temperature"] == 0.0
    assert declared["asr"]["asr_models"]["zh"]["model"]["name"] == "base"
    assert run["plan"]["asr_models"] == [["en", "tiny.en"], ["zh", "base"]]
    assert codecarena("audit", pcm_smoke).returncode == 0


def test_every_metric_of_the_smoke_run_rescores_from_its_files(pcm_smoke: Path) -> None:
    """Model-based metrics too recompute within their declared tolerance, in another process."""
    assert {row["metrics_code_sha256"] for row in rows_of(pcm_smoke)} == {metrics_code_sha256()}
    result = codecarena("audit", pcm_smoke, "--rescore", "all")
    assert result.returncode == 0, result.stdout + result.stderr


def test_reference_results_are_audited(pcm_smoke: Path, tmp_path: Path) -> None:
    """One transcript and one speaker embedding per reference, in the run directory; an edited cached
    transcript is caught by the audit."""
    stored = sorted((pcm_smoke / "reference_results").glob("*/*.json"))
    assert len(stored) == 20
    copy = tmp_path / "run"
    shutil.copytree(pcm_smoke, copy)
    row = next(r for r in rows_of(copy) if r["language"] == "zh")
    (entry,) = (copy / "reference_results" / row["reference_sha256"]).glob("asr_transcript-*.json")
    data = json.loads(entry.read_text())
    data["value"] = data["value"] + "不"
    entry.write_text(json.dumps(data))
    result = codecarena("audit", copy)
    assert result.returncode != 0
    assert f"pcm:16 {row['utterance']}: scored against the reference transcript" in result.stdout + result.stderr


def test_mandarin_dcer_grows_as_the_rate_falls(pcm_smoke: Path, tmp_path: Path) -> None:
    mirror = need_mirror()
    out = tmp_path / "low"
    result = codecarena("run", "--data-dir", mirror, "--codec", "codec2:1200", "--codec", "opus:6k",
                        "--metrics", "asr", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr

    def mean_dcer(run: Path, codec: str) -> float:
        values = [r["metrics"]["dcer"]["value"] for r in rows_of(run) if r["codec"] == codec and r["language"] == "zh"]
        assert len(values) == 4 and None not in values
        return sum(values) / len(values)

    pcm = mean_dcer(pcm_smoke, "pcm:16")
    assert pcm == 0.0
    assert mean_dcer(out, "codec2:1200") > pcm and mean_dcer(out, "opus:6k") > pcm


def test_a_language_no_model_covers_is_not_applicable_and_not_a_failure(tmp_path: Path) -> None:
    """Cantonese: a language Whisper large-v3 transcribes (`--asr-model yue=DIR`), no catalogued model."""
    corpus = tmp_path / "yue"
    corpus.mkdir()
    shutil.copy(need_mirror() / SHORT_CLIPS[0], corpus / "clip.wav")
    out = tmp_path / "run"
    result = codecarena("run", "--input", corpus, "--language", "yue", "--codec", "pcm:16", "--metrics", "asr,stoi",
                        "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = rows_of(out)
    assert {row["metrics"][o]["status"] for o in ("wer", "cer", "dwer", "dcer", "critical_survived")} == {
        "not_applicable"}
    assert "no ASR model covers language 'yue'" in row["metrics"]["dcer"]["error"]
    assert re.search(r"\d+ failed", result.stdout) is None and "metric values failed" not in result.stdout
    assert "n/a" in result.stdout
    assert codecarena("audit", out).returncode == 0


def test_an_asr_model_that_differs_from_its_pins_stops_the_run_with_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache)}
    corpus = tmp_path / "zh"
    corpus.mkdir()
    shutil.copy(need_mirror() / "zh_aishell1_BAC009S0002W0123.wav", corpus / "clip.wav")
    args = ("run", "--input", corpus, "--language", "zh", "--codec", "pcm:16", "--metrics", "asr")
    assert codecarena(*args, "--out", tmp_path / "good", env=env).returncode == 0  # assembles base
    (vocabulary,) = cache.glob("codecarena/asr/whisper-base-*/vocabulary.txt")
    data = bytearray(vocabulary.read_bytes())
    data[100] ^= 1
    vocabulary.write_bytes(bytes(data))
    result = codecarena(*args, "--out", tmp_path / "bad", env=env)
    assert result.returncode == 2 and not (tmp_path / "bad").exists()
    (line,) = result.stderr.strip().splitlines()
    assert f"{vocabulary} has sha256" in line and "pinned 34ce3fe1" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    mine = codecarena(*args, "--asr-model", f"zh={empty}", "--out", tmp_path / "mine", env=env)
    assert mine.returncode == 2 and "lacks model.bin" in mine.stderr


def test_opus_6k_scores_below_12k_on_pesq_wb_and_every_new_metric(tmp_path: Path) -> None:
    mirror = need_mirror()
    out = tmp_path / "opus"
    result = codecarena("run", "--data-dir", mirror, "--codec", "opus:6k", "--codec", "opus:12k",
                        "--metrics", "pesq_wb,visqol,pitch,mcd,distill_mos", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    pesq = {c["codec"]: c["metrics"]["pesq_wb"] for c in summary["codecs"]}
    assert pesq["opus:6k"]["n_ok"] == pesq["opus:12k"]["n_ok"] == 10
    assert pesq["opus:6k"]["mean"] < pesq["opus:12k"]["mean"] - 0.5
    visqol = {c["codec"]: c["metrics"]["visqol"] for c in summary["codecs"]}
    assert visqol["opus:6k"]["n_ok"] == 10 and visqol["opus:6k"]["mean"] < visqol["opus:12k"]["mean"] - 0.5
    means = {c["codec"]: c["metrics"] for c in summary["codecs"]}
    for name in ("f0_rmse_cents", "f0_corr", "vde", "mcd", "distill_mos"):
        six, twelve = means["opus:6k"][name]["mean"], means["opus:12k"][name]["mean"]
        assert means["opus:6k"][name]["n_ok"] == 10, (name, means["opus:6k"][name])
        assert (six > twelve) if name in LOWER_IS_BETTER else (six < twelve), (name, six, twelve)
    # gpe cannot rank them: neither rate makes gross pitch errors (Opus 6k none on the smoke set,
    # 12k two frames of one utterance), so both sit at the floor and their order is noise.
    for codec in ("opus:6k", "opus:12k"):
        assert means[codec]["gpe"]["n_ok"] == 10 and means[codec]["gpe"]["mean"] < 0.01, means[codec]["gpe"]
    assert "pesq_wb" in result.stdout  # the per-codec quality table


def test_two_runs_give_identical_scores(speech_dir: Path, tmp_path: Path) -> None:
    scores = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = codecarena("run", "--input", speech_dir, "--language", "en", "--codec", "codec2:3200",
                            "--out", out)
        assert result.returncode == 0, result.stdout + result.stderr
        # rows.jsonl is in completion order (rows run in parallel); compare by utterance.
        scores.append([r["metrics"] for r in sorted(rows_of(out), key=lambda r: r["utterance"])])
    assert len(scores[0]) == 2 and scores[0] == scores[1]
    assert all(m["pesq_wb"]["status"] == "ok" and m["dwer"]["status"] == "ok" for m in scores[0])


def test_score_command_scores_an_existing_pair_of_folders(tmp_path: Path) -> None:
    mirror = need_mirror()
    refs, decs = tmp_path / "ref", tmp_path / "dec"
    refs.mkdir()
    decs.mkdir()
    for name in SHORT_CLIPS:
        shutil.copy(mirror / name, refs / name)
        shutil.copy(mirror / name, decs / name)
    out = tmp_path / "scores.json"
    result = codecarena("score", refs, decs, "--metrics", "pesq_wb,stoi,si_sdr", "--json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert [m["name"] for m in data["metrics"]] == ["pesq_wb", "stoi", "si_sdr"]
    assert data["version"] == 2 and data["metric_devices"] == {"pesq_wb": "cpu", "stoi": "cpu", "si_sdr": "cpu"}
    assert sorted(Path(item["reference"]).name for item in data["scores"]) == sorted(SHORT_CLIPS)
    for item in data["scores"]:
        assert item["metrics"]["pesq_wb"]["value"] >= 4.4 and item["metrics"]["si_sdr"]["value"] > 60
    # A subfolder (a mirror's original/) is named once and not read: its file is no reference.
    (refs / "original").mkdir()
    shutil.copy(mirror / SHORT_CLIPS[0], refs / "original" / "other.wav")
    (refs / "notes.pdf").write_bytes(b"%PDF not audio")
    top = tmp_path / "top.json"
    beside = codecarena("score", refs, decs, "--metrics", "stoi", "--json", top)
    assert beside.returncode == 0, beside.stdout + beside.stderr
    assert beside.stdout.count("original/: subfolder not read (use --recursive)") == 1
    assert "other.wav" not in beside.stdout and "no decoded file" not in beside.stdout
    assert "notes.pdf: skipped, unreadable audio" in beside.stdout
    assert sorted(Path(s["reference"]).name for s in json.loads(top.read_text())["scores"]) == sorted(SHORT_CLIPS)
    # --recursive reads it: a reference the decoded folder has no subfolder for is listed, not scored.
    walked = codecarena("score", refs, decs, "--metrics", "stoi", "--recursive")
    assert walked.returncode == 0, walked.stdout + walked.stderr
    assert f"1 of {len(SHORT_CLIPS) + 1} references has no decoded file" in walked.stdout
    assert "original/other.wav" in walked.stdout and "subfolder not read" not in walked.stdout
    (decs / "original").mkdir()
    shutil.copy(mirror / SHORT_CLIPS[0], decs / "original" / "other.wav")
    both = tmp_path / "both.json"
    assert codecarena("score", refs, decs, "--metrics", "stoi", "--recursive", "--json", both).returncode == 0
    assert len(json.loads(both.read_text())["scores"]) == len(SHORT_CLIPS) + 1
    (decs / SHORT_CLIPS[1]).unlink()
    missing = codecarena("score", refs, decs, "--metrics", "stoi")
    assert missing.returncode == 2 and SHORT_CLIPS[1].removesuffix(".wav") in missing.stderr


def test_own_audio_in_any_format_is_announced_converted_recorded_and_audited(tmp_path: Path) -> None:
    import soxr

    mirror = need_mirror()
    speech, rate = sf.read(mirror / SHORT_CLIPS[0], dtype="float64")
    at44 = soxr.resample(speech, rate, 44100)
    inputs = tmp_path / "mine"
    inputs.mkdir()
    sf.write(inputs / "stereo.wav", np.stack([at44, 0.5 * at44], axis=1), 44100, subtype="PCM_16")
    sf.write(inputs / "talk.mp3", at44, 44100, format="MP3", subtype="MPEG_LAYER_III")
    (inputs / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0 not audio")
    out = tmp_path / "run"
    result = codecarena("run", "--input", inputs, "--codec", "opus:12k", "--metrics", "stoi", "--channels", "left",
                        "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    assert "1 file or folder of the input is skipped, each with why" in text
    assert "photo.jpg: unreadable audio" in text
    assert "2 of 2 utterances are converted before coding" in text
    assert "stereo: decode WAV PCM_16 (libsndfile), 44100 Hz, 2 channels; take channel left; resample 44100 -> 16000" in text
    # Output to a pipe: one log line per row, with the time left.
    assert re.search(r"row 2/2 opus:12k \S+ ok; elapsed \d+ s, eta 0 s", text), text
    rows = {r["utterance"]: r for r in rows_of(out)}
    assert rows["stereo"]["reference_conversions"] == [
        "decoded WAV PCM_16 (libsndfile), 44100 Hz, 2 channels", "took channel 1 of 2 (left)",
        "resampled 44100 -> 16000 Hz (soxr VHQ)", "written as 16-bit PCM wav"]
    assert rows["talk"]["reference_conversions"][0].startswith("decoded MP3")
    # The reference the codec saw is the left channel, resampled: checked against soxr directly.
    reference, _ = sf.read(out / rows["stereo"]["reference"], dtype="float64")
    expected = soxr.resample(sf.read(inputs / "stereo.wav", dtype="float64")[0][:, 0], 44100, 16000, quality="VHQ")
    assert np.max(np.abs(reference - expected)) < 3 / 32768  # 16-bit rounding
    assert codecarena("audit", out).returncode == 0


def test_unknown_metric_is_a_one_line_error(tmp_path: Path) -> None:
    result = codecarena("run", "--metrics", "pesq_wb,moss", "--out", tmp_path / "r")
    assert result.returncode == 2 and "unknown metric 'moss'" in result.stderr


def test_a_pesq_alignment_failure_is_suspect_and_counted_apart_by_the_score_command(tmp_path: Path) -> None:
    """The whole chain on files: a 15 s reference whose decoded copy drops 26 dB at a pause (PESQ's one
    whole-file gain then fails, as its time alignment did on the issue's Lyra file), beside a clean
    short pair. The command records the long file's PESQ as suspect with its segments, and the table
    keeps it out of the mean and counts it apart."""
    from codecarena.metrics.signal import pesq_split

    mirror = need_mirror()
    clips = sorted(mirror.glob("zh_*.wav"))[:3]
    long_ref = np.concatenate([sf.read(c, dtype="float64")[0] for c in clips])
    refs, decs = tmp_path / "ref", tmp_path / "dec"
    refs.mkdir()
    decs.mkdir()
    dropped = long_ref.copy()
    dropped[pesq_split(long_ref):] *= 0.05
    sf.write(refs / "long.wav", long_ref, 16000, subtype="FLOAT")
    sf.write(decs / "long.wav", dropped, 16000, subtype="FLOAT")
    shutil.copy(mirror / SHORT_CLIPS[0], refs / "short.wav")
    shutil.copy(mirror / SHORT_CLIPS[0], decs / "short.wav")
    out = tmp_path / "scores.json"
    result = codecarena("score", refs, decs, "--metrics", "pesq_wb", "--json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    scores = {s["utterance"]: s["metrics"]["pesq_wb"] for s in json.loads(out.read_text())["scores"]}
    assert scores["long"]["status"] == "suspect" and scores["long"]["value"] < 2.0
    segments = scores["long"]["details"]["segments"]
    assert len(segments) == 2 and all(s["value"] > 4.5 for s in segments)
    assert scores["short"]["status"] == "ok"
    both = (scores["long"]["value"] + scores["short"]["value"]) / 2
    assert f"{scores['short']['value']:.3f}" in result.stdout and f"(1 suspect: {both:.3f} with them)" in result.stdout


def test_the_run_prints_each_languages_quality_beside_the_pooled_table(tmp_path: Path) -> None:
    mirror = need_mirror()
    manifest = json.loads((mirror / "manifest.json").read_text())
    chosen = [*SHORT_CLIPS, next(e["file"] for e in manifest if e["language"] == "zh")]
    folder = tmp_path / "in"
    folder.mkdir()
    for name in chosen:
        shutil.copy(mirror / name, folder / name)
    (folder / "manifest.json").write_text(json.dumps([e for e in manifest if e["file"] in chosen]))
    out = tmp_path / "run"
    result = codecarena("run", "--input", folder, "--codec", "opus:6k", "--metrics", "stoi", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    (codec,) = json.loads((out / "summary.json").read_text())["codecs"]
    pooled, en = codec["metrics"]["stoi"], codec["by_language"]["en"]["metrics"]["stoi"]
    # Three utterances are fewer than the bound (bootstrap.MIN_UNITS): no interval, and said so.
    assert pooled["ci95"] is None and (pooled["ci_unit"], pooled["ci_units"]) == ("utterance", 3)
    assert f"{pooled['mean']:.3f}" in result.stdout
    assert "n=3, no interval" in result.stdout and "n=2, no interval" in result.stdout
    assert "quality, en only (2 utterances)" in result.stdout and "quality, zh only (1 utterance)" in result.stdout
    assert f"{en['mean']:.3f}" in result.stdout
    # Issue 38 (4): each language first, then the pooled table, named as pooled (as leaderboard and the report).
    headings = [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("quality")]
    assert headings == ["quality, en only (2 utterances)", "quality, zh only (1 utterance)",
                        "quality, all 2 languages pooled (3 utterances)"]
