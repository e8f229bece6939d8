"""Intrusive signal metrics: alignment, PESQ, STOI, SI-SDR, LSD, mel distance, and score_signal.

Speech cases use a real LibriSpeech clip from the smoke-set mirror (skipped when it is absent);
the alignment and formula checks use synthetic signals with hand-derived answers.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from codecarena.alignment import Alignment, aligned, find_delay
from codecarena.arena import ARENA_RATE
from codecarena.metrics import signal as S
from codecarena.metrics.signal import (
    MAX_DELAY_S,
    METRICS,
    SignalScores,
    log_spectral_distance,
    mel_distance,
    pesq_nb,
    pesq_wb,
    score_signal,
    si_sdr,
    stoi,
)

DATA = Path(os.environ.get("CODECARENA_DATA", "/work/shared/data/speech"))
CLIP = "en_librispeech_1089-134686-0001.wav"  # 3.275 s, 16 kHz
ALL = set(METRICS)
ALIGNED = ("stoi", "estoi", "si_sdr", "lsd", "mel_distance")
MAX_DELAY = int(MAX_DELAY_S * ARENA_RATE)


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    path = DATA / CLIP
    if not path.is_file():
        pytest.skip(f"speech clip {path} not found; set CODECARENA_DATA to the smoke-set folder")
    import soundfile as sf

    x, rate = sf.read(path, dtype="float64")
    assert rate == ARENA_RATE and x.ndim == 1
    return x


@pytest.fixture(scope="module")
def identical_scores(speech: np.ndarray) -> dict:
    return score_signal(speech, speech.copy(), ALL)


def delayed(x: np.ndarray, k: int) -> np.ndarray:
    """decoded[n + k] = x[n], zero-filled, same length (k < 0: decoded early by -k samples)."""
    out = np.zeros_like(x)
    if k >= 0:
        out[k:] = x[:x.size - k]
    else:
        out[:x.size + k] = x[-k:]
    return out


def values(scores: dict) -> dict:
    return {name: rec["value"] for name, rec in scores.items()}


# ----------------------------------------------------------------------------- find_delay


@pytest.mark.parametrize("k", [-4000, -300, -8, -1, 0, 1, 8, 640, 3999, 4000])
def test_find_delay_recovers_exact_shift_of_noise(k: int) -> None:
    r = np.random.default_rng(11).standard_normal(12000)
    d = delayed(r, k)
    a = find_delay(r, d, 4000)
    assert a.delay_samples == k
    assert a.overlap_samples == r.size - abs(k)
    # the overlapping parts are the same samples; only the whole-signal means removed differ
    assert a.correlation > 0.9999


def test_find_delay_stays_inside_its_bound() -> None:
    r = np.random.default_rng(12).standard_normal(12000)
    d = delayed(r, 700)
    assert find_delay(r, d, 1000).delay_samples == 700
    a = find_delay(r, d, 500)
    assert abs(a.delay_samples) <= 500
    assert a.correlation < 0.2  # nothing inside the bound matches: say so, do not pretend


@pytest.mark.parametrize("n, p, q, amp, k", [
    (1000, 300, 400, 1.0, 3),
    # configurations where FFT round-off alone makes c[+k] exceed c[-k] (found by search): without
    # the tie tolerance the positive lag would win
    (849, 205, 529, 0.7400285901907748, 29),
    (1976, 885, 1235, 0.6608684302174381, 9),
    (4327, 1395, 3243, 0.13687617154257523, 11),
])
def test_find_delay_tie_goes_to_negative_lag_of_equal_size(n: int, p: int, q: int, amp: float, k: int) -> None:
    # r = +amp at p, -amp at q (zero mean); d = r shifted by +k plus r shifted by -k.
    # By hand c[+k] = c[-k] = 2 amp^2 and every other lag |c| <= amp^2: an exact tie. The rule picks
    # -k; the overlap holds all four impulses, so correlation = 2 amp^2 / sqrt(2 amp^2 * 4 amp^2).
    r = np.zeros(n)
    r[p], r[q] = amp, -amp
    d = delayed(r, k) + delayed(r, -k)
    a = find_delay(r, d, 50)
    assert a.delay_samples == -k
    assert a.correlation == pytest.approx(1 / math.sqrt(2), abs=1e-12)
    assert a.overlap_samples == n - k


def test_find_delay_tie_goes_to_smallest_lag() -> None:
    r = np.zeros(1000)
    r[300], r[400] = 1.0, -1.0
    d = delayed(r, -5) + delayed(r, 2)  # c[2] = c[-5] = 2
    assert find_delay(r, d, 50).delay_samples == 2
    d = delayed(r, 5) + delayed(r, -2)  # c[-2] = c[5] = 2
    assert find_delay(r, d, 50).delay_samples == -2


def test_find_delay_signals_of_different_lengths() -> None:
    r = np.random.default_rng(13).standard_normal(5000)
    d = np.concatenate([np.zeros(120), r, np.zeros(37)])  # decoder padding at both ends
    a = find_delay(r, d, 4000)
    assert (a.delay_samples, a.overlap_samples) == (120, 5000)
    ra, da = aligned(r, d, a)
    np.testing.assert_array_equal(ra, r)
    np.testing.assert_array_equal(da, r)


def test_find_delay_refuses_what_cannot_be_aligned() -> None:
    r = np.random.default_rng(14).standard_normal(2000)
    with pytest.raises(ValueError, match="decoded signal is constant"):
        find_delay(r, np.zeros(2000), 100)
    with pytest.raises(ValueError, match="reference signal is constant"):
        find_delay(np.full(2000, 0.3), r, 100)
    with pytest.raises(ValueError, match="max_delay"):
        find_delay(r, r, -1)


def test_aligned_rejects_a_foreign_alignment() -> None:
    r = np.random.default_rng(15).standard_normal(2000)
    with pytest.raises(ValueError, match="overlap"):
        aligned(r, r, Alignment(delay_samples=10, correlation=1.0, overlap_samples=2000))


# ------------------------------------------------------------------------ formula checks


def test_si_sdr_hand_computed() -> None:
    r = np.array([1.0, -1.0, 1.0, -1.0])
    e = np.array([1.0, 1.0, -1.0, -1.0])  # zero mean, orthogonal to r
    # alpha = 2, |t|^2 = 16, |e|^2 = 4 -> 10 log10(4) = 6.0206 dB (eps = 1e-12 * 20 is negligible)
    assert si_sdr(r, 2 * r + e) == pytest.approx(10 * math.log10(4), abs=1e-9)
    # a DC offset on either signal is removed first
    assert si_sdr(r + 0.25, 2 * r + e - 3.0) == pytest.approx(10 * math.log10(4), abs=1e-9)


def test_si_sdr_identical_is_the_documented_finite_ceiling() -> None:
    r = np.random.default_rng(16).standard_normal(8000) * 0.01
    ceiling = 10 * math.log10(1 + 1e12)
    assert S.SI_SDR_CEILING_DB == pytest.approx(ceiling)
    for d in (r, 0.5 * r, 0.3 * r, 1e-4 * r):
        value = si_sdr(r, d)
        assert math.isfinite(value) and value == pytest.approx(ceiling, abs=1e-6)
    with pytest.raises(ValueError, match="reference signal is constant"):
        si_sdr(np.zeros(100), r[:100])
    with pytest.raises(ValueError, match="decoded signal is constant"):
        si_sdr(r[:100], np.zeros(100))


def test_lsd_and_mel_distance_of_double_level_noise() -> None:
    # every bin is far above the floors, so doubling the amplitude moves each log power by exactly
    # 10 log10(4) dB (LSD) and each log10 mel band by log10(4)
    r = np.random.default_rng(17).standard_normal(16000) * 0.1
    assert log_spectral_distance(r, r) == 0.0
    assert mel_distance(r, r) == 0.0
    # (a handful of the 257 x 122 bins of this noise lie within a few decades of the floor: 1e-4)
    assert log_spectral_distance(r, 2 * r) == pytest.approx(10 * math.log10(4), abs=1e-4)
    assert log_spectral_distance(2 * r, r) == pytest.approx(10 * math.log10(4), abs=1e-4)
    assert mel_distance(r, 2 * r) == pytest.approx(math.log10(4), abs=1e-9)
    with pytest.raises(ValueError, match="at least 512"):
        log_spectral_distance(r[:511], r[:511])


def test_stoi_refuses_to_return_pystois_substitute() -> None:
    r = np.random.default_rng(18).standard_normal(3200) * 0.1  # 0.2 s: under 30 STOI frames
    with pytest.raises(ValueError, match="fewer than 30"):
        stoi(r, r)


# ------------------------------------------------------------------------- real speech


def test_identical_speech_scores_at_the_top(speech: np.ndarray, identical_scores: dict) -> None:
    v = values(identical_scores)
    assert all(rec["error"] is None and rec["status"] == "ok" for rec in identical_scores.values())
    # observed: pesq_wb 4.644, pesq_nb 4.549 (the top of pesq's own scales)
    assert v["pesq_wb"] >= 4.6
    assert v["pesq_nb"] >= 4.5
    assert v["stoi"] >= 0.99 and v["estoi"] >= 0.99
    assert v["si_sdr"] > 60 and math.isfinite(v["si_sdr"])
    assert v["lsd"] < 1e-3
    assert v["mel_distance"] < 1e-6
    details = identical_scores["stoi"]["details"]
    assert details["delay_samples"] == 0 and details["correlation"] == pytest.approx(1.0)
    assert details["overlap_samples"] == speech.size and details["max_delay_samples"] == 4000


def test_delay_of_40ms_is_found_and_removed(speech: np.ndarray, identical_scores: dict) -> None:
    d = delayed(speech, 640)  # 40 ms late, zero-filled at the start, cut to the same length
    a = find_delay(speech, d, MAX_DELAY)
    assert a.delay_samples == 640
    assert a.overlap_samples == speech.size - 640
    assert a.correlation > 0.9999
    scores = score_signal(speech, d, ALL)
    for name in ("stoi", "estoi", "si_sdr", "lsd", "mel_distance"):
        assert scores[name]["details"]["delay_samples"] == 640
        assert scores[name]["details"]["at_search_bound"] is False
    v, ref = values(scores), values(identical_scores)
    assert v["stoi"] == pytest.approx(ref["stoi"], abs=1e-3) and v["stoi"] > 0.99
    assert v["estoi"] == pytest.approx(ref["estoi"], abs=1e-3)
    assert v["si_sdr"] == pytest.approx(ref["si_sdr"], abs=0.5) and v["si_sdr"] > 60
    assert v["lsd"] < 1e-3 and v["mel_distance"] < 1e-6
    # The trap: the same pair without alignment (observed stoi 0.380, estoi 0.192, si_sdr -29 dB).
    assert stoi(speech, d) < 0.6
    assert stoi(speech, d, extended=True) < 0.4
    assert si_sdr(speech, d) < 0


def test_dac_like_early_output_is_found_as_negative_delay(speech: np.ndarray) -> None:
    d = delayed(speech, -8)  # decoded 8 samples early: d[n - 8] = x[n]
    a = find_delay(speech, d, MAX_DELAY)
    assert a.delay_samples == -8 and a.overlap_samples == speech.size - 8
    ra, da = aligned(speech, d, a)
    np.testing.assert_array_equal(ra, speech[8:])
    np.testing.assert_array_equal(da, speech[8:])
    scores = values(score_signal(speech, d, {"si_sdr"}))
    assert scores["si_sdr"] > 60
    assert si_sdr(speech, d) < 0  # observed -10 dB unaligned


def test_frame_shuffled_speech_scores_far_lower(speech: np.ndarray, identical_scores: dict) -> None:
    frame = 320  # 20 ms
    n = speech.size // frame
    order = np.random.default_rng(1234).permutation(n)
    shuffled = np.concatenate([speech[:n * frame].reshape(n, frame)[order].ravel(), speech[n * frame:]])
    v, ref = values(score_signal(speech, shuffled, ALL)), values(identical_scores)
    # observed: pesq_wb 1.17, pesq_nb 1.11, stoi 0.050, estoi 0.012, si_sdr -24.7 dB, lsd 20.2 dB,
    # mel_distance 1.35 (vs 0 / 0 for the identical copy)
    assert v["pesq_wb"] < 2.0 and v["pesq_nb"] < 2.0
    assert v["stoi"] < 0.3 and v["estoi"] < 0.2
    assert v["si_sdr"] < -10
    assert v["lsd"] > 10 > ref["lsd"] + 9
    assert v["mel_distance"] > 0.5 > ref["mel_distance"] + 0.49


def test_white_noise_at_10_db(speech: np.ndarray) -> None:
    noise = np.random.default_rng(7).standard_normal(speech.size)
    # by hand: scale so that 10 log10(|r|^2 / |n|^2) = 10 dB
    noise *= math.sqrt(np.sum(speech ** 2) / np.sum(noise ** 2) / 10)
    assert 10 * math.log10(np.sum(speech ** 2) / np.sum(noise ** 2)) == pytest.approx(10.0)
    scores = score_signal(speech, speech + noise, ALL)
    assert scores["si_sdr"]["value"] == pytest.approx(10.0, abs=0.5)  # observed 9.99
    assert scores["si_sdr"]["details"]["delay_samples"] == 0
    assert 0.5 < scores["stoi"]["value"] < 0.99  # observed 0.936

    # Exact version: zero-mean noise orthogonal to the zero-mean reference makes alpha = 1, so
    # SI-SDR is the SNR itself and the correlation is 1 / sqrt(1 + 1/10).
    r0 = speech - speech.mean()
    n = noise - noise.mean()
    n -= np.dot(n, r0) / np.dot(r0, r0) * r0
    n *= math.sqrt(np.dot(r0, r0) / np.dot(n, n) / 10)
    assert si_sdr(speech, speech + n) == pytest.approx(10.0, abs=1e-9)
    assert find_delay(speech, speech + n, MAX_DELAY).correlation == pytest.approx(1 / math.sqrt(1.1), abs=1e-9)


def test_scaled_copy_keeps_si_sdr(speech: np.ndarray) -> None:
    scores = values(score_signal(speech, 0.5 * speech, {"si_sdr", "lsd"}))
    assert scores["si_sdr"] > 60
    # LSD is not scale-invariant: half the amplitude is 10 log10(4) dB off wherever speech is
    # far above the 1e-10 floor (observed a little less, from near-silent bins)
    assert 3.0 < scores["lsd"] <= 10 * math.log10(4) + 1e-6


# ----------------------------------------------------------------------------- failures


def test_pesq_on_silent_decoded_fails_with_reason(speech: np.ndarray) -> None:
    scores = score_signal(speech, np.zeros_like(speech), ALL)
    for name in ("pesq_wb", "pesq_nb"):
        assert scores[name]["value"] is None and scores[name]["status"] == "failed"
        assert scores[name]["error"].startswith("ValueError: ")
        assert "silent" in scores[name]["error"] and "all zeros" in scores[name]["error"]
    for name in ALIGNED:  # alignment of a silent signal is undefined too: no substitute numbers
        assert scores[name]["value"] is None and "cannot align" in scores[name]["error"]
    with pytest.raises(ValueError, match="silent"):
        pesq_wb(speech, np.zeros_like(speech))
    with pytest.raises(ValueError, match="silent"):
        pesq_nb(np.zeros_like(speech), speech)


def test_pesqs_own_error_is_passed_on_and_others_still_score(speech: np.ndarray) -> None:
    short = speech[8000:8000 + 3200]  # 0.2 s of speech: pesq needs 0.25 s, STOI 30 frames
    scores = score_signal(short, short.copy(), ALL)
    for name in ("pesq_wb", "pesq_nb"):
        assert scores[name]["value"] is None
        assert "BufferTooShortError" in scores[name]["error"] and "1/4 of a second" in scores[name]["error"]
    for name in ("stoi", "estoi"):
        assert scores[name]["value"] is None and "fewer than 30" in scores[name]["error"]
    assert scores["si_sdr"]["value"] > 60
    assert scores["lsd"]["value"] == 0.0 and scores["mel_distance"]["value"] == 0.0


def test_pesq_is_refused_above_its_safe_length_and_never_called(speech: np.ndarray,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import pesq as pesq_lib

    from codecarena.metrics.max_audio import PESQ_MAX_AUDIO_S
    from codecarena.metrics.declarations import BY_NAME

    limit = int(PESQ_MAX_AUDIO_S * ARENA_RATE)
    at_limit = np.resize(speech, limit)
    over = np.resize(speech, limit + 1)
    assert score_signal(at_limit, at_limit.copy(), {"pesq_wb"})["pesq_wb"]["value"] > 4.4
    calls: list[int] = []
    monkeypatch.setattr(pesq_lib, "pesq", lambda fs, ref, deg, mode: calls.append(len(ref)) or 4.5)
    scores = score_signal(over, over.copy(), ALL)
    for name in ("pesq_wb", "pesq_nb"):
        assert scores[name]["value"] is None and scores[name]["status"] == "failed"
        assert scores[name]["error"].startswith(f"ValueError: PESQ is refused above {PESQ_MAX_AUDIO_S:g} s "
                                                f"(this audio is {(limit + 1) / ARENA_RATE:.2f} s)")
        assert BY_NAME[name].max_audio_s == PESQ_MAX_AUDIO_S
    assert calls == []
    assert scores["stoi"]["value"] > 0.99


@pytest.mark.parametrize("make, reason", [
    (lambda x: (x, x[:-1]), "differ in length"),
    (lambda x: (x, np.where(np.arange(x.size) == 1000, np.nan, x)), "non-finite"),
    (lambda x: (np.where(np.arange(x.size) == 5, np.inf, x), x), "non-finite"),
    (lambda x: (x, np.stack([x, x])), "1-D"),
    (lambda x: (x, (x * 32767).astype(np.int16)), "floating-point"),
    (lambda x: (x[:0], x[:0]), "empty"),
])
def test_bad_input_fails_every_metric_with_the_reason(make, reason: str) -> None:
    x = np.random.default_rng(19).standard_normal(8000) * 0.1
    ref, dec = make(x)
    scores = score_signal(ref, dec, ALL)
    assert list(scores) == list(METRICS)
    for rec in scores.values():
        assert rec["value"] is None and rec["status"] == "failed"
        assert rec["error"].startswith("ValueError: ") and reason in rec["error"]
        assert "\n" not in rec["error"]


def test_unknown_metric_name_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="unknown signal metric"):
        score_signal(np.ones(10), np.ones(10), {"stoi", "pesq"})
    assert score_signal(np.ones(10), np.ones(10), set()) == {}


# ------------------------------------------------------------------------- the contract


def test_only_requested_metrics_and_alignment_details(speech: np.ndarray) -> None:
    scores = score_signal(speech, speech, {"pesq_wb"})
    assert list(scores) == ["pesq_wb"]
    assert "delay_samples" not in scores["pesq_wb"]["details"]
    scores = score_signal(speech, delayed(speech, 100), {"lsd", "si_sdr"})
    assert list(scores) == ["si_sdr", "lsd"]
    for rec in scores.values():
        assert rec["details"]["delay_samples"] == 100
        assert -1.0 <= rec["details"]["correlation"] <= 1.0


def test_score_signal_is_deterministic(speech: np.ndarray) -> None:
    d = delayed(speech, 333) + np.random.default_rng(20).standard_normal(speech.size) * 0.003
    first = score_signal(speech, d, ALL)
    second = score_signal(speech.copy(), d.copy(), set(reversed(METRICS)))
    assert first == second
    assert list(first) == list(METRICS)
    assert first["si_sdr"]["details"]["delay_samples"] == 333


def test_estoi_is_repeatable_and_leaves_the_global_rng_alone(speech: np.ndarray) -> None:
    # pystoi's ESTOI draws eps-sized noise from numpy's global RNG: left alone, its last digits
    # depend on whatever state the caller's global RNG is in
    # (for both of these pairs, unseeded ESTOI gives 2 different values over global seeds 0..7)
    for noise_seed, level in ((20, 0.003), (21, 0.03)):
        d = speech + np.random.default_rng(noise_seed).standard_normal(speech.size) * level
        seen = set()
        for seed in range(8):
            np.random.seed(seed)
            expected_next = np.random.random()
            np.random.seed(seed)
            seen.add(stoi(speech, d, extended=True))
            assert np.random.random() == expected_next  # the caller's RNG stream is untouched
        assert len(seen) == 1


def test_signal_scores_flattens_the_records(speech: np.ndarray) -> None:
    results = score_signal(speech, delayed(speech, 50), {"si_sdr", "pesq_wb"})
    flat = SignalScores.from_results(results)
    assert flat.si_sdr == results["si_sdr"]["value"] and flat.pesq_wb == results["pesq_wb"]["value"]
    assert flat.stoi is None and flat.errors == {}
    assert flat.delay_samples == 50 and flat.correlation == results["si_sdr"]["details"]["correlation"]
    failed = SignalScores.from_results(score_signal(speech, np.zeros_like(speech), {"pesq_wb", "stoi"}))
    assert failed.pesq_wb is None and failed.stoi is None
    assert set(failed.errors) == {"pesq_wb", "stoi"} and failed.delay_samples is None


@pytest.fixture(scope="module")
def long_speech() -> np.ndarray:
    """Three Mandarin smoke-set clips back to back: 15.3 s with pauses between them."""
    import soundfile as sf

    clips = sorted(DATA.glob("zh_*.wav"))[:3]
    if len(clips) < 3:
        pytest.skip(f"Mandarin smoke clips not found in {DATA}; set CODECARENA_DATA to the smoke-set folder")
    return np.concatenate([sf.read(c, dtype="float64")[0] for c in clips])


def test_pesq_far_below_its_segments_is_suspect_with_the_segment_scores(long_speech: np.ndarray) -> None:
    """The mechanism of a whole-file PESQ failure: a file whose two halves each score near 4.6, scored
    1.7 as a whole (PESQ's level alignment is one gain for the whole file; here the level drops by
    26 dB at a pause). The value is kept, marked suspect, with both segments in its details."""
    cut = S.pesq_split(long_speech)
    decoded = long_speech.copy()
    decoded[cut:] *= 0.05
    record = S.SignalPair(long_speech, decoded).score("pesq_wb")
    segments = record["details"]["segments"]
    assert [s["start_s"] for s in segments] == [0.0, cut / ARENA_RATE]
    assert all(s["value"] > 4.5 for s in segments)
    assert record["status"] == "suspect" and record["value"] < 2.0
    assert record["error"].startswith(f"whole-file pesq_wb {record['value']:.2f} is more than 0.5 below every segment")
    # The same file unchanged: whole and segments agree, the value is ok.
    clean = S.SignalPair(long_speech, long_speech.copy()).score("pesq_wb")
    assert clean["status"] == "ok" and len(clean["details"]["segments"]) == 2
    # Under 4 s a file is not split.
    short = S.SignalPair(long_speech[:3 * ARENA_RATE], decoded[:3 * ARENA_RATE]).score("pesq_wb")
    assert short["status"] == "ok" and "segments" not in short["details"]


def test_a_delay_found_at_the_search_bound_makes_aligned_values_suspect(speech: np.ndarray) -> None:
    late = delayed(speech, int(0.26 * ARENA_RATE))  # beyond the +-250 ms search
    scores = score_signal(speech, late, {"stoi", "si_sdr", "pesq_wb"})
    for name in ("stoi", "si_sdr"):
        assert scores[name]["status"] == "suspect" and scores[name]["value"] is not None
        assert scores[name]["details"]["near_search_bound"] is True
        assert "of the search bound (+-250 ms)" in scores[name]["error"]
    assert scores["pesq_wb"]["status"] == "ok"  # PESQ has its own delay search
