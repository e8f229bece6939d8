"""Post-screening of MUSHRA listeners after ITU-R BS.1534-3: who is in the results, and why not.

The Recommendation's rule, which test.json declares with its thresholds: a listener is excluded who
rates the hidden reference below 90 in more than 15% of the trials, or the mid anchor (7 kHz) above
90 in more than 15% of them. A listener who has not answered every trial is left out as incomplete
(the rule is stated over all trials, and a mean over a listener's first few trials would weigh the
trials unequally). An A/B test has no hidden reference or anchor: its complete listeners are all in.
"""

from __future__ import annotations

from dataclasses import dataclass

from codecarena.results.listening.definition import HIDDEN_REFERENCE, MID_ANCHOR, ListeningTest, Screening
from codecarena.results.listening.store import RatingLine

RULE = ("ITU-R BS.1534-3 post-screening: a listener is excluded who rates the hidden reference below "
        "{below} in more than {percent:g}% of the trials, or the mid anchor ({anchor}) above {above} in more "
        "than {percent:g}% of them")


def bs1534_rule() -> Screening:
    screening = Screening(rule="", hidden_reference_below=90, anchor=MID_ANCHOR, anchor_above=90, max_fraction=0.15)
    text = RULE.format(below=screening.hidden_reference_below, percent=screening.max_fraction * 100,
                       anchor="7 kHz low-pass", above=screening.anchor_above)
    return Screening(text, screening.hidden_reference_below, screening.anchor, screening.anchor_above,
                     screening.max_fraction)


@dataclass(frozen=True)
class ListenerStatus:
    listener: str
    status: str  # included, excluded or incomplete
    reasons: list[str]
    trials_done: int
    trials: int


def answers(test: ListeningTest, lines: list[RatingLine]) -> list[RatingLine]:
    """A listener's answers to the test's trials (not the training)."""
    return [line for line in lines if line.kind == test.kind]


def screen(test: ListeningTest, lines: list[RatingLine], listener: str) -> ListenerStatus:
    done = answers(test, lines)
    total = len(test.trials)
    if len(done) < total:
        return ListenerStatus(listener, "incomplete", [f"answered {len(done)} of {total} trials"], len(done), total)
    rule = test.screening
    if rule is None:
        return ListenerStatus(listener, "included", [], len(done), total)
    reasons = []
    low = sum(1 for line in done if line.ratings[HIDDEN_REFERENCE] < rule.hidden_reference_below)
    high = sum(1 for line in done if line.ratings[rule.anchor] > rule.anchor_above)
    for count, what in ((low, f"the hidden reference below {rule.hidden_reference_below}"),
                        (high, f"the mid anchor above {rule.anchor_above}")):
        if count / total > rule.max_fraction:  # 3 of 20 is 0.15, the same double as the threshold: not more
            reasons.append(f"rated {what} in {count} of {total} trials ({100 * count / total:.0f}%, more than "
                           f"{rule.max_fraction * 100:g}%)")
    return ListenerStatus(listener, "excluded" if reasons else "included", reasons, len(done), total)
