"""Scores one (reference, decoded) pair with the selected metrics, loading each model once.

Every output of every selected metric gets a record {value, status, error, details}; one metric
failing never stops another. The ASR of each reference is computed once per utterance and reused
for the floor WER and for dWER.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.metrics import registry
from codecarena.metrics.registry import BY_NAME, result

SIGNAL_METRICS = ("pesq_wb", "pesq_nb", "stoi", "estoi", "si_sdr", "lsd", "mel_distance")


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


@dataclass(frozen=True)
class UtteranceInfo:
    id: str
    language: str
    transcript: str | None
    critical: tuple[tuple[str, str], ...]


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

    def outputs(self) -> list[str]:
        return [o for name in self.metrics for o in BY_NAME[name].outputs]

    def failed_all(self, reason: str) -> dict[str, dict[str, Any]]:
        return {o: result(error=reason) for o in self.outputs()}

    def score(self, utt: UtteranceInfo, reference: np.ndarray, decoded: np.ndarray,
              sample_rate: int) -> dict[str, dict[str, Any]]:
        scores: dict[str, dict[str, Any]] = {}
        signal = [m for m in self.metrics if m in SIGNAL_METRICS]
        if signal:
            from codecarena.metrics.signal import score_signal

            scores.update(score_signal(reference, decoded, set(signal)))
        for name in self.metrics:
            if name in SIGNAL_METRICS:
                continue
            if name in self._unusable:
                scores.update({o: result(error=self._unusable[name]) for o in BY_NAME[name].outputs})
                continue
            try:
                if name == "dnsmos":
                    from codecarena.metrics.dnsmos import Dnsmos

                    values = self._model("dnsmos", Dnsmos).score(decoded, sample_rate)
                    scores.update({k: result(v) for k, v in values.items()})
                elif name == "speaker_sim":
                    from codecarena.metrics.speaker import SpeakerSimilarity

                    sim = self._model("speaker", SpeakerSimilarity).similarity(reference, decoded, sample_rate)
                    scores["speaker_sim"] = result(sim, model="resemblyzer GE2E")
                elif name == "asr":
                    scores.update(self._asr(utt, reference, decoded, sample_rate))
            except Exception as exc:  # a metric's failure is recorded with its reason, never fatal
                scores.update({o: result(error=_reason(exc)) for o in BY_NAME[name].outputs})
        return scores

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
            out["wer"] = _guard(lambda: content.word_error_rate(utt.transcript or "", hyp, lang), **texts)
            out["cer"] = _guard(lambda: content.char_error_rate(utt.transcript or "", hyp, lang), **texts)
            out["ref_wer"] = _guard(lambda: content.word_error_rate(utt.transcript or "", ref_hyp, lang), **texts)
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
