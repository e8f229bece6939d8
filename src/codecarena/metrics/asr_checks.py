"""The validity checks of the ASR outputs: when a content score measures the recogniser's failure
rather than the codec's (docs/metrics.md, "Validity checks").

Whisper fails in ways that make enormous error rates out of nothing a codec did: a decode that loops
("ring link link link ...", "金王 金王 金王 ...": WERs of 7 to 14 were seen), text written for audio it
judged not to be speech, a reference voice it cannot read at all. Such values are kept with status
`suspect` and their reasons (content.asr_records applies the checks), counted apart and left out
of the means, as PESQ's alignment failures are. The bounds are declared here, each with its source,
and land in run.json with the metric's declaration; every ASR record names the checks (`CHECKS`).

This module needs no ASR package: the metric declarations read it whether or not the metrics extra
is installed.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from codecarena.metrics.records import Bound, Record, Records
from codecarena.plural import counted

# Every ASR record names the checks that judged it (details `checks`).
CHECKS = "asr-checks-2"  # 2: an empty transcript of the decoded audio whose reference the recogniser reads
# The reference audio's own error rate against the transcript (WER; CER for a language written
# without spaces) above which the recogniser is taken not to read that voice, so that no codec's
# content score on the utterance is trusted. On the smoke set tiny.en reads the English clips at WER
# 0 to 0.25 and base the Mandarin ones at CER 0 to 0.467 (tests/test_content.py); the run that called
# for this check had a reference at WER 13.9 (a recogniser loop).
REFERENCE_ERROR_BOUND = 0.5
# Whisper's own test for a looping decode: compression_ratio_threshold 2.4 in openai-whisper's
# transcribe() and in faster-whisper, on the same measure (`compression_ratio`).
COMPRESSION_RATIO_BOUND = 2.4
# A loop too short for the compression ratio to see: one n-gram of at most REPEAT_MAX_TOKENS tokens
# REPEAT_COPIES times or more back to back ("link link link link link", "金王金王金王金王金王"),
# unless the text scored against repeats as much (then it was said). Read speech repeats a word
# twice, rarely three times; five leaves room for a digit string (二零零零年 has three 零).
REPEAT_COPIES = 5
REPEAT_MAX_TOKENS = 8
# More than twice the tokens of the text scored against: the insertions alone put the error rate
# above 1, which lost or substituted words never do.
LENGTH_RATIO_BOUND = 2.0
# Whisper's own rule for a window without speech (no_speech_threshold 0.6 and logprob_threshold -1.0
# in openai-whisper and faster-whisper): its no-speech probability above 0.6 while the text it wrote
# has an average log-probability below -1. The text then is what Whisper writes for noise.
NO_SPEECH_BOUND = 0.6
LOG_PROB_BOUND = -1.0

BOUNDS = (
    Bound("REFERENCE_ERROR_BOUND", REFERENCE_ERROR_BOUND,
          "the reference audio's own WER (CER for a language written without spaces) against the transcript above "
          "it: the recogniser cannot read that voice, every ASR value of the utterance is suspect, for every codec "
          "(smoke set: English WER 0-0.25 with tiny.en, Mandarin CER 0-0.467 with base)"),
    Bound("COMPRESSION_RATIO_BOUND", COMPRESSION_RATIO_BOUND,
          "a transcript whose UTF-8 bytes over their zlib-compressed bytes exceed it repeats itself: Whisper's own "
          "compression_ratio_threshold (openai-whisper, faster-whisper)"),
    Bound("REPEAT_COPIES", REPEAT_COPIES,
          "one n-gram this many times or more back to back is a recogniser loop (unless the text scored against "
          "repeats as much)"),
    Bound("REPEAT_MAX_TOKENS", REPEAT_MAX_TOKENS, "the longest n-gram the repetition test looks for, in tokens"),
    Bound("LENGTH_RATIO_BOUND", LENGTH_RATIO_BOUND,
          "a transcript with more than this many times the tokens of the text it is scored against: insertions "
          "alone put its error rate above 1"),
    Bound("NO_SPEECH_BOUND", NO_SPEECH_BOUND,
          "Whisper's no_speech_threshold: a segment whose no-speech probability is above it, with an average "
          "log-probability below LOG_PROB_BOUND, is one Whisper itself would skip as silence; text there is suspect"),
    Bound("LOG_PROB_BOUND", LOG_PROB_BOUND, "Whisper's logprob_threshold, the second half of its no-speech rule"),
)

POLICY = (f"values a recogniser failure made -> suspect with the reason: a transcript compressing above "
          f"{COMPRESSION_RATIO_BOUND:g}:1, repeating an n-gram of up to {REPEAT_MAX_TOKENS} tokens {REPEAT_COPIES} "
          f"times in a row or holding more than {LENGTH_RATIO_BOUND:g} times the tokens of the text scored against; "
          f"the decoded audio's: the outputs that read it, also for text where Whisper's no-speech probability is "
          f"above {NO_SPEECH_BOUND:g} with an average log-probability below {LOG_PROB_BOUND:g}, or no text at all "
          f"while the reference audio's has some; the reference audio's, "
          f"or its own error rate above {REFERENCE_ERROR_BOUND:g}: every output; bounds in validity_bounds")


# The outputs that read the decoded audio's transcript; ref_wer and ref_cer read only the reference's.
DECODED_OUTPUTS = ("wer", "cer", "dwer", "dcer", "critical_survived")


@dataclass(frozen=True)
class Segment:
    """What Whisper reports of one decoded segment besides its text (faster-whisper's Segment)."""

    no_speech_prob: float
    avg_logprob: float
    compression_ratio: float


def compression_ratio(text: str) -> float:
    """Whisper's measure of a repetitive text: its UTF-8 bytes over their zlib-compressed bytes
    (faster-whisper's get_compression_ratio); 0 for no text."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def longest_repeat(tokens: list[str], max_tokens: int = REPEAT_MAX_TOKENS) -> tuple[list[str], int]:
    """The n-gram of at most `max_tokens` tokens repeated most often back to back, with its number of
    copies (the shortest, then the first such; 1 copy when nothing repeats, 0 for no tokens)."""
    best: tuple[list[str], int] = (tokens[:1], min(len(tokens), 1))
    for n in range(1, max_tokens + 1):
        run = 0  # positions i in a row where tokens[i] == tokens[i + n]: a span of period n
        for i in range(len(tokens) - n):
            run = run + 1 if tokens[i] == tokens[i + n] else 0
            if run // n + 1 > best[1]:
                start = i - run + 1
                best = (tokens[start:start + n], run // n + 1)
    return best


@dataclass(frozen=True)
class Text:
    """A transcript as the checks read it: as written, and its tokens (words; characters, and Latin
    words, for a language written without spaces), which `joiner` joins back for a reason."""

    written: str
    tokens: list[str]
    joiner: str = " "


def text_problems(side: str, heard: Text, said: Text | None, said_name: str) -> list[str]:
    """Why the recogniser's text of `side` is not to be trusted: a loop, or far more text than `said`
    (the text it is scored against, None without one). A loop that `said` holds too was said."""
    problems = []
    said_tokens = said.tokens if said is not None else []
    gram, copies = longest_repeat(heard.tokens)
    if copies >= REPEAT_COPIES and longest_repeat(said_tokens)[1] < REPEAT_COPIES:
        problems.append(f"the ASR of {side} repeats {heard.joiner.join(gram)!r} {copies} times in a row "
                        f"({REPEAT_COPIES} or more: a recogniser loop)")
    ratio = compression_ratio(heard.written)
    if ratio > COMPRESSION_RATIO_BOUND and (said is None or compression_ratio(said.written) <= COMPRESSION_RATIO_BOUND):
        problems.append(f"the ASR of {side} compresses {ratio:.2f}:1 (above {COMPRESSION_RATIO_BOUND:g}, Whisper's "
                        "compression_ratio_threshold: repetitive text)")
    if said_tokens and len(heard.tokens) > LENGTH_RATIO_BOUND * len(said_tokens):
        problems.append(f"the ASR of {side} has {counted(len(heard.tokens), 'token')}, "
                        f"{len(heard.tokens) / len(said_tokens):.1f} times the {len(said_tokens)} of {said_name} "
                        f"(more than {LENGTH_RATIO_BOUND:g} times: inserted text)")
    return problems


def no_speech(hypothesis: str, segments: tuple[Segment, ...]) -> list[str]:
    """Text Whisper wrote where its own rule says there is no speech (an empty transcript is
    empty_text's)."""
    if not hypothesis.strip():
        return []
    for segment in segments:
        if segment.no_speech_prob > NO_SPEECH_BOUND and segment.avg_logprob < LOG_PROB_BOUND:
            return [f"Whisper judged the decoded audio not speech (no_speech_prob {segment.no_speech_prob:.2f} above "
                    f"{NO_SPEECH_BOUND:g}, avg_logprob {segment.avg_logprob:.2f} below {LOG_PROB_BOUND:g}: its own "
                    "rule for a silent window), yet wrote text"]
    return []


def empty_text(heard: Text, reference: Text) -> list[str]:
    """No text at all for the decoded audio while the recogniser reads the reference audio: what a
    recogniser that failed silently returns (CTranslate2 wheels have returned empty transcripts on
    some CUDA drivers), as much as a decode with no word left in it. Its values (every word lost)
    are kept, on every device, but not trusted."""
    if heard.tokens or not reference.tokens:
        return []
    return [f"the ASR of the decoded audio is empty while that of the reference audio reads "
            f"{counted(len(reference.tokens), 'token')}: a recogniser that fails silently returns nothing "
            "(CTranslate2 has on "
            "some CUDA drivers), so every word lost is not taken on trust; listen to the decoded audio"]


def reference_error(name: str, floor: Record | None) -> list[str]:
    """The reference audio's own error rate `name` (`ref_wer`, or `ref_cer` for a language written
    without spaces) above REFERENCE_ERROR_BOUND: the recogniser cannot read this voice."""
    if floor is None or floor["status"] != "ok" or floor["value"] <= REFERENCE_ERROR_BOUND:
        return []
    return [f"the reference audio's own ASR has {name} {floor['value']:.3g} against the transcript (above "
            f"{REFERENCE_ERROR_BOUND:g}): the recogniser cannot read this voice"]


def distrust(records: Records, outputs: tuple[str, ...], reasons: list[str]) -> None:
    """The ok records of `outputs` become suspect with the reasons (their values are kept)."""
    for name in outputs:
        record = records.get(name)
        if reasons and record is not None and record["status"] == "ok":
            records[name] = {**record, "status": "suspect", "error": "; ".join(reasons)}
