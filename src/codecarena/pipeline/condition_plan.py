"""What a run's conditions need before any row: the sets they draw from, loaded and pinned; every
condition checked against the evaluation set (enough other speakers for each babble, a room for each
RT60, each set named by a --noise-dir or --rir-dir); and which set file a row draws, which the run copies
before its rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from codecarena.conditions import noise as noises
from codecarena.conditions import reverb
from codecarena.conditions.sets import KINDS, OPTION, FileSet, SetError, load
from codecarena.conditions.spec import Condition, ConditionError
from codecarena.specs import CodecSpec


def load_sets(folders: dict[str, Sequence[str]], longest: int) -> tuple[list[FileSet], list[tuple[str, str, Path]]]:
    """Every --noise-dir and --rir-dir set, checked file by file (SetError in one line)."""
    found: list[FileSet] = []
    where: list[tuple[str, str, Path]] = []
    for kind in KINDS:
        for text in folders.get(kind, ()):
            loaded, folder = load(kind, text, longest if kind == "noise" else 1)
            if any((s.kind, s.name) == (kind, loaded.name) for s in found):
                raise SetError(f"{OPTION[kind]} {text}: a second {kind} set named {loaded.name!r}")
            found.append(loaded)
            where.append((kind, loaded.name, folder))
    return found, where


def _set_of(condition: Condition) -> tuple[str, str] | None:
    if condition.model == "noise" and condition.noise not in ("white", "pink", "brown", "babble"):
        return "noise", condition.noise
    if condition.model == "rir":
        return "rir", condition.rir
    return None


def check(specs: Iterable[CodecSpec], utterances: Sequence[noises.Source], sets: Sequence[FileSet]) -> None:
    """Every condition of the run can be made for every utterance (ConditionError, one line, when not);
    every set given is used by a condition."""
    used: set[tuple[str, str]] = set()
    seen: set[str] = set()
    for spec in specs:
        condition = spec.conditioned
        if condition is None or condition.canonical in seen:
            continue
        seen.add(condition.canonical)
        wanted = _set_of(condition)
        if wanted is not None:
            if not any((s.kind, s.name) == wanted for s in sets):
                given = ", ".join(s.name for s in sets if s.kind == wanted[0]) or "none"
                raise ConditionError(f"condition {condition.canonical!r}: no {OPTION[wanted[0]]} names a set "
                                     f"{wanted[1]!r} (sets given: {given})")
            used.add(wanted)
        if condition.model == "noise" and condition.noise == "babble":
            assert condition.talkers is not None
            for source in utterances:
                try:
                    noises.talkers(source.utterance, source.speaker, utterances, condition.talkers, condition.seed)
                except noises.BabbleError as exc:
                    raise ConditionError(f"condition {condition.canonical!r}: {exc}") from None
        if condition.model == "rt60":
            assert condition.rt60 is not None
            try:
                reverb.draw_room(float(condition.rt60), condition.seed,
                                 tuple(float(d) for d in condition.room) if condition.room else None)  # type: ignore[arg-type]
            except reverb.RoomError as exc:
                raise ConditionError(f"condition {condition.canonical!r}: {exc}") from None
            try:
                import pyroomacoustics  # noqa: F401
            except ImportError:
                raise ConditionError(f"condition {condition.canonical!r}: needs pyroomacoustics "
                                     "(pip install pyroomacoustics)") from None
    unused = [s for s in sets if (s.kind, s.name) not in used]
    if unused:
        raise ConditionError(f"{OPTION[unused[0].kind]} {unused[0].name}: no condition uses this set "
                             f"(name it in one: {'noise' if unused[0].kind == 'noise' else 'rir'}={unused[0].name})")


def used_files(spec: CodecSpec, utterance: str, samples: int, sets: Sequence[FileSet]) -> list[tuple[str, str, str]]:
    """(kind, set, file) of the set file a row of this configuration and utterance draws."""
    condition = spec.conditioned
    wanted = _set_of(condition) if condition is not None else None
    if condition is None or wanted is None:
        return []
    found = next(s for s in sets if (s.kind, s.name) == wanted)
    if wanted[0] == "noise":
        index, _ = noises.pick_file([f.name for f in found.files], [f.samples for f in found.files],
                                    condition.seed, found.name, utterance, samples)
    else:
        index = reverb.pick_rir(found.name, condition.seed, utterance, len(found.files))
    return [(found.kind, found.name, found.files[index].name)]
