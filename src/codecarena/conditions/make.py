"""The conditioned input of a row whose condition the harness makes itself (noise, reverberation, level),
and its trace; and the same again from a trace, for the audit (docs/conditions.md).

Everything is computed in float64, in a fixed order, from the run's 16-bit clean reference (x = sample /
32768) and the run's copies of what the condition draws from (other utterances' references for a babble,
a set's recordings). The result is quantised to 16 bits as y * 32768 rounded half to even
(`numpy.rint`) and saturated to [-32768, 32767]; every sample that saturates is counted as clipped. The
trace holds what was drawn and every gain and level, so the input re-derives bit for bit on the machine
and library versions that made it, and the audit compares the bytes.

- noise: y = x + g n, with g setting the ratio of the speech's active level (P.56) to the noise's level
  (its mean square over the utterance) to the SNR asked for;
- rt60 and rir: y = g (x * h)[:len(x)], h the impulse response from its direct path's filter (or a
  measured one from its peak), g bringing the active level back to the clean speech's;
- level: y = g x, g setting the active level to the one asked for (measured again after each gain, at
  most four times, until within 0.005 dB).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from scipy.signal import fftconvolve

from codecarena.arena import ARENA_RATE
from codecarena.conditions import noise as noises
from codecarena.conditions import reverb
from codecarena.conditions.draws import DRAWS_VERSION
from codecarena.conditions.p56 import LevelError, active_level
from codecarena.conditions.sets import FileSet, read as read_set_file
from codecarena.conditions.spec import Condition

TRACE_VERSION = 1
QUANTISER = "y * 32768 rounded half to even (numpy.rint), saturated to [-32768, 32767]"
DRAWS = f"SHA-256 in counter mode, v{DRAWS_VERSION} (docs/conditions.md)"
_LEVEL_ROUNDS = 4
_LEVEL_TOLERANCE_DB = 0.005


class ConditionInputError(ValueError):
    """A conditioned input that cannot be made (one line)."""


@dataclass(frozen=True)
class Sources:
    """What a condition may draw from besides the clean reference: the utterances a babble may take talkers
    from with the run's copy of each reference, and the pinned sets with the run's copy of each file."""
    utterances: tuple[noises.Source, ...]
    # utterance id -> the run's copy of its reference, that path as a row stores it, the sha256 the plan pins
    reference: Callable[[str], tuple[Path, str, str]]
    sets: tuple[FileSet, ...]
    set_file: Callable[[str, str, str], Path]  # (kind, set, file) -> the run's copy

    def file_set(self, kind: str, name: str) -> FileSet:
        for found in self.sets:
            if (found.kind, found.name) == (kind, name):
                return found
        raise ConditionInputError(f"no {kind} set named {name!r} is pinned in the plan")


def read_pcm(path: Path) -> np.ndarray:
    """A 16-bit wav's samples as float64 (sample / 32768)."""
    samples, rate = sf.read(path, dtype="int16")
    if rate != ARENA_RATE or samples.ndim != 1:
        raise ConditionInputError(f"{path}: expected mono 16-bit audio at {ARENA_RATE} Hz")
    return samples.astype(np.float64) / 32768.0


def quantise(signal: np.ndarray) -> tuple[np.ndarray, int]:
    """The signal as 16-bit samples (module docstring) and how many saturated."""
    scaled = np.rint(signal * 32768.0)
    clipped = int(np.count_nonzero((scaled > 32767) | (scaled < -32768)))
    return np.clip(scaled, -32768, 32767).astype(np.int16), clipped


def wav_bytes(samples: np.ndarray) -> bytes:
    """The conditioned input file as written: 16-bit PCM wav at the arena rate."""
    out = io.BytesIO()
    sf.write(out, samples, ARENA_RATE, subtype="PCM_16", format="WAV")
    return out.getvalue()


def _level(signal: np.ndarray) -> float | None:
    try:
        return active_level(signal, ARENA_RATE).level_db
    except LevelError:
        return None


def _db(value: float) -> float:
    return float(10 * np.log10(value))


def _noise(condition: Condition, clean: np.ndarray, speech_db: float, utterance: str, speaker: str,
           sources: Sources) -> tuple[np.ndarray, dict[str, Any]]:
    length = clean.size
    details: dict[str, Any] = {}
    if condition.noise in ("white", "pink", "brown"):
        noise = noises.generated(condition.noise, condition.seed, utterance, length)
    elif condition.noise == "babble":
        assert condition.talkers is not None
        chosen = noises.talkers(utterance, speaker, sources.utterances, condition.talkers, condition.seed)
        voices = {t.utterance: read_pcm(sources.reference(t.utterance)[0]) for t in chosen}
        chosen = noises.talkers(utterance, speaker, sources.utterances, condition.talkers, condition.seed,
                                {u: v.size for u, v in voices.items()})
        noise, gains = noises.babble([voices[t.utterance] for t in chosen], [t.offset for t in chosen], length,
                                     ARENA_RATE)
        details["talkers"] = [{"utterance": t.utterance, "speaker": t.speaker, "offset": t.offset, "gain": g,
                               "reference": sources.reference(t.utterance)[1],
                               "reference_sha256": sources.reference(t.utterance)[2]}
                              for t, g in zip(chosen, gains)]
    else:
        found = sources.file_set("noise", condition.noise)
        index, offset = noises.pick_file([f.name for f in found.files], [f.samples for f in found.files],
                                         condition.seed, found.name, utterance, length)
        chosen_file = found.files[index]
        recording = read_set_file(sources.set_file("noise", found.name, chosen_file.name), chosen_file.sha256)
        noise = recording[offset:offset + length]
        details["file"] = {"set": found.name, "name": chosen_file.name, "sha256": chosen_file.sha256,
                           "offset": offset}
    noise_db = _db(float(np.dot(noise, noise)) / length) if np.any(noise) else None
    if noise_db is None:
        raise ConditionInputError(f"{condition.canonical}: the noise drawn for {utterance} is silent")
    assert condition.snr is not None
    gain = 10 ** ((speech_db - float(condition.snr) - noise_db) / 20)
    details.update(noise_level_db=noise_db, gain=gain)
    return clean + gain * noise, details


def _reverberant(condition: Condition, clean: np.ndarray, speech_db: float, utterance: str,
                 sources: Sources) -> tuple[np.ndarray, dict[str, Any]]:
    if condition.model == "rt60":
        assert condition.rt60 is not None
        made = reverb.response(condition.rt60, condition.seed, condition.room, ARENA_RATE)
        rir = made.rir
        room = made.room
        details: dict[str, Any] = {
            "method": "image source (pyroomacoustics)", "pyroomacoustics": _version("pyroomacoustics"),
            "room_m": list(room.dimensions), "source_m": list(room.source), "microphone_m": list(room.microphone),
            "walls": list(reverb.WALLS), "absorption": list(made.absorption), "max_order": made.max_order,
            "calibration_rounds": made.rounds, "rt60_measured_s": made.rt60_measured, **made.predictions(),
            "trimmed_samples": made.trimmed}
    else:
        found = sources.file_set("rir", condition.rir)
        index = reverb.pick_rir(found.name, condition.seed, utterance, len(found.files))
        chosen = found.files[index]
        measured = read_set_file(sources.set_file("rir", found.name, chosen.name), chosen.sha256)
        start = int(np.argmax(np.abs(measured)))
        rir = measured[start:]
        details = {"file": {"set": found.name, "name": chosen.name, "sha256": chosen.sha256},
                   "trimmed_samples": start, "rt60_measured_s": reverb.measured_rt60(rir, ARENA_RATE)}
    wet = fftconvolve(clean, rir)[:clean.size]
    wet_db = _level(wet)
    if wet_db is None:
        raise ConditionInputError(f"{condition.canonical}: the reverberant {utterance} has no active speech")
    gain = 10 ** ((speech_db - wet_db) / 20)
    details.update(rir_samples=int(rir.size),
                   rir_sha256=hashlib.sha256(np.ascontiguousarray(rir, dtype="<f8").tobytes()).hexdigest(),
                   gain=gain)
    return gain * wet, details


def _levelled(condition: Condition, clean: np.ndarray, speech_db: float) -> tuple[np.ndarray, dict[str, Any]]:
    assert condition.level is not None
    target = float(condition.level)
    gain = 10 ** ((target - speech_db) / 20)
    rounds = 0
    for rounds in range(1, _LEVEL_ROUNDS + 1):
        now = active_level(gain * clean, ARENA_RATE).level_db
        if abs(now - target) <= _LEVEL_TOLERANCE_DB:
            break
        gain *= 10 ** ((target - now) / 20)
    return gain * clean, {"gain": gain, "rounds": rounds}


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def make(condition: Condition, utterance: str, speaker: str, reference: Path, reference_rel: str,
         sources: Sources) -> tuple[np.ndarray, dict[str, Any]]:
    """The conditioned input (16-bit samples) and its trace, for a noise, rt60, rir or level condition;
    ConditionInputError in one line when it cannot be made."""
    clean = read_pcm(reference)
    try:
        speech = active_level(clean, ARENA_RATE)
    except LevelError as exc:
        raise ConditionInputError(f"{reference_rel}: no active speech level to condition ({exc})") from None
    if condition.model == "noise":
        signal, details = _noise(condition, clean, speech.level_db, utterance, speaker, sources)
    elif condition.model in ("rt60", "rir"):
        signal, details = _reverberant(condition, clean, speech.level_db, utterance, sources)
    elif condition.model == "level":
        signal, details = _levelled(condition, clean, speech.level_db)
    else:
        raise ConditionInputError(f"{condition.canonical}: not a condition the harness makes from the signal")
    samples, clipped = quantise(signal)
    made = samples.astype(np.float64) / 32768.0
    if condition.model == "noise":
        residue = made - clean
        details["snr_achieved_db"] = speech.level_db - _db(float(np.dot(residue, residue)) / clean.size)
    trace = {
        "version": TRACE_VERSION, "condition": condition.canonical, "model": condition.model,
        "parameters": condition.parameters(), "seed": condition.seed, "draws": DRAWS, "utterance": utterance,
        "reference": reference_rel, "reference_sha256": hashlib.sha256(reference.read_bytes()).hexdigest(),
        "sample_rate": ARENA_RATE, "samples": int(samples.size), "speech_level_dbov": speech.level_db,
        "speech_activity": speech.activity, "input_level_dbov": _level(made), "quantiser": QUANTISER,
        "clipped_samples": clipped, "details": details,
        "input_sha256": hashlib.sha256(wav_bytes(samples)).hexdigest(),
    }
    return samples, trace


def realised(trace: dict[str, Any]) -> float | None:
    """What the condition achieved on this input, as its curve is drawn: the SNR measured on the quantised
    input (noise), the RT60 measured on the response (rt60, rir), the active level of the input (level), the
    generation (gen); None for a tandem."""
    details = trace.get("details") or {}
    if trace["model"] == "noise":
        return details.get("snr_achieved_db")
    if trace["model"] in ("rt60", "rir"):
        return details.get("rt60_measured_s")
    if trace["model"] == "level":
        return trace.get("input_level_dbov")
    if trace["model"] == "gen":
        return float(trace["parameters"]["generation"])
    return None


def babble_talkers(condition: Condition, utterance: str, speaker: str,
                   utterances: Sequence[noises.Source]) -> list[str]:
    """The utterances a babble of this condition takes for an utterance (noises.BabbleError when too few)."""
    assert condition.talkers is not None
    return [t.utterance for t in noises.talkers(utterance, speaker, utterances, condition.talkers, condition.seed)]


def hop_trace(condition: Condition, utterance: str, reference: Path, reference_rel: str, conditioned: Path,
              entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The trace of a tandem or generation: the hops (pipeline/conditioned.py runs them), and the levels and
    clipping of the input they made."""
    clean, made = read_pcm(reference), read_pcm(conditioned)
    pcm, _ = sf.read(conditioned, dtype="int16")
    speech = active_level(clean, ARENA_RATE)
    try:
        made_level: float | None = active_level(made, ARENA_RATE).level_db
    except LevelError:
        made_level = None
    return {"version": TRACE_VERSION, "condition": condition.canonical, "model": condition.model,
            "parameters": condition.parameters(), "seed": 0, "utterance": utterance, "reference": reference_rel,
            "reference_sha256": hashlib.sha256(reference.read_bytes()).hexdigest(), "sample_rate": ARENA_RATE,
            "samples": int(made.size), "speech_level_dbov": speech.level_db, "speech_activity": speech.activity,
            "input_level_dbov": made_level,
            "clipped_samples": int(np.count_nonzero((pcm == 32767) | (pcm == -32768))),
            "hops": entries, "input_sha256": hashlib.sha256(conditioned.read_bytes()).hexdigest()}
