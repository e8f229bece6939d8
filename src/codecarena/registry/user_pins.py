"""User pins: checkpoints the registry does not pin (a fine-tune, a release not yet in the census),
pinned by the user on their own machine, kept apart from the registry and labelled everywhere.

`codecarena registry pin FAMILY[:CONFIG] --file PATH [--url URL]` hashes the files, keeps a copy of
their bytes (a symlink is followed; never a hard link, which continued training or an edit of the
original would change) under `$XDG_DATA_HOME/codecarena/user-pins/<family>-<config>/` and records the pin in `user-pins/pins.json` (format `codecarena-user-pins`, version 1, strictly
parsed). `--weights user` then loads that checkpoint through the family's own adapter, which still
builds the architecture and refuses a checkpoint whose keys do not match. Rows say `weights: user`,
their checkpoint identity carries `pinned_by: user`, and the leaderboard and report show "pinned by
user"; `codecarena audit` refuses a user pin presented as the registry's, and `registry audit`
lists user pins separately. The package's registry is never modified.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from codecarena.files import data_home, read_json, sha256_file, write_json
from codecarena.registry.entries import HEX64, Checkpoint, CheckpointFile

FORMAT = "codecarena-user-pins"
VERSION = 1
ALL_CONFIGS = "*"  # a pin for every configuration of the family
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class UserPinError(ValueError):
    """A user pin that cannot be made or read; the message names the file and the problem."""


@dataclass(frozen=True)
class UserFile:
    name: str
    bytes: int
    sha256: str
    origin: str  # the URL the user gave, else the path the file was pinned from


@dataclass(frozen=True)
class UserPin:
    family: str
    config: str  # a configuration of the family, or "*" for all of them
    files: tuple[UserFile, ...]
    pinned_at: str

    @property
    def folder_name(self) -> str:
        return f"{self.family}-{'all' if self.config == ALL_CONFIGS else self.config}"

    def identity(self, registry_id: str) -> dict[str, str]:
        """The checkpoint identity its payloads record (and a run's plan pins)."""
        return {**self.checkpoint().identity(registry_id), "pinned_by": "user"}

    def checkpoint(self) -> Checkpoint:
        """The pin as a checkpoint the loaders read (under `pins_dir()`, with the folder as mirror_dir)."""
        return Checkpoint("user", "unknown (pinned by user)", False, self.folder_name,
                          tuple(CheckpointFile(f.name, f.origin, f.bytes, f.sha256, "both") for f in self.files))


def pins_dir() -> Path:
    return data_home() / "user-pins"


def _pins_file() -> Path:
    return pins_dir() / "pins.json"


def load() -> tuple[UserPin, ...]:
    """Every user pin (none when the overlay does not exist)."""
    path = _pins_file()
    if not path.exists():
        return ()
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION \
            or sorted(data) != ["format", "pins", "version"] or not isinstance(data["pins"], list):
        raise UserPinError(f"{path}: not a {FORMAT} version {VERSION} file")
    return tuple(_parse_pin(path, i, item) for i, item in enumerate(data["pins"]))


def _parse_pin(path: Path, i: int, item: Any) -> UserPin:
    where = f"{path}: pins[{i}]"
    if not isinstance(item, dict) or sorted(item) != ["config", "family", "files", "pinned_at"]:
        raise UserPinError(f"{where}: expected family, config, files, pinned_at")
    files = []
    for f in item["files"] if isinstance(item["files"], list) else [None]:
        if not isinstance(f, dict) or sorted(f) != ["bytes", "name", "origin", "sha256"] \
                or not isinstance(f["name"], str) or not _NAME.fullmatch(f["name"]) \
                or not isinstance(f["bytes"], int) or f["bytes"] <= 0 \
                or not isinstance(f["sha256"], str) or not HEX64.fullmatch(f["sha256"]) \
                or not isinstance(f["origin"], str):
            raise UserPinError(f"{where}: a file needs name, bytes > 0, a 64-hex sha256 and origin")
        files.append(UserFile(f["name"], f["bytes"], f["sha256"], f["origin"]))
    if not files or not all(isinstance(item[k], str) for k in ("family", "config", "pinned_at")):
        raise UserPinError(f"{where}: family, config and pinned_at must be strings, and files non-empty")
    return UserPin(item["family"], item["config"], tuple(files), item["pinned_at"])


def find(family: str, config: str) -> UserPin | None:
    """The user's pin for one configuration (a pin for that configuration first, then one for all)."""
    pins = {(p.family, p.config): p for p in load()}
    return pins.get((family, config)) or pins.get((family, ALL_CONFIGS))


def pin(family: str, config: str, paths: list[Path], url: str = "") -> UserPin:
    """Hash `paths`, keep them under pins_dir(), and record the pin (replacing an earlier one for the
    same family and configuration)."""
    if not paths:
        raise UserPinError("--file is required")
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise UserPinError(f"two files named alike: {names}")
    files = []
    sources = []
    for path in paths:
        if not path.is_file():
            raise UserPinError(f"{path}: no such file")
        if not _NAME.fullmatch(path.name):
            raise UserPinError(f"{path}: the file name must be letters, digits, '.', '_' or '-'")
        # The file a symlink points to is what gets pinned, under the name the user gave.
        source = path.resolve(strict=True)
        sources.append(source)
        files.append(UserFile(path.name, source.stat().st_size, sha256_file(source), url or str(source)))
    made = UserPin(family, config or ALL_CONFIGS, tuple(files),
                   datetime.now(timezone.utc).isoformat(timespec="seconds"))
    folder = pins_dir() / made.folder_name
    folder.mkdir(parents=True, exist_ok=True)
    for source, f in zip(sources, files):
        _keep(source, folder / f.name, f.sha256)
    pins = [p for p in load() if (p.family, p.config) != (made.family, made.config)] + [made]
    write_json(_pins_file(), {"format": FORMAT, "version": VERSION,
                              "pins": [{"family": p.family, "config": p.config, "pinned_at": p.pinned_at,
                                        "files": [vars(f) for f in p.files]} for p in pins]})
    return made


def _keep(source: Path, dest: Path, sha256: str) -> None:
    """A copy of `source` (a resolved path) at `dest`, with the hash just computed, else an error.
    A copy, not a hard link: a link shares the original's bytes, so re-saving the original in place
    (continued training) would change the pinned checkpoint. The temporary file has a fresh name of
    its own (mkstemp), so neither a second pin nor a planted file at a guessable name interferes."""
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            shutil.copyfileobj(src, out)
        if sha256_file(tmp) != sha256:
            raise UserPinError(f"{source}: changed while it was pinned; pin it again")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
