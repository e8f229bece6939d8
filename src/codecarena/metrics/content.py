"""Content metrics: does the decoded speech still say the same words?

ASR is Whisper through faster-whisper on the CPU with greedy, fixed-temperature decoding, so one
audio file always gives one transcript. Which Whisper serves a language is chosen in
``codecarena/metrics/asr_models.py`` (tiny.en for English, base for the other languages Whisper
knows, or a user's folder); every file of the model is verified before it loads.

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

Every text is normalized with ``normalize_text`` before it is scored; both sides of every
comparison go through the same normalizer, and every record names the normalizer's version
(``NORMALIZERS``): "en-1" (below), "zh-2" (codecarena/metrics/mandarin.py; "zh-1", before
December 2026, converted neither script nor numerals), "basic-1" for the other languages.

English normalizer (``normalize_text(text, "en")``), rules applied in this order
-------------------------------------------------------------------------------

Unicode NFKC; lower-case; "%" -> " percent"; "&" -> " and "; remove commas inside
digit groups ("1,813" -> "1813"); ordinals written with digits ("15th", "1st",
"22nd", "3rd") -> words with num2words(to="ordinal"); 4-digit integers 1100..1999
and 2010..2099 -> year words (num2words(to="year"): "1813" -> "eighteen thirteen");
other integers -> cardinal words ("8" -> "eight", "2005" -> "two thousand and five";
drop the "and"s num2words inserts, so "two thousand five", and apply the same "and"
removal nowhere else); decimals "3.5" -> "three point five"; a small abbreviation
table (mr -> mister, mrs -> missus, dr -> doctor, st -> saint) applied on whole
tokens with or without the trailing period; hyphens and dashes -> space; remove all
other punctuation except apostrophes inside words ("don't" stays, "'quoted'" loses
its quotes); collapse whitespace. Numbers thus normalize to words, so "1813" and
"eighteen thirteen" match, and "15th" and "fifteenth" match.

Clarifications of the English rules (decisions the list above leaves open):

1. Hyphens in words and in num2words output: num2words writes "twenty-one",
   "twenty-first", "eighteen oh-five"; its output gets the same treatment as the
   text (hyphen -> space), so "twenty-one", "twenty one" and "21" all normalize to
   "twenty one". num2words output also loses its commas ("one million, two
   hundred ..." -> "one million two hundred ...").
2. The "and" removal applies to every piece of num2words output (cardinals,
   ordinals: "101st" -> "one hundred first", the integer part of decimals, years)
   and to nothing the speaker or the ASR wrote: "one hundred and one" written out
   in words keeps its "and".
3. A number written with thousands separators is a quantity, never a year:
   "1,813" -> "one thousand eight hundred thirteen", while "1813" -> "eighteen
   thirteen". Digit groups are exactly three digits after each comma ("1,2" is not a
   digit group: the comma is punctuation, giving "one two").
4. Decimals: the integer part is read as a cardinal (commas in it removed as in
   rule 3), the digits after the point one by one: "3.05" -> "three point zero
   five", "0.5" -> "zero point five".
5. Digit runs are converted wherever they occur, also glued to letters, and the
   words are set apart by spaces: "mp3" -> "mp three", "3d" -> "three d". The
   ordinal suffix is taken only if no further letter follows ("15th" -> "fifteenth",
   but "1990s" -> "nineteen ninety s"). Leading zeros are dropped ("007" -> "seven").
   Numbers too large for num2words are read digit by digit.
6. The abbreviation table matches only whole tokens (``st`` in "1st" or "stew" is
   not touched) and eats one trailing period: "St. Paul" -> "saint paul".
7. "Hyphens and dashes" are every character of Unicode category Pd plus the minus
   sign U+2212. "Punctuation" is every character of Unicode category P* or S*
   (so "$", "+", "/" and "#" go too); each is replaced by a space, not deleted, so
   "u.s.a." -> "u s a" and "3:30" -> "three thirty".
8. Apostrophes: the typographic forms U+2019, U+2018 and U+02BC count as "'". An
   apostrophe survives only with a letter or digit on both sides: "don't" and
   "smith's" stay, "'quoted'" -> "quoted", "the smiths'" -> "the smiths".

Mandarin normalizer (``"zh"``): the rules of codecarena/metrics/mandarin.py.

Other languages ("basic-1"): NFKC, lower-case, every character of category P* or S* replaced by a
space, whitespace collapsed.

Language codes: only the primary subtag counts ("en-US" is "en", "zh_CN" is "zh").

Decoding settings (``Transcriber.settings`` records them for the run card):
the utterance's language, task "transcribe", beam_size 1, best_of 1, temperature 0.0 (a single
value: no temperature fallback), condition_on_previous_text False, vad_filter False,
without_timestamps True, and no segment is ever skipped or re-decoded by a
heuristic: compression_ratio_threshold, log_prob_threshold and no_speech_threshold
are all None (with a single temperature they could only make Whisper drop a window
it judged silent; a codec that turns speech into noise should be scored on whatever
Whisper hears, and an empty transcript scores WER 1.0 anyway). The same thresholds
judge the transcript afterwards instead (metrics/asr_checks.py): text Whisper wrote where it
heard no speech, or that loops, is kept and marked suspect. Segment texts are
stripped and joined with one space. Audio must be 16 kHz, mono, float, finite and at
most 30 s long (one Whisper window): with without_timestamps=True a full window can
lose whole utterances, so longer audio raises ValueError instead of being scored wrongly.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import jiwer
import numpy as np
from num2words import num2words

from codecarena.files import sha256_json
from codecarena.metrics import mandarin
from codecarena.metrics.asr_models import AsrModel
from codecarena.metrics.asr_models import primary_language as _primary_language
from codecarena.metrics.asr_models import written_with_spaces
from codecarena.metrics.asr_checks import (CHECKS, DECODED_OUTPUTS, Segment, Text, distrust, empty_text,
                                           no_speech, reference_error, text_problems)
from codecarena.metrics.max_audio import ASR_MAX_AUDIO_S as MAX_AUDIO_S
from codecarena.metrics.records import Record, Records, Scored, Undefined, failure_reason, result

ASR_SAMPLE_RATE = 16000
NORMALIZERS = {"en": "en-1", "zh": mandarin.NORMALIZER}
OTHER_NORMALIZER = "basic-1"
# The scoring process logs every transcription (at INFO) to its log: the count is how a benchmark
# sees that each reference is transcribed once.
log = logging.getLogger("codecarena.asr")

# --------------------------------------------------------------------------- #
# Normalizers
# --------------------------------------------------------------------------- #

_ABBREVIATIONS = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint"}
_ABBREVIATION_RE = re.compile(r"\b(mrs|mr|dr|st)\b\.?")
_APOSTROPHES = {"\u2019": "'", "\u2018": "'", "\u02bc": "'"}
_DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# One pass over every number in the text; the alternatives are tried left to right.
_NUMBER_RE = re.compile(
    r"(?P<decimal>(?P<dint>\d{1,3}(?:,\d{3})+|\d+)\.(?P<dfrac>\d+))"
    r"|(?P<ordinal>(?P<onum>\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th)(?![^\W\d_]))"
    r"|(?P<grouped>\d{1,3}(?:,\d{3})+)"
    r"|(?P<plain>\d+)"
)


def _is_punct_or_symbol(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def _clean_num2words(words: str) -> str:
    """num2words output -> plain words: hyphens and commas to spaces, "and" dropped."""
    words = words.lower().replace("-", " ").replace(",", " ")
    return " ".join(w for w in words.split() if w != "and")


def _spell_digits(digits: str) -> str:
    return " ".join(_DIGIT_WORDS[int(d)] for d in digits)


def _cardinal(digits: str) -> str:
    try:
        return _clean_num2words(num2words(int(digits)))
    except (OverflowError, NotImplementedError, ValueError):
        return _spell_digits(digits)


def _ordinal(digits: str) -> str:
    try:
        return _clean_num2words(num2words(int(digits), to="ordinal"))
    except (OverflowError, NotImplementedError, ValueError):
        return _spell_digits(digits)


def _number_words(match: re.Match[str]) -> str:
    if match.group("decimal"):
        words = f"{_cardinal(match.group('dint').replace(',', ''))} point {_spell_digits(match.group('dfrac'))}"
    elif match.group("ordinal"):
        words = _ordinal(match.group("onum").replace(",", ""))
    elif match.group("grouped"):
        words = _cardinal(match.group("grouped").replace(",", ""))
    else:
        digits = match.group("plain")
        value = int(digits)
        if len(digits) == 4 and (1100 <= value <= 1999 or 2010 <= value <= 2099):
            words = _clean_num2words(num2words(value, to="year"))
        else:
            words = _cardinal(digits)
    return f" {words} "


def _normalize_en(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.replace("%", " percent").replace("&", " and ")
    text = _NUMBER_RE.sub(_number_words, text)
    text = _ABBREVIATION_RE.sub(lambda m: f" {_ABBREVIATIONS[m.group(1)]} ", text)
    for typographic, plain in _APOSTROPHES.items():
        text = text.replace(typographic, plain)
    chars = []
    for ch in text:
        if ch == "'":
            chars.append(ch)
        elif unicodedata.category(ch) == "Pd" or ch == "\u2212" or _is_punct_or_symbol(ch):
            chars.append(" ")
        else:
            chars.append(ch)
    text = "".join(chars)
    # Apostrophes survive only between two letters/digits ("\w" less "_", already gone).
    text = re.sub(r"(?<!\w)'|'(?!\w)", " ", text)
    return " ".join(text.split())


def _normalize_other(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if _is_punct_or_symbol(ch) else ch for ch in text)
    return " ".join(text.split())


def normalizer_version(language: str) -> str:
    return NORMALIZERS.get(_primary_language(language), OTHER_NORMALIZER)


def normalize_text(text: str, language: str) -> str:
    """Normalize a transcript for scoring; the rules are in the module docstring."""
    lang = _primary_language(language)
    if lang == "en":
        return _normalize_en(text)
    if lang == "zh":
        return mandarin.normalize(text)
    return _normalize_other(text)


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

@dataclass(frozen=True)
class Heard:
    """A transcript and what Whisper reported of each of its segments."""

    text: str
    segments: tuple[Segment, ...] = ()


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


# --------------------------------------------------------------------------- #
# ASR
# --------------------------------------------------------------------------- #

class Transcriber:
    """Deterministic Whisper transcription of 16 kHz mono audio (float32, greedy) on the CPU or a CUDA device."""

    def __init__(self, model: AsrModel, language: str = "en", threads: int = 1, device: str = "cpu") -> None:
        """`model` is a verified folder (asr_models.resolve): its files are the hashed bytes. `device`:
        the metric device, cpu or cuda[:N] (checked usable before any row: metrics/engines.py)."""
        model_dir = model.path
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        lang = _primary_language(language)

        import ctranslate2
        import faster_whisper

        from codecarena.metrics.engines import ASR_COMPUTE_TYPE, MetricDeviceError, device_index

        kind = device.split(":")[0]
        if kind not in ("cpu", "cuda"):
            raise MetricDeviceError(f"CTranslate2 runs on the CPU or CUDA, not on {device}")
        self.model = model
        self.language = lang
        self._model = faster_whisper.WhisperModel(
            str(model_dir), device=kind, device_index=device_index(device) if kind == "cuda" else 0,
            compute_type=ASR_COMPUTE_TYPE, cpu_threads=int(threads), num_workers=1, local_files_only=True,
        )
        if self._model.model.device != kind:
            raise MetricDeviceError(f"CTranslate2 loaded the ASR model on {self._model.model.device}, not {device}")
        if lang != "en" and not self._model.model.is_multilingual:
            raise ValueError(f"the ASR model at {model_dir} is English-only; cannot transcribe {language!r}")
        self._decode_options: dict[str, Any] = {
            "language": lang,
            "task": "transcribe",
            "beam_size": 1,
            "best_of": 1,
            "patience": 1.0,
            "length_penalty": 1.0,
            "repetition_penalty": 1.0,
            "no_repeat_ngram_size": 0,
            "temperature": 0.0,
            "compression_ratio_threshold": None,
            "log_prob_threshold": None,
            "no_speech_threshold": None,
            "condition_on_previous_text": False,
            "initial_prompt": None,
            "prefix": None,
            "suppress_blank": True,
            "suppress_tokens": [-1],
            "without_timestamps": True,
            "word_timestamps": False,
            "vad_filter": False,
            "hotwords": None,
            "chunk_length": None,
            "max_new_tokens": None,
        }
        # Everything that decides the transcript, and nothing about where the files lie: reference
        # transcripts are cached under its hash.
        self.identity: dict[str, Any] = {
            "engine": "faster-whisper",
            "faster_whisper_version": faster_whisper.__version__,
            "ctranslate2_version": ctranslate2.__version__,
            "model": model.identity(),
            "model_multilingual": bool(self._model.model.is_multilingual),
            "device": device,
            "compute_type": ASR_COMPUTE_TYPE,
            "cpu_threads": int(threads),
            "num_workers": 1,
            "sample_rate": ASR_SAMPLE_RATE,
            "max_audio_s": MAX_AUDIO_S,
            "segment_join": "strip each segment text, join with one space",
            **{k: (list(v) if isinstance(v, list) else v) for k, v in self._decode_options.items()},
        }
        self.identity_sha256 = sha256_json(self.identity)
        self.settings: dict[str, Any] = {**self.identity, "model_dir": str(model_dir),
                                         "model_sha256": model.model_sha256, "identity_sha256": self.identity_sha256}

    def row_identity(self) -> dict[str, Any]:
        """What every ASR record names: the model, the language, and the hash of all the settings
        (run.json holds them in full under that hash)."""
        return {"model": self.model.name, "model_sha256": self.model.model_sha256, "language": self.language,
                "settings_sha256": self.identity_sha256}

    def transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        """Transcript of mono float audio at 16 kHz (other rates raise ValueError)."""
        return self.hear(audio, sample_rate).text

    def hear(self, audio: np.ndarray, sample_rate: int) -> Heard:
        """The transcript of `transcribe`, with what Whisper reported of each segment."""
        if int(sample_rate) != ASR_SAMPLE_RATE:
            raise ValueError(f"ASR needs {ASR_SAMPLE_RATE} Hz audio, got {sample_rate} Hz; resample first")
        samples = np.asarray(audio)
        if samples.ndim != 1:
            raise ValueError(f"ASR needs mono audio (a 1-D array), got shape {samples.shape}")
        if samples.size == 0:
            raise ValueError("ASR got empty audio")
        if samples.size > MAX_AUDIO_S * ASR_SAMPLE_RATE:
            raise ValueError(f"ASR audio is {samples.size / ASR_SAMPLE_RATE:.2f} s long; at most {MAX_AUDIO_S:g} s "
                             "(one Whisper window) is transcribed reliably with without_timestamps=True; split it")
        if not np.issubdtype(samples.dtype, np.floating):
            raise ValueError(f"ASR needs float audio in [-1, 1], got dtype {samples.dtype}")
        if not np.all(np.isfinite(samples)):
            raise ValueError("ASR got audio with NaN or infinite samples")
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        start = time.perf_counter()
        segments = list(self._model.transcribe(samples, **self._decode_options)[0])
        texts = [segment.text.strip() for segment in segments]
        if log.isEnabledFor(logging.INFO):
            log.info("transcribed %.2f s of audio (float32 sha256 %s) in %.2f s (whisper %s, %s)",
                     samples.size / ASR_SAMPLE_RATE, hashlib.sha256(samples.tobytes()).hexdigest()[:16],
                     time.perf_counter() - start, self.model.name, self.language)
        return Heard(" ".join(text for text in texts if text),
                     tuple(Segment(float(s.no_speech_prob), float(s.avg_logprob), float(s.compression_ratio))
                           for s in segments))
