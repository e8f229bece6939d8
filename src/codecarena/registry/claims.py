"""Claimed bitrates: what a paper, a model card, a name or a standard says a codec configuration runs
at, and where it says so. The bitrate ledger (`results/ledger.py`, docs/ledger.md) sets the rates it
measures from the payloads beside them.

A claim lives in a built-in family's registry entry (`[[claims]]` in its `registry.toml`) or in a user
codec's declaration (`[[claims]]` in its `codec.toml`); a command-line family's `nominal_bps` and a
family whose configuration is its bitrate (Opus) claim without a table (`results/ledger.py`). Parsed
strictly: unknown keys, wrong types, a configuration or option the family does not have, and two
claims that could cover one configuration are refused with one line naming the file and the claim.
A family with a variable-rate mode declares it (`[variable_rate]`, `VariableRate`): a claim on a
configuration in that mode is a target, checked with the declared tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from codecarena.registry.strict import RegistryError, Table

#: Where a claimed rate comes from, in words the ledger shows.
SOURCES = ("paper", "model_card", "documentation", "name", "standard", "census", "declaration")
#: The relative difference between measured and claimed rate beyond which the ledger flags a claim.
DEFAULT_TOLERANCE = 0.05

OptionValue = int | float | str


@dataclass(frozen=True)
class Claim:
    configs: tuple[str, ...]  # the configurations it covers
    bps: float
    source: str  # one of SOURCES
    reference: str  # where it is said: a paper with its arXiv id, a model card, a file and key
    options: tuple[tuple[str, OptionValue], ...] = ()  # option values it needs (a rate knob at its claimed value)
    tolerance: float = DEFAULT_TOLERANCE

    def covers(self, config: dict[str, Any]) -> bool:
        """Whether a row's resolved configuration (`{"config": ..., option: value, ...}`) is this claim's."""
        return config.get("config") in self.configs and all(config.get(k) == v for k, v in self.options)

    def record(self) -> dict[str, Any]:
        """What the ledger records of it."""
        return {"bps": self.bps, "source": self.source, "reference": self.reference, "tolerance": self.tolerance,
                "options": dict(self.options)}


def _claim(raw: Any, where: str, configs: tuple[str, ...] | None, options: tuple[str, ...] | None) -> Claim:
    table = Table(raw, where)
    covered = table.strings("configs")
    if not covered or len(set(covered)) != len(covered):
        raise table.fail("configs", "must be a non-empty list without repeats")
    for config in covered:
        if configs is not None and config not in configs:
            raise table.fail("configs", f"names {config!r}, which is not a config ({', '.join(configs)})")
    bps = table.get("bps", (int, float))
    if not math.isfinite(bps) or bps <= 0:
        raise table.fail("bps", "must be a positive number of bits per second")
    source = table.get("source", str)
    if source not in SOURCES:
        raise table.fail("source", f"must be one of {', '.join(SOURCES)}")
    reference = table.get("reference", str)
    if not reference.strip():
        raise table.fail("reference", "must say where the rate is claimed")
    needs = table.get("options", dict, {})
    for name, value in needs.items():
        if options is not None and name not in options:
            raise table.fail("options", f"names {name!r}, which is not an option ({', '.join(options) or 'none'})")
        if not isinstance(value, (int, float, str)) or isinstance(value, bool):
            raise table.fail("options", f"value of {name!r} must be a number or a string")
    tolerance = table.get("tolerance", (int, float), DEFAULT_TOLERANCE)
    if not 0 < tolerance <= 1:
        raise table.fail("tolerance", "must be a relative difference in (0, 1]")
    table.done()
    return Claim(tuple(covered), float(bps), source, reference, tuple(sorted(needs.items())), float(tolerance))


@dataclass(frozen=True)
class VariableRate:
    """A family's variable-rate mode (`[variable_rate]` in its declaration): with its option `option`
    at one of `values` (Opus's `vbr` on or constrained), the encoder spends bits as the content asks, and
    a claimed rate is the average it aims at, not a rate it keeps: the ledger checks a claim on such a
    configuration with `tolerance` and reads a larger difference as a target missed, not a failed claim."""
    option: str
    values: tuple[OptionValue, ...]
    tolerance: float
    reference: str

    def covers(self, config: dict[str, Any]) -> bool:
        return config.get(self.option) in self.values

    def record(self, config: dict[str, Any]) -> dict[str, Any]:
        """What the ledger records of it for a configuration it covers."""
        return {"option": self.option, "value": config.get(self.option), "tolerance": self.tolerance,
                "reference": self.reference}


def parse_variable_rate(raw: Any, where: str, options: dict[str, tuple[OptionValue, ...]]) -> VariableRate:
    """A `[variable_rate]` table, strictly; `options`: the family's options with their choices (empty:
    any value of the option's kind)."""
    table = Table(raw, where)
    option = table.get("option", str)
    if option not in options:
        raise table.fail("option", f"names {option!r}, which is not an option ({', '.join(options) or 'none'})")
    values = table.get("values", list)
    if not values or len(set(values)) != len(values):
        raise table.fail("values", "must be a non-empty list without repeats")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise table.fail("values", f"must be numbers or strings, got {type(value).__name__}")
        if options[option] and value not in options[option]:
            raise table.fail("values", f"names {value!r}, which {option} does not take "
                                       f"({', '.join(map(str, options[option]))})")
    tolerance = table.get("tolerance", (int, float))
    if not 0 < tolerance <= 1:
        raise table.fail("tolerance", "must be a relative difference in (0, 1]")
    reference = table.get("reference", str)
    if not reference.strip():
        raise table.fail("reference", "must say where the variable rate is documented")
    table.done()
    return VariableRate(option, tuple(values), float(tolerance), reference)


def _may_overlap(a: Claim, b: Claim) -> bool:
    """Two claims could both cover one configuration unless an option both name takes different values."""
    if not set(a.configs) & set(b.configs):
        return False
    theirs = dict(b.options)
    return all(theirs[k] == v for k, v in a.options if k in theirs)


def parse_claims(items: Any, where: str, configs: tuple[str, ...] | None = None,
                 options: tuple[str, ...] | None = None) -> tuple[Claim, ...]:
    """`[[claims]]` tables; `configs` and `options` (when known) are what the family accepts."""
    if not isinstance(items, list):
        raise RegistryError(f"{where}: must be an array of tables ([[claims]]), got {type(items).__name__}")
    claims = tuple(_claim(raw, f"{where}[{i}]", configs, options) for i, raw in enumerate(items))
    for i, claim in enumerate(claims):
        for j in range(i):
            if _may_overlap(claims[j], claim):
                raise RegistryError(f"{where}[{i}]: could cover a configuration claims[{j}] covers; give each a "
                                    f"different value of one option to tell them apart")
    return claims


def covering(claims: tuple[Claim, ...], config: dict[str, Any]) -> Claim | None:
    """The one claim covering a resolved configuration, or None (parse_claims allows no second)."""
    return next((c for c in claims if c.covers(config)), None)
