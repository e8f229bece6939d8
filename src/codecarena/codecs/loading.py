"""Which code a worker runs for a codec family: a built-in unit's adapter module, or a user codec
(registry/user_units.py) as it was pinned.

A user codec runs only in its sandbox (codecarena/sandbox/), which the worker entered before reading
its job. Its module is compiled from the bytes whose sha256 is checked against its pin, never from a
bytecode cache (codecs/pinned_source.py), and its checkpoints are verified against theirs before the
adapter sees their paths. A changed source or checkpoint fails the stage with one line saying how to
re-pin it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from codecarena.registry import user_units
from codecarena.registry.catalog import FAMILIES
from codecarena.registry.user_units import UserCodecChanged


def adapter_module(family: str) -> tuple[ModuleType, dict[str, Any]]:
    """The module holding the family's ADAPTER, and what a row records of a user codec (its label,
    its checkpoint identity, how its sandbox confines it; {} for a built-in unit). A user codec is
    refused outside its sandbox."""
    from codecarena.sandbox.enter import ACTIVE, refusal

    declared = FAMILIES[family]
    if declared.origin != "user":
        return importlib.import_module(declared.module), {}
    refused = refusal(family, [])
    if refused:
        raise PermissionError(refused)
    unit = user_units.load(family)
    record: dict[str, Any] = {"user_codec": unit.label(), "checkpoint": unit.checkpoint_identity(),
                              "weights": "real" if unit.checkpoints else "none", "confined": ACTIVE["record"]}
    if unit.source is None:  # a command-line codec: the shared adapter runs its declared commands
        return importlib.import_module(declared.module), record
    return _import(unit), record


def check_adapter(family: str) -> None:
    """What `codecarena codec add` runs in a fresh process of the codec's runtime, a sandboxed worker
    (`python -m codecarena.worker --sandbox FAMILY SCRATCH --check`): import the codec as a worker
    does and check that it exports an Adapter class with an input rate; any problem is an exception
    naming it."""
    from codecarena.plugin import Adapter

    module, _ = adapter_module(family)
    adapter = getattr(module, "ADAPTER", None)
    if not (isinstance(adapter, type) and issubclass(adapter, Adapter)):
        raise TypeError(f"user codec {family}: its module must export ADAPTER, a subclass of codecarena.plugin.Adapter")
    rate = getattr(adapter, "input_rate", None)
    if type(rate) is not int or not 8000 <= rate <= 384_000:
        raise TypeError(f"user codec {family}: ADAPTER.input_rate must be an int of 8000 to 384000 Hz, got {rate!r}")


def checkpoint_paths(family: str) -> dict[str, Path]:
    """A user codec's checkpoint files, each verified against its pin (size, then sha256); {} for a
    built-in unit, whose adapter finds its own files."""
    if FAMILIES[family].origin != "user":
        return {}
    return user_units.load(family).verified_checkpoints()


def _import(unit: user_units.UserUnit) -> ModuleType:
    from codecarena.codecs.pinned_source import import_file, import_package

    assert unit.source is not None
    source = unit.source
    path = Path(source.path)
    name = f"codecarena_user_codec_{unit.name}"
    if name in sys.modules:  # a persistent worker loads each user codec once
        return sys.modules[name]
    try:
        if source.kind == "file":
            return import_file(name, path, lambda digest: _check(unit, digest))
        return import_package(name, path, lambda digest: _check(unit, digest))
    except OSError as exc:
        raise UserCodecChanged(f"{path}: user codec {unit.name}'s source cannot be read ({exc.strerror})") from None


def _check(unit: user_units.UserUnit, current: str) -> None:
    assert unit.source is not None
    if current != unit.source.sha256:
        raise UserCodecChanged(f"{unit.source.path}: user codec {unit.name}'s source changed since `codecarena codec "
                               f"add` (sha256 {unit.source.sha256[:12]}..., now {current[:12]}...); add it again to "
                               "run the new code")
