"""Codec specs: `FAMILY[:CONFIG][,key=value...]`, parsed strictly against the catalog; a run's codec
configurations may add `%CONDITION`, the condition their input is put through (docs/conditions.md), and
`@CHANNEL`, the channel their payloads cross (docs/channel.md): `SPEC[%CONDITION][@CHANNEL]`."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from codecarena.channel.spec import ChannelError, parse_channel
from codecarena.conditions.spec import Condition, ConditionError, parse_condition
from codecarena.registry.catalog import FAMILIES, USER_PROBLEMS, Family, Option


class SpecError(ValueError):
    """A codec spec the catalog does not accept; the message names the spec and the problem."""


OptionValue = int | float | str
# A configuration's slug names its folders in a run (payloads/SLUG/, decoded/SLUG/, work/SLUG/,
# channel/SLUG/): no longer than one file name can be on the file systems a run lives on (255 bytes
# on ext4, XFS, Btrfs and tmpfs; a slug is ASCII). A longer one parsed, then failed every row.
MAX_SLUG = 255


@dataclass(frozen=True)
class CodecSpec:
    family: str
    config: str
    # Only the options the user wrote, so the canonical name stays short and stable.
    explicit: tuple[tuple[str, OptionValue], ...]
    # Every option with its value (explicit or default): what ran, recorded in payloads and rows.
    resolved: tuple[tuple[str, OptionValue], ...]
    # The canonical channel spec the payloads cross ("": none, the perfect channel). Not the codec's:
    # the encoder runs `bare`, and the payload's codec is the bare canonical spec.
    channel: str = ""
    # The canonical condition spec the input goes through before the encoder gets it ("": the clean input).
    condition: str = ""

    def __post_init__(self) -> None:
        # Here, not in a parser: a configuration is also built from a codec spec and a --channel.
        slug = self.slug
        if len(slug) > MAX_SLUG:
            shown = self.canonical if len(self.canonical) <= 80 else self.canonical[:77] + "..."
            raise SpecError(f"{shown}: its folder name would be {len(slug)} characters, more than the {MAX_SLUG} a "
                            "file name can hold; write the channel's or condition's numbers with fewer digits "
                            "(loss=0.001%, not a long run of zeros) or its options' values shorter")

    @property
    def canonical(self) -> str:
        return (self._bare_canonical + (f"%{self.condition}" if self.condition else "")
                + (f"@{self.channel}" if self.channel else ""))

    @property
    def _bare_canonical(self) -> str:
        text = f"{self.family}:{self.config}"
        for key, value in self.explicit:
            text += f",{key}={_format(value)}"
        return text

    @property
    def bare(self) -> CodecSpec:
        """The codec configuration without its condition and channel: what the encoder runs and the
        payload names."""
        return dataclasses.replace(self, channel="", condition="")

    @property
    def slug(self) -> str:
        """File-system safe name of the canonical spec (for payload/decoded folders)."""
        bare = re.sub(r"[^A-Za-z0-9._-]+", "_", self._bare_canonical.replace(":", "_").replace(",", "__"))
        if self.condition:
            bare += "+" + re.sub(r"[^A-Za-z0-9._-]+", "_", self.condition.replace(",", "__"))
        if not self.channel:
            return bare
        return f"{bare}@" + re.sub(r"[^A-Za-z0-9._-]+", "_", self.channel.replace("%", "pct").replace(",", "__"))

    @property
    def conditioned(self) -> Condition | None:
        """The configuration's condition, parsed (None without one)."""
        return parse_condition(self.condition, codec=lambda inner: parse_spec(inner).canonical) if self.condition \
            else None

    def hops(self) -> list[CodecSpec]:
        """The codec stages the input goes through before the configuration's own encode: a tandem's codec,
        or the configuration itself once per earlier generation; none for other conditions (docs/conditions.md)."""
        condition = self.conditioned
        if condition is not None and condition.model == "tandem":
            return [parse_spec(condition.tandem)]
        if condition is not None and condition.model == "gen":
            assert condition.gen is not None
            return [self.bare] * (condition.gen - 1)
        return []

    def options(self) -> dict[str, OptionValue]:
        return dict(self.resolved)

    def config_dict(self) -> dict[str, OptionValue]:
        return {"config": self.config, **self.options()}


def _format(value: OptionValue) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _coerce(spec: str, option: Option, raw: str, config: str) -> OptionValue:
    try:
        value: OptionValue = option.kind(raw)
    except ValueError:
        kind = {"int": "an integer", "float": "a number", "str": "a string"}[option.kind.__name__]
        raise SpecError(f"{spec}: option {option.name}={raw!r} is not {kind}") from None
    if option.choices and value not in option.choices:
        allowed = ", ".join(_format(c) for c in option.choices)
        raise SpecError(f"{spec}: option {option.name}={raw!r} is not one of {allowed}")
    if isinstance(value, (int, float)):
        if option.minimum is not None and value < option.minimum:
            raise SpecError(f"{spec}: option {option.name}={raw} is below {_format(option.minimum)}")
        maximum = option.maximum_for(config)
        if maximum is not None and value > maximum:
            raise SpecError(f"{spec}: option {option.name}={raw} is above {_format(maximum)}")
    return value


def _normalise_config(spec: str, family: Family, config: str) -> str:
    if family.config_is_bitrate:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([kK]?)", config)
        if not match:
            raise SpecError(f"{spec}: config {config!r} is not a bitrate such as 6k or 7500")
        bps = float(match.group(1)) * (1000 if match.group(2) else 1)
        if not bps.is_integer() or not 500 <= bps <= 512_000:
            raise SpecError(f"{spec}: bitrate {config!r} must be a whole number of bps in 500..512000")
        bps_int = int(bps)
        return f"{bps_int // 1000}k" if bps_int % 1000 == 0 else str(bps_int)
    matches = [c for c in family.configs if c.lower() == config.lower()]
    if not matches:
        raise SpecError(f"{spec}: config {config!r} is not one of {', '.join(family.configs)}")
    return matches[0]


def parse_spec(spec: str) -> CodecSpec:
    text = spec.strip()
    if not text:
        raise SpecError("empty codec spec")
    head, *pairs = text.split(",")
    family_name, colon, config = head.partition(":")
    if colon and not config:
        raise SpecError(f"{spec}: empty config after ':'")
    family = FAMILIES.get(family_name.lower())
    if family is None:
        broken = USER_PROBLEMS.get(family_name.lower())
        if broken:
            raise SpecError(f"{spec}: user codec {family_name!r} cannot be read: {broken}")
        raise SpecError(f"{spec}: unknown codec family {family_name!r} (known: {', '.join(FAMILIES)})")
    config = _normalise_config(spec, family, config or family.default_config)
    explicit: dict[str, OptionValue] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"{spec}: option {pair!r} is not key=value")
        option = family.option(key)
        if option is None:
            known = ", ".join(o.name for o in family.options) or "none"
            raise SpecError(f"{spec}: unknown option {key!r} for {family.name} (options: {known})")
        if key in explicit:
            raise SpecError(f"{spec}: option {key!r} given twice")
        explicit[key] = _coerce(spec, option, raw.strip(), config)
    resolved = {o.name: explicit.get(o.name, o.default_for(config)) for o in family.options}
    return CodecSpec(
        family=family.name,
        config=config,
        explicit=tuple(sorted(explicit.items())),
        resolved=tuple(sorted(resolved.items())),
    )



def parse_configuration(text: str) -> CodecSpec:
    """`SPEC[%CONDITION][@CHANNEL]`: a codec spec, after `%` the condition its input goes through, after
    `@` the channel its payloads cross."""
    head, at, channel = text.strip().partition("@")
    codec, percent, condition = head.partition("%")
    spec = parse_spec(codec)
    try:
        return dataclasses.replace(spec, condition=canonical_condition(condition) if percent else "",
                                   channel=parse_channel(channel).canonical if at else "")
    except (ChannelError, ConditionError) as exc:
        raise SpecError(f"{text}: {exc}") from None


def bare_canonical(configuration: str) -> str:
    """The codec spec of a canonical configuration without its condition and channel: what its payloads name."""
    return configuration.partition("@")[0].partition("%")[0]


def canonical_condition(text: str) -> str:
    """A condition spec's canonical text (ConditionError when it is not one); a tandem codec is a codec spec."""
    return parse_condition(text, codec=lambda inner: parse_spec(inner).canonical).canonical
