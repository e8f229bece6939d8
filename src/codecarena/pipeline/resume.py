"""What a run into a directory continues: the run already there, checked against this invocation's
plan, and which of its rows are kept.

Resume keys on (codec, utterance). A directory whose plan differs is refused, saying what to do; with
--add the new codec configurations join the run's, every other part of the plan the same, and a user
codec pinned anew since the run (`codec add` again) takes the place of its old pin: the plan holds the
new one, its rows are computed again and every other row is kept. A row is kept only if its status is
ok and its verdict agrees, its content still hashes to its `row_sha256`, its payload, decoded and
reference files (and a channel's or condition's files) still have the recorded sha256, and it agrees
with what the plan pins (reference, transcript, checkpoints, user codec pins, devices); failed rows are
computed again.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from codecarena.channel import stage as channel_stage
from codecarena.conditions import record as condition_record
from codecarena.metrics.reference_results import missing, reliances
from codecarena.pipeline.plan import RunError, RunPlan
from codecarena.plural import counted
from codecarena.registry import user_units
from codecarena.results.record import Plan, RunLoadError, RunRecord, on_the_cpu_if_older, read_record
from codecarena.results.schema import Row
from codecarena.results.verdict import status_problem
from codecarena.rundir import RunDir
from codecarena.runtime.external import mixed_runtimes
from codecarena.specs import parse_configuration


def follow(plan: RunPlan) -> tuple[RunPlan, RunRecord | None]:
    """What a run into plan.run follows: the plan (with --add, the earlier run's codec configurations
    first, then the new ones), and the earlier run's record if there is one; RunError when the
    directory holds a run this invocation may not continue, saying what to do. `prepare` calls it
    before anything is printed about the run, `execute` again under the run's lock."""
    run = plan.run
    if plan.add and not run.run_json.exists():
        raise RunError(f"{run.root}: --add needs an existing run to add codec configurations to")
    if not run.run_json.exists():
        return plan, None
    try:
        earlier = read_record(run)
    except RunLoadError as exc:
        raise RunError(f"{exc}; use another --out directory") from None
    previous = on_the_cpu_if_older(earlier.plan)
    if previous.references is None:
        raise RunError(f"{run.root}: holds a run made before plans pinned references, transcripts and user "
                       f"checkpoints (run.json version {earlier.version}), whose rows cannot be tied to "
                       f"them; use another --out directory")
    for key, option in (("device", "--device"), ("metric_device", "--metric-device")):
        was, now = getattr(previous, key), getattr(plan.plan, key)
        if was is not None and was != now:
            raise RunError(f"{run.root}: holds a run with {option} {was}, this command asks for {now}: another "
                           f"device is another configuration, never a resume; use a new --out directory")
    if plan.add:
        plan = added_codecs(previous, plan)
        repinned = [p.codec for p in previous.user_pins or () if p not in (plan.plan.user_pins or ())]
        if repinned:
            raise RunError(f"{run.root}: --add: the user pin of {', '.join(repinned)} changed since the run; "
                           f"pin the run's files again (see user_pins in its run.json) or use another --out")
        others = [d for d in _plan_differences(previous, plan.plan)
                  if d not in ("codecs", "runtimes", "user_pins", "user_codecs")]
        if others:
            raise RunError(f"{run.root}: --add adds codec configurations only, but the run differs in "
                           f"{', '.join(others)}; use the same options as the run, which was made by: "
                           f"{shlex.join(earlier.command)}{_warm_sample_hint(previous, plan.plan, others)}")
        # This invocation describes the runtimes of its own codecs only: the run keeps the records of the
        # others (their interpreters replay their payloads, their programs are checked on resume).
        record = dataclasses.replace(plan.record, runtimes={**earlier.runtimes, **plan.record.runtimes})
        plan = dataclasses.replace(plan, record=record, repinned=repinned_user_codecs(previous, plan.plan))
    elif previous != plan.plan:
        differs = _plan_differences(previous, plan.plan)
        repin = (" (a user pin changed since the run: pin the run's files again, see its run.json)"
                 if "user_pins" in differs else "")
        raise RunError(f"{run.root}: holds a run with a different plan ({', '.join(differs)}){repin}"
                       f"{_what_to_do(previous, plan.plan, differs)}")
    return plan, earlier


def repinned_user_codecs(previous: Plan, plan: Plan) -> tuple[str, ...]:
    """The user codecs of the earlier run whose pin the plan holds anew (added again since)."""
    now = {c.name: c for c in plan.user_codecs or ()}
    return tuple(c.name for c in previous.user_codecs or () if c.name in now and now[c.name] != c)


def added_codecs(previous: Plan, plan: RunPlan) -> RunPlan:
    """`plan` with the earlier run's codec configurations first and the new ones after them, or
    RunError naming a runtime the two would run one family in differently."""
    known = [c.codec for c in previous.codecs]
    codecs = tuple(parse_configuration(c) for c in known) + tuple(s for s in plan.codecs if s.canonical not in known)
    runtimes = tuple(dict.fromkeys([tuple(r) for r in previous.runtimes] + [tuple(r) for r in plan.plan.runtimes]))
    mixed = mixed_runtimes(previous.runtimes, [tuple(r) for r in plan.plan.runtimes])
    if mixed:
        raise RunError(f"--add: {mixed}")
    return plan.with_codecs(codecs, runtimes)


def changed_binaries(before: dict[str, Any], now: dict[str, Any], repinned: tuple[str, ...] = ()) -> str:
    """The first binary of a command-line family (run.json's runtime records, by registry id) whose
    identity differs between two invocations, said in words; "" when none does. The programs of a user
    codec pinned anew (`repinned`, by name) may differ: its rows are all computed again."""
    skipped = {f"{user_units.REGISTRY_PREFIX}{name}" for name in repinned}
    for registry_id in sorted((before.keys() & now.keys()) - skipped):
        old = {b["name"]: b for b in before[registry_id].get("binaries", [])}
        new = {b["name"]: b for b in now[registry_id].get("binaries", [])}
        for name in sorted(old.keys() | new.keys()):
            if old.get(name) != new.get(name):
                was, is_ = old.get(name) or {}, new.get(name) or {}
                fields = [k for k in ("resolved", "sha256", "package", "version") if was.get(k) != is_.get(k)]
                detail = ", ".join(f"{k} {was.get(k) or '-'} -> {is_.get(k) or '-'}" for k in fields)
                return f"binary {name} of {registry_id} changed ({detail or 'added or removed'})"
    return ""


def _plan_differences(a: Plan, b: Plan) -> list[str]:
    return [f.name for f in dataclasses.fields(Plan) if getattr(a, f.name) != getattr(b, f.name)]


def _what_to_do(previous: Plan, plan: Plan, differs: list[str]) -> str:
    """The end of the refusal of a run whose plan differs from this command's."""
    tail = "; use another --out directory"
    older = _warm_sample_hint(previous, plan, differs)
    if older:
        return f"{older}{tail}"
    repinned = repinned_user_codecs(previous, plan)
    if repinned and set(differs) <= {"codecs", "runtimes", "user_codecs"}:
        return (f" (user codec {', '.join(repinned)} was added again since the run: rerun with --add to compute its "
                f"rows again and keep every other row){tail}")
    if differs not in (["codecs"], ["codecs", "runtimes"]):
        return tail
    had = [c.codec for c in previous.codecs]
    named = [c.codec for c in plan.codecs]
    if any(c not in had for c in named):
        return f" (to add codec configurations to it, rerun with --add){tail}"
    run_has = f": it has the codec configurations {', '.join(had)}"
    if len(named) < len(had):  # e.g. the command that made a run which --add has extended since
        return (f"{run_has} and this command names only some of them; to resume the whole run, rerun this command "
                f"with --add; for a run of only these, use another --out directory")
    if named != had:
        return f"{run_has} and this command names them in another order; to resume it, rerun this command with --add"
    return tail


def _warm_sample_hint(previous: Plan, plan: Plan, differs: list[str]) -> str:
    """What to do about a run whose warm sample (the rows that repeat the codec call for the warm RTF) is
    not this command's: a run made before --warm-sample repeated in every row; "" for any other difference."""
    if "warm_sample" not in differs:
        return ""

    def said(sample: int | None) -> str:
        if sample is None:
            return "every row"
        return f"the first {counted(sample, 'row')} of each configuration" if sample else "no row"

    return (f" (the run repeats the codec call for the warm RTF in {said(previous.warm_sample)}, this command in "
            f"{said(plan.warm_sample)}: to resume it, rerun with --warm-sample "
            f"{'all' if previous.warm_sample is None else previous.warm_sample})")


def kept_rows(existing: list[Row], plan: RunPlan) -> dict[tuple[str, str], Row]:
    """The rows of the run's rows.jsonl a resume keeps, by key. A row edited since it was computed, one
    the plan does not pin as it is (a forged reference or transcript, another checkpoint), one whose
    verdict is not its status or whose files changed is computed again, and so is the first row of
    each reference whose reference-side results are lost."""
    wanted = {(s.canonical, u.id) for s in plan.codecs for u in plan.evalset.utterances}
    # A row of a user codec pinned anew was made with the old pin, whatever parts of the pin it records.
    repinned = {f"{user_units.REGISTRY_PREFIX}{name}" for name in plan.repinned}
    kept: dict[tuple[str, str], Row] = {}
    for row in existing:
        if row.key in wanted and row.registry not in repinned and row.intact and row_files_verify(row, plan.run) \
                and not plan.plan.row_problems(row) and not status_problem(row):
            kept[row.key] = row
    for key in rows_to_rebuild_reference_results(kept, plan.plan, plan.run):
        del kept[key]
    return kept


def row_files_verify(row: Row, run: RunDir) -> bool:
    """A completed row counts on resume only if the files it names are inside the run and still have
    its hashes."""
    if row.status != "ok" or row.payload is None or row.decoded is None:
        return False
    return (run.hold(((row.payload, row.payload_sha256), (row.decoded, row.decoded_sha256),
                      (row.reference, row.reference_sha256)))
            and channel_stage.files_verify(row.channel, run) and condition_record.files_verify(row.condition, run))


def rows_to_rebuild_reference_results(kept: dict[tuple[str, str], Row], plan: Plan, run: RunDir) -> list[tuple[str, str]]:
    """Per reference whose reference-side results some kept row relied on but the run no longer holds
    (a deleted `reference_results/`), the first such row in plan order: computing it again stores them
    again, which the kept rows of that reference then agree with (the audit checks that they do)."""
    relied = {key: set().union(*(reliances(sha, metrics) for sha, metrics in row.scored_against))
              for key, row in kept.items()}
    lost = missing(run.reference_results(), set().union(*relied.values()))
    chosen: dict[str, tuple[str, str]] = {}
    for key in plan.keys():
        for need in relied.get(key, set()) & lost:
            chosen.setdefault(need.reference_sha256, key)
    return list(dict.fromkeys(chosen.values()))
