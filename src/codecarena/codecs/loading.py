"""Which code a worker runs for a codec family: a built-in unit's adapter module, or a user codec
(registry/user_units.py) as it was pinned.

A user codec's module is run from the bytes whose sha256 is checked against its pin (a package's
files are hashed, then imported), its checkpoints are verified against theirs before the adapter sees
their paths, and its writes are confined to the job's folders (codecs/confine.py) before any of its
code runs. A changed source or checkpoint fails the stage with one line saying how to re-pin it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from codecarena.codecs.confine import confine
from codecarena.files import sha256_file
from codecarena.registry import user_units
from codecarena.registry.catalog import FAMILIES


class UserCodecChanged(ValueError):
    """A user codec's source or checkpoint is no longer what `codec add` pinned."""


_confined: dict[str, Any] = {}


def adapter_module(family: str, writable: list[Path]) -> tuple[ModuleType, dict[str, Any]]:
    """The module holding the family's ADAPTER, and what a row records of a user codec (its label,
    its checkpoint identity, how its writes were confined; {} for a built-in unit). The confinement
    holds for the rest of the process (a persistent worker passes the run directory)."""
    declared = FAMILIES[family]
    if declared.origin != "user":
        return importlib.import_module(declared.module), {}
    unit = user_units.load(family)
    record: dict[str, Any] = {"user_codec": unit.label(), "checkpoint": checkpoint_identity(unit),
                              "weights": "real" if unit.checkpoints else "none"}
    if unit.source is None:  # a command-line codec: the shared adapter runs its declared commands
        return importlib.import_module(declared.module), record
    if not _confined:
        _confined.update(confine(writable))
    return _import(unit), {**record, "confined": dict(_confined)}


def check_adapter(family: str, scratch: str) -> None:
    """What `codecarena codec add` runs in a fresh process of the codec's runtime: import it as a
    worker does (its writes confined to the folder `scratch`, which the caller removes) and check that
    it exports an Adapter class with an input rate; any problem is an exception naming it."""
    from codecarena.codecs.base import Adapter

    module, _ = adapter_module(family, [Path(scratch)])
    adapter = getattr(module, "ADAPTER", None)
    if not (isinstance(adapter, type) and issubclass(adapter, Adapter)):
        raise TypeError(f"user codec {family}: its module must export ADAPTER, a subclass of codecarena.plugin.Adapter")
    rate = getattr(adapter, "input_rate", None)
    if type(rate) is not int or not 8000 <= rate <= 384_000:
        raise TypeError(f"user codec {family}: ADAPTER.input_rate must be an int of 8000 to 384000 Hz, got {rate!r}")


def checkpoint_identity(unit: user_units.UserUnit) -> dict[str, str]:
    """The checkpoint identity a user codec's payloads record."""
    return {"registry": unit.registry_id, "revision": "user codec", **{f.name: f.sha256 for f in unit.checkpoints}}


def checkpoint_paths(family: str) -> dict[str, Path]:
    """A user codec's checkpoint files, each verified against its pin (size, then sha256); {} for a
    built-in unit, whose adapter finds its own files."""
    if FAMILIES[family].origin != "user":
        return {}
    unit = user_units.load(family)
    paths = {}
    for f in unit.checkpoints:
        path = unit.checkpoint_path(f.name)
        if not path.is_file() or path.stat().st_size != f.bytes or sha256_file(path) != f.sha256:
            raise UserCodecChanged(f"{path}: user codec {family}'s checkpoint is missing or differs from its pin; "
                                   f"add the codec again (codecarena codec add {family} ...)")
        paths[f.name] = path
    return paths


def _import(unit: user_units.UserUnit) -> ModuleType:
    assert unit.source is not None
    source = unit.source
    path = Path(source.path)
    name = f"codecarena_user_codec_{unit.name}"
    if name in sys.modules:  # a persistent worker loads each user codec once
        return sys.modules[name]
    if source.kind == "file":
        try:
            code = path.read_bytes()
        except OSError as exc:
            raise UserCodecChanged(f"{path}: user codec {unit.name}'s source cannot be read ({exc.strerror})") from None
        _check(unit, hashlib.sha256(code).hexdigest())
        module = ModuleType(name)
        module.__file__ = str(path)
        sys.modules[name] = module
        exec(compile(code, str(path), "exec"), module.__dict__)  # the very bytes whose hash was checked
        return module
    _check(unit, source.current_sha256())
    spec = importlib.util.spec_from_file_location(name, path / "__init__.py", submodule_search_locations=[str(path)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _check(unit: user_units.UserUnit, current: str) -> None:
    assert unit.source is not None
    if current != unit.source.sha256:
        raise UserCodecChanged(f"{unit.source.path}: user codec {unit.name}'s source changed since `codecarena codec "
                               f"add` (sha256 {unit.source.sha256[:12]}..., now {current[:12]}...); add it again to "
                               "run the new code")
