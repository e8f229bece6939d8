"""Strict reading of TOML tables: every key consumed, every type checked, one line per error naming
the file and the key. Shared by the registry entries and the catalog's family declarations."""

from __future__ import annotations

from typing import Any


class RegistryError(ValueError):
    """A registry entry or family declaration that is missing or does not match its schema (one line:
    file and key)."""


class Table:
    """One TOML table being read: every key must be consumed, and `done()` rejects the rest."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise RegistryError(f"{where}: must be a table, got {type(data).__name__}")
        self.data, self.where, self.seen = data, where, set[str]()

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is ...:
                raise RegistryError(f"{self.where}: missing key {key!r}")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise RegistryError(f"{self.where}: {key} must be {names}, got {type(value).__name__}")
        return value

    def has(self, key: str) -> bool:
        return key in self.data

    def fail(self, key: str, message: str) -> RegistryError:
        return RegistryError(f"{self.where}: {key} {message}")

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        values = self.get(key, list, default)
        if any(not isinstance(v, str) for v in values):
            raise self.fail(key, "must be a list of strings")
        return tuple(values)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise RegistryError(f"{self.where}: unknown key {unknown[0]!r}")
