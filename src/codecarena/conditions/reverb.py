"""Room impulse responses of `rt60=...` conditions: a shoebox room by the image-source method
(J. B. Allen and D. A. Berkley, "Image method for efficiently simulating small-room acoustics", JASA 65,
1979), as pyroomacoustics computes it (docs/conditions.md).

The room is drawn from the condition's seed (not per utterance: one room per condition, as a recording
session has one): its length, width and height (or the `room=` given), the source and the microphone
(0.5 m or more from every wall, 1.2 to 1.8 m high, 1 to 3 m apart) and each wall's share of the
absorption. The absorption is first what Sabine's formula, T = 24 ln(10) V / (c S a), gives for the
RT60 asked; the image-source room with it decays more slowly than Sabine predicts, so the absorption is
then scaled until the RT60 measured on the response (T30: Schroeder's backward integral, a line fitted
from -5 to -35 dB, extrapolated to 60 dB) is within 2% of the one asked (at most 6 rounds). The trace
records the room, the absorption, the measured RT60 and what Sabine's and Eyring's formulas predict.

pyroomacoustics builds the response in float32 with threads; it runs with one thread here, so the sum
is taken in one order and the response re-derives exactly on one machine and library version.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from codecarena.conditions.draws import Draws

SPEED_OF_SOUND = 343.0
ROOM_RANGES_M = ((3.0, 10.0), (3.0, 8.0), (2.5, 4.0))
WALL_MARGIN_M = 0.5
HEIGHT_RANGE_M = (1.2, 1.8)
DISTANCE_RANGE_M = (1.0, 3.0)
# A drawn room is kept when Sabine's absorption for the RT60 lies in this range (else the next is drawn).
ABSORPTION_RANGE = (0.05, 0.6)
MAX_ABSORPTION = 0.99
TOLERANCE = 0.02
ROUNDS = 6
WALLS = ("west", "east", "south", "north", "floor", "ceiling")
_DRAW_ATTEMPTS = 1000


class RoomError(ValueError):
    """A room that cannot give the RT60 asked (one line)."""


@dataclass(frozen=True)
class Room:
    dimensions: tuple[float, float, float]  # metres
    source: tuple[float, float, float]
    microphone: tuple[float, float, float]
    weights: tuple[float, ...]  # each wall's share of the absorption (WALLS order), mean 1 by area

    def areas(self) -> tuple[float, ...]:
        length, width, height = self.dimensions
        return (width * height, width * height, length * height, length * height, length * width, length * width)


@dataclass(frozen=True)
class Response:
    rir: np.ndarray  # float64, from the direct path's filter onwards
    room: Room
    absorption: tuple[float, ...]  # per wall (WALLS order), energy absorption coefficients
    max_order: int
    rt60_measured: float
    rounds: int
    trimmed: int  # samples before the direct path's fractional-delay filter that were cut

    @property
    def sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.rir, dtype="<f8").tobytes()).hexdigest()

    def predictions(self) -> dict[str, float]:
        """RT60 as Sabine's and Eyring's formulas give it for the room and the final absorption."""
        areas = self.room.areas()
        surface = sum(areas)
        mean = sum(a * s for a, s in zip(self.absorption, areas)) / surface
        volume = math.prod(self.room.dimensions)
        coefficient = 24 * math.log(10) / SPEED_OF_SOUND
        return {"sabine_s": coefficient * volume / (surface * mean),
                "eyring_s": coefficient * volume / (-surface * math.log(1 - mean))}


def sabine_absorption(rt60: float, dimensions: tuple[float, float, float]) -> float:
    length, width, height = dimensions
    surface = 2 * (length * width + length * height + width * height)
    return 24 * math.log(10) * length * width * height / (SPEED_OF_SOUND * surface * rt60)


def _between(draws: Draws, index: int, low: float, high: float) -> float:
    return low + (high - low) * draws.uniform(index)


def pick_rir(set_name: str, seed: int, utterance: str, count: int) -> int:
    """Which response of a --rir-dir set (of `count`, in name order) an utterance gets."""
    return Draws(f"rir={set_name},seed={seed}\0{utterance}\0file").below(0, count)


def draw_room(rt60: float, seed: int, given: tuple[float, float, float] | None) -> Room:
    """The room of a condition (module docstring); RoomError when none fits."""
    draws = Draws(f"rt60,seed={seed}\0room")
    index = 0
    dimensions = given
    if dimensions is None:
        for _ in range(_DRAW_ATTEMPTS):
            candidate = tuple(_between(draws, index + k, low, high) for k, (low, high) in enumerate(ROOM_RANGES_M))
            index += 3
            if ABSORPTION_RANGE[0] <= sabine_absorption(rt60, candidate) <= ABSORPTION_RANGE[1]:  # type: ignore[arg-type]
                dimensions = candidate  # type: ignore[assignment]
                break
        else:
            raise RoomError(f"rt60={rt60:g}: no room of {ROOM_RANGES_M} metres gives it with a Sabine absorption "
                            f"in {ABSORPTION_RANGE}")
    assert dimensions is not None
    problem = room_problem(rt60, dimensions)
    if problem:
        raise RoomError(problem)
    for _ in range(_DRAW_ATTEMPTS):
        points = []
        for k in range(2):
            horizontal = [_between(draws, index + 3 * k + d, WALL_MARGIN_M, dimensions[d] - WALL_MARGIN_M)
                          for d in range(2)]
            points.append((*horizontal, _between(draws, index + 3 * k + 2, *HEIGHT_RANGE_M)))
        index += 6
        if DISTANCE_RANGE_M[0] <= math.dist(points[0], points[1]) <= DISTANCE_RANGE_M[1]:
            break
    else:
        raise RoomError(f"room {dimensions}: no source and microphone {DISTANCE_RANGE_M} m apart fit in it")
    raw = [0.6 + 0.8 * draws.uniform(index + k) for k in range(len(WALLS))]
    areas = Room(dimensions, points[0], points[1], tuple(raw)).areas()  # type: ignore[arg-type]
    scale = sum(areas) / sum(w * a for w, a in zip(raw, areas))
    return Room(dimensions, points[0], points[1], tuple(w * scale for w in raw))  # type: ignore[arg-type]


def room_problem(rt60: float, dimensions: tuple[float, float, float]) -> str:
    """Why a room given with room= cannot give the RT60 ("" when it can)."""
    absorption = sabine_absorption(rt60, dimensions)
    if absorption > 0.9:
        return (f"rt60={rt60:g} in a room of {'x'.join(f'{d:g}' for d in dimensions)} m needs a Sabine absorption of "
                f"{absorption:.2f}, more than 0.9: the room is too large for so short a reverberation")
    if absorption < 0.01:
        return (f"rt60={rt60:g} in a room of {'x'.join(f'{d:g}' for d in dimensions)} m needs a Sabine absorption of "
                f"{absorption:.3f}, less than 0.01: the room is too small for so long a reverberation")
    return ""


def _simulate(room: Room, absorption: tuple[float, ...], max_order: int, sample_rate: int) -> np.ndarray:
    import pyroomacoustics as pra

    pra.constants.set("num_threads", 1)
    materials = {wall: pra.Material(a) for wall, a in zip(WALLS, absorption)}
    shoebox = pra.ShoeBox(list(room.dimensions), fs=sample_rate, materials=materials, max_order=max_order,
                          air_absorption=False, use_rand_ism=False)
    shoebox.add_source(list(room.source))
    shoebox.add_microphone(list(room.microphone))
    shoebox.compute_rir()
    return np.asarray(shoebox.rir[0][0], dtype=np.float64)


def measured_rt60(rir: np.ndarray, sample_rate: int) -> float:
    """T30 of a response as pyroomacoustics measures it (Schroeder's integral, -5 to -35 dB, extrapolated)."""
    import pyroomacoustics as pra

    return float(pra.experimental.measure_rt60(rir, fs=sample_rate, decay_db=30))


@functools.lru_cache(maxsize=16)
def response(rt60: Decimal, seed: int, room: tuple[Decimal, Decimal, Decimal] | None, sample_rate: int) -> Response:
    """The condition's impulse response (computed once per process: every utterance shares it)."""
    import pyroomacoustics as pra

    target = float(rt60)
    drawn = draw_room(target, seed, tuple(float(d) for d in room) if room is not None else None)  # type: ignore[arg-type]
    _, max_order = pra.inverse_sabine(target, list(drawn.dimensions), c=SPEED_OF_SOUND)
    mean = sabine_absorption(target, drawn.dimensions)
    rir = np.zeros(0)
    measured = 0.0
    rounds = 0
    tried: list[tuple[float, float]] = []  # (log absorption, log RT60 measured)
    for rounds in range(1, ROUNDS + 1):
        absorption = tuple(min(MAX_ABSORPTION, mean * w) for w in drawn.weights)
        rir = _simulate(drawn, absorption, max_order, sample_rate)
        measured = measured_rt60(rir, sample_rate)
        if abs(measured / target - 1) <= TOLERANCE:
            break
        tried.append((math.log(mean), math.log(measured)))
        # The first correction is Sabine's proportion (RT60 as 1/absorption); then the secant through
        # the last two rounds in log-log, whose slope the image-source room sets.
        slope = -1.0
        if len(tried) > 1 and tried[-1][1] != tried[-2][1]:
            slope = min(-0.2, (tried[-1][1] - tried[-2][1]) / (tried[-1][0] - tried[-2][0]))
        mean = math.exp(tried[-1][0] + (math.log(target) - tried[-1][1]) / slope)
    half = int(pra.constants.get("frac_delay_length")) // 2
    start = max(0, int(np.argmax(np.abs(rir))) - half)
    return Response(rir[start:], drawn, absorption, int(max_order), measured, rounds, start)
