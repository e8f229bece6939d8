"""Counts in words: "1 sample", "3 samples". A message that states how many of something there are
builds the count here, so that one of them never reads "1 samples"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str = "") -> str:
    """`n` and its noun, singular for exactly one (`plural` for a noun that does not just take an s):
    counted(1, "sample") is "1 sample", counted(3, "sample") "3 samples"."""
    return f"{n} {noun if abs(n) == 1 else plural or noun + 's'}"


def verb(n: int, singular: str, plural: str) -> str:
    """The verb form that agrees with a count: verb(1, "is", "are") is "is"."""
    return singular if abs(n) == 1 else plural
