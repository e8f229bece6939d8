"""A metric's value as a row stores it: the record {value, status, error, details}.

Failure policy, for every metric: a value that cannot be computed is stored as null with a
one-line reason (status "failed"); a metric that does not apply to a row (no critical entities,
no transcript) is stored as null with status "not_applicable"; a value the metric's own validity
check distrusts (PESQ far below every segment of the same file, an alignment at its search bound)
keeps its number with status "suspect" and the reason. Nothing is ever replaced by 0 or 1, and
summaries average over ok values, count the rest, and give the mean with the suspect ones apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Record = dict[str, Any]
Records = dict[str, Record]  # output name -> record


def result(value: float | None = None, error: str | None = None, status: str | None = None,
           **details: Any) -> Record:
    """A record; `status="suspect"` keeps the value with `error` as the reason it is distrusted."""
    if value is not None and not np.isfinite(value):
        value, error, status = None, f"non-finite value {value}", None
    return {"value": value, "status": status or ("ok" if error is None else "failed"),
            "error": error, "details": details}


class Undefined(ValueError):
    """A value the metric does not define for its input (an error rate counted against a text with no
    tokens): its record is not_applicable with the reason, never failed."""


def failure_reason(exc: BaseException) -> str:
    """'<Type>: <first line of the message>', the one-line reason of a failed record."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


@dataclass(frozen=True)
class Bound:
    """A bound of a metric's validity check, as its declaration records it: name, value and why."""

    name: str
    value: float
    why: str


@dataclass(frozen=True)
class Scored:
    """What a metric's scoring function returns."""

    records: Records  # every output but the transcript outputs when there is no transcript
    # The details every output carries (the ASR hypotheses), also one the Scorer records as not_applicable.
    shared_details: dict[str, Any] = field(default_factory=dict)
