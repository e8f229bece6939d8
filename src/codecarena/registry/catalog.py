"""What codec specs the harness accepts, declared as data: the catalog of built-in family units.

A family is one unit, a folder `codecs/<name>/` holding `codec.toml` (this declaration: configs,
options, defaults, which weights it takes), `adapter.py` (the Adapter its workers run),
`registry.toml` (its pins) and, when it runs in its own runtime, `lock.txt`. The harness must never
import a codec's own dependencies, so it reads only the declaration, as data; the adapter module is
imported inside a worker process only. Adding a built-in family is a new unit folder plus its name in
`BUILTIN` (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from codecarena.registry import user_units
from codecarena.registry.strict import RegistryError, Table

#: The version of the declaration format and of the adapter contract (codecarena.plugin).
API_VERSION = 1


@dataclass(frozen=True)
class Option:
    name: str
    kind: type  # int, float or str
    default: int | float | str
    help: str
    choices: tuple[int | float | str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    # Per-config overrides (config, value): where one knob's default and upper bound depend on the
    # configuration (DAC's codebook count is 12, 32 or 9).
    config_defaults: tuple[tuple[str, int | float | str], ...] = ()
    config_maximum: tuple[tuple[str, float], ...] = ()

    def default_for(self, config: str) -> int | float | str:
        return dict(self.config_defaults).get(config, self.default)

    def maximum_for(self, config: str) -> float | None:
        return dict(self.config_maximum).get(config, self.maximum)


@dataclass(frozen=True)
class Family:
    name: str
    module: str
    description: str
    configs: tuple[str, ...]
    default_config: str
    options: tuple[Option, ...] = field(default=())
    # True when the config is an open-ended bitrate such as "6k" or "7500" rather than a fixed list.
    config_is_bitrate: bool = False
    # "none" (DSP: no weights), "real" (real weights only), "real_or_synthetic" (seeded random
    # weights can stand in, loaded through the same code path, and every output says so).
    supported_weights: str = "none"
    # Named numerical variants (codecarena.variants) that apply to this family's model.
    variants: tuple[str, ...] = ()
    # The decoder carries hidden process-wide state (libcodec2's own PRNG), so a decode equals a
    # fresh decoder's only in a fresh process: warm mode still decodes such a family cold.
    fresh_process_decode: bool = False
    # "builtin" (a unit of this package) or "user" (added with `codecarena codec add`, registry/user_units.py).
    origin: str = "builtin"

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)


#: The built-in units, in the order `codecarena codecs` lists them: the catalog line a new family adds.
BUILTIN = ("opus", "codec2", "pcm", "lyra", "encodec", "dac", "snac", "mimi", "bigcodec", "fish_dac", "xcodec2",
           "wavtokenizer")

_KINDS: dict[str, type] = {"int": int, "float": float, "str": str}
WEIGHTS = ("none", "real", "real_or_synthetic")


def parse_declaration(text: str, where: str, module: str) -> Family:
    """A family declaration (`codec.toml`, format `API_VERSION`), strictly: unknown keys, wrong types,
    a default config that is not a config, an option default outside its own bounds are refused with
    one line naming `where`. `module` is the adapter module the workers import."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{where}: not valid TOML ({exc})") from None
    top = Table(data, where)
    version = top.get("api_version", int)
    if version != API_VERSION:
        raise top.fail("api_version", f"is {version}; this codecarena reads declarations of version {API_VERSION}")
    name = top.get("name", str)
    configs = top.strings("configs")
    bitrate = top.get("config_is_bitrate", bool, False)
    if not configs or len(set(configs)) != len(configs):
        raise top.fail("configs", "must be a non-empty list without repeats")
    default = top.get("default_config", str)
    if default not in configs:
        raise top.fail("default_config", f"{default!r} is not one of configs")
    weights = top.get("supported_weights", str, "none")
    if weights not in WEIGHTS:
        raise top.fail("supported_weights", f"must be one of {', '.join(WEIGHTS)}")
    options = tuple(_option(raw, f"{where}: options[{i}]", configs)
                    for i, raw in enumerate(top.get("options", list, [])))
    family = Family(name=name, module=module, description=top.get("description", str), configs=configs,
                    default_config=default, options=options, config_is_bitrate=bitrate,
                    supported_weights=weights, variants=top.strings("variants", ()),
                    fresh_process_decode=top.get("fresh_process_decode", bool, False))
    top.done()
    return family


def _option(raw: Any, where: str, configs: tuple[str, ...]) -> Option:
    table = Table(raw, where)
    name = table.get("name", str)
    kind_name = table.get("kind", str)
    if kind_name not in _KINDS:
        raise table.fail("kind", f"must be one of {', '.join(_KINDS)}")
    kind = _KINDS[kind_name]
    value_kind = (int, float) if kind is float else kind

    def per_config(key: str) -> tuple[tuple[str, Any], ...]:
        mapping = table.get(key, dict, {})
        for config, value in mapping.items():
            if config not in configs:
                raise table.fail(key, f"names {config!r}, which is not a config")
            if not isinstance(value, value_kind) or isinstance(value, bool):
                raise table.fail(key, f"value for {config!r} must be {kind_name}")
        return tuple(mapping.items())

    bound = (int, float)
    option = Option(name=name, kind=kind, default=table.get("default", value_kind), help=table.get("help", str),
                    choices=tuple(table.get("choices", list, [])), minimum=table.get("minimum", bound, None),
                    maximum=table.get("maximum", bound, None), config_defaults=per_config("config_defaults"),
                    config_maximum=per_config("config_maximum"))
    table.done()
    if any(not isinstance(c, value_kind) or isinstance(c, bool) for c in option.choices):
        raise table.fail("choices", f"must all be {kind_name}")
    for config in ("", *configs):
        value = option.default_for(config)
        if option.choices and value not in option.choices:
            raise table.fail("default", f"{value!r} is not one of its choices")
        if isinstance(value, (int, float)) and ((option.minimum is not None and value < option.minimum) or
                                                 (option.maximum_for(config) is not None
                                                  and value > option.maximum_for(config))):  # type: ignore[operator]
            raise table.fail("default", f"{value!r} is outside its bounds")
    return option


def _builtin(name: str) -> Family:
    unit = resources.files("codecarena.codecs") / name
    family = parse_declaration((unit / "codec.toml").read_text(encoding="utf-8"), f"codecs/{name}/codec.toml",
                               f"codecarena.codecs.{name}.adapter")
    if family.name != name:
        raise RegistryError(f"codecs/{name}/codec.toml: name {family.name!r} differs from its folder")
    return family


def _user_families() -> tuple[dict[str, Family], dict[str, str]]:
    """The user's own codecs, and, by name, those that cannot be read (with why): a broken one is left
    out of the catalog, and naming it says why, but it stops no other command."""
    units, problems = user_units.load_all()
    found = {}
    for unit in units:
        where = str(user_units.units_dir() / unit.name / user_units.RECORD)
        try:
            family = parse_declaration(unit.declaration, where, "" if unit.source else "codecarena.codecs.command")
        except RegistryError as exc:
            problems[unit.name] = str(exc)
            continue
        if family.name != unit.name or unit.name in BUILTIN:
            problems[unit.name] = f"{where}: declares {family.name!r}, or takes a built-in family's name"
            continue
        found[unit.name] = dataclasses.replace(family, origin="user")
    return found, problems


FAMILIES: dict[str, Family] = {name: _builtin(name) for name in BUILTIN}
_USER, USER_PROBLEMS = _user_families()
FAMILIES.update(_USER)
