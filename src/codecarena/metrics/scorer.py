"""Scores one (reference, decoded) pair with the selected metrics, through the metric declarations.

Every output of every selected metric gets a record {value, status, error, details}; one metric
failing never stops another. Metrics are computed one at a time in `scoring_order`, each by
`Scorer.score_metric`, so that the guarded scoring process (metrics/guarded.py) can announce each
one before computing it with the very code that scores in-process. `score_metric` checks the
metric's declared needs, then calls its scoring function, loaded once per Scorer. The ASR of each
reference is computed once per utterance and reused for the floor WER and for dWER.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import soundfile as sf

from codecarena.arena import ARENA_RATE
from codecarena.metrics import declarations
from codecarena.metrics.records import Records, failure_reason, result
from codecarena.metrics.declarations import BY_NAME, METRICS, Asr, Inputs, MetricSpec, Need, ScoreFunction

if TYPE_CHECKING:
    from codecarena.metrics.content import Transcriber
    from codecarena.metrics.signal import SignalPair

# Packages whose version can move a score as much as an edit of the metric code can.
_SCORING_PACKAGES = tuple(sorted({p for spec in METRICS for p in spec.packages} | {"numpy", "soundfile"}))


@dataclass(frozen=True)
class UtteranceInfo:
    id: str
    language: str
    transcript: str | None
    critical: tuple[tuple[str, str], ...]


@functools.cache
def metrics_code_sha256() -> str:
    """sha256 over the code that produces metric values: every source file of codecarena.metrics
    (name and bytes, in name order) and the versions of the packages the metrics use. Rows record
    it, so that `audit --rescore` can tell a changed metric code from an edited value."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        source = path.read_bytes()
        digest.update(f"{path.name}\0{len(source)}\0".encode() + source)
    for dist in _SCORING_PACKAGES:
        digest.update(f"{dist}=={declarations.version(dist)}\n".encode())
    return digest.hexdigest()


def scoring_order(metrics: Iterable[str]) -> tuple[str, ...]:
    """The metrics without a model file first, in declaration order (the signal metrics: they share
    one alignment), then the model-based ones as selected."""
    selected = tuple(metrics)
    first = tuple(spec.name for spec in METRICS if spec.name in selected and not spec.models)
    return first + tuple(name for name in selected if name not in first)


def failed_records(metrics: Iterable[str], reason: str) -> Records:
    """Every output of the given metrics as failed with `reason`."""
    return {o: result(error=reason) for name in metrics for o in BY_NAME[name].outputs}


class RowScorer(Protocol):
    """What the row pipeline needs of a scorer: the in-process Scorer or a GuardedScorer."""

    metrics: tuple[str, ...]

    @property
    def code_sha256(self) -> str: ...

    def failed_all(self, reason: str) -> Records: ...

    def score_files(self, utt: UtteranceInfo, reference: Path, decoded: Path) -> Records: ...


@dataclass
class Scorer:
    metrics: tuple[str, ...]
    # language -> CTranslate2 Whisper model folder; English defaults to the shipped tiny.en.
    asr_models: dict[str, Path] = field(default_factory=dict)
    _functions: dict[str, ScoreFunction] = field(default_factory=dict, repr=False)
    _transcribers: dict[str, Transcriber] = field(default_factory=dict, repr=False)
    _unusable: dict[str, str] = field(default_factory=dict, repr=False)
    _reference_asr: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        specs = [BY_NAME[name] for name in self.metrics]
        shipped = None
        if any(Need.ASR_LANGUAGE in spec.needs for spec in specs):
            from codecarena.metrics.content import default_asr_model_dir

            shipped = default_asr_model_dir()
            if "en" not in self.asr_models and shipped is not None:
                self.asr_models = {"en": shipped, **self.asr_models}
        for spec in specs:
            _, problem = declarations.verify_models(spec)
            # An ASR metric's pins are those of the shipped English model: a user-supplied English
            # model replaces it, so the pins do not apply.
            if problem and not (Need.ASR_LANGUAGE in spec.needs and self.asr_models.get("en") != shipped):
                self._unusable[spec.name] = problem

    def describe(self) -> list[dict[str, Any]]:
        """The metric declarations for run.json; a metric that needs an ASR model also records the
        settings of each one (loading them)."""
        def extra(spec: MetricSpec) -> dict[str, Any]:
            if Need.ASR_LANGUAGE not in spec.needs:
                return {}
            models: dict[str, Any] = {}
            for lang in sorted(self.asr_models):
                try:
                    models[lang] = self._transcriber(lang).settings
                except Exception as exc:  # recorded; every row's ASR then fails with the same reason
                    models[lang] = {"path": str(self.asr_models[lang]), "error": failure_reason(exc)}
            return {"asr_models": models}
        return declarations.describe(self.metrics, extra)

    def forget_reference_asr(self) -> None:
        """Drop the cached transcripts of references (benchmarks time both transcriptions)."""
        self._reference_asr.clear()

    @property
    def code_sha256(self) -> str:
        return metrics_code_sha256()

    def failed_all(self, reason: str) -> Records:
        return failed_records(self.metrics, reason)

    def score(self, utt: UtteranceInfo, reference: np.ndarray, decoded: np.ndarray, sample_rate: int) -> Records:
        from codecarena.metrics.signal import SignalPair

        pair = SignalPair(reference, decoded)
        scores: Records = {}
        for name in scoring_order(self.metrics):
            scores.update(self.score_metric(name, utt, pair, sample_rate))
        return scores

    def score_files(self, utt: UtteranceInfo, reference: Path, decoded: Path) -> Records:
        """Scores of two wav files, read as float64 (the decoded file's rate is the one scored)."""
        ref_audio, _ = sf.read(reference, dtype="float64")
        dec_audio, rate = sf.read(decoded, dtype="float64")
        return self.score(utt, ref_audio, dec_audio, rate)

    def score_metric(self, name: str, utt: UtteranceInfo, pair: SignalPair, sample_rate: int) -> Records:
        """The records of every output of one metric, in its declared order."""
        spec = BY_NAME[name]
        unmet = self._unusable.get(name) or self._unmet(spec, utt, sample_rate)
        if unmet:
            return failed_records((name,), unmet)
        transcript = utt.transcript or None
        try:
            asr = self._asr(utt, pair.reference, sample_rate) if Need.ASR_LANGUAGE in spec.needs else None
            scored = self._function(spec)(Inputs(pair, sample_rate, utt.language, transcript, utt.critical, asr))
        except Exception as exc:  # a metric's failure is recorded with its reason, never fatal
            return failed_records((name,), failure_reason(exc))
        records = dict(scored.records)
        if Need.TRANSCRIPT in spec.needs and transcript is None:
            for output in spec.transcript_outputs:
                records[output] = result(status="not_applicable", error="no reference transcript",
                                         **scored.shared_details)
        return {output: records[output] for output in spec.outputs}

    def _unmet(self, spec: MetricSpec, utt: UtteranceInfo, sample_rate: int) -> str | None:
        """Why the metric cannot be scored for lack of a need, or None. (Every pair has its reference,
        and a missing transcript leaves only the transcript outputs not_applicable.)"""
        if Need.ARENA_RATE in spec.needs and sample_rate != ARENA_RATE:
            return f"{spec.name} needs {ARENA_RATE} Hz audio, got {sample_rate} Hz"
        if Need.ASR_LANGUAGE in spec.needs:
            if not utt.language:
                return "utterance has no language (pass --language for an --input folder)"
            if utt.language not in self.asr_models:
                return (f"no offline ASR model for language {utt.language!r} "
                        f"(pass --asr-model {utt.language}=DIR with a CTranslate2 Whisper model)")
        return None

    def _function(self, spec: MetricSpec) -> ScoreFunction:
        if spec.name not in self._functions:
            self._functions[spec.name] = spec.load()
        return self._functions[spec.name]

    def _transcriber(self, language: str) -> Transcriber:
        if language not in self._transcribers:
            from codecarena.metrics.content import Transcriber

            self._transcribers[language] = Transcriber(self.asr_models[language], language=language)
        return self._transcribers[language]

    def _asr(self, utt: UtteranceInfo, reference: np.ndarray, sample_rate: int) -> Asr:
        transcriber = self._transcriber(utt.language)
        key = (utt.language, utt.id)
        if key not in self._reference_asr:
            self._reference_asr[key] = transcriber.transcribe(reference, sample_rate)
        return Asr(transcriber, self._reference_asr[key])
