"""Input conditions (docs/conditions.md): the P.56 active level, the noises and the SNR they are mixed at,
the image-source rooms and their RT60, levels and clipping, babble talkers, pinned sets, condition specs,
bytes that re-derive, and the row and run formats that carry them. Whole runs are in test_condition_runs.py."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import MIRROR, need_mirror
from codecarena.conditions import noise as noises
from codecarena.conditions.draws import Draws
from codecarena.conditions.make import ConditionInputError, Sources, make, quantise, read_pcm, wav_bytes
from codecarena.conditions.p56 import LevelError, active_level
from codecarena.conditions.sets import FileSet, SetError, load
from codecarena.conditions.spec import ConditionError, expand, parse_condition

RATE = 16000
CLIP = "en_librispeech_1089-134686-0001.wav"  # 3.3 s, speaker 1089
OTHER = "en_librispeech_2412-153948-0000.wav"  # speaker 2412


def _sources(tmp_path: Path, sets: tuple[FileSet, ...] = (), folders: dict[str, Path] | None = None) -> Sources:
    mirror = need_mirror()
    known = {"a": ("1089", mirror / CLIP), "b": ("2412", mirror / OTHER)}

    def reference(utterance: str) -> tuple[Path, str, str]:
        path = known[utterance][1]
        return path, f"references/{utterance}.wav", hashlib.sha256(path.read_bytes()).hexdigest()

    def set_file(kind: str, name: str, file_name: str) -> Path:
        assert folders is not None
        return folders[name] / file_name

    return Sources(tuple(noises.Source(u, s) for u, (s, _) in known.items()), reference, sets, set_file)


def _make(text: str, tmp_path: Path, **kw: object) -> tuple[np.ndarray, dict]:
    return make(parse_condition(text), "a", "1089", need_mirror() / CLIP, "references/a.wav",
                _sources(tmp_path, **kw))  # type: ignore[arg-type]


# P.56 ---------------------------------------------------------------------------------------------


def test_p56_gives_a_sine_its_textbook_level_and_full_activity() -> None:
    t = np.arange(3 * RATE) / RATE
    for amplitude in (0.5, 0.05, 0.005):
        level = active_level(amplitude * np.sin(2 * np.pi * 440 * t), RATE)
        # A sine of amplitude A has the mean square A^2 / 2: 20 log10 A - 3.01 dB.
        assert level.level_db == pytest.approx(20 * math.log10(amplitude) - 10 * math.log10(2), abs=0.05)
        assert level.activity > 0.99


def test_p56_measures_speech_apart_from_the_silence_around_it() -> None:
    speech = read_pcm(need_mirror() / CLIP)
    padded = np.concatenate([np.zeros(3 * RATE), speech, np.zeros(5 * RATE)])
    alone, with_silence = active_level(speech, RATE), active_level(padded, RATE)
    # The long-term level drops by the share of silence; the active level does not move.
    assert alone.long_term_db - with_silence.long_term_db == pytest.approx(10 * math.log10(padded.size / speech.size),
                                                                          abs=1e-9)
    assert with_silence.level_db == pytest.approx(alone.level_db, abs=0.01)
    assert with_silence.activity == pytest.approx(alone.activity * speech.size / padded.size, rel=0.01)
    assert active_level(speech * 10 ** (-20 / 20), RATE).level_db == pytest.approx(alone.level_db - 20, abs=0.2)


def test_p56_refuses_silence() -> None:
    with pytest.raises(LevelError, match="silent"):
        active_level(np.zeros(RATE), RATE)


# Noises and draws ---------------------------------------------------------------------------------


def test_draws_are_sha256_in_counter_mode_as_documented() -> None:
    key = hashlib.sha256(b"codecarena condition draws v1\0some key").digest()
    block0 = hashlib.sha256(key + (0).to_bytes(8, "big")).digest()
    block1 = hashlib.sha256(key + (1).to_bytes(8, "big")).digest()
    draws = Draws("some key")
    assert draws.word(0) == int.from_bytes(block0[:8], "big")
    assert draws.word(5) == int.from_bytes(block1[8:16], "big")
    assert draws.uint16(17).tolist() == [int.from_bytes(b[i:i + 2], "big") for b in (block0, block1)
                                         for i in range(0, 32, 2)][:17]
    # White noise is the Irwin-Hall sum of four of them, centred.
    white = noises.white(Draws("w"), 3)
    words = Draws("w").uint16(12).reshape(3, 4)
    assert white.tolist() == (words.sum(axis=1) - 2 * 65535).tolist()


def _slope_db_per_octave(signal: np.ndarray) -> float:
    from scipy.signal import welch

    freqs, power = welch(signal, RATE, nperseg=4096)
    band = (freqs >= 100) & (freqs <= 4000)
    return float(np.polyfit(np.log2(freqs[band]), 10 * np.log10(power[band]), 1)[0])


def test_white_pink_and_brown_noise_have_their_spectral_slopes() -> None:
    slopes = {name: _slope_db_per_octave(noises.generated(name, 0, "u", 10 * RATE))
              for name in ("white", "pink", "brown")}
    assert slopes["white"] == pytest.approx(0.0, abs=0.3)
    assert slopes["pink"] == pytest.approx(-3.01, abs=0.4)
    assert slopes["brown"] == pytest.approx(-6.02, abs=0.6)
    # The seed and the utterance give other noise; the same ones the same samples.
    assert np.array_equal(noises.generated("pink", 0, "u", 1000), noises.generated("pink", 0, "u", 1000))
    assert not np.array_equal(noises.generated("pink", 0, "u", 1000), noises.generated("pink", 1, "u", 1000))
    assert not np.array_equal(noises.generated("pink", 0, "u", 1000), noises.generated("pink", 0, "v", 1000))


@pytest.mark.parametrize("text", ["noise=white,snr=5", "noise=pink,snr=0", "noise=brown,snr=20",
                                  "noise=babble,snr=10,talkers=1"])
def test_noise_is_mixed_at_the_snr_asked_over_the_active_speech_level(text: str, tmp_path: Path) -> None:
    samples, trace = _make(text, tmp_path)
    clean = read_pcm(need_mirror() / CLIP)
    noise = samples.astype(np.float64) / 32768 - clean  # what the quantised input adds to the clean speech
    achieved = active_level(clean, RATE).level_db - 10 * math.log10(float(np.mean(noise ** 2)))
    assert achieved == pytest.approx(float(parse_condition(text).snr), abs=0.02)  # type: ignore[arg-type]
    assert trace["details"]["snr_achieved_db"] == pytest.approx(achieved, abs=1e-9)
    assert trace["clipped_samples"] == 0 and trace["input_sha256"] == hashlib.sha256(wav_bytes(samples)).hexdigest()


def test_a_babble_takes_other_speakers_and_refuses_when_there_are_too_few(tmp_path: Path) -> None:
    sources = [noises.Source(f"u{i}", speaker) for i, speaker in enumerate("AABBCD")]
    chosen = noises.talkers("u0", "A", sources, 3, seed=0)
    assert sorted(t.speaker for t in chosen) == ["B", "C", "D"]
    assert noises.talkers("u0", "A", sources, 3, seed=0) == chosen
    assert {tuple(t.utterance for t in noises.talkers("u0", "A", sources, 2, seed=s)) for s in range(8)} != {
        tuple(t.utterance for t in chosen[:2])}  # the seed draws other talkers
    with pytest.raises(noises.BabbleError, match="needs 4 other speakers, the set has 3"):
        noises.talkers("u0", "A", sources, 4, seed=0)
    with pytest.raises(noises.BabbleError, match="speaker is unknown"):
        noises.talkers("u0", "", sources, 1, seed=0)
    _, trace = _make("noise=babble,snr=5,talkers=1", tmp_path)
    assert [t["utterance"] for t in trace["details"]["talkers"]] == ["b"]


# Rooms ----------------------------------------------------------------------------------------------


def _t30(rir: np.ndarray) -> float:
    """ISO 3382-1 T30, written here apart from the code: Schroeder's backward integral, a least-squares line
    from -5 to -35 dB, the time it takes to fall 60 dB."""
    energy = np.cumsum(rir[::-1] ** 2)[::-1]
    decay = 10 * np.log10(energy / energy[0])
    span = (decay <= -5) & (decay >= -35)
    slope = np.polyfit(np.arange(rir.size)[span] / RATE, decay[span], 1)[0]
    return -60.0 / slope


@pytest.mark.parametrize("rt60", ["0.3", "0.6"])
def test_the_image_source_room_has_the_rt60_asked(rt60: str) -> None:
    from codecarena.conditions.reverb import response

    made = response(Decimal(rt60), 0, None, RATE)
    assert _t30(made.rir) == pytest.approx(float(rt60), rel=0.05)
    predicted = made.predictions()
    # Eyring's formula always gives less than Sabine's for the same absorption.
    assert predicted["eyring_s"] < predicted["sabine_s"]
    room = made.room
    assert all(0.5 <= c <= d - 0.5 for point in (room.source, room.microphone) for c, d in zip(point[:2], room.dimensions))
    assert 1.0 <= math.dist(room.source, room.microphone) <= 3.0


def test_a_reverberant_input_keeps_the_clean_speech_level(tmp_path: Path) -> None:
    samples, trace = _make("rt60=0.3", tmp_path)
    clean = read_pcm(need_mirror() / CLIP)
    made = samples.astype(np.float64) / 32768
    assert active_level(made, RATE).level_db == pytest.approx(active_level(clean, RATE).level_db, abs=0.05)
    assert trace["details"]["rt60_measured_s"] == pytest.approx(0.3, rel=0.02)
    assert len(trace["details"]["rir_sha256"]) == 64 and trace["details"]["pyroomacoustics"]


def test_a_room_too_large_for_its_rt60_is_refused() -> None:
    from codecarena.conditions.reverb import RoomError, draw_room

    with pytest.raises(RoomError, match="too large for so short a reverberation"):
        draw_room(0.15, 0, (20.0, 20.0, 10.0))


# Levels and clipping -------------------------------------------------------------------------------


def test_a_level_is_set_on_the_active_speech_and_clipping_is_counted(tmp_path: Path) -> None:
    samples, trace = _make("level=-36", tmp_path)
    assert active_level(samples.astype(np.float64) / 32768, RATE).level_db == pytest.approx(-36, abs=0.02)
    assert trace["clipped_samples"] == 0
    loud, trace = _make("level=-6", tmp_path)
    clean = read_pcm(need_mirror() / CLIP)
    scaled = np.rint(clean * trace["details"]["gain"] * 32768)
    assert trace["clipped_samples"] == int(np.count_nonzero(np.abs(scaled) > 32767)) > 0
    assert int(np.count_nonzero(loud == 32767)) + int(np.count_nonzero(loud == -32768)) >= trace["clipped_samples"]


def test_the_quantiser_rounds_half_to_even_and_saturates() -> None:
    samples, clipped = quantise(np.array([0.5, 1.5, 2.5, -0.5, 32766.5, 32767.5, 40000.0, -32768.5]) / 32768)
    # 32767.5 rounds to 32768, which saturates; -32768.5 rounds to -32768, which does not.
    assert samples.tolist() == [0, 2, 2, 0, 32766, 32767, 32767, -32768] and clipped == 2


def test_the_conditioned_input_is_the_same_bytes_in_another_process(tmp_path: Path) -> None:
    script = (f"import sys, hashlib; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
              "from test_conditions import _make; from pathlib import Path; "
              "s, t = _make(sys.argv[1], Path('.')); print(t['input_sha256'], t['details'].get('rir_sha256', ''))")
    for text in ("noise=pink,snr=5", "rt60=0.3"):
        here = _make(text, tmp_path)[1]
        out = subprocess.run([sys.executable, "-c", script, text], capture_output=True, text=True, check=True,
                             cwd=tmp_path).stdout.split()
        assert out[0] == here["input_sha256"]
        assert out[1:] == ([here["details"]["rir_sha256"]] if "rir_sha256" in here["details"] else [])


# Sets ----------------------------------------------------------------------------------------------


def _write(path: Path, samples: np.ndarray, rate: int = RATE) -> None:
    sf.write(path, samples, rate, subtype="PCM_16")


def test_a_noise_folder_is_pinned_and_its_bad_files_are_refused_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "kitchen"
    folder.mkdir()
    rng = np.random.default_rng(0)
    _write(folder / "a.wav", 0.1 * rng.standard_normal(2 * RATE))
    found, where = load("noise", str(folder), RATE)
    assert found.name == "kitchen" and where == folder and found.files[0].samples == 2 * RATE
    assert found.files[0].sha256 == hashlib.sha256((folder / "a.wav").read_bytes()).hexdigest()
    named, _ = load("noise", f"cafe={folder}", RATE)
    assert named.name == "cafe"
    cases = {"short.wav": (0.1 * rng.standard_normal(RATE // 2), RATE, "too short"),
             "rate.wav": (0.1 * rng.standard_normal(2 * 48000), 48000, "48000 Hz"),
             "stereo.wav": (0.1 * rng.standard_normal((2 * RATE, 2)), RATE, "2 channels"),
             "silent.wav": (np.zeros(2 * RATE), RATE, "silent")}
    for name, (samples, rate, message) in cases.items():
        bad = tmp_path / name.split(".")[0]
        bad.mkdir()
        _write(bad / name, samples, rate)
        with pytest.raises(SetError, match=message) as caught:
            load("noise", str(bad), RATE)
        assert name in str(caught.value) and "\n" not in str(caught.value)
    text = tmp_path / "text"
    text.mkdir()
    (text / "notes.wav").write_text("not audio")
    with pytest.raises(SetError, match="not audio libsndfile reads"):
        load("noise", str(text), RATE)
    with pytest.raises(SetError, match="not a folder"):
        load("noise", str(tmp_path / "missing"), RATE)


def test_a_set_noise_is_read_from_its_pinned_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "hum"
    folder.mkdir()
    t = np.arange(6 * RATE) / RATE
    _write(folder / "hum.wav", 0.2 * np.sin(2 * np.pi * 100 * t))
    found, _ = load("noise", str(folder), RATE)
    samples, trace = _make("noise=hum,snr=10", tmp_path, sets=(found,), folders={"hum": folder})
    assert trace["details"]["file"]["name"] == "hum.wav" and trace["details"]["snr_achieved_db"] == pytest.approx(10, abs=0.02)
    _write(folder / "hum.wav", 0.3 * np.sin(2 * np.pi * 100 * t))  # changed after it was pinned
    with pytest.raises(SetError, match="not the one the plan pins"):
        _make("noise=hum,snr=10", tmp_path, sets=(found,), folders={"hum": folder})
    with pytest.raises(ConditionInputError, match="no noise set named 'other'"):
        _make("noise=other,snr=10", tmp_path, sets=(found,), folders={"hum": folder})


# Specs ---------------------------------------------------------------------------------------------


def test_condition_specs_are_canonical_and_refused_in_one_line_outside_their_ranges() -> None:
    from codecarena.specs import parse_configuration

    assert parse_condition("noise=babble, snr=05.0").canonical == "noise=babble,snr=5"
    assert parse_condition("noise=babble,snr=5,talkers=2,seed=3").curve == "noise=babble,snr=X,talkers=2,seed=3"
    assert parse_condition("rt60=0.60,room=6x4.0x3").canonical == "rt60=0.6,room=6x4x3"
    assert parse_condition("level=-26.0").canonical == "level=-26"
    assert expand("generations=4") == ["gen=2", "gen=3", "gen=4"]
    spec = parse_configuration("opus:24k,fec=10%noise=white,snr=5@loss=5%")
    assert (spec.canonical, spec.bare.canonical, spec.condition, spec.channel) == (
        "opus:24k,fec=10%noise=white,snr=5@loss=5%", "opus:24k,fec=10", "noise=white,snr=5", "loss=5%")
    assert spec.slug == "opus_24k__fec_10+noise_white__snr_5@loss_5pct"
    assert parse_configuration("codec2:3200%tandem=OPUS:12000").canonical == "codec2:3200%tandem=opus:12k"
    refused = {"noise=white": "needs snr=DB", "noise=white,snr=61": "snr=61 is above 60 dB",
               "rt60=2": "rt60=2 is above 1.2 s", "level=-70": "level=-70 is below -60 dBov",
               "gen=1": "gen=1 is outside 2..20", "noise=white,snr=5,talkers=2": "unknown key 'talkers'",
               "tandem=nope:1": "unknown codec family 'nope'", "tandem=opus:12k%level=-26": "without a channel",
               "generations=5": "a --condition shorthand", "snr=5": "starts with 'snr'",
               "noise=white,snr=5,seed=-1": "seed=-1 is below 0"}
    for text, message in refused.items():
        with pytest.raises(ConditionError, match=message):
            parse_condition(text, codec=lambda inner: parse_configuration(inner).canonical)


# Formats -------------------------------------------------------------------------------------------


def test_a_version_8_row_reads_without_a_condition_and_input_metrics_need_one() -> None:
    from codecarena.results.schema import ROW_VERSION, SchemaError, parse_row

    row = json.loads((Path(__file__).parent / "fixtures" / "row_v8.json").read_text())
    parsed = parse_row(row)
    assert ROW_VERSION == 11 and parsed.condition is None and parsed.input_metrics is None and parsed.intact
    with pytest.raises(SchemaError, match="only a row with a condition"):
        parse_row({**row, "version": 9, "condition": None, "input_metrics": {}})


def test_a_plan_without_condition_sets_hashes_as_before_and_a_version_7_record_reads() -> None:
    from codecarena.results.record import parse_run_record

    record = json.loads((Path(__file__).parent / "fixtures" / "run_v7.json").read_text())
    parsed = parse_run_record(record)
    assert parsed.plan.file_sets is None and "file_sets" not in parsed.plan.to_dict()
    assert parsed.plan.sha256 == record["plan_sha256"]
    from codecarena.results.schema import SchemaError

    with pytest.raises(SchemaError, match="file_sets"):
        parse_run_record({**record, "plan": {**record["plan"], "file_sets": []}})


# Refusals before any row ---------------------------------------------------------------------------


def _folder_of_noise(tmp_path: Path, seconds: float) -> Path:
    folder = tmp_path / "street"
    folder.mkdir(parents=True)
    _write(folder / "street.wav", 0.1 * np.random.default_rng(1).standard_normal(int(seconds * RATE)))
    return folder


@pytest.mark.parametrize("args, message", [
    (["--condition", "noise=white,snr=99"], "--condition: condition 'noise=white,snr=99': snr=99 is above 60 dB"),
    (["--condition", "rt60=0.5,depth=3"], "unknown key 'depth' for rt60"),
    (["--condition", "tandem=nope:1"], "unknown codec family 'nope'"),
    (["--condition", "noise=babble,snr=5"], "its speaker is unknown"),
    (["--condition", "noise=street,snr=5"], "no --noise-dir names a set 'street'"),
    (["--condition", "noise=white,snr=5", "--noise-dir", "NOISE"], "--noise-dir street: no condition uses this set"),
    (["--condition", "noise=street,snr=5", "--noise-dir", "SHORT"], "street.wav: 8000 samples, too short"),
    (["--condition", "rir=halls"], "no --rir-dir names a set 'halls'"),
])
def test_bad_conditions_and_sets_are_refused_in_one_line_before_any_row(args: list[str], message: str,
                                                                        tmp_path: Path) -> None:
    from conftest import SHORT_CLIPS, codecarena

    clips = tmp_path / "in"
    clips.mkdir()
    for name in SHORT_CLIPS:
        (clips / name).write_bytes((need_mirror() / name).read_bytes())
    noise = _folder_of_noise(tmp_path / "long", 3.0) if "NOISE" in args else None
    short = _folder_of_noise(tmp_path / "short", 0.5) if "SHORT" in args else None
    given = [str(noise) if a == "NOISE" else str(short) if a == "SHORT" else a for a in args]
    result = codecarena("run", "--input", clips, "--codec", "pcm:16", *given, "--out", tmp_path / "run")
    assert result.returncode == 2 and not (tmp_path / "run").exists(), result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr
