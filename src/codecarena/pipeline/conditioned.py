"""A row's conditioned input (docs/conditions.md): what its encoder gets instead of the clean reference.

A noise, reverberation or level condition is made here, in the harness, from the run's own files
(conditions/make.py) and written with its trace. A tandem or a generation runs codec stages first, each
hop an encode and a decode in fresh processes through the row's own stage runner (pipeline/row.py hands
it over as `run_stage`): a tandem's codec once, or the row's configuration once per earlier generation.
Each hop's payload and decoded audio stay in the run (RunDir.hop); the last hop decodes into the row's
conditioned input, and the trace lists every hop with its payload's bits and bitrates.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import soundfile as sf

from codecarena.arena import ARENA_RATE
from codecarena.conditions import record as condition_record
from codecarena.conditions.make import ConditionInputError, Sources, hop_trace, make
from codecarena.conditions.noise import BabbleError, Source
from codecarena.conditions.p56 import LevelError
from codecarena.conditions.reverb import RoomError
from codecarena.conditions.sets import SetError
from codecarena.conditions.spec import Condition
from codecarena.files import sha256_file
from codecarena.payload import PayloadError, read_payload
from codecarena.pipeline.plan import RunPlan
from codecarena.plural import counted
from codecarena.references import Reference
from codecarena.rundir import RowFiles
from codecarena.runtime.protocol import Job
from codecarena.specs import CodecSpec

# (stage name, job, the codec that runs it) -> "" or why the stage failed
RunStage = Callable[[str, Job, CodecSpec], str]
_FAILURES = (ConditionInputError, SetError, BabbleError, RoomError, LevelError, PayloadError, OSError, ValueError)


def sources(plan: RunPlan, talkers: tuple[Reference, ...]) -> Sources:
    """What a row's condition may draw from: the set's utterances (the run's copies of the references a
    babble takes, prepared before the row), the plan's sets and the run's copies of their files."""
    prepared = {ref.utterance.id: ref for ref in talkers}
    pinned = {ref.id: ref.sha256 for ref in plan.plan.references or ()}

    def reference(utterance: str) -> tuple[Path, str, str]:
        path = prepared[utterance].path
        return path, plan.run.relative(path), pinned[utterance]

    return Sources(tuple(Source(u.id, u.speaker) for u in plan.evalset.utterances), reference, plan.file_sets,
                   plan.run.set_file)


def make_input(spec: CodecSpec, ref: Reference, talkers: tuple[Reference, ...], plan: RunPlan, files: RowFiles,
               run_stage: RunStage) -> tuple[str, Path, dict[str, Any] | None]:
    """("" or why the row fails, the file its encoder gets, the row's condition record)."""
    condition = spec.conditioned
    if condition is None:
        return "", ref.path, None
    utt = ref.utterance
    try:
        if condition.signal:
            samples, trace = make(condition, utt.id, utt.speaker, ref.path, plan.run.relative(ref.path),
                                  sources(plan, talkers))
        else:
            error, trace = _hops(condition, spec, ref, plan, files, run_stage)
            if error:
                return error, ref.path, None
            samples = None
        condition_record.write(samples, trace, files.condition_input, files.condition_trace)
        return "", files.condition_input, condition_record.record(trace, plan.run, files.condition_input,
                                                                   files.condition_trace)
    except _FAILURES as exc:
        return f"condition {spec.condition}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", \
            ref.path, None


def _hops(condition: Condition, spec: CodecSpec, ref: Reference, plan: RunPlan, files: RowFiles,
          run_stage: RunStage) -> tuple[str, dict[str, Any]]:
    """Every hop of a tandem or generation in fresh processes; ("" or why it failed, the trace)."""
    utt, run = ref.utterance, plan.run
    hops = spec.hops()
    source = ref.path
    entries: list[dict[str, Any]] = []
    seconds = ref.num_samples / ARENA_RATE
    for k, hop in enumerate(hops, 1):
        payload, decoded = run.hop(spec.slug, utt.id, k)
        if k == len(hops):
            decoded = files.condition_input
        payload.parent.mkdir(parents=True, exist_ok=True)
        device = plan.stage_device(hop.family)
        name = f"hop {k} ({hop.canonical})"
        error = run_stage(f"hop{k}-encode", Job.encode(source, payload, run.stage(spec.slug, utt.id, f"hop{k}-encode").report,
                                                        hop.canonical, warm_repeats=0, weights=plan.plan.weights,
                                                        variant=plan.variant, device=device), hop)
        if error:
            return f"condition {spec.condition}: {name} encode: {error}", {}
        coded = read_payload(payload)
        if coded.codec != hop.canonical or coded.num_samples != ref.num_samples:
            return (f"condition {spec.condition}: {name}: its payload says {coded.codec} / "
                    f"{counted(coded.num_samples, 'sample')}, "
                    f"expected {hop.canonical} / {ref.num_samples}"), {}
        error = run_stage(f"hop{k}-decode", Job.decode(payload, decoded, run.stage(spec.slug, utt.id, f"hop{k}-decode").report,
                                                        warm_repeats=0, device=device), hop)
        if error:
            return f"condition {spec.condition}: {name} decode: {error}", {}
        info = sf.info(decoded)
        if (info.frames, info.samplerate) != (ref.num_samples, ARENA_RATE):
            return (f"condition {spec.condition}: {name} decoded {counted(info.frames, 'sample')} at "
                    f"{info.samplerate} Hz, "
                    f"expected {ref.num_samples} at {ARENA_RATE} Hz"), {}
        bits, size = coded.representation_bits(), payload.stat().st_size
        entries.append({"codec": hop.canonical, "payload": run.relative(payload), "payload_sha256": sha256_file(payload),
                        "payload_bytes": size, "representation_bits": bits, "representation_bps": bits / seconds,
                        "payload_bps": size * 8 / seconds, "decoded": run.relative(decoded),
                        "decoded_sha256": sha256_file(decoded), "device": device})
        source = decoded
    return "", hop_trace(condition, utt.id, ref.path, run.relative(ref.path), files.condition_input, entries)
