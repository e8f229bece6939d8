"""Metric dispatch through the registry: each declaration's needs are checked by the Scorer before
its scoring function runs, and a metric is one declaration plus that function."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from codecarena.metrics import content, transcriber
from codecarena.metrics.records import Records, Scored, result
from codecarena.metrics.declarations import (BY_NAME, METRICS, Inputs, MetricSpec, Need, ScoreFunction, available,
                                             describe)
from codecarena.metrics.scorer import Scorer, UtteranceInfo, scoring_order
from codecarena.metrics.signal import METRICS as SIGNAL_METRICS
from codecarena.metrics.signal import score_signal
from conftest import SHORT_CLIPS, need_mirror

CLIP = SHORT_CLIPS[0]
DECLARED = {"name", "outputs", "needs", "packages", "modules", "models", "failure_policy", "description",
            "max_audio_s", "min_audio_s", "input_checks", "rescore_tolerance", "scales", "validity_bounds",
            "device_engine"}


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    audio, rate = sf.read(need_mirror() / CLIP, dtype="float64")
    assert rate == 16000
    return audio


def test_declarations_are_consistent() -> None:
    outputs = [o for spec in METRICS for o in spec.outputs]
    assert len(outputs) == len(set(outputs))
    for spec in METRICS:
        assert set(spec.declaration()) == DECLARED
        assert all(isinstance(need, Need) for need in spec.needs)
        assert (Need.TRANSCRIPT in spec.needs) == bool(spec.transcript_outputs)
        assert set(spec.transcript_outputs) <= set(spec.outputs)
        # Every output declares which end is better and its range, and tables show it by that label.
        assert [scale["name"] for scale in spec.declaration()["scales"]] == list(spec.outputs)
    # The signal metrics, in the signal module's order, and MCD are those without a model file.
    no_models = tuple(spec.name for spec in METRICS if not spec.uses_models)
    assert tuple(n for n in no_models if n in SIGNAL_METRICS) == SIGNAL_METRICS
    assert set(no_models) - set(SIGNAL_METRICS) == {"mcd", "warp_q"}


def test_needs_are_recorded_as_their_words() -> None:
    declared = {entry["name"]: entry["needs"] for entry in describe(tuple(BY_NAME))}
    assert declared["stoi"] == ["reference", "16 kHz"]
    assert declared["dnsmos"] == ["16 kHz"]
    assert declared["asr"] == ["reference", "transcript", "language with an ASR model"]


def test_scoring_order_puts_the_signal_metrics_first() -> None:
    assert scoring_order(("asr", "dnsmos", "stoi", "pesq_wb")) == ("pesq_wb", "stoi", "asr", "dnsmos")


def test_signal_metrics_through_the_scorer_equal_score_signal(speech: np.ndarray) -> None:
    decoded = speech + 0.01 * np.random.default_rng(4).standard_normal(speech.size)
    utt = UtteranceInfo("u", "en", None, ())
    assert Scorer(SIGNAL_METRICS).score(utt, speech, decoded, 16000) == score_signal(speech, decoded,
                                                                                     set(SIGNAL_METRICS))


def test_audio_off_the_arena_rate_fails_before_the_metric_runs(speech: np.ndarray,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def never() -> ScoreFunction:
        raise AssertionError("the scoring function of a metric whose needs are unmet was loaded")

    for name in ("stoi", "dnsmos"):
        monkeypatch.setitem(BY_NAME, name, replace(BY_NAME[name], load=never))
    scores = Scorer(("stoi", "dnsmos")).score(UtteranceInfo("u", "en", None, ()), speech, speech, 8000)
    assert scores["stoi"]["error"] == "stoi needs 16000 Hz audio, got 8000 Hz"
    for output in ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808"):
        assert scores[output] == {"value": None, "status": "failed", "details": {},
                                  "error": "dnsmos needs 16000 Hz audio, got 8000 Hz"}


def test_asr_without_a_language_fails_every_output(speech: np.ndarray) -> None:
    scores = Scorer(("asr",)).score(UtteranceInfo("u", "", "SAID", ()), speech, speech, 16000)
    assert list(scores) == list(BY_NAME["asr"].outputs)
    reason = "utterance has no language (pass --language for an --input folder)"
    assert all(record == {"value": None, "status": "failed", "error": reason, "details": {}}
               for record in scores.values())


def test_a_language_no_asr_model_covers_is_not_applicable_not_failed(speech: np.ndarray) -> None:
    scores = Scorer(("asr",)).score(UtteranceInfo("u", "tlh", "SAID", ()), speech, speech, 16000)
    assert list(scores) == list(BY_NAME["asr"].outputs)
    reason = ("no ASR model covers language 'tlh' "
              "(pass --asr-model tlh=DIR with a multilingual CTranslate2 Whisper model)")
    assert all(record == {"value": None, "status": "not_applicable", "error": reason, "details": {}}
               for record in scores.values())


def _fake(load: Callable[[str], ScoreFunction]) -> MetricSpec:
    return MetricSpec("fake", ("fake_said", "fake_heard"), (Need.REFERENCE, Need.TRANSCRIPT), (), (), (),
                      "exception -> null with reason", "a metric declared by a test", None, 0.0, load,
                      transcript_outputs=("fake_said",))


def test_a_new_metric_is_one_declaration_and_its_function(speech: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[int] = []
    seen: list[Inputs] = []

    def load(device: str) -> ScoreFunction:
        loads.append(1)
        assert device == "cpu"  # a metric no library runs on a device is computed on the CPU

        def score(inputs: Inputs) -> Scored:
            seen.append(inputs)
            said = {"fake_said": result(1.0)} if inputs.transcript is not None else {}
            return Scored({**said, "fake_heard": result(float(inputs.pair.decoded.size))}, {"heard": "all"})
        return score

    monkeypatch.setitem(BY_NAME, "fake", _fake(load))
    scorer = Scorer(("fake",))
    with_transcript = scorer.score(UtteranceInfo("u", "en", "SAID", (("number", "ONE"),)), speech, speech, 16000)
    assert with_transcript == {"fake_said": result(1.0), "fake_heard": result(float(speech.size))}
    without = scorer.score(UtteranceInfo("u", "en", "", ()), speech, speech, 16000)
    assert list(without) == ["fake_said", "fake_heard"]  # the declared order
    assert without["fake_said"] == {"value": None, "status": "not_applicable", "error": "no reference transcript",
                                    "details": {"heard": "all"}}
    assert without["fake_heard"]["status"] == "ok"
    assert loads == [1]  # loaded once per scorer
    assert [(i.language, i.transcript, i.critical, i.asr) for i in seen] == [
        ("en", "SAID", (("number", "ONE"),), None), ("en", None, (), None)]
    assert [entry["name"] for entry in describe(("fake",))] == ["fake"]


def test_a_metric_that_raises_or_cannot_load_fails_alone(speech: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(device: str) -> ScoreFunction:
        raise OSError("model file unreadable\nsecond line")

    monkeypatch.setitem(BY_NAME, "fake", _fake(broken))
    scores = Scorer(("fake", "si_sdr")).score(UtteranceInfo("u", "en", "SAID", ()), speech, speech, 16000)
    for output in ("fake_said", "fake_heard"):
        assert scores[output] == result(error="OSError: model file unreadable")
    assert scores["si_sdr"]["status"] == "ok"


@pytest.mark.slow
def test_asr_without_a_transcript_scores_the_rest_and_transcribes_each_reference_once(
        speech: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    heard: list[int] = []
    hear = transcriber.Transcriber.hear

    def counted(self: transcriber.Transcriber, audio: np.ndarray, sample_rate: int) -> transcriber.Heard:
        heard.append(audio.size)
        return hear(self, audio, sample_rate)

    monkeypatch.setattr(transcriber.Transcriber, "hear", counted)
    scorer = Scorer(("asr",))
    utt = UtteranceInfo("u", "en", None, ())
    first = scorer.score(utt, speech, speech, 16000)
    second = scorer.score(utt, speech, speech[::-1].copy(), 16000)  # another codec's row of the utterance
    assert len(heard) == 3  # the reference once, each decoded signal once
    texts = first["critical_survived"]["details"]  # what every output's details hold
    assert set(texts) == {"hypothesis", "reference_hypothesis", "normalizer", "asr", "checks", "whisper"}
    tokens = len(content.normalize_text(texts["reference_hypothesis"], "en").split())
    assert first["dwer"]["details"] == {**texts, "errors": 0, "reference_tokens": tokens}
    assert texts["hypothesis"] and texts["checks"] == "asr-checks-2"
    # What Whisper reported of the decoded audio's one segment (one window, no timestamps).
    (segment,) = texts["whisper"]
    assert set(segment) == {"no_speech_prob", "avg_logprob", "compression_ratio"}
    assert texts["normalizer"] == "en-1" and texts["asr"]["model"] == "tiny.en"
    for output in ("wer", "cer", "ref_wer", "ref_cer"):
        assert first[output] == {"value": None, "status": "not_applicable", "error": "no reference transcript",
                                 "details": texts}
    assert first["dwer"]["value"] == 0.0 and second["dwer"]["status"] == "ok"
    assert first["critical_survived"]["status"] == "not_applicable"
    assert second["dwer"]["details"]["reference_hypothesis"] == texts["reference_hypothesis"]


def test_a_user_supplied_english_model_replaces_the_shipped_one(speech: np.ndarray, tmp_path: Path) -> None:
    scorer = Scorer(("asr",), {"en": str(tmp_path)})
    assert scorer.asr_models == {"en": str(tmp_path)}
    reason = (f"AsrModelError: ASR model folder {tmp_path} lacks "
              "model.bin, config.json, tokenizer.json, vocabulary.txt")
    (entry,) = scorer.describe()
    assert entry["asr_models"] == {"en": {"choice": str(tmp_path), "error": reason}}
    scores = scorer.score(UtteranceInfo("u", "en", "SAID", ()), speech, speech, 16000)
    assert scores == {output: result(error=reason) for output in BY_NAME["asr"].outputs}


@pytest.mark.slow
def test_reference_side_work_is_done_once_per_reference_across_scorers_and_resumes(
        speech: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five codec configurations, each scored by its own Scorer (as separate scoring processes are),
    sharing a run's reference_results/: six transcriptions and six speaker embeddings (five decoded,
    one reference), not ten; a resumed run computes no reference-side result again."""
    from codecarena.metrics import speaker
    from codecarena.metrics.reference_results import entries

    heard: list[int] = []
    embedded: list[int] = []
    hear, embed = transcriber.Transcriber.hear, speaker.SpeakerSimilarity.embed
    monkeypatch.setattr(transcriber.Transcriber, "hear",
                        lambda self, audio, rate: heard.append(audio.size) or hear(self, audio, rate))
    monkeypatch.setattr(speaker.SpeakerSimilarity, "embed",
                        lambda self, audio, rate: embedded.append(audio.size) or embed(self, audio, rate))
    reference = tmp_path / "reference.wav"
    sf.write(reference, speech, 16000, subtype="PCM_16")
    rng = np.random.default_rng(1)
    decoded = []
    for i in range(5):
        path = tmp_path / f"decoded{i}.wav"
        sf.write(path, np.clip(speech + rng.normal(0, 0.002 * (i + 1), speech.size), -1, 1), 16000, subtype="PCM_16")
        decoded.append(path)
    store = tmp_path / "reference_results"
    utt = UtteranceInfo("u", "en", "SAID", ())
    rows = [Scorer(("asr", "speaker_sim"), reference_results=store).score_files(utt, reference, path)
            for path in decoded]
    assert len(heard) == 6 and len(embedded) == 6
    assert len({r["dwer"]["details"]["reference_hypothesis"] for r in rows}) == 1
    assert sorted(p.name.split("-")[0] for p in entries(store)) == ["asr_transcript", "speaker_embedding"]
    # Resumed: a fresh scorer finds both in the run directory.
    again = Scorer(("asr", "speaker_sim"), reference_results=store).score_files(utt, reference, decoded[0])
    assert len(heard) == 7 and len(embedded) == 7  # only the decoded side
    assert again == rows[0]
    # Without the run's store (a scorer computing its reference side itself), the same values.
    assert Scorer(("asr", "speaker_sim")).score_files(utt, reference, decoded[0]) == rows[0]


@pytest.mark.parametrize("name", [spec.name for spec in METRICS])
def test_too_short_silent_or_clipped_inputs_are_declared_failures_never_numbers(speech: np.ndarray,
                                                                               name: str) -> None:
    spec = BY_NAME[name]
    if not available(spec):
        pytest.skip(f"{name} is not installed")
    scorer = Scorer((name,))
    utt = UtteranceInfo("u", "en", None, ())

    def refused(scores: Records, reason: str) -> bool:
        return scores == {output: result(error=reason) for output in spec.outputs}

    def computed(scores: Records) -> bool:
        """No output was stopped by the input checks (the metric itself may still fail, e.g. pitch on
        too little voicing)."""
        return not any(str(r["error"]).startswith(("decoded audio is", "reference audio is")) for r in scores.values())

    one = scorer.score(utt, speech, speech[:1], 16000)
    assert refused(one, f"decoded audio is 6.25e-05 s long; {name} needs at least {spec.min_audio_s:g} s"), one
    just_short = scorer.score(utt, speech, speech[: round(spec.min_audio_s * 16000) - 1], 16000)
    assert all(r["status"] == "failed" and str(r["error"]).endswith(f"; {name} needs at least {spec.min_audio_s:g} s")
               for r in just_short.values()), just_short

    quiet = speech / np.max(np.abs(speech)) * 10 ** (-61 / 20)  # peak -61 dBFS
    assert refused(scorer.score(utt, speech, quiet, 16000),
                   f"decoded audio is silent (peak -61.0 dBFS, below -60 dBFS); {name} is undefined on silence")
    audible = speech / np.max(np.abs(speech)) * 10 ** (-59 / 20)  # peak -59 dBFS: scored
    assert computed(scorer.score(utt, speech, audible, 16000))
    # Only a metric that reads the reference is stopped by a silent one (DNSMOS and Distill-MOS are not).
    no_reference = scorer.score(utt, np.zeros_like(speech), speech, 16000)
    if Need.REFERENCE in spec.needs:
        assert refused(no_reference, f"reference audio is silent (peak digital silence, below -60 dBFS); {name} is "
                                     "undefined on silence"), no_reference
    else:
        assert computed(no_reference), no_reference

    def clipped(share: float) -> np.ndarray:
        x = speech.copy()
        x[: int(share * x.size)] = 32767 / 32768
        return x
    over = scorer.score(utt, speech, clipped(0.02), 16000)
    assert refused(over, f"decoded audio is clipped (2.0% of its samples at full scale, more than 1%); {name} is not "
                         "scored on saturated audio"), over
    assert computed(scorer.score(utt, speech, clipped(0.009), 16000))


def test_visqol_ranks_a_copy_above_frame_shuffled_audio(speech: np.ndarray) -> None:
    pytest.importorskip("visqol")
    scorer = Scorer(("visqol",))
    utt = UtteranceInfo("u", "en", None, ())
    copy = scorer.score(utt, speech, speech.copy(), 16000)["visqol"]
    frames = speech[: speech.size // 320 * 320].reshape(-1, 320)
    shuffled = np.concatenate([frames[np.random.default_rng(0).permutation(len(frames))].ravel(),
                               speech[frames.size:]])
    mixed = scorer.score(utt, speech, shuffled, 16000)["visqol"]
    assert copy["status"] == mixed["status"] == "ok"
    assert copy["value"] > 3.5 and mixed["value"] < copy["value"] - 1.5, (copy, mixed)
    entry = {e["name"]: e for e in scorer.describe()}["visqol"]
    assert entry["unusable_because"] is None and entry["model_files"][0]["sha256"] == entry["models"][0]["sha256"]


def test_pitch_of_a_copy_is_perfect_and_of_a_pitch_shift_is_not(speech: np.ndarray) -> None:
    pytest.importorskip("swift_f0")
    import soxr

    scorer = Scorer(("pitch",))
    utt = UtteranceInfo("u", "en", None, ())
    copy = scorer.score(utt, speech, speech.copy(), 16000)
    assert (copy["f0_rmse_cents"]["value"], copy["gpe"]["value"], copy["vde"]["value"]) == (0.0, 0.0, 0.0)
    assert copy["f0_corr"]["value"] == pytest.approx(1.0, abs=1e-12)
    assert copy["f0_rmse_cents"]["details"]["voiced_both"] >= 10
    # Played 6 % faster (about a semitone higher), cut to the same length: F0 moves by about 100 cents.
    shifted = soxr.resample(speech, 16000, 16000 / 1.06)
    shifted = np.concatenate([shifted, np.zeros(speech.size)])[:speech.size]
    moved = scorer.score(utt, speech, shifted, 16000)
    assert moved["f0_rmse_cents"]["value"] > 50 or moved["gpe"]["value"] > 0.1, moved
    silence_mostly = speech.copy()
    silence_mostly[: speech.size - 800] = 0.0  # 50 ms of speech left: too little voicing to compare
    sparse = scorer.score(utt, speech, silence_mostly, 16000)
    assert sparse["f0_rmse_cents"]["status"] == "failed" and "frames voiced in both" in sparse["f0_rmse_cents"]["error"]
    assert sparse["vde"]["status"] == "ok" and sparse["vde"]["value"] > 0.5


def _need_module(name: str) -> None:
    """Skip without the package; unlike importorskip, does not import it (distillmos needs its placeholder)."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed")


def _frame_shuffled(speech: np.ndarray) -> np.ndarray:
    frames = speech[: speech.size // 320 * 320].reshape(-1, 320)
    return np.concatenate([frames[np.random.default_rng(0).permutation(len(frames))].ravel(), speech[frames.size:]])


def test_mcd_of_a_copy_is_zero_and_of_shuffled_frames_is_large(speech: np.ndarray) -> None:
    pytest.importorskip("pysptk")
    scorer = Scorer(("mcd",))
    utt = UtteranceInfo("u", "en", None, ())
    copy = scorer.score(utt, speech, speech.copy(), 16000)["mcd"]
    assert copy["status"] == "ok" and copy["value"] == 0.0 and copy["details"]["speech_frames"] >= 10
    noisy = scorer.score(utt, speech, speech + 0.003 * np.random.default_rng(1).standard_normal(speech.size),
                         16000)["mcd"]
    shuffled = scorer.score(utt, speech, _frame_shuffled(speech), 16000)["mcd"]
    assert 0.0 < noisy["value"] < shuffled["value"], (noisy, shuffled)
    assert shuffled["value"] > 8.0, shuffled
    # A band the decoder leaves empty counts the same whether it wrote exact zeros or 16-bit ones.
    import scipy.signal
    low = scipy.signal.sosfiltfilt(scipy.signal.butter(10, 3400, fs=16000, output="sos"), speech)
    as_float = scorer.score(utt, speech, low, 16000)["mcd"]["value"]
    as_int16 = scorer.score(utt, speech, np.round(low * 32768) / 32768, 16000)["mcd"]["value"]
    assert as_float == pytest.approx(as_int16, rel=0.1), (as_float, as_int16)


@pytest.mark.parametrize("clip", [CLIP, "en_ljspeech_LJ001-0005.wav"])  # 1.5 s and 8 s
def test_pitch_of_shuffled_frames_is_far_worse_than_of_a_copy(clip: str) -> None:
    pytest.importorskip("swift_f0")
    speech, _ = sf.read(need_mirror() / clip, dtype="float64")
    scorer = Scorer(("pitch",))
    utt = UtteranceInfo("u", "en", None, ())
    copy = scorer.score(utt, speech, speech.copy(), 16000)
    shuffled = scorer.score(utt, speech, _frame_shuffled(speech), 16000)
    assert copy["vde"]["value"] == 0.0
    # Shuffled 20 ms frames no longer voice where the reference does: a codec at 6 kbps disagrees on
    # a few percent of the frames (Opus 6k's mean VDE on the smoke set: 0.04), the shuffle on a quarter or more.
    assert shuffled["vde"]["value"] > 0.25, shuffled["vde"]
    gpe = shuffled["gpe"]
    if gpe["status"] == "failed":  # too few frames voiced in both to compare F0: said, not scored
        assert "frames voiced in both" in gpe["error"]
        assert shuffled["f0_rmse_cents"]["error"] == shuffled["f0_corr"]["error"] == gpe["error"]
    else:
        # A copy has no gross error and 0 cents; here a fifth of the frames or more are 20 % off, and
        # the rest far from 0 cents. f0_corr is left out: it is computed over the frames without a
        # gross error only, whose F0 agrees within 20 % by that choice, so it stays high.
        assert gpe["value"] >= 0.2, gpe
        rmse = shuffled["f0_rmse_cents"]
        if rmse["status"] == "failed":
            assert "without a gross error" in rmse["error"], rmse
        else:
            assert rmse["value"] >= 100, rmse


def test_distill_mos_prefers_the_speech_to_its_shuffled_frames(speech: np.ndarray) -> None:
    _need_module("distillmos")
    scorer = Scorer(("distill_mos",))
    utt = UtteranceInfo("u", "en", None, ())
    clean = scorer.score(utt, speech, speech, 16000)["distill_mos"]
    again = Scorer(("distill_mos",)).score(utt, speech, speech, 16000)["distill_mos"]
    shuffled = scorer.score(utt, speech, _frame_shuffled(speech), 16000)["distill_mos"]
    assert clean["status"] == shuffled["status"] == "ok"
    assert clean["value"] == again["value"]  # one torch thread: the same bits from a fresh model
    assert 1.0 <= shuffled["value"] < clean["value"] - 1.0 <= 4.0, (clean, shuffled)
    entry = {e["name"]: e for e in scorer.describe()}["distill_mos"]
    assert entry["unusable_because"] is None and entry["model_files"][0]["sha256"] == entry["models"][0]["sha256"]


def test_distill_mos_never_reaches_the_torchaudio_it_is_lent() -> None:
    _need_module("distillmos")
    import importlib.util
    import sys

    from codecarena.metrics import distill_mos

    if importlib.util.find_spec("torchaudio") is not None:
        pytest.skip("torchaudio is installed: the placeholder is not used")
    distill_mos.DistillMos()
    assert "torchaudio" not in sys.modules
    with pytest.raises(RuntimeError, match="torchaudio.load is not available"):
        sys.modules["distillmos.sqa"].torchaudio.load("x.wav")


def test_aligned_model_metrics_are_suspect_when_the_delay_is_near_the_search_bound(speech: np.ndarray) -> None:
    pytest.importorskip("pysptk")
    pytest.importorskip("swift_f0")
    from codecarena.metrics.signal import BOUND_MARGIN_S, MAX_DELAY_S

    delay = int((MAX_DELAY_S - BOUND_MARGIN_S / 2) * 16000)
    late = np.concatenate([np.zeros(delay), speech])[: speech.size]
    scored = Scorer(("stoi", "mcd", "pitch")).score(UtteranceInfo("u", "en", None, ()), speech, late, 16000)
    for name in ("stoi", "mcd", "f0_rmse_cents"):
        assert scored[name]["status"] == "suspect", (name, scored[name])
        assert scored[name]["error"] == scored["stoi"]["error"]


def test_batched_dnsmos_equals_the_speechmos_protocol(speech: np.ndarray) -> None:
    pytest.importorskip("speechmos")
    from speechmos import dnsmos as speechmos_dnsmos

    from codecarena.metrics.dnsmos import Dnsmos

    model = Dnsmos()
    noisy = np.clip(speech + 0.02 * np.random.default_rng(2).standard_normal(speech.size), -1, 1)
    # Short (tiled to the window), one window, and several windows 1 s apart.
    for audio in (noisy[:16000], noisy, np.tile(noisy, 9)):
        ours = model.score(audio)
        theirs = speechmos_dnsmos.run(audio, 16000)
        for output, key in (("dnsmos_sig", "sig_mos"), ("dnsmos_bak", "bak_mos"), ("dnsmos_ovrl", "ovrl_mos"),
                            ("dnsmos_p808", "p808_mos")):
            # One window per call there, all in one call here, one thread here: float32 rounding only.
            assert ours[output] == pytest.approx(float(theirs[key]), abs=1e-6), (output, len(audio))
    assert len(model.windows(np.tile(noisy, 9))) > 1


def test_plcmos_and_warp_q_are_in_the_default_metric_set() -> None:
    """The default --metrics puts PLCMOS on every row, channel rows included, and WARP-Q beside it (its
    cost is under a tenth of the default set's: docs/metrics.md)."""
    import argparse

    from codecarena.commands.common import add_metric_args
    from codecarena.metrics.declarations import select

    if not (available(BY_NAME["plcmos"]) and available(BY_NAME["warp_q"])):
        pytest.skip("the metrics extra is not installed")
    parser = argparse.ArgumentParser()
    add_metric_args(parser)
    assert {"plcmos", "warp_q"} <= set(select(parser.parse_args([]).metrics))


def _lost_frames(speech: np.ndarray, rate: float) -> np.ndarray:
    """Speech with each 20 ms frame zeroed with probability `rate`, one seeded draw per frame shared by
    every rate (a higher rate loses a superset), as the arena's channel draws are: silence in place of
    every lost frame, no concealment."""
    draws = np.random.default_rng(0).random(speech.size // 320)
    lossy = speech.copy()
    for frame in np.flatnonzero(draws < rate):
        lossy[frame * 320:(frame + 1) * 320] = 0.0
    return lossy


def test_plcmos_is_speechmos_protocol_with_a_seeded_rater_draw(speech: np.ndarray) -> None:
    pytest.importorskip("speechmos")
    from speechmos.plcmos import PLCMOS

    from codecarena.metrics.plcmos import RATER_SEED, Plcmos

    noisy = np.clip(speech + 0.02 * np.random.default_rng(2).standard_normal(speech.size), -1, 1)
    ours = Plcmos().score(noisy)
    saved = np.random.get_state()
    try:
        np.random.seed(RATER_SEED)  # speechmos draws its 15 rater embeddings from numpy's global generator
        theirs = PLCMOS()(noisy)["plcmos"]
    finally:
        np.random.set_state(saved)
    # One onnxruntime thread here, speechmos's default there: float32 rounding at most.
    assert ours == pytest.approx(theirs, abs=1e-6)
    assert Plcmos().score(noisy) == ours  # a fixed draw: a fresh model repeats it bit for bit
    entry = {e["name"]: e for e in describe(("plcmos",))}["plcmos"]
    assert entry["unusable_because"] is None and entry["device_engine"] == "onnxruntime"


def test_plcmos_scores_clean_speech_high_and_falls_with_every_step_of_loss(speech: np.ndarray) -> None:
    pytest.importorskip("speechmos")
    scorer = Scorer(("plcmos",))
    utt = UtteranceInfo("u", "en", None, ())
    values = [scorer.score(utt, speech, _lost_frames(speech, rate), 16000)["plcmos"]["value"]
              for rate in (0.0, 0.05, 0.1, 0.2, 0.4)]
    assert values[0] >= 4.0, values  # the clean 1.5 s clip: 4.26 here
    assert all(later < earlier for earlier, later in zip(values, values[1:])), values
    assert values[3] < values[0] - 1.0, values  # a fifth of the frames silent: far lower (2.20)


def test_plcmos_refuses_what_speechmos_refuses_and_what_is_too_short(speech: np.ndarray) -> None:
    pytest.importorskip("speechmos")
    scorer = Scorer(("plcmos",))
    utt = UtteranceInfo("u", "en", None, ())
    over = speech.copy()
    over[100] = 1.25  # one sample over full scale: not clipped audio, yet outside what speechmos takes
    record = scorer.score(utt, speech, over, 16000)["plcmos"]
    assert record["status"] == "failed" and record["error"] == (
        "ValueError: PLCMOS takes samples within [-1, 1] (speechmos refuses others); this audio has a peak of 1.25")
    short = scorer.score(utt, speech, speech[:12000], 16000)["plcmos"]
    assert short["status"] == "failed" and short["error"] == "decoded audio is 0.75 s long; plcmos needs at least 1 s"


def test_warp_q_ranks_a_copy_noise_loss_and_shuffled_frames_in_order(speech: np.ndarray) -> None:
    pytest.importorskip("warpq")
    scorer = Scorer(("warp_q",))
    utt = UtteranceInfo("u", "en", None, ())

    def warp_q(decoded: np.ndarray) -> float:
        record = scorer.score(utt, speech, decoded, 16000)["warp_q"]
        assert record["status"] == "ok", record
        assert record["details"]["normalized"] == pytest.approx(max(0.0, 1 - record["value"] / 3.5), abs=1e-3)
        return float(record["value"])

    copy = warp_q(speech.copy())
    # Lower is better. Not 0 for a copy: the published step sizes have no diagonal step (0.68 here).
    assert 0.3 < copy < 1.0
    losses = [warp_q(_lost_frames(speech, rate)) for rate in (0.05, 0.1, 0.2)]
    assert copy < losses[0] < losses[1] < losses[2], (copy, losses)
    assert warp_q(_frame_shuffled(speech)) > losses[2]
    assert "pad" not in vars(np.lib)  # numpy 1's alias lent to warpq and pyvad is gone again


def test_warp_q_without_a_patch_of_speech_fails_with_its_reason(speech: np.ndarray) -> None:
    pytest.importorskip("warpq")
    decoded = np.concatenate([speech[:3000], np.zeros(speech.size - 3000)])  # 0.19 s of speech, then silence
    record = Scorer(("warp_q",)).score(UtteranceInfo("u", "en", None, ()), speech, decoded, 16000)["warp_q"]
    assert record["status"] == "failed" and record["error"] == (
        "ValueError: WARP-Q's voice activity detector keeps less than its 0.4 s patch of the reference or the "
        "decoded audio: no patch to align")
