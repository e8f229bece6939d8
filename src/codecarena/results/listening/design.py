"""Seeded randomisation: which utterances a test takes, and each listener's order of trials and of
the conditions within each trial.

A listener's orders come from a seed derived from the test's seed and the listener id, drawn with a
generator small enough to write twice: FNV-1a (32 bits) of `"<test seed>:<listener>"` seeds
mulberry32, whose draws drive a Fisher-Yates shuffle of the trials, then of each trial's conditions
in the order the listener meets them. The page's script (static/listen.js) does exactly the same in
JavaScript, so a server, a static bundle and the audit all derive the same orders, and a rating
whose recorded order is not its listener's is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from codecarena.results.listening.definition import ListeningTest

T = TypeVar("T")
_MASK = 0xFFFFFFFF


def fnv1a32(text: str) -> int:
    """The 32-bit FNV-1a hash of `text`'s UTF-8 bytes."""
    h = 0x811C9DC5
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * 0x01000193) & _MASK
    return h


def mulberry32(seed: int) -> Callable[[], float]:
    """Draws in [0, 1) from the 32-bit state `seed`, bit for bit those of the usual JavaScript mulberry32."""
    state = seed & _MASK

    def draw() -> float:
        nonlocal state
        state = (state + 0x6D2B79F5) & _MASK
        t = ((state ^ (state >> 15)) * (state | 1)) & _MASK
        t = ((t + (((t ^ (t >> 7)) * (t | 61)) & _MASK)) & _MASK) ^ t
        return ((t ^ (t >> 14)) & _MASK) / 4294967296

    return draw


def shuffled(items: Sequence[T], draw: Callable[[], float]) -> list[T]:
    """Fisher-Yates from the last position down, as the script does it."""
    out = list(items)
    for i in range(len(out) - 1, 0, -1):
        j = int(draw() * (i + 1))
        out[i], out[j] = out[j], out[i]
    return out


def listener_seed(test_seed: int, listener: str) -> int:
    return fnv1a32(f"{test_seed}:{listener}")


def listener_plan(test: ListeningTest, listener: str) -> list[tuple[str, list[str]]]:
    """(trial id, condition ids in the order shown) for each trial, in the order `listener` meets them."""
    draw = mulberry32(listener_seed(test.seed, listener))
    order = shuffled([t.id for t in test.trials], draw)
    return [(tid, shuffled(test.condition_ids, draw)) for tid in order]


def in_turn(groups: dict[str, list[str]], limit: int) -> Iterator[str]:
    """At most `limit` items taken one from each group in turn (groups in their order)."""
    queues = [list(items) for items in groups.values()]
    taken = 0
    while taken < limit and any(queues):
        for queue in queues:
            if queue and taken < limit:
                taken += 1
                yield queue.pop(0)


def sample_utterances(usable: list[tuple[str, str]], count: int, seed: int) -> list[str]:
    """`count` of the (utterance, language) pairs, taken in turn from each language (languages in order
    of first appearance), each language's in an order drawn from `seed`; returned in their given order."""
    draw = mulberry32(fnv1a32(f"{seed}:utterances"))
    groups: dict[str, list[str]] = {}
    for utterance, language in usable:
        groups.setdefault(language, []).append(utterance)
    chosen = set(in_turn({lang: shuffled(items, draw) for lang, items in groups.items()}, count))
    return [u for u, _ in usable if u in chosen]
