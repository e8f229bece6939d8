"""A listening test as `listening/<test>/test.json` holds it: frozen, versioned, parsed strictly.

The test names its runs (by path relative to the run that holds it, and by plan sha256), its
conditions (the hidden reference, the two low-pass anchors and the codec configurations of a MUSHRA
test; the two configurations of an A/B test), its trials (one utterance each, every stimulus by the
sha256 of its bytes), the training trial, where each stimulus's bytes are, the anchors' recipe and
the screening rule. `test_sha256` is the sha256 of everything else: every rating line names it, so
a rating can only ever belong to the exact test it was given in.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from codecarena.files import JSONFileError, read_json, sha256_file, sha256_json, write_json
from codecarena.results.schema import SchemaError, from_dict
from codecarena.rundir import RunDir, unsafe_id_reason

TEST_VERSION = 1
KINDS = ("mushra", "ab")
ROLES = ("hidden_reference", "anchor", "codec")
FILE_KINDS = ("reference", "decoded", "anchor")
SHA256 = re.compile(r"[0-9a-f]{64}")
HIDDEN_REFERENCE = "ref"
# BS.1534-3's two low-pass anchors: the low anchor (3.5 kHz) and the mid anchor (7 kHz), which the
# post-screening rule reads.
LOW_ANCHOR, MID_ANCHOR = "lp3500", "lp7000"


class ListeningError(ValueError):
    """A listening test that cannot be built, read or used as asked; the message is one line."""


@dataclass(frozen=True)
class TestRun:
    label: str
    path: str  # relative to the folder of the run holding the test ("." for that run itself)
    plan_sha256: str


@dataclass(frozen=True)
class Condition:
    id: str
    role: str  # hidden_reference, anchor or codec
    label: str  # what results call it (never shown to a listener)
    run: int | None  # a codec condition's run (index into `runs`)
    codec: str | None  # a codec condition's configuration
    cutoff_hz: int | None  # an anchor's cut-off


@dataclass(frozen=True)
class Trial:
    id: str
    utterance: str
    language: str
    duration_s: float
    reference: str  # sha256 of the open reference
    stimuli: dict[str, str]  # condition id -> sha256 of the stimulus played for it


@dataclass(frozen=True)
class StoredFile:
    sha256: str
    kind: str  # reference, decoded or anchor
    run: int  # the run folder the file is in (index into `runs`)
    path: str  # run-relative, as rows store paths
    level_db: float  # RMS level over the file, dB relative to full scale (BS.1534-3 asks for aligned levels)


@dataclass(frozen=True)
class Screening:
    rule: str
    hidden_reference_below: int
    anchor: str  # the condition id of the mid anchor
    anchor_above: int
    max_fraction: float  # a listener is excluded past this fraction of trials


@dataclass(frozen=True)
class ListeningTest:
    version: int
    name: str
    kind: str
    created_at: str
    codecarena: str
    seed: int  # every listener's orders derive from it (design.py)
    runs: list[TestRun]
    conditions: list[Condition]
    trials: list[Trial]
    training: Trial  # played, not rated, before the first trial
    files: list[StoredFile]
    anchors: dict[str, Any] | None  # the recipe and the filter taps' hashes (MUSHRA), None for A/B
    screening: Screening | None  # MUSHRA's post-screening rule, None for A/B
    no_preference: bool  # A/B: whether "no preference" may be answered
    test_sha256: str

    @property
    def condition_ids(self) -> list[str]:
        return [c.id for c in self.conditions]

    def condition(self, cid: str) -> Condition:
        return next(c for c in self.conditions if c.id == cid)

    def trial(self, tid: str) -> Trial | None:
        return next((t for t in self.trials if t.id == tid), None)

    def file(self, sha256: str) -> StoredFile | None:
        return next((f for f in self.files if f.sha256 == sha256), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def content_sha256(self) -> str:
        data = self.to_dict()
        del data["test_sha256"]
        return sha256_json(data)

    def sealed(self) -> ListeningTest:
        return replace(self, test_sha256=self.content_sha256)


def _problem(test: ListeningTest) -> str:
    """What makes a parsed test unusable ("" when nothing does)."""
    if test.version != TEST_VERSION:
        return f"version {test.version}, expected {TEST_VERSION}"
    if test.kind not in KINDS:
        return f"kind {test.kind!r} is not one of {', '.join(KINDS)}"
    for name, what in ((test.name, "test name"), *((t.id, "trial id") for t in [*test.trials, test.training]),
                       *((c.id, "condition id") for c in test.conditions),
                       *((t.utterance, "utterance id") for t in [*test.trials, test.training])):
        if unsafe_id_reason(name):
            return f"{what} {unsafe_id_reason(name)}"
    ids = test.condition_ids
    if len(set(ids)) != len(ids) or len({t.id for t in test.trials}) != len(test.trials) or not test.trials:
        return "condition and trial ids must be unique, and there must be a trial"
    for c in test.conditions:
        if c.role not in ROLES:
            return f"condition {c.id}: role {c.role!r} is not one of {', '.join(ROLES)}"
        if (c.role == "codec") != (c.run is not None and c.codec is not None) or \
                (c.run is not None and not 0 <= c.run < len(test.runs)):
            return f"condition {c.id}: a codec condition names its run and configuration, no other does"
    known = {f.sha256 for f in test.files}
    for trial in [*test.trials, test.training]:
        if set(trial.stimuli) != set(ids):
            return f"trial {trial.id}: its stimuli are not one per condition"
        for sha in [trial.reference, *trial.stimuli.values()]:
            if not (isinstance(sha, str) and SHA256.fullmatch(sha) and sha in known):
                return f"trial {trial.id}: stimulus {str(sha)[:70]!r} is not a sha256 of a file the test names"
    for f in test.files:
        if f.kind not in FILE_KINDS or not 0 <= f.run < len(test.runs) or not SHA256.fullmatch(f.sha256):
            return f"file {f.path!r}: kind, run or sha256 is not valid"
    if (test.kind == "mushra") != (test.screening is not None and test.anchors is not None):
        return "a MUSHRA test, and only one, has anchors and a screening rule"
    return ""


def parse_test(data: Any, where: str) -> ListeningTest:
    """The test in `data`; ListeningError naming `where` when it is not one or its digest is wrong."""
    try:
        test = from_dict(ListeningTest, data, "test")
    except SchemaError as exc:
        raise ListeningError(f"{where}: not a listening test ({exc})") from None
    problem = _problem(test)
    if problem:
        raise ListeningError(f"{where}: {problem}")
    if test.test_sha256 != test.content_sha256:
        raise ListeningError(f"{where}: test_sha256 is not the sha256 of its content (was it edited after it was "
                             "built?)")
    return test


def test_names(run: RunDir) -> list[str]:
    """The names of the listening tests a run holds, sorted."""
    folder = run.listening()
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / "test.json").is_file())


def load_test(run: RunDir, name: str) -> ListeningTest:
    path = run.listening_file(name, "test.json")
    try:
        data = read_json(path)
    except JSONFileError as exc:
        raise ListeningError(str(exc)) from None
    test = parse_test(data, str(path))
    if test.name != name:
        raise ListeningError(f"{path}: names test {test.name!r}, in the folder of {name!r}")
    return test


def save_test(run: RunDir, test: ListeningTest) -> Path:
    path = run.listening_file(test.name, "test.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, test.to_dict())
    return path


def run_folder(home: RunDir, test_run: TestRun) -> Path:
    """The folder of one of the test's runs, from the run holding the test."""
    return home.root if test_run.path == "." else (home.root / test_run.path).resolve()


def stimulus_paths(home: RunDir, test: ListeningTest) -> dict[str, Path]:
    """sha256 -> where the bytes of each stimulus the test names are (inside the run that holds them)."""
    folders = [RunDir(run_folder(home, r)) for r in test.runs]
    return {f.sha256: folders[f.run].resolve(f.path) for f in test.files}


def stimulus_problems(paths: dict[str, Path]) -> list[str]:
    """Every stimulus file that is missing or whose bytes no longer hash to the sha256 the test names."""
    problems = []
    for sha, path in paths.items():
        if not path.is_file():
            problems.append(f"{path}: stimulus {sha[:12]} is missing")
        elif sha256_file(path) != sha:
            problems.append(f"{path}: no longer hashes to {sha[:12]}, the stimulus the test's ratings are tied to")
    return problems
