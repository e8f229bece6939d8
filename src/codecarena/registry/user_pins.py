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

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from codecarena.files import JSONFileError, copy_verified, data_home, read_json, sha256_file, write_json
from codecarena.registry.entries import HEX64, Checkpoint, CheckpointFile

FORMAT = "codecarena-user-pins"
VERSION = 1
ALL_CONFIGS = "*"  # a pin for every configuration of the family
# File, family and configuration names become path components under pins_dir(): no '/', no leading dot.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_RULE = "letters, digits, '.', '_' or '-', starting with a letter or a digit"
# No checkpoint file comes near a pebibyte; a larger size is a damaged or hand-made file.
MAX_FILE_BYTES = 1 << 50


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
    try:
        data = read_json(path)
    except JSONFileError as exc:
        raise UserPinError(str(exc)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION \
            or sorted(data) != ["format", "pins", "version"] or not isinstance(data["pins"], list):
        raise UserPinError(f"{path}: not a {FORMAT} version {VERSION} file")
    pins = tuple(_parse_pin(path, i, item) for i, item in enumerate(data["pins"]))
    # Two pins in one folder would overwrite each other's files, and find() would pick one of them.
    first: dict[str, int] = {}
    for i, p in enumerate(pins):
        j = first.setdefault(p.folder_name, i)
        if j != i:
            raise UserPinError(f"{path}: pins[{i}]: {p.family}:{p.config} shares the folder {p.folder_name} with "
                               f"pins[{j}] ({pins[j].family}:{pins[j].config}); pin each family and configuration "
                               f"once")
    return pins


def _parse_pin(path: Path, i: int, item: Any) -> UserPin:
    where = f"{path}: pins[{i}]"
    if not isinstance(item, dict) or sorted(item) != ["config", "family", "files", "pinned_at"]:
        raise UserPinError(f"{where}: expected family, config, files, pinned_at")
    files = []
    for f in item["files"] if isinstance(item["files"], list) else [None]:
        if not isinstance(f, dict) or sorted(f) != ["bytes", "name", "origin", "sha256"] \
                or not isinstance(f["name"], str) or not _NAME.fullmatch(f["name"]) \
                or type(f["bytes"]) is not int or not 0 < f["bytes"] <= MAX_FILE_BYTES \
                or not isinstance(f["sha256"], str) or not HEX64.fullmatch(f["sha256"]) \
                or not isinstance(f["origin"], str):
            raise UserPinError(f"{where}: a file needs a name ({NAME_RULE}), bytes from 1 to {MAX_FILE_BYTES} "
                               f"(an integer), a 64-hex sha256 and an origin")
        files.append(UserFile(f["name"], f["bytes"], f["sha256"], f["origin"]))
    if not files or not all(isinstance(item[k], str) for k in ("family", "config", "pinned_at")):
        raise UserPinError(f"{where}: family, config and pinned_at must be strings, and files non-empty")
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise UserPinError(f"{where}: two files named alike: {names}")
    problem = _names_problem(item["family"], item["config"])
    if problem:
        raise UserPinError(f"{where}: {problem}")
    return UserPin(item["family"], item["config"], tuple(files), item["pinned_at"])


def _names_problem(family: str, config: str) -> str:
    """Why a family and configuration cannot name a pin's folder ("" when they can)."""
    if not _NAME.fullmatch(family):
        return f"family {family!r} is not a name ({NAME_RULE})"
    if config != ALL_CONFIGS and not _NAME.fullmatch(config):
        return f"config {config!r} is neither {ALL_CONFIGS!r} nor a name ({NAME_RULE})"
    return ""


def find(family: str, config: str) -> UserPin | None:
    """The user's pin for one configuration (a pin for that configuration first, then one for all)."""
    pins = {(p.family, p.config): p for p in load()}
    return pins.get((family, config)) or pins.get((family, ALL_CONFIGS))


def pin(family: str, config: str, paths: list[Path], url: str = "") -> UserPin:
    """Hash `paths`, keep them under pins_dir(), and record the pin (replacing an earlier one for the
    same family and configuration)."""
    if not paths:
        raise UserPinError("--file is required")
    problem = _names_problem(family, config or ALL_CONFIGS)
    if problem:
        raise UserPinError(f"registry pin: {problem}")
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise UserPinError(f"two files named alike: {names}")
    files = []
    sources = []
    for path in paths:
        if not path.is_file():
            raise UserPinError(f"{path}: no such file")
        if not _NAME.fullmatch(path.name):
            raise UserPinError(f"{path}: the file name must be {NAME_RULE}")
        # The file a symlink points to is what gets pinned, under the name the user gave.
        source = path.resolve(strict=True)
        sources.append(source)
        files.append(UserFile(path.name, source.stat().st_size, sha256_file(source), url or str(source)))
    made = UserPin(family, config or ALL_CONFIGS, tuple(files),
                   datetime.now(timezone.utc).isoformat(timespec="seconds"))
    folder = pins_dir() / made.folder_name
    folder.mkdir(parents=True, exist_ok=True)
    for source, f in zip(sources, files):
        if not copy_verified(source, folder / f.name, f.sha256):
            raise UserPinError(f"{source}: changed while it was pinned; pin it again")
    pins = [p for p in load() if (p.family, p.config) != (made.family, made.config)] + [made]
    write_json(_pins_file(), {"format": FORMAT, "version": VERSION,
                              "pins": [{"family": p.family, "config": p.config, "pinned_at": p.pinned_at,
                                        "files": [vars(f) for f in p.files]} for p in pins]})
    return made
