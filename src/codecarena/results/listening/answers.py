"""One answer checked against its test and against what its listener already answered: the one check
the server, the import of a downloaded ratings file and the audit apply.

An answer is refused (AnswerError: an HTTP status and one line) when it is malformed, names another
test, a listener id that is not a safe file name, an unknown trial or a stimulus that is not the
test's, an order of conditions other than the listener's, a rating outside 0-100, a stimulus that was
not played, or a trial that is not the listener's next one (the training comes first; a trial already
answered is a replayed or duplicated submission).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from codecarena.results.listening.definition import ListeningTest, Trial
from codecarena.results.listening.design import listener_plan, listener_seed
from codecarena.results.listening.store import LINE_VERSION, RatingLine
from codecarena.rundir import unsafe_id_reason

SUBMISSION_KEYS = ("test_sha256", "listener", "kind", "trial", "position", "order", "stimuli", "ratings", "choice",
                   "plays", "heard_s", "reference_plays", "started_at", "submitted_at")
# A stimulus counts as played once it was the one playing for this long (or for its whole length, if
# shorter); the page enforces the same before it lets a trial be submitted.
MIN_HEARD_S = 1.0
_HEARD_SLACK = 0.9  # timers of a page and of the audio clock disagree by a few ms
NO_PREFERENCE = "none"


class AnswerError(ValueError):
    """An answer refused: `status` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _malformed(why: str) -> AnswerError:
    return AnswerError(400, f"malformed answer: {why}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mapping(value: Any, name: str, check: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and check(v) for k, v in value.items()):
        raise _malformed(f"{name} must map condition ids to values of its kind")
    return value


def _time(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) > 40:
        raise _malformed(f"{name} must be an ISO 8601 time")
    try:
        dt.datetime.fromisoformat(value)
    except ValueError:
        raise _malformed(f"{name} {value!r} is not an ISO 8601 time") from None
    return value


def _shape(answer: Any) -> None:
    if not isinstance(answer, dict):
        raise _malformed("expected a JSON object")
    missing = [k for k in SUBMISSION_KEYS if k not in answer]
    extra = [k for k in answer if k not in SUBMISSION_KEYS]
    if missing or extra:
        raise _malformed(f"missing keys {missing}, unexpected keys {[str(k)[:40] for k in extra[:5]]}")
    if not isinstance(answer["listener"], str) or unsafe_id_reason(answer["listener"]):
        raise AnswerError(400, f"listener id {unsafe_id_reason(answer['listener'])}")
    if not isinstance(answer["trial"], str) or not isinstance(answer["kind"], str) or \
            not isinstance(answer["test_sha256"], str):
        raise _malformed("test_sha256, kind and trial must be strings")
    if not (answer["position"] is None or _is_int(answer["position"])):
        raise _malformed("position must be an integer or null")
    if not isinstance(answer["order"], list) or not all(isinstance(c, str) for c in answer["order"]):
        raise _malformed("order must be a list of condition ids")
    _mapping(answer["stimuli"], "stimuli", lambda v: isinstance(v, str))
    _mapping(answer["ratings"], "ratings", lambda v: _is_int(v) or isinstance(v, float))
    _mapping(answer["plays"], "plays", _is_int)
    _mapping(answer["heard_s"], "heard_s", lambda v: (_is_int(v) or isinstance(v, float)) and math.isfinite(v))
    if not (answer["choice"] is None or isinstance(answer["choice"], str)):
        raise _malformed("choice must be a condition id or null")
    if not _is_int(answer["reference_plays"]) or answer["reference_plays"] < 0:
        raise _malformed("reference_plays must be a count")
    _time(answer["started_at"], "started_at")
    _time(answer["submitted_at"], "submitted_at")


def _next_trial(test: ListeningTest, answer: dict[str, Any], history: list[RatingLine]) -> tuple[Trial, list[str],
                                                                                                int | None]:
    """The trial the answer is for, the order it must have been shown in and its position."""
    trained = any(line.kind == "training" for line in history)
    if answer["kind"] == "training":
        if trained:
            raise AnswerError(409, f"listener {answer['listener']} has already done the training")
        if answer["trial"] != test.training.id or answer["position"] is not None:
            raise AnswerError(422, f"the training trial is {test.training.id!r}, without a position")
        return test.training, test.condition_ids, None
    trial = test.trial(answer["trial"])
    if trial is None:
        raise AnswerError(422, f"unknown trial {answer['trial'][:70]!r}: the test's trials are "
                               f"{', '.join(t.id for t in test.trials)}")
    if not trained:
        raise AnswerError(409, f"listener {answer['listener']} has not done the training yet: it comes first")
    answered = [line.trial for line in history if line.kind == test.kind]
    if trial.id in answered:
        raise AnswerError(409, f"trial {trial.id} is already answered by listener {answer['listener']} "
                               "(a repeated or duplicated submission); nothing was written")
    plan = listener_plan(test, answer["listener"])
    position = len(answered)
    if position >= len(plan) or plan[position][0] != trial.id or answer["position"] != position:
        raise AnswerError(409, f"trial {trial.id} at position {answer['position']} is not listener "
                               f"{answer['listener']}'s next: that is {plan[position][0]} at position {position}")
    return trial, plan[position][1], position


def _outcome(test: ListeningTest, answer: dict[str, Any], trial: Trial) -> None:
    """The ratings or the choice, and the plays, against the trial's conditions."""
    ids = test.condition_ids
    if answer["kind"] == "mushra":
        if set(answer["ratings"]) != set(ids):
            raise AnswerError(422, f"trial {trial.id}: ratings for {sorted(answer['ratings'])[:20]}, the trial's "
                                   f"stimuli are {sorted(ids)}")
        for cid, value in answer["ratings"].items():
            if not _is_int(value) or not 0 <= value <= 100:
                raise AnswerError(422, f"trial {trial.id}: rating {value!r} for {cid} is not an integer from 0 to 100")
    elif answer["ratings"]:
        raise AnswerError(422, f"a {answer['kind']} answer has no ratings")
    if answer["kind"] == "ab":
        allowed = ids + ([NO_PREFERENCE] if test.no_preference else [])
        if answer["choice"] not in allowed:
            raise AnswerError(422, f"trial {trial.id}: choice {answer['choice']!r} is not one of {', '.join(allowed)}")
    elif answer["choice"] is not None:
        raise AnswerError(422, f"a {answer['kind']} answer has no choice")
    if set(answer["plays"]) != set(ids) or set(answer["heard_s"]) != set(ids):
        raise AnswerError(422, f"trial {trial.id}: plays and heard_s must name every stimulus of the trial")
    needed = min(MIN_HEARD_S, trial.duration_s) * _HEARD_SLACK
    unheard = [cid for cid in ids if answer["plays"][cid] < 1 or answer["heard_s"][cid] < needed]
    if unheard:
        raise AnswerError(422, f"trial {trial.id}: not every stimulus was played (for at least "
                               f"{min(MIN_HEARD_S, trial.duration_s):g} s): {', '.join(unheard)}")


def check_answer(test: ListeningTest, answer: Any, history: list[RatingLine], received_at: str,
                 via: str) -> dict[str, Any]:
    """The rating line's fields (without its hashes) for `answer`, given the listener's `history`;
    AnswerError when it is refused."""
    _shape(answer)
    if answer["test_sha256"] != test.test_sha256:
        raise AnswerError(409, f"the answer is for test {answer['test_sha256'][:12]!r}, not this test "
                               f"({test.test_sha256[:12]}): reload the page")
    if answer["kind"] not in ("training", test.kind):
        raise AnswerError(422, f"kind {answer['kind'][:20]!r}: this is a {test.kind} test")
    if any(line.listener != answer["listener"] or line.test_sha256 != test.test_sha256 for line in history):
        raise AnswerError(409, f"listener {answer['listener']}'s file holds lines of another listener or test")
    trial, order, position = _next_trial(test, answer, history)
    if answer["order"] != order:
        raise AnswerError(422, f"trial {trial.id}: the conditions were not shown in listener "
                               f"{answer['listener']}'s order")
    for cid, sha in answer["stimuli"].items():
        if trial.stimuli.get(cid) != sha:
            raise AnswerError(422, f"trial {trial.id}: stimulus {sha[:70]!r} for {cid[:40]!r} is not the test's")
    if set(answer["stimuli"]) != set(trial.stimuli):
        raise AnswerError(422, f"trial {trial.id}: the stimuli named are not the trial's")
    _outcome(test, answer, trial)
    return {"version": LINE_VERSION, "kind": answer["kind"], "test_sha256": test.test_sha256,
            "listener": answer["listener"], "seed": listener_seed(test.seed, answer["listener"]), "trial": trial.id,
            "position": position, "order": order, "stimuli": dict(trial.stimuli), "ratings": dict(answer["ratings"]),
            "choice": answer["choice"], "plays": dict(answer["plays"]),
            "heard_s": {k: float(v) for k, v in answer["heard_s"].items()},
            "reference_plays": answer["reference_plays"], "started_at": answer["started_at"],
            "submitted_at": answer["submitted_at"], "received_at": received_at, "via": via}


def submission_of(line: RatingLine) -> dict[str, Any]:
    """The answer a stored line was made from (what the audit checks again)."""
    data = line.to_dict()
    return {k: data[k] for k in SUBMISSION_KEYS}


def history_problems(test: ListeningTest, lines: list[RatingLine], where: str) -> list[str]:
    """Every line of a listener's file checked again, in order, as it was when it was accepted."""
    problems = []
    for number, line in enumerate(lines, start=1):
        try:
            fields = check_answer(test, submission_of(line), lines[:number - 1], line.received_at, line.via)
        except AnswerError as exc:
            problems.append(f"{where}: line {number}: {exc}")
            continue
        stored = {k: v for k, v in line.to_dict().items() if k in fields}
        if stored != fields:
            problems.append(f"{where}: line {number}: its recorded seed, position or order is not what the test gives")
    return problems
