"""Where two traced calls part ways (no torch: the harness reads probe results with it).

Hooks fire when a module returns, so a call's records are in post-order (children before their
parent): the first record whose input hash agrees across two calls while its output hash differs is
the innermost module where the calls part ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Record:
    module: str  # qualified name in the model
    occurrence: int  # how many times this module had already returned in this call
    kind: str  # the module's class name
    input_hash: str
    output_hash: str


def first_divergence(a: list[Record], b: list[Record]) -> dict[str, Any] | None:
    """Where call `b` parts from call `a`: the first module (in `a`'s order) with the same input hash
    and a different output hash, and how many modules' outputs differ after it."""
    by_key = {(r.module, r.occurrence): r for r in b}
    differing = [r for r in a if (r.module, r.occurrence) in by_key
                 and by_key[(r.module, r.occurrence)].output_hash != r.output_hash]
    if not differing and len(a) == len(b):
        return None
    for index, record in enumerate(a):
        other = by_key.get((record.module, record.occurrence))
        if other is None:
            return {"module": record.module, "kind": record.kind, "occurrence": record.occurrence,
                    "reason": "the module ran in one call only", "modules_diverging_after": len(differing)}
        if other.input_hash == record.input_hash and other.output_hash != record.output_hash:
            after = sum(1 for r in a[index + 1:] if r in differing)
            return {"module": record.module, "kind": record.kind, "occurrence": record.occurrence,
                    "reason": "same input hash, different output hash", "modules_diverging_after": after,
                    "modules_diverging": len(differing)}
    return {"module": "", "kind": "", "occurrence": 0,
            "reason": "outputs differ but no module has an identical input with a different output "
                      "(the difference enters outside a hooked module)",
            "modules_diverging_after": len(differing), "modules_diverging": len(differing)}
