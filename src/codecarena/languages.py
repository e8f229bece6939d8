"""Language tags: the one rule for every language codecarena reads (`run --language`, a
manifest's `language`, the folder names `--language-from-folders` reads, the LANG of `--asr-model
LANG=...`, the smoke set's manifest).

A language chooses the ASR model and the text normaliser, and splits every error rate by language,
so a tag must name a language, not look like one: `old_runs`, `raw_data` or `xx_long_name` passed a
pattern of two or three letters and a subtag, and a folder of old runs became a language. A tag's
first subtag must be one of the languages Whisper transcribes (the 99 codes of its multilingual
models, and Cantonese, `yue`, which came with large-v3), in any case; it may be followed, as in
BCP-47, by a script (4 letters: `zh-Hans`) and then a region (2 letters or 3 digits: `pt-BR`,
`es-419`), joined by `-` or `_` (`en_US`). A language outside that set has no recogniser here: leave
the language out (the other metrics do not read it).
"""

from __future__ import annotations

import re

# The 99 language codes of Whisper base ("yue" came only with large-v3).
WHISPER_LANGUAGES = frozenset((
    "af am ar as az ba be bg bn bo br bs ca cs cy da de el en es et eu fa fi fo fr gl gu ha haw he hi "
    "hr ht hu hy id is it ja jw ka kk km kn ko la lb ln lo lt lv mg mi mk ml mn mr ms mt my ne nl nn "
    "no oc pa pl ps pt ro ru sa sd si sk sl sn so sq sr su sv sw ta te tg th tk tl tr tt uk ur uz vi "
    "yi yo zh").split())
# What a tag's first subtag may be.
LANGUAGES = WHISPER_LANGUAGES | {"yue"}
_TAG = re.compile(r"(?P<language>[A-Za-z]{2,3})(?:[-_][A-Za-z]{4})?(?:[-_](?:[A-Za-z]{2}|\d{3}))?")
RULE = ("a language Whisper transcribes (en, zh, de, fr, pt, ..., and yue), optionally with a script and a region "
        "(zh-Hans, pt-BR, en_US)")


def language_problem(tag: str) -> str:
    """Why `tag` is not a language codecarena accepts ('' when it is)."""
    match = _TAG.fullmatch(tag)
    if match is None or match["language"].lower() not in LANGUAGES:
        return f"{tag!r} is not a language tag codecarena knows ({RULE})"
    return ""
