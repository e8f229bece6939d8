"""Channel specs: what `--channel` takes and what a configuration's `@CHANNEL` says, parsed strictly.

    loss=R%               independent (Bernoulli) packet loss at rate R percent
    burst=R%,len=B        bursty loss: a two-state Gilbert model with mean loss R percent and mean burst
                          length B packets (the parametrisation of google/lyra's gilbert_model.cc)
    ber=X                 independent bit errors at bit error rate X (e.g. 1e-3)

Each takes `seed=N` (default 0), `policy=repeat|silence|zero` (default repeat): what the arena does for
a lost frame of a codec whose decoder has no concealment of its own (a family declares which it offers),
and `packet=Nms` or `packet=Nframes`: how much of the codec's output one packet carries (default: the
fewest whole frames that last at least 20 ms; channel/packets.py). Rates are kept as exact decimals, so
the canonical text is stable and every probability the models draw against is exact (docs/channel.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from codecarena.choices import ARENA_POLICIES

MODELS = ("loss", "burst", "ber")
POLICIES = ARENA_POLICIES
DEFAULT_POLICY = "repeat"
# Signed, so that a negative value is refused for being out of range, not for not being a number.
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_SCIENTIFIC = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")
_PACKET = re.compile(r"(?P<number>-?\d+(\.\d+)?)(?P<unit>ms|frames?)")


class ChannelError(ValueError):
    """A channel spec that is not accepted; the message names the spec and the problem."""


@dataclass(frozen=True)
class Channel:
    model: str  # one of MODELS
    rate: Decimal  # loss probability (loss, burst) or bit error probability (ber), in [0, 1]
    burst: Decimal | None  # mean burst length in packets (burst only)
    seed: int
    policy: str  # one of POLICIES
    # How much one packet carries: milliseconds (an exact decimal) or a whole number of the codec's frames;
    # None: the default, the fewest whole frames that last at least 20 ms (channel/packets.py).
    packet_ms: Decimal | None = None
    packet_frames: int | None = None

    @property
    def canonical(self) -> str:
        return (self.model_text + ("" if self.policy == DEFAULT_POLICY else f",policy={self.policy}")
                + (f",packet={self.packet_text}" if self.packet_text else ""))

    @property
    def packet_text(self) -> str:
        """`40ms`, `2frames` (`1frame`), or "" for the default packet."""
        if self.packet_ms is not None:
            return f"{_plain(self.packet_ms)}ms"
        if self.packet_frames is not None:
            return f"{self.packet_frames}frame" + ("" if self.packet_frames == 1 else "s")
        return ""

    @property
    def model_text(self) -> str:
        """The canonical text without the policy: what decides which units are lost or flipped."""
        if self.model == "ber":
            text = f"ber={_scientific(self.rate)}"
        else:
            text = f"{self.model}={_plain(self.rate * 100)}%"
        if self.burst is not None:
            text += f",len={_plain(self.burst)}"
        return text + (f",seed={self.seed}" if self.seed else "")

    @property
    def curve(self) -> str:
        """The canonical text with its rate left open ("loss=R%", "burst=R%,len=3", "ber=X"): the
        configurations a quality-against-rate curve joins."""
        rest = self.canonical.partition(",")[2] if "," in self.canonical else ""
        return ("ber=X" if self.model == "ber" else f"{self.model}=R%") + (f",{rest}" if rest else "")

    @property
    def draw_key(self) -> str:
        """What the draws of a row depend on besides its utterance: the model and the seed, not the rate,
        so that a higher rate loses a superset of what a lower one loses (common random numbers)."""
        return f"{self.model},seed={self.seed}"

    def transitions(self) -> tuple[Fraction, Fraction]:
        """A burst channel's (p, r): the probabilities of going from received to lost and back."""
        assert self.burst is not None
        rate, length = Fraction(self.rate), Fraction(self.burst)
        return rate / (length * (1 - rate)), 1 / length

    def parameters(self) -> dict[str, object]:
        """The model's parameters as the row records them (exact decimals as strings)."""
        if self.model == "ber":
            return {"bit_error_rate": str(self.rate)}
        if self.model == "loss":
            return {"loss_rate": str(self.rate)}
        p, r = self.transitions()
        return {"loss_rate": str(self.rate), "mean_burst_packets": str(self.burst),
                "p_received_to_lost": str(p), "r_lost_to_received": str(r),
                "loss_in_good_state": "0", "loss_in_bad_state": "1"}


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f")


def _scientific(value: Decimal) -> str:
    return "0" if value == 0 else format(value.normalize(), "e").replace("e+0", "").replace("e+", "e")


def _decimal(text: str, pattern: re.Pattern[str], spec: str, key: str) -> Decimal:
    if not pattern.fullmatch(text):
        raise ChannelError(f"channel {spec!r}: {key}={text!r} is not a number")
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ChannelError(f"channel {spec!r}: {key}={text!r} is not a number") from None
    return value.copy_abs() if value.is_zero() else value  # -0 is 0, one canonical text


def _percent(text: str, spec: str, key: str) -> Decimal:
    if not text.endswith("%"):
        raise ChannelError(f"channel {spec!r}: {key}={text!r} needs a percent sign, e.g. {key}=5%")
    value = _decimal(text[:-1], _NUMBER, spec, key) / 100
    if value < 0:
        raise ChannelError(f"channel {spec!r}: {key}={text} is below 0%")
    if value > 1:
        raise ChannelError(f"channel {spec!r}: {key}={text} is above 100%")
    return value


def key_values(spec: str, what: str, error: type[ValueError]) -> dict[str, str]:
    """`key=value,key=value` in order (the notation of channels and conditions), or `error` in one line
    naming `what` the spec is, for a part that is not key=value or a key given twice."""
    pairs: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise error(f"{what} {spec!r}: {part!r} is not key=value")
        if key in pairs:
            raise error(f"{what} {spec!r}: {key!r} given twice")
        pairs[key] = value
    return pairs


def parse_channel(text: str) -> Channel:
    """A channel spec (module docstring) -> Channel, or ChannelError in one line."""
    spec = text.strip()
    if not spec:
        raise ChannelError("empty channel spec (expected e.g. loss=5%, burst=10%,len=3 or ber=1e-3)")
    pairs = key_values(spec, "channel", ChannelError)
    model = next(iter(pairs))
    if model not in MODELS:
        raise ChannelError(f"channel {spec!r}: starts with {model!r}, expected one of {', '.join(MODELS)}")
    allowed = {model, "seed", "policy", "packet"} | ({"len"} if model == "burst" else set())
    extra = [k for k in pairs if k not in allowed]
    if extra:
        raise ChannelError(f"channel {spec!r}: unknown key {extra[0]!r} for {model} "
                           f"(keys: {', '.join(sorted(allowed))})")
    seed_text = pairs.get("seed", "0")
    if seed_text.startswith("-") and seed_text[1:].isdigit():
        raise ChannelError(f"channel {spec!r}: seed={seed_text} is below 0")
    if not seed_text.isdigit() or len(seed_text) > 18:
        raise ChannelError(f"channel {spec!r}: seed={seed_text!r} is not a non-negative integer below 10^18")
    policy = pairs.get("policy", DEFAULT_POLICY)
    if policy not in POLICIES:
        raise ChannelError(f"channel {spec!r}: policy={policy!r} is not one of {', '.join(POLICIES)}")
    burst = None
    if model == "ber":
        rate = _decimal(pairs[model], _SCIENTIFIC, spec, model)
        if rate < 0:
            raise ChannelError(f"channel {spec!r}: ber={pairs[model]} is below 0")
        if rate > Decimal("0.5"):
            raise ChannelError(f"channel {spec!r}: ber={pairs[model]} is above 0.5")
    else:
        rate = _percent(pairs[model], spec, model)
    if model == "burst":
        if "len" not in pairs:
            raise ChannelError(f"channel {spec!r}: a burst channel needs len=B, its mean burst length in packets")
        burst = _decimal(pairs["len"], _NUMBER, spec, "len")
        if burst < 1:
            raise ChannelError(f"channel {spec!r}: len={pairs['len']} is below 1 packet")
        if rate >= 1 or Fraction(rate) > Fraction(burst) / (Fraction(burst) + 1):
            raise ChannelError(f"channel {spec!r}: a mean burst of {pairs['len']} packets allows a loss rate of at "
                               f"most len/(len+1) = {float(burst / (burst + 1)):.4g}")
    packet_ms, packet_frames = _packet(pairs["packet"], spec) if "packet" in pairs else (None, None)
    return Channel(model=model, rate=rate, burst=burst, seed=int(seed_text), policy=policy, packet_ms=packet_ms,
                   packet_frames=packet_frames)


def _packet(text: str, spec: str) -> tuple[Decimal | None, int | None]:
    """`packet=40ms` or `packet=2frames`: a positive duration, or a positive whole number of frames."""
    found = _PACKET.fullmatch(text)
    if found is None:
        raise ChannelError(f"channel {spec!r}: packet={text!r} is not a duration in ms or a number of frames "
                           "(e.g. packet=40ms, packet=2frames)")
    value = _decimal(found["number"], _NUMBER, spec, "packet")
    if found["unit"] == "ms":
        if value <= 0:
            raise ChannelError(f"channel {spec!r}: packet={text} is not above 0 ms")
        return value, None
    if value != value.to_integral_value() or value < 1:
        raise ChannelError(f"channel {spec!r}: packet={text} is not a whole number of frames, at least 1")
    return None, int(value)
