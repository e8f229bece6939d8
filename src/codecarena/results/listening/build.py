"""Building a listening test from one or more runs of one evaluation set.

Conditions: the codec configurations asked for (`SPEC`, or `RUN/SPEC` for one run's; default every
configuration of every run), plus, for MUSHRA, the hidden reference and the two low-pass anchors.
Trials: the utterances asked for, or a sample of those every condition has a clean row for (no
failure, no failed check, no differing replay), taken in turn per language from the test's seed. Each
stimulus is a file the runs already hold (a reference, a decoded file), its bytes hashed now and
checked against its row, or an anchor made here. A test already built under the same name is used as
it is when the same design is asked for again, and refused otherwise: its ratings belong to its bytes.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import codecarena
from codecarena.files import sha256_file
from codecarena.results.listening import anchors
from codecarena.results.listening.definition import (HIDDEN_REFERENCE, LOW_ANCHOR, MID_ANCHOR, TEST_VERSION, Condition,
                                             ListeningError, ListeningTest, StoredFile, TestRun, Trial)
from codecarena.results.listening.design import sample_utterances
from codecarena.results.listening.screening import bs1534_rule
from codecarena.results.run import Run
from codecarena.results.schema import Row
from codecarena.results.verdict import verdict
from codecarena.rundir import UnsafePathError

DEFAULT_TRIALS = 10
# Stimuli rated in one MUSHRA trial, the hidden reference and both anchors included: more tires a
# listener past what the Recommendation's sessions assume (docs/listening.md).
MAX_RATED = 12
TRAINING = "training"


@dataclass(frozen=True)
class Design:
    name: str
    kind: str  # mushra or ab
    codecs: tuple[str, ...]  # SPEC or RUN/SPEC; for ab exactly two
    utterances: tuple[str, ...]  # () for the default sample
    trials: int
    seed: int | None  # None: drawn, and recorded
    training: str | None
    no_preference: bool


def run_labels(runs: list[Run]) -> list[str]:
    names = [run.dir.root.name for run in runs]
    return [name if names.count(name) == 1 else f"{name}#{i + 1}" for i, name in enumerate(names)]


def _conditions(runs: list[Run], labels: list[str], design: Design) -> list[tuple[int, str]]:
    available = [(i, codec) for i, run in enumerate(runs) for codec in run.codecs()]
    if not design.codecs:
        return available
    chosen: list[tuple[int, str]] = []
    for wanted in design.codecs:
        label, _, spec = wanted.rpartition("/")
        found = [(i, c) for i, c in available if c == spec and label in ("", labels[i])]
        if not found:
            raise ListeningError(f"{wanted}: no run of the test has this configuration (configurations: "
                                 f"{', '.join(f'{labels[i]}/{c}' for i, c in available)})")
        if design.kind == "ab" and len(found) > 1:
            raise ListeningError(f"{wanted}: several runs have it; name one as RUN/SPEC ({', '.join(labels)})")
        chosen += [f for f in found if f not in chosen]
    return chosen


def _problem(row: Row | None) -> str:
    """Why a row cannot give a stimulus ("" when it can)."""
    if row is None:
        return "no row"
    said = verdict(row)
    if said.kind:
        return f"{said.status}: {said.reason}"
    return "" if row.decoded else "no decoded audio"


def _usable(runs: list[Run], conditions: list[tuple[int, str]], utterance: str) -> str:
    for i, codec in conditions:
        why = _problem(runs[i].by_codec.get(codec, {}).get(utterance))
        if why:
            return f"{codec}: {why}"
    return ""


def _utterances(runs: list[Run], conditions: list[tuple[int, str]], design: Design, seed: int) -> list[str]:
    planned = [u for u, _ in runs[0].utterances()]
    if design.utterances:
        for u in design.utterances:
            if u not in planned:
                raise ListeningError(f"--utterance {u}: not an utterance of the runs' evaluation set")
            why = _usable(runs, conditions, u)
            if why:
                raise ListeningError(f"--utterance {u}: {why}")
        return [u for u in planned if u in design.utterances]
    usable = [u for u in planned if not _usable(runs, conditions, u)]
    if not usable:
        raise ListeningError(f"no utterance has a clean row for every condition ({planned[0]}: "
                             f"{_usable(runs, conditions, planned[0])}; the run's failures say more)")
    first = runs[conditions[0][0]].by_codec[conditions[0][1]]
    return sample_utterances([(u, first[u].language) for u in usable], design.trials, seed)


class _Files:
    """The stimuli's files, each hashed once and checked against what its row says."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs
        self.files: dict[str, StoredFile] = {}

    def stored(self, run: int, relative: str, kind: str, expected: str) -> str:
        try:
            path = self.runs[run].dir.resolve(relative)
        except UnsafePathError as exc:
            raise ListeningError(str(exc)) from None
        if not path.is_file():
            raise ListeningError(f"{path}: missing (run `codecarena audit` on {self.runs[run].path})")
        sha = sha256_file(path)
        if sha != expected:
            raise ListeningError(f"{path}: its bytes hash to {sha[:12]}, its row says {expected[:12]} "
                                 f"(run `codecarena audit` on {self.runs[run].path})")
        if sha not in self.files:
            self.files[sha] = StoredFile(sha, kind, run, relative, anchors.level_db(anchors.read_mono16(path)[0]))
        return sha

    def anchor(self, test: str, reference: Path, utterance: str, cutoff: int, made: dict[Path, bytes]) -> str:
        import hashlib

        data, level = anchors.anchor_wav(reference, cutoff)
        dest = self.runs[0].dir.anchor(test, utterance, cutoff)
        sha = hashlib.sha256(data).hexdigest()
        made[dest] = data
        self.files.setdefault(sha, StoredFile(sha, "anchor", 0, self.runs[0].dir.relative(dest), level))
        return sha


def _trial(tid: str, utterance: str, runs: list[Run], conditions: list[tuple[int, str]], files: _Files,
           design: Design, made: dict[Path, bytes]) -> Trial:
    rows = [runs[i].by_codec[codec][utterance] for i, codec in conditions]
    if len({r.reference_sha256 for r in rows}) != 1:
        raise ListeningError(f"utterance {utterance}: the runs' references differ ({', '.join(sorted({r.reference_sha256[:12] for r in rows}))}); "
                             "a test plays one reference")
    first = rows[0]
    run0 = conditions[0][0]
    reference = files.stored(run0, first.reference, "reference", first.reference_sha256)
    stimuli: dict[str, str] = {}
    if design.kind == "mushra":
        ref_path = runs[run0].dir.resolve(first.reference)
        stimuli[HIDDEN_REFERENCE] = reference
        stimuli[MID_ANCHOR] = files.anchor(design.name, ref_path, utterance, 7000, made)
        stimuli[LOW_ANCHOR] = files.anchor(design.name, ref_path, utterance, 3500, made)
    for n, ((i, _), row) in enumerate(zip(conditions, rows), start=1):
        stimuli[f"c{n}"] = files.stored(i, row.decoded or "", "decoded", row.decoded_sha256 or "")
    return Trial(tid, utterance, first.language, float(first.duration_s), reference, stimuli)


def build(runs: list[Run], design: Design) -> tuple[ListeningTest, dict[Path, bytes]]:
    """The test `design` asks for over `runs` (the first holds it), and the anchor files to write
    (path -> bytes); nothing is written here."""
    home = runs[0]
    for run in runs[1:]:
        if (run.plan.set, run.plan.manifest_sha256) != (home.plan.set, home.plan.manifest_sha256):
            raise ListeningError(f"{run.path}: evaluation set {run.plan.set} ({run.plan.manifest_sha256[:12]}) is not "
                                 f"{home.plan.set} ({home.plan.manifest_sha256[:12]}) of {home.path}: runs on different "
                                 "evaluation sets cannot be mixed into one test")
    labels = run_labels(runs)
    conditions = _conditions(runs, labels, design)
    if design.kind == "ab" and len(conditions) != 2:
        raise ListeningError(f"an A/B test compares two configurations; {len(conditions)} were named")
    if not conditions:
        raise ListeningError("the runs hold no codec configuration to test")
    if design.kind == "mushra" and len(conditions) + 3 > MAX_RATED:
        raise ListeningError(f"{len(conditions)} configurations and the hidden reference and two anchors make "
                             f"{len(conditions) + 3} stimuli a trial; at most {MAX_RATED} (choose with --codec)")
    seed = design.seed if design.seed is not None else secrets.randbits(32)
    chosen = _utterances(runs, conditions, design, seed)
    training = design.training or next((u for u, _ in home.utterances() if u not in chosen and
                                        not _usable(runs, conditions, u)), chosen[0])
    if design.training and _usable(runs, conditions, design.training):
        raise ListeningError(f"--training {design.training}: {_usable(runs, conditions, design.training)}")
    files, made = _Files(runs), {}
    trials = [_trial(f"t{n:02d}", u, runs, conditions, files, design, made) for n, u in enumerate(chosen, start=1)]
    codec_conditions = [Condition(f"c{n}", "codec", codec if [c for _, c in conditions].count(codec) == 1
                                  else f"{codec} [{labels[i]}]", i, codec, None)
                        for n, (i, codec) in enumerate(conditions, start=1)]
    fixed = ([Condition(HIDDEN_REFERENCE, "hidden_reference", "hidden reference", None, None, None),
              Condition(MID_ANCHOR, "anchor", "anchor 7 kHz low-pass", None, None, 7000),
              Condition(LOW_ANCHOR, "anchor", "anchor 3.5 kHz low-pass", None, None, 3500)]
             if design.kind == "mushra" else [])
    rate = runs[conditions[0][0]].by_codec[conditions[0][1]][chosen[0]].sample_rate
    test = ListeningTest(
        version=TEST_VERSION, name=design.name, kind=design.kind,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), codecarena=codecarena.__version__,
        seed=seed, runs=[TestRun(label, os.path.relpath(run.dir.root, home.dir.root), run.plan.sha256)
                         for label, run in zip(labels, runs)],
        conditions=fixed + codec_conditions, trials=trials,
        training=_trial(TRAINING, training, runs, conditions, files, design, made),
        files=list(files.files.values()), anchors=anchors.recipe(rate) if design.kind == "mushra" else None,
        screening=bs1534_rule() if design.kind == "mushra" else None,
        no_preference=design.no_preference, test_sha256="")
    return test.sealed(), made


# What makes two builds the same test: not when or by which version it was built, nor the library
# versions in the anchors' recipe (the anchors' own hashes are in `files` and the trials).
_NOT_DESIGN = ("created_at", "codecarena", "test_sha256", "anchors")


def design_differences(built: ListeningTest, asked: ListeningTest) -> list[str]:
    """The fields in which the test asked for (with the built test's seed) differs from the one built."""
    a, b = built.to_dict(), asked.to_dict()
    return [key for key in a if key not in _NOT_DESIGN and a[key] != b[key]]
