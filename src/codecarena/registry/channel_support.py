"""A family's `[channel]` table (docs/plugins.md, docs/channel.md): whether its payloads may cross a
channel, who conceals a lost frame, how long one frame lasts (so that a packet is a whole number of
them), which of the arena's policies it offers, and the shared library whose concealment it calls.

    [channel]
    concealment = "codec"            # or "arena"
    description = "..."              # what its decoder does with a lost frame and with flipped bits
    frame = "20 ms"                  # or "320/24000 s", or "{frame_ms} ms" (an option's or config's value)
    policies = ["repeat", "zero"]    # the arena's policies it offers (arena concealment only)
    tokens = true                    # a neural codec: the arena's token policy fills lost frames (channel/tokens.py)
    [channel.config_frames]          # a configuration whose frame differs
    "700C" = "40 ms"
    [channel.library]                # a library whose own concealment the decoder calls through ctypes
    file = "libspeex.so.1"
    package = "libspeex1"            # its Debian package, at the version the registry entry pins

A duration is exact: a decimal number of milliseconds or a fraction of a second (samples over a rate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from codecarena.choices import ARENA_POLICIES
from codecarena.registry.strict import RegistryError, Table

#: Who conceals a lost packet or frame: the family's own decoder, or the arena (its policy, or a
#: concealment a standard specifies that the arena implements, named in the row).
CONCEALMENT = ("codec", "arena")
#: What an arena family offers when its declaration does not say: today's policies for one frame.
DEFAULT_POLICIES = ("repeat", "silence")
_DURATION = re.compile(r"(?P<number>\d+(\.\d+)?)(/(?P<denominator>[1-9]\d*))? (?P<unit>ms|s)")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ChannelLibrary:
    """A shared library the decoder loads with ctypes for its concealment, identified like a binary."""
    file: str  # the library's file name as its package installs it (libspeex.so.1)
    package: str  # the Debian package that ships it; the family's registry entry pins its version


@dataclass(frozen=True)
class ChannelSupport:
    """The `[channel]` table: the family's payloads may cross a channel (`run --channel`)."""
    concealment: str  # one of CONCEALMENT
    description: str  # what its decoder does with a lost unit and with flipped bits, in words
    frame: str = ""  # one frame's duration, maybe with {placeholders}; "" when undeclared (one unit a packet)
    config_frames: tuple[tuple[str, str], ...] = ()
    policies: tuple[str, ...] = ()  # the arena's policies it offers; () for a codec that conceals itself
    library: ChannelLibrary | None = None
    tokens: bool = False  # the arena's token policy fills lost frames before the adapter decodes (channel/tokens.py)

    def frame_text(self, config: str, values: dict[str, Any]) -> str:
        """This configuration's frame duration with its placeholders filled from `values` (the
        configuration's options and values), or "" when the family declares none."""
        text = dict(self.config_frames).get(config, self.frame)
        return _PLACEHOLDER.sub(lambda m: _plain(values[m.group(1)]), text)

    def frame_seconds(self, config: str, values: dict[str, Any]) -> Fraction | None:
        text = self.frame_text(config, values)
        return duration(text, "frame") if text else None


def _plain(value: Any) -> str:
    # An option's float (20.0, 2.5) as the exact decimal it was written as.
    return format(Decimal(str(value)).normalize(), "f")


def duration(text: str, what: str) -> Fraction:
    """`20 ms`, `2.5 ms`, `320/24000 s` as an exact number of seconds; RegistryError naming `what`."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise RegistryError(f"{what} {text!r} is not a duration such as '20 ms' or '320/24000 s'")
    value = Fraction(Decimal(found["number"])) / int(found["denominator"] or 1)
    value /= 1000 if found["unit"] == "ms" else 1
    if value <= 0:
        raise RegistryError(f"{what} {text!r} is not above 0")
    return value


def parse_channel_support(raw: Any, where: str, configs: tuple[str, ...], names: set[str]) -> ChannelSupport:
    """The `[channel]` table, strictly; `names` are the placeholders a frame may use (options, and a
    command-line family's configuration values)."""
    table = Table(raw, where)
    concealment = table.get("concealment", str)
    if concealment not in CONCEALMENT:
        raise table.fail("concealment", f"must be one of {', '.join(CONCEALMENT)}")
    frame = table.get("frame", str, "")
    config_frames = table.get("config_frames", dict, {})
    for config, text in [("", frame), *config_frames.items()]:
        if config and config not in configs:
            raise table.fail("config_frames", f"names {config!r}, which is not one of configs")
        if not isinstance(text, str):
            raise table.fail("config_frames", f"{config}: must be a duration text")
        unknown = [n for n in _PLACEHOLDER.findall(text) if n not in names]
        if unknown:
            raise table.fail("frame", f"{text!r} names {unknown[0]!r}, which is no option or configuration value")
        if text and not _PLACEHOLDER.search(text):
            try:
                duration(text, "frame")
            except RegistryError as exc:
                raise table.fail("frame", str(exc).removeprefix("frame ")) from None
    if config_frames and not frame:
        raise table.fail("config_frames", "needs frame, the duration of the other configurations")
    policies = table.strings("policies", DEFAULT_POLICIES if concealment == "arena" else ())
    if concealment == "codec" and policies:
        raise table.fail("policies", "are the arena's: a codec that conceals itself offers none")
    if concealment == "arena" and (not policies or any(p not in ARENA_POLICIES for p in policies)):
        raise table.fail("policies", f"must be a non-empty list of {', '.join(ARENA_POLICIES)}")
    library = None
    if table.has("library"):
        lib = Table(table.get("library", dict), f"{where}: library")
        library = ChannelLibrary(file=lib.get("file", str), package=lib.get("package", str))
        lib.done()
        if "/" in library.file or not library.file:
            raise table.fail("library", f"file {library.file!r} must be a file name, not a path")
    tokens = table.get("tokens", bool, False)
    if tokens and (concealment != "arena" or any(p not in ("repeat", "zero") for p in policies)):
        raise table.fail("tokens", "the arena's token policy is arena concealment with policies repeat and zero")
    support = ChannelSupport(concealment=concealment, description=table.get("description", str), frame=frame,
                             config_frames=tuple(sorted(config_frames.items())), policies=policies, library=library,
                             tokens=tokens)
    table.done()
    return support
