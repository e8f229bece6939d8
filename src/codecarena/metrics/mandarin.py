"""Mandarin text for scoring: the normaliser (version ``zh-2``), its tokens, and its negators.

Whisper writes Mandarin in traditional or simplified characters, with Arabic digits or Chinese
numerals, with full-width or ASCII punctuation; references (AISHELL and most Mandarin corpora) are
simplified characters with numbers as spoken. Both sides of every comparison go through the same
rules, in this order:

1. Unicode NFKC: full-width ASCII becomes half-width ("２０１９" -> "2019", "Ａ" -> "A"), the
   ideographic space a space.
2. Traditional -> simplified characters with OpenCC's ``t2s`` conversion ("廣州" -> "广州").
3. Latin letters lower-cased.
4. Numbers written with digits become the Chinese numerals they are read as (cn2an for the
   cardinal), so that both forms meet in one canonical, spoken form:
   commas inside digit groups are dropped ("1,000" -> "1000"); a percentage is read
   "百分之..." ("50%" -> "百分之五十"); two to four digits before 年 are read digit by digit
   ("2019年" -> "二零一九年"); a decimal is its cardinal, 点, then its digits one by one
   ("3.05" -> "三点零五"); any other digit run is a cardinal ("6月" -> "六月", "25" -> "二十五",
   "10" -> "十"), except a run with a leading zero or of more than 12 digits (codes, telephone
   numbers), read digit by digit ("007" -> "零零七").
5. Numeral spellings are unified: 〇 -> 零, and 两 -> 二 before 百, 千, 万 or 亿 ("两千" and
   "2000" both give "二千").
6. Every character of Unicode category P* or S* (ASCII and CJK punctuation alike) becomes a space.
7. Whitespace is dropped, except one space between two Latin words ("iphone 手机" stays apart
   from "iphone手机" only where two Latin words meet: "mac book" -> "mac book").

Tokens (what WER and critical entities count): every CJK character is one token and every run of
Latin letters or digits is one token, so "我用iphone打电话" has six. CER counts every character of
the normalised text without its spaces.

Known limits: 两 before a measure word ("两个") is not unified with "2个" ("二个"); times and dates
with separators ("3:30", "2019-10-01") are read number by number; words are not segmented, so a
synonym or a homophone written differently is an error, as in every Mandarin CER.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

NORMALIZER = "zh-2"

# The negators a Mandarin negation entity must contain (longest first, so 没有 is found before 没).
NEGATORS = ("没有", "未曾", "不要", "不用", "不是", "不", "没", "未", "别", "无", "非", "莫", "勿", "甭")

_MAX_CARDINAL_DIGITS = 12
_DIGITS = "零一二三四五六七八九"
_NUMBER_RE = re.compile(
    r"(?P<percent>[0-9]+(?:\.[0-9]+)?)%"
    r"|(?P<year>[0-9]{2,4})(?=年)"
    r"|(?P<dint>[0-9]+)\.(?P<dfrac>[0-9]+)"
    r"|(?P<plain>[0-9]+)"
)
_GROUPED_RE = re.compile(r"(?<![0-9])[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])")
_LIANG_RE = re.compile(r"两(?=[百千万亿])")


@functools.cache
def _t2s() -> Any:
    import opencc  # the metrics extra installs it

    return opencc.OpenCC("t2s")


def _spell(digits: str) -> str:
    return "".join(_DIGITS[int(d)] for d in digits)


def _cardinal(digits: str) -> str:
    if (len(digits) > 1 and digits.startswith("0")) or len(digits) > _MAX_CARDINAL_DIGITS:
        return _spell(digits)
    import cn2an  # the metrics extra installs it

    return str(cn2an.an2cn(digits, "low"))


def _decimal(number: str) -> str:
    whole, _, fraction = number.partition(".")
    return _cardinal(whole) + (f"点{_spell(fraction)}" if fraction else "")


def _number(match: re.Match[str]) -> str:
    if match.group("percent"):
        return "百分之" + _decimal(match.group("percent"))
    if match.group("year"):
        return _spell(match.group("year"))
    if match.group("dint"):
        return _decimal(f"{match.group('dint')}.{match.group('dfrac')}")
    return _cardinal(match.group("plain"))


def _is_word_char(ch: str) -> bool:
    """Latin (or any cased) letters and ASCII digits: the characters that form multi-letter tokens."""
    return (ch.isascii() and ch.isalnum()) or (ch.isalpha() and ch.lower() != ch.upper())


def normalize(text: str) -> str:
    """The text in normal form; the rules are in the module docstring."""
    text = unicodedata.normalize("NFKC", text)
    text = _t2s().convert(text).lower()
    text = _GROUPED_RE.sub(lambda m: m.group(0).replace(",", ""), text)
    text = _NUMBER_RE.sub(_number, text)
    text = _LIANG_RE.sub("二", text.replace("〇", "零"))
    text = "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in text)
    out: list[str] = []
    pending_space = False
    for ch in text:
        if ch.isspace():
            pending_space = True
            continue
        if pending_space and out and _is_word_char(out[-1]) and _is_word_char(ch):
            out.append(" ")
        out.append(ch)
        pending_space = False
    return "".join(out)


def tokens(normalized: str) -> list[str]:
    """Each CJK character alone, each run of Latin letters or digits together."""
    found: list[str] = []
    word = ""
    for ch in normalized:
        if _is_word_char(ch):
            word += ch
            continue
        if word:
            found.append(word)
            word = ""
        if not ch.isspace():
            found.append(ch)
    if word:
        found.append(word)
    return found


def characters(normalized: str) -> str:
    """What CER counts: the normalised text without its spaces."""
    return normalized.replace(" ", "")


def negator_in(text: str) -> str | None:
    """The first negator in a normalised text, or None."""
    for negator in NEGATORS:
        if negator in text:
            return negator
    return None
