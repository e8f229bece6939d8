"""Scores one (reference, decoded) pair with the selected metrics, through the metric declarations.

Every output of every selected metric gets a record {value, status, error, details}; one metric
failing never stops another. Metrics are computed one at a time in `scoring_order`, each by
`Scorer.score_metric`, so that the guarded scoring process (metrics/guarded.py) can announce each
one before computing it with the very code that scores in-process. `score_metric` checks the
metric's declared needs, then calls its scoring function, loaded once per Scorer. What a metric
computes from the reference alone (its ASR, its speaker embedding) is computed once per reference
(metrics/reference_results.py) and reused by every row that is scored against it.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import soundfile as sf

from codecarena.arena import ARENA_RATE
from codecarena.metrics import asr_models as catalogue
from codecarena.metrics import declarations, engines
from codecarena.metrics.records import Records, failure_reason, result
from codecarena.metrics.declarations import BY_NAME, METRICS, Asr, Inputs, MetricSpec, Need, ScoreFunction
from codecarena.metrics.reference_results import ReferenceResults
from codecarena.metrics.validity import input_problem

if TYPE_CHECKING:
    from codecarena.metrics.transcriber import Transcriber
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
def read_hashed(path: Path) -> tuple[np.ndarray, str]:
    """A wav file's samples (float64) and the sha256 of the very bytes they were decoded from: one read."""
    data = Path(path).read_bytes()
    audio, _ = sf.read(io.BytesIO(data), dtype="float64")
    return audio, hashlib.sha256(data).hexdigest()


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
    first = tuple(spec.name for spec in METRICS if spec.name in selected and not spec.uses_models)
    return first + tuple(name for name in selected if name not in first)


def failed_records(metrics: Iterable[str], reason: str) -> Records:
    """Every output of the given metrics as failed with `reason`."""
    return {o: result(error=reason) for name in metrics for o in BY_NAME[name].outputs}


class RowScorer(Protocol):
    """What the row pipeline needs of a scorer: the in-process Scorer or a GuardedScorer."""

    metrics: tuple[str, ...]

    @property
    def code_sha256(self) -> str: ...

    @property
    def devices(self) -> dict[str, str]: ...

    def failed_all(self, reason: str, only: tuple[str, ...] | None = None) -> Records: ...

    def score_files(self, utt: UtteranceInfo, reference: Path, decoded: Path,
                    only: tuple[str, ...] | None = None) -> Records: ...


def reference_sha256_of(samples: np.ndarray) -> str:
    """The key of reference audio given as samples rather than as a file (the Scorer.score API)."""
    return hashlib.sha256(b"float64 samples\0" + np.ascontiguousarray(samples, dtype=np.float64).tobytes()).hexdigest()


@dataclass
class Scorer:
    metrics: tuple[str, ...]
    # language -> the ASR model's choice: a catalogue name (metrics/asr_models.py) or a model folder.
    # A language not named gets asr_models.default_choice (tiny.en for English, base for the rest).
    asr_models: dict[str, str] = field(default_factory=dict)
    # Where reference-side results persist (a run's reference_results/); None: in memory only.
    reference_results: Path | None = None
    # --metric-device: where the learned metrics run (metrics/engines.py; the others run on the CPU).
    metric_device: str = "cpu"
    _functions: dict[str, ScoreFunction] = field(default_factory=dict, repr=False)
    _transcribers: dict[str, Transcriber | str] = field(default_factory=dict, repr=False)
    _unusable: dict[str, str] = field(default_factory=dict, repr=False)
    _results: ReferenceResults = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.asr_models = {catalogue.primary_language(lang): str(choice) for lang, choice in self.asr_models.items()}
        self._results = ReferenceResults(self.reference_results)
        for spec in (BY_NAME[name] for name in self.metrics):
            _, problem = declarations.verify_models(spec)
            if problem:
                self._unusable[spec.name] = problem

    def forget_reference_results(self) -> None:
        """Drop the in-memory reference-side results (benchmarks time both sides of every pair)."""
        self._results = ReferenceResults(self.reference_results)

    def asr_choice(self, language: str) -> str | None:
        """The ASR model that scores a language: the user's choice, else the default; None: none covers it."""
        lang = catalogue.primary_language(language)
        return self.asr_models.get(lang) or catalogue.default_choice(lang)

    def describe(self, languages: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The metric declarations for run.json; a metric that needs an ASR model also records the
        catalogue and the settings of the model of each of `languages` and of each chosen language
        (loading them)."""
        def extra(spec: MetricSpec) -> dict[str, Any]:
            if Need.ASR_LANGUAGE not in spec.needs:
                return {}
            models: dict[str, Any] = {}
            for lang in sorted({catalogue.primary_language(lang) for lang in languages if lang} | set(self.asr_models)):
                choice = self.asr_choice(lang)
                if choice is None:
                    models[lang] = {"not_applicable": f"no ASR model covers language {lang!r}"}
                    continue
                # Loaded for its settings and let go: the harness describes the run and never
                # transcribes, and would otherwise hold every ASR model for the whole run.
                transcriber = self._transcribers.get(lang) or self._load_transcriber(lang)
                models[lang] = (transcriber.settings if not isinstance(transcriber, str)
                                else {"choice": choice, "error": transcriber})
            from codecarena.metrics.normalizers import NORMALIZERS, OTHER_NORMALIZER

            return {"asr_models": models, "asr_catalogue": catalogue.describe_catalogue(),
                    "normalizers": {**NORMALIZERS, "other languages": OTHER_NORMALIZER}}
        return declarations.describe(self.metrics, extra)

    @property
    def code_sha256(self) -> str:
        return metrics_code_sha256()

    @property
    def devices(self) -> dict[str, str]:
        """metric -> the device its values are computed on (rows record it as `metric_devices`)."""
        return engines.devices_of(self.metrics, self.metric_device)

    def failed_all(self, reason: str, only: tuple[str, ...] | None = None) -> Records:
        return failed_records(self.metrics if only is None else only, reason)

    def score(self, utt: UtteranceInfo, reference: np.ndarray, decoded: np.ndarray, sample_rate: int,
              reference_sha256: str | None = None, only: tuple[str, ...] | None = None) -> Records:
        """Every selected metric, or `only` those of them."""
        from codecarena.metrics.signal import SignalPair

        pair = SignalPair(reference, decoded)
        key = reference_sha256 or reference_sha256_of(pair.reference)
        scores: Records = {}
        for name in scoring_order(self.metrics if only is None else only):
            scores.update(self.score_metric(name, utt, pair, sample_rate, key))
        return scores

    def score_files(self, utt: UtteranceInfo, reference: Path, decoded: Path,
                    only: tuple[str, ...] | None = None) -> Records:
        """Scores of two wav files, read as float64 (the decoded file's rate is the one scored)."""
        ref_audio, ref_sha256 = read_hashed(reference)
        dec_audio, rate = sf.read(decoded, dtype="float64")
        return self.score(utt, ref_audio, dec_audio, rate, ref_sha256, only)

    def score_metric(self, name: str, utt: UtteranceInfo, pair: SignalPair, sample_rate: int,
                     reference_sha256: str) -> Records:
        """The records of every output of one metric, in its declared order. `reference_sha256` keys
        the reference-side results (the sha256 of the reference file)."""
        spec = BY_NAME[name]
        unmet = self._unusable.get(name) or self._unmet(spec, utt, sample_rate) or self._invalid(spec, pair, sample_rate)
        if unmet:
            return failed_records((name,), unmet)
        if Need.ASR_LANGUAGE in spec.needs and self.asr_choice(utt.language) is None:
            reason = (f"no ASR model covers language {utt.language!r} "
                      f"(pass --asr-model {utt.language}=DIR with a multilingual CTranslate2 Whisper model)")
            return {output: result(status="not_applicable", error=reason) for output in spec.outputs}
        transcriber = self._transcriber(utt.language) if Need.ASR_LANGUAGE in spec.needs else None
        if isinstance(transcriber, str):
            return failed_records((name,), transcriber)
        transcript = utt.transcript or None
        try:
            asr = (self._asr(transcriber, pair.reference, sample_rate, reference_sha256)
                   if transcriber is not None else None)
            inputs = Inputs(pair, sample_rate, utt.language, transcript, utt.critical, asr,
                            reference_sha256, self._results)
            scored = self._function(spec)(inputs)
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
        if Need.ASR_LANGUAGE in spec.needs and not utt.language:
            return "utterance has no language (pass --language for an --input folder)"
        return None

    @staticmethod
    def _invalid(spec: MetricSpec, pair: SignalPair, sample_rate: int) -> str | None:
        """Why the signals the metric reads are no input for it (too short, silent, clipped), or None."""
        signals = {"decoded": pair.decoded}
        if Need.REFERENCE in spec.needs:
            signals["reference"] = pair.reference
        return input_problem(spec.name, signals, sample_rate, spec.min_audio_s)

    def _function(self, spec: MetricSpec) -> ScoreFunction:
        if spec.name not in self._functions:
            self._functions[spec.name] = spec.load(self.devices[spec.name])
        return self._functions[spec.name]

    def _transcriber(self, language: str) -> Transcriber | str:
        """The loaded transcriber of a language, or why it cannot load (kept: every row of the
        language then fails with the same one-line reason, without a retry per row)."""
        lang = catalogue.primary_language(language)
        if lang not in self._transcribers:
            self._transcribers[lang] = self._load_transcriber(lang)
        return self._transcribers[lang]

    def _load_transcriber(self, lang: str) -> Transcriber | str:
        from codecarena.metrics.transcriber import Transcriber

        choice = self.asr_choice(lang)
        try:
            if choice is None:
                raise catalogue.AsrModelError(f"no ASR model covers language {lang!r}")
            return Transcriber(catalogue.resolve(choice), language=lang, device=self.devices.get("asr", "cpu"))
        except Exception as exc:
            return failure_reason(exc)

    def _asr(self, transcriber: Transcriber, reference: np.ndarray, sample_rate: int, reference_sha256: str) -> Asr:
        heard = self._results.get("asr_transcript", reference_sha256, transcriber.identity,
                                  lambda: transcriber.hear(reference, sample_rate).text)
        return Asr(transcriber, heard)
