"""A user codec's sandbox (docs/security.md, "User codecs: what is confined and how each promise is tested").

Every stage of a user codec (`codecarena codec add`), Python or command-line, runs in a worker of its
own, started by the harness as PID 1 of a PID namespace (namespace.py) and confined by the worker
itself before any of the codec's code runs (enter.py: capabilities.py, landlock.py, syscalls.py). It
writes only into its job's private folder, which the harness empties before and copies out of after
each job (runtime/private.py). Built-in units are codecarena's own code and run unconfined.
"""

from __future__ import annotations


def for_family(family: str) -> str:
    """The sandbox a family's stages run in: the family's own for a user codec, "" for a built-in unit
    (and for a family this machine does not know, which no worker can load)."""
    from codecarena.registry.catalog import FAMILIES

    declared = FAMILIES.get(family)
    return family if declared is not None and declared.origin == "user" else ""
