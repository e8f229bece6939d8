"""A codec configuration's claimed rate and the check of a measured rate against it, for the bitrate
ledger (`results/ledger.py`, docs/ledger.md): where the claim comes from (the registry, a user codec's
declaration, a command-line configuration's nominal rate, the configuration's name) and whether the
configuration is in its family's variable-rate mode, where a claim is a target."""

from __future__ import annotations

from typing import Any

from codecarena.registry import user_units
from codecarena.registry.catalog import FAMILIES
from codecarena.registry.claims import Claim, VariableRate, covering
from codecarena.registry.entries import RegistryError, entry_for_family, load_entry
from codecarena.results.schema import Row

#: The ledger version from which a variable-rate configuration's claim is checked as a target.
TARGETS_FROM = 2


def claim_for(row: Row) -> Claim | None:
    """The claimed rate of a row's configuration: its registry entry's `[[claims]]`, a user codec's
    declared ones, a command-line configuration's `nominal_bps`, or the bitrate a configuration names."""
    family = FAMILIES.get(row.family)
    if not row.registry.startswith(user_units.REGISTRY_PREFIX):
        try:
            entry = load_entry(row.registry) if row.registry else entry_for_family(row.family)
        except RegistryError:
            entry = None
        found = covering(entry.claims, row.config) if entry is not None else None
        if found is not None:
            return found
    if family is None:
        return None
    found = covering(family.claims, row.config)
    if found is not None:
        return found
    config = str(row.config.get("config"))
    if family.command is not None and config in dict(family.command.configs):
        nominal = family.command.config(config).nominal_bps
        if nominal:
            return Claim((config,), float(nominal), "declaration",
                         f"the {row.family} declaration's nominal_bps for configuration {config}")
    if family.config_is_bitrate:
        bps = float(config[:-1]) * 1000 if config.endswith("k") else float(config)
        return Claim((config,), bps, "name", f"the configuration {config} names its target bitrate")
    return None


def variable_rate(row: Row) -> VariableRate | None:
    """The variable-rate mode a row's configuration is in (its family's `[variable_rate]` covers it), or None."""
    family = FAMILIES.get(row.family)
    found = family.variable_rate if family is not None else None
    return found if found is not None and found.covers(row.config) else None


def claim_check(claim: Claim | None, measured: float | None, variable: VariableRate | None = None,
                 config: dict[str, Any] | None = None, version: int = TARGETS_FROM) -> dict[str, Any] | None:
    """The measured rate against the claim: `ok` within the claim's tolerance, else `over` or `under`; on a
    configuration in its family's variable-rate mode (from version 2) the claim is a target, checked with the
    mode's tolerance, and a larger difference reads `over_target` or `under_target`, a target missed."""
    if claim is None or measured is None:
        return None
    difference = (measured - claim.bps) / claim.bps
    if version < TARGETS_FROM:
        flag = "ok" if abs(difference) <= claim.tolerance else ("over" if difference > 0 else "under")
        return {"measured_bps": measured, "difference": difference, "flag": flag}
    tolerance = variable.tolerance if variable is not None else claim.tolerance
    flag = "ok" if abs(difference) <= tolerance else ("over" if difference > 0 else "under")
    if variable is not None and flag != "ok":
        flag += "_target"
    return {"measured_bps": measured, "difference": difference, "flag": flag,
            "variable": variable.record(config or {}) if variable is not None else None}
