"""Content metrics: does the decoded speech still say the same words?

ASR is Whisper through faster-whisper with greedy, fixed-temperature decoding, so one audio file always
gives one transcript (``Transcriber``, codecarena/metrics/transcriber.py, with its decoding settings).
Which Whisper serves a language is chosen in ``codecarena/metrics/asr_models.py`` (tiny.en for English,
base for the other languages Whisper knows, or a user's folder); every file of the model is verified
before it loads.

Outputs (``ASR_OUTPUTS`` in the metric declarations):

* ``wer``: word error rate of the ASR of the decoded audio against the reference transcript; only
  for a language written with spaces (Mandarin has none: its ``wer``, ``ref_wer`` and ``dwer`` are
  not applicable, its character error rates are its scores).
* ``cer``: character error rate of the same pair.
* ``ref_wer``, ``ref_cer``: the WER and CER of the ASR of the *reference* (unprocessed) audio against
  the transcript: the floor any codec's ``wer``/``cer`` is measured against.
* ``dwer``, ``dcer``: WER and CER of the ASR of the decoded audio against the ASR of the reference
  audio (the reference audio's transcript stands in for the truth, so ASR errors that are already
  present in the original do not count against the codec).
* ``critical_survived``: the share of the critical entities of a clip (numbers, negations) that
  occur in the ASR of the decoded audio, with each entity's outcome and matched span in the details
  (see ``entity_outcome``).

Every error rate's record keeps its counts (errors, reference tokens), from which summaries add up
corpus rates. Values a recogniser failure made (a loop, text where Whisper heard no speech, a
reference voice it cannot read) are suspect, with their reasons: codecarena/metrics/asr_checks.py.

Every text is normalized with ``normalize_text`` (codecarena/metrics/normalizers.py, where its rules are
written down) before it is scored; both sides of every comparison go through the same normalizer, and
every record names the normalizer's version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import jiwer

from codecarena.metrics import mandarin
from codecarena.metrics.asr_models import primary_language as _primary_language
from codecarena.metrics.asr_models import written_with_spaces
from codecarena.metrics.asr_checks import (CHECKS, DECODED_OUTPUTS, Segment, Text, distrust, empty_text,
                                           no_speech, reference_error, text_problems)
from codecarena.metrics.normalizers import normalize_text, normalizer_version
from codecarena.metrics.records import Record, Records, Scored, Undefined, failure_reason, result


def _tokens(normalized: str, language: str) -> list[str]:
    """Scoring tokens: Mandarin's characters (and Latin words), whitespace-separated words otherwise."""
    if _primary_language(language) == "zh":
        return mandarin.tokens(normalized)
    return normalized.split()


def _characters(normalized: str, language: str) -> str:
    return mandarin.characters(normalized) if _primary_language(language) == "zh" else normalized


def _normalized_pair(reference: str, hypothesis: str, language: str) -> tuple[str, str]:
    ref = normalize_text(reference, language)
    if not ref:
        raise Undefined("empty reference transcript")
    return ref, normalize_text(hypothesis, language)


@dataclass(frozen=True)
class Errors:
    """The edit distance of a hypothesis from its reference, in tokens (words or characters)."""

    errors: int  # substitutions + deletions + insertions
    reference_tokens: int

    @property
    def rate(self) -> float:
        """errors / reference_tokens: jiwer's WER and CER to the last bit ((S+D+I) / (H+S+D))."""
        return self.errors / self.reference_tokens


def _errors(output: Any) -> Errors:
    return Errors(output.substitutions + output.deletions + output.insertions,
                  output.hits + output.substitutions + output.deletions)


def word_errors(reference: str, hypothesis: str, language: str) -> Errors:
    """jiwer's word alignment of the normalized texts; for Chinese the tokens are characters and
    Latin words (mandarin.tokens).

    Raises ValueError("empty reference transcript") when the reference normalizes to
    nothing. An empty hypothesis has every reference word deleted.
    """
    ref, hyp = _normalized_pair(reference, hypothesis, language)
    return _errors(jiwer.process_words(" ".join(_tokens(ref, language)), " ".join(_tokens(hyp, language))))


def char_errors(reference: str, hypothesis: str, language: str) -> Errors:
    """jiwer's character alignment of the normalized texts (English keeps one space between words,
    Mandarin none). Raises ValueError("empty reference transcript") when the reference normalizes to
    nothing."""
    ref, hyp = _normalized_pair(reference, hypothesis, language)
    return _errors(jiwer.process_characters(_characters(ref, language), _characters(hyp, language)))


def word_error_rate(reference: str, hypothesis: str, language: str) -> float:
    """The WER of `word_errors`; an empty hypothesis scores 1.0."""
    return word_errors(reference, hypothesis, language).rate


def char_error_rate(reference: str, hypothesis: str, language: str) -> float:
    """The CER of `char_errors`."""
    return char_errors(reference, hypothesis, language).rate


def _find(needle: list[str], haystack: list[str]) -> int | None:
    n = len(needle)
    return next((i for i in range(len(haystack) - n + 1) if haystack[i:i + n] == needle), None)


def _entity_tokens(entity: str, language: str) -> list[str]:
    needle = _tokens(normalize_text(entity, language), language)
    if not needle:
        raise ValueError(f"critical entity {entity!r} is empty after normalization")
    return needle


def entity_survived(entity: str, hypothesis: str, language: str) -> bool:
    """True when the normalized entity's tokens occur contiguously in the normalized hypothesis.

    Tokens are words (characters for Mandarin), so "eight" is not found in "eighty".
    Raises ValueError when the entity normalizes to nothing.
    """
    return _find(_entity_tokens(entity, language), _tokens(normalize_text(hypothesis, language), language)) is not None


def _aligned_span(reference: list[str], hypothesis: list[str], start: int, end: int) -> tuple[int, int] | None:
    """The hypothesis tokens that the minimum-edit alignment puts against reference[start:end]
    (insertions inside the span included); None when all of them were deleted."""
    if not hypothesis:
        return None
    chunks = jiwer.process_words(" ".join(reference), " ".join(hypothesis)).alignments[0]
    covered: list[int] = []
    for chunk in chunks:
        if chunk.type == "insert":
            if start < chunk.ref_start_idx < end:
                covered.extend(range(chunk.hyp_start_idx, chunk.hyp_end_idx))
        elif chunk.type != "delete":
            for ref_i in range(max(start, chunk.ref_start_idx), min(end, chunk.ref_end_idx)):
                covered.append(chunk.hyp_start_idx + ref_i - chunk.ref_start_idx)
    return (min(covered), max(covered) + 1) if covered else None


def entity_outcome(kind: str, text: str, hypothesis: str, reference_hypothesis: str, transcript: str | None,
                   language: str) -> dict[str, Any]:
    """Whether one critical entity survived in `hypothesis`, and where.

    An entity survives when its normalized tokens occur contiguously in the normalized hypothesis:
    `hypothesis_span` gives their token positions [start, end) and `hypothesis_text` what stands
    there. When it did not survive and the transcript holds it, `aligned_span`/`aligned_text` say
    what the hypothesis has in its place (the minimum-edit alignment of transcript and hypothesis
    tokens), so a lost negation shows what replaced it. A negation (kind "negation") must contain a
    negator (mandarin.NEGATORS for Mandarin); `negator_kept` says whether the text in the entity's
    place still holds one, even where the negated word was misheard.
    """
    join = "" if _primary_language(language) == "zh" else " "
    needle = _entity_tokens(text, language)
    hyp = _tokens(normalize_text(hypothesis, language), language)
    zh_negation = kind == "negation" and _primary_language(language) == "zh"
    if zh_negation and mandarin.negator_in("".join(needle)) is None:
        raise ValueError(f"negation entity {text!r} holds no negator ({', '.join(mandarin.NEGATORS)})")
    at = _find(needle, hyp)
    heard_in_reference = _tokens(normalize_text(reference_hypothesis, language), language)
    outcome: dict[str, Any] = {
        "kind": kind, "text": text, "normalized": join.join(needle), "survived": at is not None,
        "in_reference_asr": _find(needle, heard_in_reference) is not None,
    }
    span: tuple[int, int] | None = None
    if at is not None:
        span = (at, at + len(needle))
        outcome.update(hypothesis_span=list(span), hypothesis_text=join.join(hyp[span[0]:span[1]]))
    elif transcript is not None:
        said = _tokens(normalize_text(transcript, language), language)
        where = _find(needle, said)
        if where is not None:
            span = _aligned_span(said, hyp, where, where + len(needle))
            outcome.update(aligned_span=list(span) if span else None,
                           aligned_text=join.join(hyp[span[0]:span[1]]) if span else "")
    if zh_negation:
        outcome["negator_kept"] = span is not None and mandarin.negator_in("".join(hyp[span[0]:span[1]])) is not None
    return outcome


# --------------------------------------------------------------------------- #
# Validity checks: values a recogniser's own failure made (metrics/asr_checks.py)
# --------------------------------------------------------------------------- #

def _check_tokens(text: str, language: str) -> list[str]:
    """What the length and repetition checks count: the scoring tokens (words; Mandarin's characters
    and Latin words), or the characters of another language written without spaces."""
    normalized = normalize_text(text, language)
    if _primary_language(language) != "zh" and not written_with_spaces(language):
        return list(normalized.replace(" ", ""))
    return _tokens(normalized, language)


def _checked(text: str, language: str) -> Text:
    return Text(text, _check_tokens(text, language), "" if not written_with_spaces(language) else " ")


def _rate(count: Callable[[], Errors], against: str, **details: Any) -> Record:
    """An error rate's record with its counts in the details; not applicable if `against` has no tokens."""
    try:
        counted = count()
    except Undefined:
        return result(status="not_applicable", error=f"{against} is empty after normalization: no tokens to count "
                      "errors against", **details)
    except Exception as exc:
        return result(error=failure_reason(exc), **details)
    return result(counted.rate, **details, errors=counted.errors, reference_tokens=counted.reference_tokens)


def asr_records(hypothesis: str, reference_hypothesis: str, language: str, transcript: str | None,
                critical: tuple[tuple[str, str], ...], asr: dict[str, Any],
                segments: tuple[Segment, ...] = ()) -> Scored:
    """The ASR outputs of one utterance from the transcripts of its decoded and its reference audio:
    WER, CER and the reference's WER and CER against `transcript` (none without one), dWER and dCER,
    and the share of the critical entities that the decoded audio's transcript kept. A language written
    without spaces gets no word error rate (not_applicable, its character error rates are its scores).

    Every error rate's details hold its counts (`errors`, `reference_tokens`); every output's details
    hold both transcripts, the normalizer's version, `asr` (the model's identity and the language),
    `checks` and `whisper` (`segments`: what Whisper reported of each segment of the decoded audio), and those
    scored against the transcript also `transcript`. The validity checks (above) make values suspect,
    with their reasons: a reference the recogniser cannot read, all of them; a decoded audio's
    transcript that loops, runs far longer than what was said or is text where Whisper heard no
    speech, those that read it."""
    texts = {"hypothesis": hypothesis, "reference_hypothesis": reference_hypothesis,
             "normalizer": normalizer_version(language), "asr": asr, "checks": CHECKS,
             "whisper": [asdict(segment) for segment in segments]}
    no_words = (f"language {_primary_language(language)!r} is written without spaces between words: no word "
                "error rate (its error rates are cer, ref_cer and dcer)")

    def word_rate(reference: str, heard: str, against: str, **details: Any) -> Record:
        if not written_with_spaces(language):
            return result(status="not_applicable", error=no_words, **details)
        return _rate(lambda: word_errors(reference, heard, language), against, **details)

    out: Records = {}
    if transcript is not None:
        # The transcript scored against goes into the row, so that `audit --rescore` can recompute
        # WER and CER from the run directory alone.
        said = {**texts, "transcript": transcript}
        out["wer"] = word_rate(transcript, hypothesis, "the transcript", **said)
        out["cer"] = _rate(lambda: char_errors(transcript, hypothesis, language), "the transcript", **said)
        out["ref_wer"] = word_rate(transcript, reference_hypothesis, "the transcript", **said)
        out["ref_cer"] = _rate(lambda: char_errors(transcript, reference_hypothesis, language), "the transcript",
                               **said)
    out["dwer"] = word_rate(reference_hypothesis, hypothesis, "the reference audio's ASR", **texts)
    out["dcer"] = _rate(lambda: char_errors(reference_hypothesis, hypothesis, language), "the reference audio's ASR",
                        **texts)
    if critical:
        try:
            entities = [entity_outcome(kind, text, hypothesis, reference_hypothesis, transcript, language)
                        for kind, text in critical]
        except ValueError as exc:
            out["critical_survived"] = result(error=failure_reason(exc), **texts)
        else:
            share = sum(e["survived"] for e in entities) / len(entities)
            out["critical_survived"] = result(share, entities=entities, **texts)
    else:
        out["critical_survived"] = result(status="not_applicable", error="no critical entities in this utterance",
                                          **texts)
    floor = "ref_wer" if written_with_spaces(language) else "ref_cer"
    reference = reference_error(floor, out.get(floor)) + text_problems(
        "the reference audio", _checked(reference_hypothesis, language),
        _checked(transcript, language) if transcript is not None else None, "the transcript")
    said, said_name = ((transcript, "the transcript") if transcript is not None
                       else (reference_hypothesis, "the reference audio's ASR"))
    decoded = (text_problems("the decoded audio", _checked(hypothesis, language), _checked(said, language), said_name)
               + no_speech(hypothesis, segments)
               + empty_text(_checked(hypothesis, language), _checked(reference_hypothesis, language)))
    distrust(out, ("ref_wer", "ref_cer"), reference)
    distrust(out, DECODED_OUTPUTS, reference + decoded)
    return Scored(out, texts)
