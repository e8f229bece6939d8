"""User codecs: families a user adds to the arena (`codecarena codec add`), pinned on their own machine
and labelled "user codec" everywhere.

A user codec is a unit like a built-in one: a declaration (`codec.toml`, the same format,
`registry/catalog.py`) and, for a Python codec, a module or package exporting `ADAPTER`
(`codecarena.plugin`). `codec add` pins what it was given by content and keeps the pins in
`$XDG_DATA_HOME/codecarena/codecs/<name>/unit.json` (format `codecarena-user-codec`, version 2, parsed
strictly): the declaration's text, the source's sha256 (of the module file, or of the package's
files) with its git commit and dirty flag when it lies in a repository, each checkpoint's size and
sha256 (a copy of its bytes is kept beside the record, never a link), the requirements of its own
runtime, and for a command-line codec the sha256 of each program and the path, size and sha256 of
every shared library it loads (`libraries`, registry/libraries.py). Version 2 added `libraries`; a
version 1 record reads with None there, and the catalog refuses a command-line codec so pinned until
it is added again. The source is not copied: workers import it from where it is and refuse it when its
hash is no longer the pinned one, so an edit is never run unnoticed; `codec add` again re-pins it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from codecarena.files import (JSONFileError, copy_verified, data_home, read_json, sha256_file, sha256_json, tree_sha256,
                              write_json)
from codecarena.registry.libraries import Library

FORMAT = "codecarena-user-codec"
VERSION = 2
RECORD = "unit.json"
# A family name is a codec spec's first part (`NAME:CONFIG,key=value`) and a folder name.
NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
NAME_RULE = "lower-case letters, digits and '_', starting with a letter, at most 32 characters"
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX40 = re.compile(r"[0-9a-f]{40}")
REGISTRY_PREFIX = "user-"


class UserCodecChanged(ValueError):
    """A user codec's source or checkpoint is no longer what `codec add` pinned."""


class UserUnitError(ValueError):
    """A user codec that cannot be added or read; the message names the file and the problem."""


@dataclass(frozen=True)
class Source:
    path: str  # absolute: the module file, or the package folder
    kind: str  # "file" or "package"
    sha256: str  # of the file's bytes, or files.tree_sha256 of the package folder
    git_commit: str  # "" when the source is not in a git repository
    git_dirty: bool

    def current_sha256(self) -> str:
        """The source's hash now (UserUnitError when it is gone)."""
        path = Path(self.path)
        if self.kind == "file" and path.is_file():
            return sha256_file(path)
        if self.kind == "package" and path.is_dir():
            return tree_sha256(path)
        raise UserUnitError(f"{path}: the source of this user codec is gone")


@dataclass(frozen=True)
class UnitFile:
    name: str
    bytes: int
    sha256: str
    origin: str  # the path it was added from


@dataclass(frozen=True)
class UserUnit:
    name: str
    added_at: str
    declaration: str  # the codec.toml text, as given
    source: Source | None  # None for a command-line codec (its declaration is its source)
    checkpoints: tuple[UnitFile, ...]
    requirements: str  # the requirements text of its own runtime; "" runs it in the harness's environment
    binaries: tuple[tuple[str, str], ...] = ()  # a command-line codec's programs: (name, sha256 pinned at add)
    # The shared libraries a command-line codec's programs load, pinned at add; None for a Python codec,
    # and for a command-line codec added by a version 1 record, which did not pin them.
    libraries: tuple[Library, ...] | None = None

    @property
    def registry_id(self) -> str:
        """What a row's `registry` field says for this codec, and its runtime's folder name."""
        return f"{REGISTRY_PREFIX}{self.name}"

    @property
    def folder(self) -> Path:
        return units_dir() / self.name

    def checkpoint_path(self, name: str) -> Path:
        return self.folder / "checkpoints" / name

    def checkpoint_identity(self) -> dict[str, str]:
        """The checkpoint identity this codec's payloads record."""
        return {"registry": self.registry_id, "revision": "user codec", **{f.name: f.sha256 for f in self.checkpoints}}

    def verified_checkpoints(self) -> dict[str, Path]:
        """Its checkpoint files by name, each verified against its pin (size, then sha256)."""
        paths = {}
        for f in self.checkpoints:
            path = self.checkpoint_path(f.name)
            if not path.is_file() or path.stat().st_size != f.bytes or sha256_file(path) != f.sha256:
                raise UserCodecChanged(f"{path}: user codec {self.name}'s checkpoint is missing or differs from its "
                                       f"pin; add the codec again (codecarena codec add {self.name} ...)")
            paths[f.name] = path
        return paths

    def identity(self) -> dict[str, Any]:
        """What a run's plan pins of this codec: a change to any of it is another codec. The libraries
        only where they were pinned, so that the pin of a codec without them is what it was before."""
        libraries = {} if self.libraries is None else {"libraries": [vars(lib) for lib in self.libraries]}
        return {"name": self.name, "declaration_sha256": hashlib.sha256(self.declaration.encode()).hexdigest(),
                "source_sha256": self.source.sha256 if self.source else None,
                "checkpoints": {f.name: f.sha256 for f in self.checkpoints},
                "requirements_sha256": hashlib.sha256(self.requirements.encode()).hexdigest()
                if self.requirements else None, "binaries": dict(self.binaries), **libraries}

    def label(self) -> dict[str, Any]:
        """What rows and tables show: that it is a user codec, and which source made it; and the sha256
        of its whole pin (`identity`), which ties a row to the pin the run's plan holds."""
        source = self.source
        return {"name": self.name, "source_sha256": source.sha256 if source else None,
                "git_commit": source.git_commit if source else "", "git_dirty": source.git_dirty if source else False,
                "declaration_sha256": self.identity()["declaration_sha256"], "pin_sha256": sha256_json(self.identity())}


def units_dir() -> Path:
    return data_home() / "codecs"


def _record_path(name: str) -> Path:
    return units_dir() / name / RECORD


def name_problem(name: str) -> str:
    return "" if NAME.fullmatch(name) else f"user codec name {name!r} must be {NAME_RULE}"


def load_all() -> tuple[tuple[UserUnit, ...], dict[str, str]]:
    """Every user codec, and, by name, those whose record cannot be read (with why): one broken record
    must not stop the commands that do not use it."""
    root = units_dir()
    units, problems = [], {}
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            units.append(load(folder.name))
        except UserUnitError as exc:
            problems[folder.name] = str(exc)
    return tuple(units), problems


def load(name: str) -> UserUnit:
    path = _record_path(name)
    try:
        data = read_json(path)
    except JSONFileError as exc:
        raise UserUnitError(str(exc)) from None
    return _parse(data, path, name)


def _parse(data: Any, path: Path, name: str) -> UserUnit:
    keys = ["added_at", "binaries", "checkpoints", "declaration", "format", "name", "requirements", "source", "version"]
    if not isinstance(data, dict) or data.get("format") != FORMAT or type(data.get("version")) is not int \
            or data["version"] not in (1, VERSION) \
            or sorted(data) != (keys if data["version"] == 1 else sorted([*keys, "libraries"])):
        raise UserUnitError(f"{path}: not a {FORMAT} version 1 or {VERSION} record")
    if data["version"] == 1:  # it pinned no libraries
        data = {**data, "libraries": None}
    if data["name"] != name or name_problem(name):
        raise UserUnitError(f"{path}: name {data['name']!r} is not its folder's ({name!r})")
    for key in ("added_at", "declaration", "requirements"):
        if not isinstance(data[key], str):
            raise UserUnitError(f"{path}: {key} must be a string")
    binaries = data["binaries"]
    if not isinstance(binaries, dict) or not all(isinstance(k, str) and isinstance(v, str) and _HEX64.fullmatch(v)
                                                 for k, v in binaries.items()):
        raise UserUnitError(f"{path}: binaries must map each program's name to its sha256")
    source = _parse_source(data["source"], path)
    libraries = _parse_libraries(data["libraries"], path, set(binaries))
    if source is not None and libraries is not None:
        raise UserUnitError(f"{path}: a Python codec pins no libraries")
    if source is None and libraries is None and data["version"] == VERSION:
        raise UserUnitError(f"{path}: a command-line codec's record must list the libraries its programs load")
    return UserUnit(name, data["added_at"], data["declaration"], source, _parse_files(data["checkpoints"], path),
                    data["requirements"], tuple(sorted(binaries.items())), libraries)


def _parse_libraries(raw: Any, path: Path, binaries: set[str]) -> tuple[Library, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise UserUnitError(f"{path}: libraries must be a list")
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or sorted(item) != ["binary", "bytes", "path", "sha256"] \
                or item["binary"] not in binaries or not isinstance(item["path"], str) \
                or not os.path.isabs(item["path"]) or type(item["bytes"]) is not int or item["bytes"] < 0 \
                or not isinstance(item["sha256"], str) or not _HEX64.fullmatch(item["sha256"]):
            raise UserUnitError(f"{path}: libraries[{i}] is not a program's name, an absolute path, a size and "
                                "a sha256")
    return tuple(Library(**item) for item in raw)


def _parse_source(raw: Any, path: Path) -> Source | None:
    if raw is None:
        return None
    fields = {"path": str, "kind": str, "sha256": str, "git_commit": str, "git_dirty": bool}
    if not isinstance(raw, dict) or sorted(raw) != sorted(fields) or \
            any(type(raw[k]) is not t for k, t in fields.items()):  # noqa: E721 (a bool is not an int here)
        raise UserUnitError(f"{path}: source must have {', '.join(fields)} of their types")
    if raw["kind"] not in ("file", "package") or not os.path.isabs(raw["path"]) or not _HEX64.fullmatch(raw["sha256"]) \
            or (raw["git_commit"] and not _HEX40.fullmatch(raw["git_commit"])):
        raise UserUnitError(f"{path}: source {raw!r} is not an absolute file or package with its sha256")
    return Source(**raw)


def _parse_files(raw: Any, path: Path) -> tuple[UnitFile, ...]:
    if not isinstance(raw, list):
        raise UserUnitError(f"{path}: checkpoints must be a list")
    files = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or sorted(item) != ["bytes", "name", "origin", "sha256"] \
                or not isinstance(item["name"], str) or not _FILE_NAME.fullmatch(item["name"]) \
                or type(item["bytes"]) is not int or not 0 < item["bytes"] < 1 << 50 \
                or not isinstance(item["sha256"], str) or not _HEX64.fullmatch(item["sha256"]) \
                or not isinstance(item["origin"], str):
            raise UserUnitError(f"{path}: checkpoints[{i}] is not a file name, size, sha256 and origin")
        files.append(UnitFile(**item))
    if len({f.name for f in files}) != len(files):
        raise UserUnitError(f"{path}: two checkpoints share a name")
    return tuple(files)


def source_of(module: Path) -> Source:
    """The pin of a module file or a package folder as it is now."""
    path = module.resolve(strict=True)
    if path.is_file():
        if path.suffix != ".py":
            raise UserUnitError(f"{module}: a Python codec is a .py file or a package folder")
        kind, sha = "file", sha256_file(path)
    elif (path / "__init__.py").is_file():
        kind, sha = "package", tree_sha256(path)
    else:
        raise UserUnitError(f"{module}: a package folder needs an __init__.py")
    commit, dirty = _git_state(path)
    return Source(str(path), kind, sha, commit, dirty)


def _git_state(path: Path) -> tuple[str, bool]:
    """The commit of the repository holding `path` and whether `path` differs from it; ("", False)
    outside a repository (or without git)."""
    where = path if path.is_dir() else path.parent
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=30).stdout.strip()
        if not _HEX40.fullmatch(commit):
            return "", False
        status = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--", str(path)],
                                capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "", False
    return commit, bool(status.strip())


def save(unit: UserUnit, checkpoint_sources: dict[str, Path]) -> None:
    """Keep copies of the checkpoints, then write the record (replacing an earlier unit of that name)."""
    folder = unit.folder
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    for f in unit.checkpoints:
        if not copy_verified(checkpoint_sources[f.name], unit.checkpoint_path(f.name), f.sha256):
            raise UserUnitError(f"{checkpoint_sources[f.name]}: changed while it was added; add the codec again")
    wanted = {f.name for f in unit.checkpoints}
    for stale in (folder / "checkpoints").iterdir():
        if stale.name not in wanted:
            stale.unlink()
    write_json(_record_path(unit.name), record(unit))


def record(unit: UserUnit) -> dict[str, Any]:
    """The record kept of `unit` (`unit.json`), as `_parse` reads it back."""
    return {"format": FORMAT, "version": VERSION, "name": unit.name, "added_at": unit.added_at,
            "declaration": unit.declaration, "requirements": unit.requirements,
            "source": vars(unit.source) if unit.source else None,
            "checkpoints": [vars(f) for f in unit.checkpoints], "binaries": dict(unit.binaries),
            "libraries": None if unit.libraries is None else [vars(lib) for lib in unit.libraries]}


def checkpoint_file(path: Path) -> UnitFile:
    if not path.is_file():
        raise UserUnitError(f"{path}: no such file")
    if not _FILE_NAME.fullmatch(path.name):
        raise UserUnitError(f"{path}: the file name must be letters, digits, '.', '_' or '-'")
    source = path.resolve(strict=True)
    return UnitFile(path.name, source.stat().st_size, sha256_file(source), str(source))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def remove(name: str) -> bool:
    folder = units_dir() / name
    if name_problem(name) or not folder.is_dir():
        return False
    shutil.rmtree(folder)
    return True
