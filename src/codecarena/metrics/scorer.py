"""Scores one (reference, decoded) pair with the selected metrics, loading each model once.

Every output of every selected metric gets a record {value, status, error, details}; one metric
failing never stops another. Metrics are computed one at a time in `scoring_order`, each by
`Scorer.score_metric`, so that the guarded scoring process (metrics/guarded.py) can announce each
one before computing it with the very code that scores in-process. The ASR of each reference is
computed once per utterance and reused for the floor WER and for dWER.
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

from codecarena.metrics import registry
from codecarena.metrics.registry import BY_NAME, METRICS, result

if TYPE_CHECKING:
    from codecarena.metrics.signal import SignalPair

SIGNAL_METRICS = ("pesq_wb", "pesq_nb", "stoi", "estoi", "si_sdr", "lsd", "mel_distance")
# Packages whose version can move a score as much as an edit of the metric code can.
_SCORING_PACKAGES = tuple(sorted({p for spec in METRICS for p in spec.packages} | {"numpy", "soundfile"}))


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


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
        digest.update(f"{dist}=={registry.version(dist)}\n".encode())
    return digest.hexdigest()


def scoring_order(metrics: Iterable[str]) -> tuple[str, ...]:
    """Signal metrics first, in registry order (they share one alignment), then the others as selected."""
    selected = tuple(metrics)
    return (tuple(m for m in SIGNAL_METRICS if m in selected)
            + tuple(m for m in selected if m not in SIGNAL_METRICS))


def failed_records(metrics: Iterable[str], reason: str) -> dict[str, dict[str, Any]]:
    """Every output of the given metrics as failed with `reason`."""
    return {o: result(error=reason) for name in metrics for o in BY_NAME[name].outputs}


class RowScorer(Protocol):
    """What the row pipeline needs of a scorer: the in-process Scorer or a GuardedScorer."""

    metrics: tuple[str, ...]

    @property
    def code_sha256(self) -> str: ...

    def failed_all(self, reason: str) -> dict[str, dict[str, Any]]: ...

    def score_files(self, utt: UtteranceInfo, reference: Path, decoded: Path) -> dict[str, dict[str, Any]]: ...


@dataclass
class Scorer:
    metrics: tuple[str, ...]
    # language -> CTranslate2 Whisper model folder; English defaults to the shipped tiny.en.
    asr_models: dict[str, Path] = field(default_factory=dict)
    _loaded: dict[str, Any] = field(default_factory=dict, repr=False)
    _unusable: dict[str, str] = field(default_factory=dict, repr=False)
    _reference_asr: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        shipped = None
        if "asr" in self.metrics:
            from codecarena.metrics.content import default_asr_model_dir

            shipped = default_asr_model_dir()
            if "en" not in self.asr_models and shipped is not None:
                self.asr_models = {"en": shipped, **self.asr_models}
        for name in self.metrics:
            _, problem = registry.verify_models(BY_NAME[name])
            # A user-supplied English model replaces the pinned one, so the pin does not apply.
            if problem and not (name == "asr" and self.asr_models.get("en") != shipped):
                self._unusable[name] = problem

    def describe(self) -> list[dict[str, Any]]:
        """The metric declarations for run.json; loads the ASR models to record their settings."""
        def extra(name: str) -> dict[str, Any]:
            if name != "asr":
                return {}
            models: dict[str, Any] = {}
            for lang in sorted(self.asr_models):
                try:
                    models[lang] = self._transcriber(lang).settings
                except Exception as exc:  # recorded; every row's ASR then fails with the same reason
                    models[lang] = {"path": str(self.asr_models[lang]), "error": _reason(exc)}
            return {"asr_models": models}
        return registry.describe(self.metrics, extra)

    def _transcriber(self, language: str) -> Any:
        from codecarena.metrics import content

        return self._model(f"asr:{language}",
                           lambda: content.Transcriber(self.asr_models[language], language=language))

    def _model(self, key: str, factory: Any) -> Any:
        if key not in self._loaded:
            self._loaded[key] = factory()
        return self._loaded[key]

    def forget_reference_asr(self) -> None:
        """Drop the cached transcripts of references (benchmarks time both transcriptions)."""
        self._reference_asr.clear()

    @property
    def code_sha256(self) -> str:
        return metrics_code_sha256()

    def outputs(self) -> list[str]:
        return [o for name in self.metrics for o in BY_NAME[name].outputs]

    def failed_all(self, reason: str) -> dict[str, dict[str, Any]]:
        return failed_records(self.metrics, reason)

    def score(self, utt: UtteranceInfo, reference: np.ndarray, decoded: np.ndarray,
              sample_rate: int) -> dict[str, dict[str, Any]]:
        from codecarena.metrics.signal import SignalPair

        pair = SignalPair(reference, decoded)
        scores: dict[str, dict[str, Any]] = {}
        for name in scoring_order(self.metrics):
            scores.update(self.score_metric(name, utt, pair, sample_rate))
        return scores

    def score_files(self, utt: UtteranceInfo, reference: Path, decoded: Path) -> dict[str, dict[str, Any]]:
        """Scores of two wav files, read as float64 (the decoded file's rate is the one scored)."""
        ref_audio, _ = sf.read(reference, dtype="float64")
        dec_audio, rate = sf.read(decoded, dtype="float64")
        return self.score(utt, ref_audio, dec_audio, rate)

    def score_metric(self, name: str, utt: UtteranceInfo, pair: SignalPair,
                     sample_rate: int) -> dict[str, dict[str, Any]]:
        """The records of every output of one metric."""
        if name in SIGNAL_METRICS:
            return {name: pair.score(name)}
        if name in self._unusable:
            return failed_records((name,), self._unusable[name])
        reference, decoded = pair.reference, pair.decoded
        try:
            if name == "dnsmos":
                from codecarena.metrics.dnsmos import Dnsmos

                values = self._model("dnsmos", Dnsmos).score(decoded, sample_rate)
                return {k: result(v) for k, v in values.items()}
            if name == "speaker_sim":
                from codecarena.metrics.speaker import SpeakerSimilarity

                sim = self._model("speaker", SpeakerSimilarity).similarity(reference, decoded, sample_rate)
                return {"speaker_sim": result(sim, model="resemblyzer GE2E")}
            return self._asr(utt, reference, decoded, sample_rate)
        except Exception as exc:  # a metric's failure is recorded with its reason, never fatal
            return failed_records((name,), _reason(exc))

    def _asr(self, utt: UtteranceInfo, reference: np.ndarray, decoded: np.ndarray,
             sample_rate: int) -> dict[str, dict[str, Any]]:
        from codecarena.metrics import content

        model_dir = self.asr_models.get(utt.language)
        if not utt.language:
            reason = "utterance has no language (pass --language for an --input folder)"
            return {o: result(error=reason) for o in content.ASR_OUTPUTS}
        if model_dir is None:
            reason = (f"no offline ASR model for language {utt.language!r} "
                      f"(pass --asr-model {utt.language}=DIR with a CTranslate2 Whisper model)")
            return {o: result(error=reason) for o in content.ASR_OUTPUTS}
        transcriber = self._transcriber(utt.language)
        key = (utt.language, utt.id)
        if key not in self._reference_asr:
            self._reference_asr[key] = transcriber.transcribe(reference, sample_rate)
        ref_hyp = self._reference_asr[key]
        hyp = transcriber.transcribe(decoded, sample_rate)
        lang = utt.language
        out: dict[str, dict[str, Any]] = {}
        texts = {"hypothesis": hyp, "reference_hypothesis": ref_hyp}
        if utt.transcript:
            # The transcript scored against goes into the row, so that `audit --rescore` can recompute
            # WER and CER from the run directory alone.
            said = {**texts, "transcript": utt.transcript}
            out["wer"] = _guard(lambda: content.word_error_rate(utt.transcript or "", hyp, lang), **said)
            out["cer"] = _guard(lambda: content.char_error_rate(utt.transcript or "", hyp, lang), **said)
            out["ref_wer"] = _guard(lambda: content.word_error_rate(utt.transcript or "", ref_hyp, lang), **said)
        else:
            for o in ("wer", "cer", "ref_wer"):
                out[o] = result(status="not_applicable", error="no reference transcript", **texts)
        out["dwer"] = _guard(lambda: content.word_error_rate(ref_hyp, hyp, lang), **texts)
        if utt.critical:
            entities = [{"kind": kind, "text": text,
                         "survived": content.entity_survived(text, hyp, lang),
                         "in_reference_asr": content.entity_survived(text, ref_hyp, lang)}
                        for kind, text in utt.critical]
            share = sum(e["survived"] for e in entities) / len(entities)
            out["critical_survived"] = result(share, entities=entities)
        else:
            out["critical_survived"] = result(status="not_applicable", error="no critical entities in this utterance")
        return out


def _guard(fn: Any, **details: Any) -> dict[str, Any]:
    try:
        return result(float(fn()), **details)
    except Exception as exc:
        return result(error=_reason(exc), **details)
