"""The longest audio a metric accepts, and why. Longer audio is refused by the metric's own code
with a reason that says so; the limits are declared in the metric declarations and land in run.json."""

from __future__ import annotations

# pesq 0.0.4 (the ITU reference C code) keeps the speech segments it finds in the reference in
# fixed tables of 50 entries and writes past them, unchecked, when there are more: the scores are
# then undefined, and from about 59 segments the process dies with SIGSEGV (measured here: at
# 116 s (wide band) and 113 s (narrow band) of the smoke-set speech, and at 90 s of the same
# clips with pauses of up to 1.5 s between them). A segment counts only with at least 200 ms of
# speech and at least 204 ms of silence before the next one (shorter gaps are joined), so 51
# segments need 20.4 s: at or below 20 s no reference can overflow the tables, whatever it holds.
PESQ_MAX_AUDIO_S = 20.0

# Whisper reads 30 s windows. With without_timestamps=True, tiny.en may transcribe only
# the last utterance of a full window (seen on a 33 s concatenation of the smoke-set
# clips: 25 s of speech silently vanished), and windows are cut at fixed 30 s marks,
# through words. Longer audio is refused rather than scored wrongly.
ASR_MAX_AUDIO_S = 30.0
