"""What codec specs the harness accepts, declared as data: the catalog of built-in family units.

A family is one unit, a folder `codecs/<name>/` holding `codec.toml` (this declaration: configs,
options, defaults, which weights it takes), `adapter.py` (the Adapter its workers run),
`registry.toml` (its pins) and, when it runs in its own runtime, `lock.txt`. The harness must never
import a codec's own dependencies, so it reads only the declaration, as data; the adapter module is
imported inside a worker process only. Adding a built-in family is a new unit folder plus its name in
`BUILTIN` (docs/architecture.md).

A command-line family (`kind = "command"`) has no adapter of its own: its `[command]` table declares
the encode and decode commands, the binaries they run and how the tool frames its bitstream, and the
one shared adapter `codecarena.codecs.command` runs them (docs/plugins.md, "Command-line codecs").

Long because it is the strict parser of the whole declaration format (`codec.toml` with its
`[[options]]` and `[command]` tables; the `[channel]` table's parser is registry/channel_support.py),
each key checked where it is read, and the catalog built from it.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from codecarena.registry import user_units
from codecarena.registry.channel_support import ChannelSupport, parse_channel_support
from codecarena.registry.claims import Claim, VariableRate, parse_claims, parse_variable_rate
from codecarena.registry.libraries import Library
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


#: The one adapter every command-line family's workers run.
COMMAND_MODULE = "codecarena.codecs.command"
#: How a command-line tool frames its bitstream; `codecarena.framing` parses each.
FRAMINGS = ("raw", "gsm_toast", "lc3_file", "ogg_speex")
#: A command-line codec's declared bandwidth and the sample rate its tools run at.
BANDWIDTHS = {"narrowband": 8000, "wideband": 16000, "super_wideband": 32000, "fullband": 48000}
#: How the worker writes the encoder's input and reads the decoder's output: a PCM16 wav, or raw
#: signed 16-bit little-endian samples at the declared rate.
AUDIO_FORMATS = ("wav", "s16le")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: How a program of a command-line family is pinned: the one rule every refusal about it states.
BINARY_PIN_RULE = ("a built-in unit pins a program by its Debian package, whose version its registry entry pins; "
                   "your own codec names no package: `codec add` pins the program by the sha256 it takes of the "
                   "file, and a sha256 your declaration gives must be that one")
_FILE_PLACEHOLDERS = ("input", "output")


@dataclass(frozen=True)
class Binary:
    """A program a command-line family runs, named in its commands as `{name}` (always argv[0])."""
    name: str
    path: str  # absolute; resolved (links followed) when its identity is taken
    # The Debian package that ships it: dpkg must own the file, with the version the registry entry pins.
    package: str = ""
    sha256: str = ""  # the file's own pin (a user's command-line codec is pinned so at `codec add`)


@dataclass(frozen=True)
class CommandConfig:
    values: tuple[tuple[str, str], ...]  # placeholder -> the text it stands for in this configuration
    nominal_bps: int | None  # the standard rate this configuration claims (recorded beside the measured one)


@dataclass(frozen=True)
class Command:
    """The `[command]` table of a command-line family's declaration."""
    bandwidth: str  # a key of BANDWIDTHS
    sample_rate: int  # BANDWIDTHS[bandwidth]: the worker resamples to it and back (soxr)
    audio: str  # one of AUDIO_FORMATS
    framing: str  # one of FRAMINGS
    # The bitstream file's name is "bitstream" + this (toast -d looks for NAME.gsm; "" = no suffix).
    suffix: str
    encode: tuple[str, ...]  # argv, with {input} (audio) and {output} (bitstream) unless encode_stdout
    decode: tuple[str, ...]  # argv, with {input} (bitstream) and {output} (audio) unless decode_stdout
    encode_stdout: bool  # the bitstream is what the encoder writes to its standard output
    decode_stdout: bool  # the decoded audio is what the decoder writes to its standard output
    length_tolerance: int  # samples at sample_rate the decoded length may differ from the input's
    binaries: tuple[Binary, ...]
    configs: tuple[tuple[str, CommandConfig], ...]
    # The shared libraries its programs load, pinned by `codec add` (registry/libraries.py); None for a
    # built-in unit, whose registry entry pins them by Debian package version.
    libraries: tuple[Library, ...] | None = None

    def program(self, which: str) -> Binary:
        """The binary the encode or decode command runs (its argv[0])."""
        template = self.encode if which == "encode" else self.decode
        return next(b for b in self.binaries if f"{{{b.name}}}" == template[0])

    def config(self, name: str) -> CommandConfig:
        return dict(self.configs)[name]

    def argv(self, which: str, config: str, options: dict[str, Any], input: str, output: str) -> list[str]:
        """The encode or decode argv of one configuration: every placeholder replaced, argv[0] the
        binary's path (the catalog has checked that every placeholder has a value)."""
        values = {**{b.name: b.path for b in self.binaries}, **{k: str(v) for k, v in options.items()},
                  **dict(self.config(config).values), "input": input, "output": output}
        template = self.encode if which == "encode" else self.decode
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], token) for token in template]


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
    # Its adapter is a codecarena.plugin.torch.TorchAdapter: it runs on --device (the others on the CPU).
    torch: bool = False
    # The decoder carries hidden process-wide state (libcodec2's own PRNG), so a decode equals a
    # fresh decoder's only in a fresh process: warm mode still decodes such a family cold.
    fresh_process_decode: bool = False
    # "python" (its own adapter module) or "command" (declared commands run by COMMAND_MODULE).
    kind: str = "python"
    command: Command | None = None  # the `[command]` table, for kind "command" only
    # "builtin" (a unit of this package) or "user" (added with `codecarena codec add`, registry/user_units.py).
    origin: str = "builtin"
    channel: ChannelSupport | None = None  # None: its payloads cannot cross a channel
    # A user codec's claimed bitrates (`[[claims]]`, registry/claims.py); a built-in unit's are in its registry entry.
    claims: tuple[Claim, ...] = ()
    # A user codec's sandbox lets it open sockets (TCP, UDP, unix) only when its declaration says so.
    network: bool = False
    # Its variable-rate mode (`[variable_rate]`): a claim on a configuration in it is a target.
    variable_rate: VariableRate | None = None

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)


#: The built-in units, in the order `codecarena codecs` lists them: the catalog line a new family adds.
BUILTIN = ("opus", "codec2", "pcm", "lyra", "encodec", "dac", "snac", "mimi", "bigcodec", "fish_dac", "xcodec2",
           "wavtokenizer", "g722", "g726", "gsm", "speex", "lc3")

_KINDS: dict[str, type] = {"int": int, "float": float, "str": str}
WEIGHTS = ("none", "real", "real_or_synthetic")
KINDS = ("python", "command")


def parse_declaration(text: str, where: str, module: str, user: bool = False) -> Family:
    """A family declaration (`codec.toml`, format `API_VERSION`), strictly: unknown keys, wrong types,
    a default config that is not a config, an option default outside its own bounds are refused with
    one line naming `where`. `module` is the adapter module the workers import; a command-line
    family's is always COMMAND_MODULE. `user`: a user's declaration, whose programs are pinned as
    BINARY_PIN_RULE says."""
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
    kind = top.get("kind", str, "python")
    if kind not in KINDS:
        raise top.fail("kind", f"must be one of {', '.join(KINDS)}")
    variants = top.strings("variants", ())
    command = None
    if kind == "command":
        # Its configurations are the fixed ones its [command] table spells out, and a tool has no
        # weights or torch model: the keys that say otherwise are refused, not ignored.
        for key, value in (("config_is_bitrate", bitrate), ("variants", variants),
                           ("torch", top.get("torch", bool, False))):
            if value:
                raise top.fail(key, "is not for a command-line family")
        if weights != "none":
            raise top.fail("supported_weights", "must be none for a command-line family")
        command = _command(top.get("command", dict), f"{where}: command", configs, options, user)
        module = COMMAND_MODULE
    elif top.has("command"):
        raise top.fail("command", 'is only for kind = "command"')
    claims = parse_claims(top.get("claims", list, []), f"{where}: claims", None if bitrate else configs,
                          tuple(o.name for o in options))
    family = Family(name=name, module=module, description=top.get("description", str), configs=configs,
                    default_config=default, options=options, config_is_bitrate=bitrate,
                    supported_weights=weights, variants=variants, torch=top.get("torch", bool, False),
                    fresh_process_decode=top.get("fresh_process_decode", bool, False), kind=kind, command=command,
                    channel=parse_channel_support(top.get("channel", dict), f"{where}: channel", configs,
                                                  _placeholder_names(options, command))
                    if top.has("channel") else None,
                    claims=claims, network=top.get("network", bool, False),
                    variable_rate=parse_variable_rate(top.get("variable_rate", dict), f"{where}: variable_rate",
                                                      {o.name: o.choices for o in options})
                    if top.has("variable_rate") else None)
    top.done()
    return family


def _placeholder_names(options: tuple[Option, ...], command: Command | None) -> set[str]:
    """What a `[channel]` frame may name: the options, and a command-line family's configuration values."""
    values = {key for _, config in command.configs for key, _ in config.values} if command else set()
    return {o.name for o in options} | values


def _command(raw: Any, where: str, configs: tuple[str, ...], options: tuple[Option, ...],
             user: bool) -> Command:
    table = Table(raw, where)
    bandwidth = table.get("bandwidth", str)
    if bandwidth not in BANDWIDTHS:
        raise table.fail("bandwidth", f"must be one of {', '.join(BANDWIDTHS)}")
    audio = table.get("audio", str, "wav")
    if audio not in AUDIO_FORMATS:
        raise table.fail("audio", f"must be one of {', '.join(AUDIO_FORMATS)}")
    framing = table.get("framing", str)
    if framing not in FRAMINGS:
        raise table.fail("framing", f"must be one of {', '.join(FRAMINGS)}")
    suffix = table.get("bitstream_suffix", str, "")
    if suffix and not re.fullmatch(r"\.[A-Za-z0-9]{1,16}", suffix):
        raise table.fail("bitstream_suffix", "must be a dot and up to 16 letters or digits, such as .gsm")
    tolerance = table.get("length_tolerance", int)
    if tolerance < 0:
        raise table.fail("length_tolerance", "must be >= 0")
    binaries = tuple(_binary(item, f"{where}.binaries[{i}]", user)
                     for i, item in enumerate(table.get("binaries", list)))
    names = [b.name for b in binaries]
    if not binaries or len(set(names)) != len(names):
        raise table.fail("binaries", "must list at least one binary, each name once")
    reserved = set(_FILE_PLACEHOLDERS) | {o.name for o in options}
    clash = sorted(reserved & set(names))
    if clash:
        raise table.fail("binaries", f"name {clash[0]!r} is also a placeholder for a file or an option")
    per_config = table.get("configs", dict)
    if sorted(per_config) != sorted(configs):
        raise table.fail("configs", f"must have one table for each config ({', '.join(configs)}), "
                                    f"has {', '.join(per_config) or 'none'}")
    parsed = tuple((config, _command_config(per_config[config], f"{where}.configs.{config}", reserved | set(names)))
                   for config in configs)
    command = Command(bandwidth=bandwidth, sample_rate=BANDWIDTHS[bandwidth], audio=audio, framing=framing,
                      suffix=suffix, encode=table.strings("encode"), decode=table.strings("decode"),
                      encode_stdout=table.get("encode_stdout", bool, False),
                      decode_stdout=table.get("decode_stdout", bool, False), length_tolerance=tolerance,
                      binaries=binaries, configs=parsed)
    table.done()
    values = {key for _, c in parsed for key, _ in c.values}
    used: set[str] = set()
    for which, argv, to_stdout in (("encode", command.encode, command.encode_stdout),
                                   ("decode", command.decode, command.decode_stdout)):
        found = _placeholders(table, which, argv, names)
        for needed in ("input",) + (() if to_stdout else ("output",)):
            if needed not in found:
                raise table.fail(which, f"must name the {{{needed}}} file")
        if to_stdout and "output" in found:
            raise table.fail(which, f"names {{output}}, but {which}_stdout says its output is standard output")
        for name in found - set(_FILE_PLACEHOLDERS) - set(names) - {o.name for o in options}:
            missing = [config for config, c in parsed if name not in dict(c.values)]
            if missing:
                raise table.fail(which, f"uses {{{name}}}, which configs.{missing[0]} does not give")
        used |= found
    unused = sorted(values - used)
    if unused:
        raise table.fail("configs", f"value {unused[0]!r} is used by neither command")
    unrun = [name for name in names if name not in used]
    if unrun:
        raise table.fail("binaries", f"{unrun[0]!r} is run by neither command")
    return command


def _placeholders(table: Table, which: str, argv: tuple[str, ...], binaries: list[str]) -> set[str]:
    """The placeholders of one argv, which must start with a declared binary and name binaries only there."""
    if not argv:
        raise table.fail(which, "must not be empty")
    first = _PLACEHOLDER.fullmatch(argv[0])
    if first is None or first.group(1) not in binaries:
        raise table.fail(which, "must start with one of its binaries, as {name} (commands run without a shell)")
    found = {first.group(1)}
    for token in argv[1:]:
        for match in _PLACEHOLDER.finditer(token):
            if match.group(1) in binaries:
                raise table.fail(which, f"names the binary {{{match.group(1)}}} past argv[0]")
            found.add(match.group(1))
        if "{" in _PLACEHOLDER.sub("", token) or "}" in _PLACEHOLDER.sub("", token):
            raise table.fail(which, f"argument {token!r} has a brace that is not a {{placeholder}}")
    return found


def _binary(raw: Any, where: str, user: bool) -> Binary:
    table = Table(raw, where)
    binary = Binary(name=table.get("name", str), path=table.get("path", str), package=table.get("package", str, ""),
                    sha256=table.get("sha256", str, ""))
    table.done()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", binary.name):
        raise table.fail("name", "must be letters, digits and underscores (it is the {name} placeholder)")
    if not binary.path.startswith("/"):
        raise table.fail("path", "must be absolute (nothing is looked up on PATH)")
    if binary.sha256 and not _HEX64.fullmatch(binary.sha256):
        raise table.fail("sha256", "must be 64 lower-case hex digits")
    if binary.package and not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", binary.package):
        raise table.fail("package", "must be a Debian package name")
    if user and binary.package:
        raise table.fail("package", f"is for built-in units ({BINARY_PIN_RULE})")
    if not user and not binary.package and not binary.sha256:
        raise table.fail("package", f"or sha256 must be given ({BINARY_PIN_RULE})")
    return binary


def _command_config(raw: Any, where: str, reserved: set[str]) -> CommandConfig:
    table = Table(raw, where)
    nominal = table.get("nominal_bps", int, None)
    if nominal is not None and nominal <= 0:
        raise table.fail("nominal_bps", "must be positive")
    values = []
    for key in sorted(set(table.data) - {"nominal_bps"}):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or key in reserved:
            raise table.fail(key, "is not a placeholder name a configuration may give")
        values.append((key, table.get(key, str)))
    table.done()
    return CommandConfig(values=tuple(values), nominal_bps=nominal)


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
    """A built-in unit's declaration; a command-line unit has no adapter.py (parse_declaration points it
    at COMMAND_MODULE)."""
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
            family = parse_declaration(unit.declaration, where, "", user=True)
        except RegistryError as exc:
            problems[unit.name] = str(exc)
            continue
        if family.name != unit.name or unit.name in BUILTIN:
            problems[unit.name] = f"{where}: declares {family.name!r}, or takes a built-in family's name"
            continue
        if family.command is not None:
            # A user's programs are pinned by the sha256 `codec add` took, whatever the declaration says.
            pins = dict(unit.binaries)
            binaries = tuple(dataclasses.replace(b, sha256=pins.get(b.name, b.sha256)) for b in family.command.binaries)
            unpinned = [b.name for b in binaries if not b.sha256]
            if unpinned or unit.libraries is None:
                why = (f"binary {unpinned[0]} has no sha256 pin" if unpinned else
                       "added before codecarena pinned the shared libraries its programs load")
                problems[unit.name] = (f"{where}: {why}; add the codec again "
                                       f"(codecarena codec add {unit.name} --declaration FILE)")
                continue
            family = dataclasses.replace(family, command=dataclasses.replace(family.command, binaries=binaries,
                                                                             libraries=unit.libraries))
        found[unit.name] = dataclasses.replace(family, origin="user")
    return found, problems


FAMILIES: dict[str, Family] = {name: _builtin(name) for name in BUILTIN}
_USER, USER_PROBLEMS = _user_families()
FAMILIES.update(_USER)
