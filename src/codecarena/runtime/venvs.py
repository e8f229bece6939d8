"""Isolated runtimes: one virtualenv per codec family whose dependencies conflict with the harness.

`codecarena env create FAMILY` builds `<data dir>/envs/<registry id>/` from the family's locked
requirements file, copies the codecarena package into it (so the worker there runs this exact code
but none of the harness's packages), and records the interpreter and the resolved package list with
its sha256 in `runtime.json`. Families whose registry entry says `environment = "main"` run with
the harness's own interpreter.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import codecarena
from codecarena.registry.catalog import FAMILIES
from codecarena.files import data_home, tree_sha256
from codecarena.registry.entries import Entry, lock_file

RUNTIME_FILE = "runtime.json"


class RuntimeMissing(RuntimeError):
    """A family's isolated runtime has not been built, or is broken."""


def env_dir(registry_id: str) -> Path:
    return data_home() / "envs" / registry_id


def _python(folder: Path) -> Path:
    return folder / "bin" / "python"


def _freeze(python: Path | str) -> list[str]:
    out = subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return sorted(line.strip() for line in out.splitlines() if line.strip())


def _packages_record(packages: list[str]) -> dict[str, Any]:
    return {"packages": packages, "packages_sha256": hashlib.sha256("\n".join(packages).encode()).hexdigest()}


def package_sha256(root: Path | None = None) -> str:
    """One hash of the codecarena package's files: which harness code a runtime's copy is."""
    return tree_sha256(root or Path(codecarena.__file__).parent)


def _copy_package(site: Path) -> None:
    # A copy, not a path entry: pointing at the harness's site-packages would leak its packages.
    target = site / "codecarena"
    staging = site / ".codecarena.sync"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(Path(codecarena.__file__).parent, staging, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def sync_package(folder: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Bring the runtime's copy of codecarena up to the harness's code (its workers must run the
    same code as the harness that reads their reports); the locked packages are untouched."""
    current = package_sha256()
    site = record.get("site") or subprocess.run(
        [str(_python(folder)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    # The copy itself is hashed (a few ms), not the record trusted: an edited copy is replaced too.
    copy = Path(site) / "codecarena"
    if record.get("codecarena_sha256") == current and copy.is_dir() and package_sha256(copy) == current:
        return record
    _copy_package(Path(site))
    record = {**record, "codecarena": codecarena.__version__, "codecarena_sha256": current, "site": site}
    (folder / RUNTIME_FILE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return record


def sync_interpreter(interpreter: str) -> None:
    """Sync the codecarena copy of the runtime that owns this interpreter, if it is one of ours."""
    folder = Path(interpreter).parent.parent
    try:
        record = json.loads((folder / RUNTIME_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    sync_package(folder, record)


def lock_text(entry: Entry) -> str:
    if not entry.runtime.lock:
        raise RuntimeMissing(f"{entry.id}: the registry entry names no lock file for an isolated runtime")
    try:
        return lock_file(entry).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        raise RuntimeMissing(f"{entry.id}: lock file {entry.runtime.lock} not found") from None


def create(entry: Entry, log: Any = None) -> Path:
    """Build (or rebuild) the family's virtualenv from its lock file; returns the env folder."""
    if entry.runtime.environment != "isolated":
        raise RuntimeMissing(f"{entry.id}: runs in the main environment; nothing to create")
    check = f"import {FAMILIES[entry.codec_family].module}" if entry.codec_family else ""
    return build(entry.id, lock_text(entry), entry.runtime.python, entry.runtime.no_deps, entry.runtime.post_install,
                 check, log)


def build(registry_id: str, lock: str, python: str = "3.11", no_deps: tuple[str, ...] = (),
          post_install: tuple[str, ...] = (), check: str = "", log: Any = None) -> Path:
    """Build (or rebuild) `envs/<registry_id>/` from requirements text `lock`, copy codecarena into it,
    run `check` (Python code proving the codec imports there) and record the resolved packages."""
    folder = env_dir(registry_id)
    tmp = folder.with_name(f".{folder.name}.building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    base = shutil.which(f"python{python}") or sys.executable
    with_deps = tmp.parent / f".{registry_id}.with-deps.txt"
    with_deps.write_text("".join(line for line in lock.splitlines(keepends=True)
                                 if line.strip() not in no_deps), encoding="utf-8")
    pip = [str(_python(tmp)), "-m", "pip", "install", "--quiet", "--no-input"]
    try:
        subprocess.run([base, "-m", "venv", str(tmp)], check=True, stdout=log, stderr=log)
        subprocess.run([*pip, "-r", str(with_deps)], check=True, stdout=log, stderr=log)
        if no_deps:
            subprocess.run([*pip, "--no-deps", *no_deps], check=True, stdout=log, stderr=log)
        site = subprocess.run([str(_python(tmp)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        for fix in post_install:
            POST_INSTALL[fix](Path(site))
        _copy_package(Path(site))
        if check:
            subprocess.run([str(_python(tmp)), "-c", check], check=True, stdout=log, stderr=log, timeout=300)
        record = {"version": 1, "registry": registry_id, "interpreter": str(_python(folder)),
                  "lock": lock, "codecarena": codecarena.__version__,
                  "codecarena_sha256": package_sha256(), "site": site.replace(str(tmp), str(folder), 1),
                  **_packages_record(_freeze(_python(tmp)))}
        (tmp / RUNTIME_FILE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        # The venv's scripts name its own path, so it is built where it will live: renaming the
        # finished folder is safe because `python -m` never goes through those scripts.
        tmp.rename(folder)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeMissing(f"{registry_id}: building the runtime failed ({exc})") from None
    finally:
        with_deps.unlink(missing_ok=True)
    return folder


def strip_torchaudio_extensions(site: Path) -> None:
    """PyPI's torchaudio (pulled in unpinned by encodec, dac, ...) is a CUDA build whose compiled
    libraries fail to load beside the CPU torch, while `pip check` reports nothing. Without them
    torchaudio falls back to its pure-Python paths (resample, Spectrogram, lfilter), which is all
    these codecs use."""
    lib = site / "torchaudio" / "lib"
    for path in lib.glob("*.so*") if lib.is_dir() else ():
        path.unlink()


POST_INSTALL = {"strip_torchaudio_extensions": strip_torchaudio_extensions}


def remove(entry_id: str) -> bool:
    folder = env_dir(entry_id)
    if not folder.exists():
        return False
    shutil.rmtree(folder)
    return True


def list_envs() -> list[dict[str, Any]]:
    root = data_home() / "envs"
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            record = json.loads((folder / RUNTIME_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {"registry": folder.name, "error": "no readable runtime.json (rebuild with env create)"}
        found.append({"path": str(folder), **record})
    return found


def describe(entry: Entry) -> dict[str, Any]:
    """Interpreter and resolved packages of the runtime a family's workers will use (for run.json)."""
    if entry.runtime.environment == "main":
        return describe_main(entry.id)
    return describe_isolated(entry.id, f"codecarena env create {entry.codec_family or entry.id}")


def describe_main(registry_id: str) -> dict[str, Any]:
    """The harness's own environment, as a family's runtime."""
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    return {"registry": registry_id, "environment": "main", "interpreter": sys.executable,
            **_packages_record(packages)}


def recorded_lock(registry_id: str) -> str | None:
    """The requirements text a built runtime was made from (None when there is none)."""
    try:
        lock = json.loads((env_dir(registry_id) / RUNTIME_FILE).read_text(encoding="utf-8")).get("lock")
    except (OSError, ValueError):
        return None
    return lock if isinstance(lock, str) else None


def is_built(registry_id: str) -> bool:
    """Whether an isolated runtime has been built here (what `describe_isolated` reads), looked at
    without refreshing its copy of the harness."""
    folder = env_dir(registry_id)
    return (folder / RUNTIME_FILE).is_file() and _python(folder).is_file()


def describe_isolated(registry_id: str, rebuild: str) -> dict[str, Any]:
    """A built isolated runtime (RuntimeMissing naming the command `rebuild` that builds it)."""
    folder = env_dir(registry_id)
    try:
        record = json.loads((folder / RUNTIME_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RuntimeMissing(f"{registry_id}: isolated runtime not built; run `{rebuild}`") from None
    if not _python(folder).is_file():
        raise RuntimeMissing(f"{registry_id}: runtime at {folder} has no interpreter; rebuild it")
    record = sync_package(folder, record)
    return {"registry": registry_id, "environment": "isolated", "interpreter": str(_python(folder)),
            "packages": record["packages"], "packages_sha256": record["packages_sha256"],
            "codecarena_sha256": record["codecarena_sha256"], "site": record.get("site", "")}
