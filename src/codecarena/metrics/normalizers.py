"""The normalizers of transcripts: what a text becomes before an error rate is counted on it.

Every transcript is normalized with ``normalize_text`` before it is scored (codecarena/metrics/content.py);
both sides of every comparison go through the same normalizer, and every record names the normalizer's
version (``NORMALIZERS``): "en-1" (below), "zh-2" (codecarena/metrics/mandarin.py; "zh-1", before
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
"""

from __future__ import annotations

import re
import unicodedata

from num2words import num2words

from codecarena.metrics import mandarin
from codecarena.metrics.asr_models import primary_language as _primary_language

NORMALIZERS = {"en": "en-1", "zh": mandarin.NORMALIZER}
OTHER_NORMALIZER = "basic-1"

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
