"""Condition specs: what `--condition` takes and what a configuration's `%CONDITION` says, parsed strictly.

    noise=white|pink|brown|babble|SET,snr=DB   additive noise at a signal-to-noise ratio over the active
                                             speech level (ITU-T P.56); babble takes talkers=N (default 4),
                                             SET names a folder given with --noise-dir
    rt60=SECONDS[,room=LxWxH]                a room impulse response by the image-source method, the room
                                             (unless given, in metres) drawn from the seed
    rir=SET                                  a measured room impulse response from a folder given with --rir-dir
    level=DB                                 the active speech level set to DB dBov
    tandem=CODEC_SPEC                        the input first coded and decoded by another codec
    gen=K                                    the K-th generation: the codec's own output coded again until
                                             this row's encode is the K-th

noise, rt60 and rir take `seed=N` (default 0). `--condition generations=N` stands for gen=2 ... gen=N.
Numbers are kept as exact decimals, so the canonical text is stable (docs/conditions.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from codecarena.channel.spec import key_values

MODELS = ("noise", "rt60", "rir", "level", "tandem", "gen")
GENERATED_NOISES = ("white", "pink", "brown", "babble")
DEFAULT_TALKERS = 4
# What a curve is drawn against, per model: a model not named here gives points, not a curve.
SWEPT = {"noise": "snr", "rt60": "rt60", "level": "level", "gen": "gen"}
# The ranges a value must lie in (inclusive): a condition outside them is refused before any row.
SNR_DB = (Decimal(-20), Decimal(60))
# An image-source response costs about the cube of its RT60 (1.0 s: some 15 s; 1.5 s: a minute).
RT60_S = (Decimal("0.15"), Decimal("1.2"))
ROOM_M = (Decimal(2), Decimal(20))
LEVEL_DBOV = (Decimal(-60), Decimal(-6))
TALKERS = (1, 16)
GENERATIONS = (2, 20)
MAX_SEED = 10 ** 18
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_SET_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
SET_NAME_RULE = "letters, digits, '.', '_' and '-', not starting with a dot, at most 64 characters"


class ConditionError(ValueError):
    """A condition spec that is not accepted; the message names the spec and the problem."""


@dataclass(frozen=True)
class Condition:
    model: str  # one of MODELS
    noise: str = ""  # noise: white, pink, brown, babble or the name of a --noise-dir set
    snr: Decimal | None = None  # noise: dB
    talkers: int | None = None  # babble: how many other speakers at once
    rt60: Decimal | None = None  # rt60: seconds
    room: tuple[Decimal, Decimal, Decimal] | None = None  # rt60: length, width, height in metres; None: drawn
    rir: str = ""  # rir: the name of a --rir-dir set
    level: Decimal | None = None  # level: dBov
    tandem: str = ""  # tandem: the canonical codec spec of the first codec
    gen: int | None = None  # gen: the generation of this row's encode
    seed: int = 0

    @property
    def canonical(self) -> str:
        return self._text(open_key="")

    @property
    def curve(self) -> str:
        """The canonical text with the swept value left open (`noise=babble,snr=X`, `rt60=X,seed=1`): the
        configurations a quality-against-condition curve joins; "" for a model without one (tandem, rir)."""
        return self._text(open_key=SWEPT[self.model]) if self.model in SWEPT else ""

    @property
    def value(self) -> float | None:
        """The swept value as a number (SNR in dB, RT60 in s, level in dBov, generation); None without one."""
        found = {"noise": self.snr, "rt60": self.rt60, "level": self.level, "gen": self.gen}.get(self.model)
        return float(found) if found is not None else None

    @property
    def signal(self) -> bool:
        """Whether the harness makes the conditioned input itself (noise, reverberation, level), rather
        than codec stages (tandem, generations)."""
        return self.model in ("noise", "rt60", "rir", "level")

    def _text(self, open_key: str) -> str:
        def shown(key: str, value: object) -> str:
            return f"{key}=X" if key == open_key else f"{key}={value}"

        if self.model == "noise":
            parts = [f"noise={self.noise}", shown("snr", _plain(self.snr))]
            if self.noise == "babble" and self.talkers != DEFAULT_TALKERS:
                parts.append(f"talkers={self.talkers}")
        elif self.model == "rt60":
            parts = [shown("rt60", _plain(self.rt60))]
            if self.room is not None:
                parts.append("room=" + "x".join(_plain(d) for d in self.room))
        elif self.model == "rir":
            parts = [f"rir={self.rir}"]
        elif self.model == "level":
            parts = [shown("level", _plain(self.level))]
        elif self.model == "tandem":
            return f"tandem={self.tandem}"
        else:
            return shown("gen", self.gen)
        return ",".join(parts + ([f"seed={self.seed}"] if self.seed else []))

    def parameters(self) -> dict[str, object]:
        """The model's parameters as a trace records them (exact decimals as strings)."""
        if self.model == "noise":
            return {"noise": self.noise, "snr_db": _plain(self.snr),
                    **({"talkers": self.talkers} if self.noise == "babble" else {})}
        if self.model == "rt60":
            return {"rt60_s": _plain(self.rt60),
                    "room_m": [_plain(d) for d in self.room] if self.room is not None else None}
        if self.model == "rir":
            return {"set": self.rir}
        if self.model == "level":
            return {"level_dbov": _plain(self.level)}
        if self.model == "tandem":
            return {"codec": self.tandem}
        return {"generation": self.gen}


def _plain(value: Decimal | None) -> str:
    assert value is not None
    text = format(value.normalize(), "f")
    return "0" if text == "-0" else text


def _decimal(text: str, spec: str, key: str, bounds: tuple[Decimal, Decimal], unit: str) -> Decimal:
    if not _NUMBER.fullmatch(text):
        raise ConditionError(f"condition {spec!r}: {key}={text!r} is not a number")
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ConditionError(f"condition {spec!r}: {key}={text!r} is not a number") from None
    low, high = bounds
    if value < low:
        raise ConditionError(f"condition {spec!r}: {key}={text} is below {_plain(low)} {unit}")
    if value > high:
        raise ConditionError(f"condition {spec!r}: {key}={text} is above {_plain(high)} {unit}")
    return value.copy_abs() if value.is_zero() else value


def _integer(text: str, spec: str, key: str, bounds: tuple[int, int]) -> int:
    if text.startswith("-") and text[1:].isdigit():
        raise ConditionError(f"condition {spec!r}: {key}={text} is below {bounds[0]}")
    if not text.isdigit() or len(text) > 18:
        raise ConditionError(f"condition {spec!r}: {key}={text!r} is not a whole number")
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise ConditionError(f"condition {spec!r}: {key}={text} is outside {bounds[0]}..{bounds[1]}")
    return value


def set_name_problem(name: str) -> str:
    """Why `name` cannot name a --noise-dir or --rir-dir set ("" when it can)."""
    if not _SET_NAME.fullmatch(name):
        return f"{name!r} is not a set name ({SET_NAME_RULE})"
    if name in GENERATED_NOISES:
        return f"{name!r} is a generated noise, not a set name"
    return ""


def parse_condition(text: str, codec: Callable[[str], str] = lambda s: s) -> Condition:
    """A condition spec (module docstring) -> Condition, or ConditionError in one line. `codec` turns the
    codec spec of a tandem condition into its canonical text (or raises ValueError saying why it cannot)."""
    spec = text.strip()
    if not spec:
        raise ConditionError("empty condition spec (expected e.g. noise=babble,snr=5, rt60=0.6, level=-26, "
                             "tandem=opus:12k or gen=3)")
    model = spec.partition("=")[0].strip()
    if model == "tandem":
        return _tandem(spec, codec)
    if model == "generations":
        raise ConditionError(f"condition {spec!r}: generations=N is a --condition shorthand for gen=2 ... gen=N; "
                             "a configuration names one generation (gen=K)")
    pairs = key_values(spec, "condition", ConditionError)
    if model not in MODELS:
        raise ConditionError(f"condition {spec!r}: starts with {model!r}, expected one of {', '.join(MODELS)}")
    allowed = {"noise": {"noise", "snr", "talkers", "seed"}, "rt60": {"rt60", "room", "seed"},
               "rir": {"rir", "seed"}, "level": {"level"}, "gen": {"gen"}}[model]
    if model == "noise" and pairs["noise"] != "babble":
        allowed = allowed - {"talkers"}
    extra = [k for k in pairs if k not in allowed]
    if extra:
        raise ConditionError(f"condition {spec!r}: unknown key {extra[0]!r} for {model} "
                             f"(keys: {', '.join(sorted(allowed))})")
    seed = _integer(pairs.get("seed", "0"), spec, "seed", (0, MAX_SEED - 1))
    if model == "noise":
        name = pairs["noise"]
        if name not in GENERATED_NOISES and set_name_problem(name):
            raise ConditionError(f"condition {spec!r}: noise={name!r} is not white, pink, brown, babble or a "
                                 f"--noise-dir set name ({SET_NAME_RULE})")
        if "snr" not in pairs:
            raise ConditionError(f"condition {spec!r}: a noise condition needs snr=DB")
        talkers = _integer(pairs.get("talkers", str(DEFAULT_TALKERS)), spec, "talkers", TALKERS) \
            if name == "babble" else None
        return Condition("noise", noise=name, snr=_decimal(pairs["snr"], spec, "snr", SNR_DB, "dB"),
                         talkers=talkers, seed=seed)
    if model == "rt60":
        room = _room(pairs["room"], spec) if "room" in pairs else None
        return Condition("rt60", rt60=_decimal(pairs["rt60"], spec, "rt60", RT60_S, "s"), room=room, seed=seed)
    if model == "rir":
        problem = set_name_problem(pairs["rir"])
        if problem:
            raise ConditionError(f"condition {spec!r}: rir={problem}")
        return Condition("rir", rir=pairs["rir"], seed=seed)
    if model == "level":
        return Condition("level", level=_decimal(pairs["level"], spec, "level", LEVEL_DBOV, "dBov"))
    return Condition("gen", gen=_integer(pairs["gen"], spec, "gen", GENERATIONS))


def _room(text: str, spec: str) -> tuple[Decimal, Decimal, Decimal]:
    parts = text.split("x")
    if len(parts) != 3:
        raise ConditionError(f"condition {spec!r}: room={text!r} is not LENGTHxWIDTHxHEIGHT in metres (e.g. 6x4x3)")
    length, width, height = (_decimal(p, spec, "room", ROOM_M, "m") for p in parts)
    return length, width, height


def _tandem(spec: str, codec: Callable[[str], str]) -> Condition:
    inner = spec.partition("=")[2].strip()
    if not inner:
        raise ConditionError(f"condition {spec!r}: tandem needs a codec spec (tandem=opus:12k)")
    if "@" in inner or "%" in inner:
        raise ConditionError(f"condition {spec!r}: a tandem codec is a codec spec, without a channel (@) or a "
                             "condition (%)")
    try:
        canonical = codec(inner)
    except ValueError as exc:
        raise ConditionError(f"condition {spec!r}: {exc}") from None
    return Condition("tandem", tandem=canonical)


def expand(text: str) -> list[str]:
    """What one --condition stands for: itself, or for `generations=N` the generations 2 to N."""
    spec = text.strip()
    key, sep, value = spec.partition("=")
    if key.strip() != "generations":
        return [spec]
    count = _integer(value.strip(), spec, "generations", GENERATIONS) if sep else None
    if count is None:
        raise ConditionError(f"condition {spec!r}: generations needs a number (generations=5)")
    return [f"gen={k}" for k in range(2, count + 1)]
