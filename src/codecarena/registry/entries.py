"""Registry entries: one TOML file per codec family in `registry/families/`, parsed strictly.

This module reads what the checkpoint resolver and the adapters need (source pin, checkpoint files
with URL, size, sha256 and side). The full schema and its auditor are issue #5's work.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

SCHEMA_VERSION = 1
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class RegistryError(ValueError):
    """A registry entry that is missing or does not match the schema."""


@dataclass(frozen=True)
class CheckpointFile:
    name: str
    url: str
    bytes: int
    sha256: str
    side: str  # "encoder", "decoder" or "both": what a sender or a receiver must ship


@dataclass(frozen=True)
class Checkpoint:
    revision: str
    license: str
    gated: bool
    mirror_dir: str
    files: tuple[CheckpointFile, ...]

    def identity(self, registry_id: str) -> dict[str, str]:
        """What a payload records so that a decoder can refuse other weights."""
        return {"registry": registry_id, "revision": self.revision,
                **{f.name: f.sha256 for f in self.files}}


@dataclass(frozen=True)
class Entry:
    id: str
    display_name: str
    codec_family: str
    roles: tuple[str, ...]
    status: str
    license: str
    source_repository: str
    source_commit: str
    checkpoint: Checkpoint | None
    raw: dict[str, Any]


def _need(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise RegistryError(f"{where}: missing key {key!r}")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RegistryError(f"{where}: {key} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _checkpoint(data: dict[str, Any], where: str) -> Checkpoint:
    files = []
    for i, item in enumerate(_need(data, "files", list, where)):
        at = f"{where}.files[{i}]"
        sha = _need(item, "sha256", str, at)
        if not _HEX64.fullmatch(sha):
            raise RegistryError(f"{at}: sha256 must be 64 lower-case hex digits")
        side = _need(item, "side", str, at)
        if side not in ("encoder", "decoder", "both"):
            raise RegistryError(f"{at}: side must be encoder, decoder or both")
        files.append(CheckpointFile(_need(item, "name", str, at), _need(item, "url", str, at),
                                    _need(item, "bytes", int, at), sha, side))
    revision = _need(data, "revision", str, where)
    if not _HEX40.fullmatch(revision):
        raise RegistryError(f"{where}: revision must be a full 40-hex commit")
    return Checkpoint(revision, _need(data, "license", str, where), _need(data, "gated", bool, where),
                      _need(data, "mirror_dir", str, where), tuple(files))


def parse_entry(text: str, where: str) -> Entry:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{where}: not valid TOML ({exc})") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise RegistryError(f"{where}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    source = _need(data, "source", dict, where)
    commit = _need(source, "commit", str, f"{where}.source")
    if not _HEX40.fullmatch(commit):
        raise RegistryError(f"{where}.source: commit must be a full 40-hex commit")
    checkpoint = _checkpoint(data["checkpoint"], f"{where}.checkpoint") if "checkpoint" in data else None
    return Entry(
        id=_need(data, "id", str, where), display_name=_need(data, "display_name", str, where),
        codec_family=_need(data, "codec_family", str, where),
        roles=tuple(_need(data, "roles", list, where)), status=_need(data, "status", str, where),
        license=_need(data, "license", str, where),
        source_repository=_need(source, "repository", str, f"{where}.source"), source_commit=commit,
        checkpoint=checkpoint, raw=data,
    )


def load_entry(registry_id: str) -> Entry:
    resource = resources.files("codecarena.registry") / "families" / f"{registry_id}.toml"
    if not resource.is_file():
        raise RegistryError(f"no registry entry {registry_id!r}")
    return parse_entry(resource.read_text(encoding="utf-8"), f"registry/families/{registry_id}.toml")
