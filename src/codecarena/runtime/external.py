"""An external runtime: a family's workers run in an interpreter the user names (`--runtime-python PATH`)
instead of the runtime built from its lock file, e.g. on a GPU host that comes with its own torch and
no network. Such rows are not the pinned runtime: the row, run.json and every table say so.

The interpreter is checked by running it (never by importing anything here): it must be a Python
that imports this harness's own codecarena code and the family's adapter with its dependencies; the
versions of the family's pinned packages it actually has are recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecarena.registry.catalog import FAMILIES
from codecarena.registry.entries import Entry

ENVIRONMENT = "external"

# Run inside the external interpreter: argv[1] is the adapter module, the rest distribution names.
_INSPECT = r"""
import importlib, importlib.metadata as md, json, os, sys
out = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    import codecarena
    out["codecarena"] = os.path.dirname(os.path.abspath(codecarena.__file__))
except Exception as exc:
    out["codecarena_error"] = f"{type(exc).__name__}: {exc}"
else:
    try:
        importlib.import_module(sys.argv[1])
    except BaseException as exc:
        out["module_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
versions = {}
for name in sys.argv[2:]:
    try:
        versions[name] = md.version(name)
    except md.PackageNotFoundError:
        versions[name] = None
out["packages"] = versions
print(json.dumps(out))
"""


class ExternalRuntimeError(RuntimeError):
    """The named interpreter cannot serve as a family's runtime; the message says why and what to do."""


def _install_hint(python: str) -> str:
    checkout = Path(__file__).resolve().parents[3]
    return (f"install this checkout into it without its dependencies ({python} -m pip install --no-deps {checkout}) "
            f"or put it on the path (PYTHONPATH={checkout / 'src'})")


def package_names(entry: Entry) -> list[str]:
    """The distributions the registry pins for a family's runtime, by name."""
    return [pin.split("==")[0].strip() for pin in entry.runtime.packages]


def inspect(python: str, module: str, packages: list[str], timeout_s: float = 300.0) -> dict[str, Any]:
    """What the interpreter says about itself; ExternalRuntimeError when it is not a Python that runs."""
    path = Path(python)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ExternalRuntimeError(f"--runtime-python {python}: not an executable file")
    try:
        done = subprocess.run([python, "-c", _INSPECT, module, *packages], capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExternalRuntimeError(f"--runtime-python {python}: could not run it ({exc})") from None
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " ".join((done.stderr or done.stdout).split())[-200:]
        raise ExternalRuntimeError(f"--runtime-python {python}: not a working Python interpreter "
                                   f"(exit status {done.returncode}: {tail or 'no output'})") from None
    if not isinstance(found, dict) or not isinstance(found.get("packages"), dict):
        raise ExternalRuntimeError(f"--runtime-python {python}: not a working Python interpreter")
    return found


def describe(python: str, entry: Entry) -> dict[str, Any]:
    """The runtime record (as run.json keeps one per registry id) of `python` serving `entry`'s family,
    or ExternalRuntimeError naming the first thing that stops it."""
    from codecarena.runtime.venvs import package_sha256

    family = entry.codec_family or entry.id
    module = FAMILIES[family].module
    packages = package_names(entry)
    found = inspect(python, module, packages)
    if "codecarena_error" in found:
        raise ExternalRuntimeError(f"--runtime-python {python}: cannot import codecarena "
                                   f"({found['codecarena_error']}); {_install_hint(python)}")
    # Its workers must run the same code as the harness that reads their reports.
    theirs, ours = package_sha256(Path(found["codecarena"])), package_sha256()
    if theirs != ours:
        raise ExternalRuntimeError(f"--runtime-python {python}: imports codecarena from {found['codecarena']}, which "
                                   f"is not this harness's code; {_install_hint(python)}")
    if "module_error" in found:
        missing = [name for name, version in found["packages"].items() if version is None]
        raise ExternalRuntimeError(f"--runtime-python {python}: cannot import {family}'s adapter {module} "
                                   f"({found['module_error']}); it needs {', '.join(entry.runtime.packages)}"
                                   + (f" (missing there: {', '.join(missing)})" if missing else ""))
    versions = {name: found["packages"][name] for name in packages}
    listed = sorted(f"{name}=={version}" for name, version in versions.items() if version is not None)
    return {"registry": entry.id, "environment": ENVIRONMENT, "interpreter": python, "python": found["python"],
            "package_versions": versions, "pinned_packages": list(entry.runtime.packages),
            "packages": listed, "packages_sha256": hashlib.sha256("\n".join(listed).encode()).hexdigest(),
            "codecarena_sha256": ours, "codecarena_path": found["codecarena"]}


@dataclass(frozen=True)
class ExternalRuntime:
    """What every row of a family run in an external interpreter adds to the runtime its worker reported."""
    family: str
    interpreter: str
    python: str
    package_versions: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, family: str, record: dict[str, Any]) -> ExternalRuntime:
        return cls(family, record["interpreter"], record["python"], tuple(record["package_versions"].items()))

    def row_fields(self) -> dict[str, Any]:
        return {"environment": ENVIRONMENT, "interpreter": self.interpreter, "python": self.python,
                "package_versions": dict(self.package_versions)}


def external_mark(record: dict[str, Any]) -> tuple[str, ...]:
    """What a runtime record adds to the plan's [family, registry id, interpreter]: ("external",) for an
    external runtime (so a run with one is another plan than one with the locked runtime), else ()."""
    return (ENVIRONMENT,) if record.get("environment") == ENVIRONMENT else ()


def _words(entry: Sequence[str]) -> str:
    family, registry_id, python, *external = entry
    return f"the external runtime {python}" if external else f"the runtime {registry_id} ({python})"


def mixed_runtimes(before: Sequence[Sequence[str]], now: Sequence[Sequence[str]]) -> str:
    """A family's rows come from one runtime: an external interpreter and the locked runtime are two
    configurations, never mixed in one run. Why two plans' runtimes would mix ("" when they would not)."""
    had = {entry[0]: entry for entry in before}
    for entry in now:
        was = had.get(entry[0])
        if was is not None and list(was) != list(entry):
            return (f"the run's {entry[0]} rows ran in {_words(was)}, this command's would run in {_words(entry)}; "
                    f"use the run's runtime (see runtimes in its run.json) or another --out directory")
    return ""
