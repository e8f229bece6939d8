"""From what the user selected to the run as one value: `prepare(Selection) -> RunPlan`.

A `Selection` is what a user asks for, as given (the options of `codecarena run`, or the arguments of
a Python call); `prepare` checks every part of it before any work and resolves it against this
machine: the limits, the codec configurations with the conditions their input goes through and the
channels they cross, the devices (one that nothing of the run can use is refused,
`pipeline/placement.py`; the metric libraries and each family's runtime that would use one are asked,
before the set is read), the evaluation set and its subset, the condition sets (--noise-dir,
--rir-dir), the metrics and ASR models, the weights and their pins, the variant, the executor; then the plan,
its hash and default directory, the replay default, the record run.json starts with, and whether the
directory can hold this run (the run already there is continued as `pipeline/resume.py` says). A
refusal is one line naming the option or the path (SelectionError, RunError, or the error of the
parser that refused it); nothing is written but the run directory itself.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecarena import selection as resolve
from codecarena.arena import ARENA_RATE
from codecarena.pipeline import condition_plan as conditions
from codecarena.conditions.sets import FileSet
from codecarena.datasets import EvalSet
from codecarena.choices import CHANNEL_CHOICES, DEFAULT_CODECS
from codecarena.devices import DeviceError, parse_device
from codecarena.machine import describe
from codecarena.pipeline.placement import Placement
from codecarena.pipeline.plan import Execution, RunError, RunPlan, default_directory, plan_of
from codecarena.pipeline.resume import follow
from codecarena.runtime.external import ExternalRuntime, external_mark
from codecarena.runtime.limits import DEFAULT_POLL_S, DEFAULT_TIMEOUT_S, parse_limits
from codecarena.selection import SelectionError
from codecarena.specs import CodecSpec, parse_configuration


@dataclass(frozen=True)
class Selection:
    """What a user selected for a run, as given; `prepare` checks and resolves it. Defaults are
    `codecarena run`'s."""
    codecs: tuple[str, ...] = ()  # codec specs (none: choices.DEFAULT_CODECS)
    channel_specs: tuple[str, ...] = ()  # --channel: channels every configuration also crosses
    condition_specs: tuple[str, ...] = ()  # --condition: conditions every configuration's input also goes through
    noise_dirs: tuple[str, ...] = ()  # --noise-dir [NAME=]DIR: noise recordings a condition may draw from
    rir_dirs: tuple[str, ...] = ()  # --rir-dir [NAME=]DIR: measured room impulse responses
    input: Path | None = None  # a folder or file of the user's audio; None: the smoke set
    corpus: str = "auto"  # the layout of `input`
    language: str = ""  # the language of input files that declare none
    language_from_folders: bool = False
    channels: str = "mix"  # how a multichannel input file is taken (choices.CHANNEL_CHOICES)
    data_dir: Path | None = None  # a mirror of the smoke set
    download: bool = True  # the smoke set and model files may be downloaded
    limit: int | None = None  # the first N utterances of the set
    limit_per_language: int | None = None  # the first N utterances of each language, before `limit`
    shard: str | None = None  # K/N: every N-th utterance from the K-th
    weights: str = "real"  # real, user or synthetic[:SEED]
    variant: str = ""
    metrics: str = "all"  # all, none, or a comma list
    asr_models: tuple[str, ...] = ()  # LANG=NAME or LANG=DIR
    device: str = "cpu"
    metric_device: str | None = None  # None: `device`
    runtime_python: str | None = None
    out: str | None = None  # the run directory; None: runs/<set>-<plan hash>
    add: bool = False  # add the codecs to the run in `out`
    memory_limit: str | None = None  # None: half of physical memory
    guard_poll: str = str(DEFAULT_POLL_S)
    stage_timeout: str = str(DEFAULT_TIMEOUT_S)
    warm_repeats: int = 2
    mode: str = "cold"
    cold_sample: int = 1
    replay_sample: str | None = None  # N or "all"; None: replay_default
    warm_sample: str = "3"  # N or "all": the cold rows per configuration that repeat the codec call for the warm RTF
    executor: str = "local"
    workers: int | None = None
    ray_address: str | None = None
    fresh_interpreter: bool = False  # cold stages in new interpreters, not forked from templates
    command: tuple[str, ...] = ()  # the command line run.json records


def prepare(chosen: Selection) -> RunPlan:
    """The run `chosen` asks for, checked and resolved; its directory exists when this returns, and
    holds either nothing of a run yet or a run this one may continue (`plan.continued` names its codec
    configurations). Nothing but the directory is written."""
    limits = parse_limits(chosen.memory_limit, chosen.guard_poll, chosen.stage_timeout)
    warm_sample = _warm_sample(chosen.warm_sample)
    device = _device(chosen.device, "--device")
    metric_device = _device(chosen.metric_device or device, "--metric-device")
    named = named_out(chosen.out) if chosen.out is not None else None
    specs = with_channels(with_conditions(tuple(parse_configuration(s) for s in (chosen.codecs or DEFAULT_CODECS)),
                                          chosen.condition_specs), chosen.channel_specs)
    canon = [s.canonical for s in specs]
    if len(set(canon)) != len(canon):
        raise SelectionError(f"the same codec configuration is given twice: {canon}")
    if chosen.language_from_folders and chosen.input is None:
        raise SelectionError("--language-from-folders reads the folders of --input")
    # The devices first, before the set is read or a metric model verified: a device nothing of this
    # command uses is refused (with --add, once the run's codecs are known, below), then every library
    # and runtime that would use one is asked, and a refusal names the flag the user typed. A tandem's or
    # generation's codec stages run like the row's own: their families need runtimes, pins and devices as well.
    metric_option = "--device" if chosen.metric_device is None else "--metric-device"
    metric_names = resolve.select_metrics(chosen.metrics)
    hops = tuple(dict.fromkeys(h for spec in specs for h in spec.hops()))
    if not chosen.add:
        _refuse_unused(Placement.of((s.family for s in specs + hops), metric_names, device, metric_device,
                                    metric_option))
    resolve.check_metric_device(metric_names, metric_device, metric_option)
    weights = resolve.canonical_weights(chosen.weights)
    runtimes = _runtimes(specs + hops, weights, chosen.runtime_python, device)
    evalset = resolve.evaluation_set(chosen.input, chosen.corpus, chosen.language, chosen.data_dir, chosen.download,
                                     chosen.limit, chosen.shard, chosen.channels, chosen.language_from_folders,
                                     chosen.limit_per_language)
    if chosen.add and chosen.out is None:
        raise SelectionError("--add needs --out, the run directory to add codec configurations to")
    if chosen.cold_sample < 0:
        raise SelectionError("--cold-sample must be >= 0")
    replay_sample = _replay_sample(chosen.replay_sample, chosen.mode, evalset.name)
    if chosen.workers is not None and chosen.workers < 1:
        raise SelectionError("--workers must be at least 1")
    if chosen.ray_address and chosen.executor != "ray":
        raise SelectionError("--ray-address needs --executor ray")
    if chosen.warm_repeats < 0:
        raise SelectionError("--warm-repeats must be >= 0")
    file_sets, set_folders = _condition_sets(chosen, specs, evalset)
    if not isinstance(chosen.fresh_interpreter, bool):
        raise SelectionError(f"--fresh-interpreter is on or off, not {chosen.fresh_interpreter!r}")
    languages = sorted({u.language for u in evalset.utterances if u.language})
    scorer = resolve.scorer(chosen.metrics, chosen.asr_models, languages, metric_device)
    resolve.pinned_checkpoints(specs + hops, weights, allow_download=chosen.download)
    plan = plan_of(evalset, specs, weights=weights, variant=resolve.check_variant(chosen.variant, specs + hops),
                   warm_repeats=chosen.warm_repeats, device=device, metric_device=metric_device, mode=chosen.mode,
                   cold_sample=chosen.cold_sample, replay_sample=replay_sample, warm_sample=warm_sample,
                   metrics=scorer.metrics if scorer else (),
                   runtimes=[(family, rec["registry"], rec["interpreter"], *external_mark(rec))
                             for family, rec in runtimes.items()],
                   asr_models=sorted(scorer.asr_models.items()) if scorer else (), file_sets=file_sets)
    out = named if named is not None else default_directory(evalset, plan)
    if named is None:
        check_run_dir(out, f"run directory {out}")
    invocation = {**describe(list(chosen.command)), "metrics": scorer.describe(languages) if scorer else [],
                  "runtimes": {rec["registry"]: rec for rec in runtimes.values()}}
    prepared = RunPlan.start(plan, evalset, out, limits, invocation=invocation,
                             external=[ExternalRuntime.of(family, rec) for family, rec in runtimes.items()
                                       if external_mark(rec)],
                             execution=Execution(chosen.executor, chosen.workers, chosen.ray_address,
                                                 chosen.fresh_interpreter), add=chosen.add,
                             set_folders=set_folders)
    # The directory's run is checked before anything is said about it (execute checks it again, locked).
    followed, earlier = follow(prepared)
    if chosen.add:
        _refuse_unused(Placement.of((s.family for c in followed.codecs for s in (c, *c.hops())), metric_names,
                                    device, metric_device, metric_option))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what the checks cannot foresee, e.g. a folder in /proc
        raise RunError(f"run directory {out}: cannot be made ({exc.strerror})") from None
    return dataclasses.replace(followed, continued=tuple(c.codec for c in earlier.plan.codecs) if earlier else ())


def _runtimes(specs: tuple[CodecSpec, ...], weights: str, runtime_python: str | None,
              device: str) -> dict[str, dict[str, Any]]:
    """Each family's runtime record; every runtime that would run on the device is asked before anything
    is written: a device that is not there fails the command, never a row."""
    runtimes = resolve.runtimes(specs, weights, runtime_python)
    for registry_id, info in resolve.probe_devices(specs, runtimes, device).items():
        for rec in runtimes.values():
            if rec["registry"] == registry_id:
                rec["device"] = info
    return runtimes


def _refuse_unused(placement: Placement) -> None:
    problem = placement.unused()
    if problem:
        raise SelectionError(problem)


def _device(text: str, option: str) -> str:
    try:
        return parse_device(text, option)
    except DeviceError as exc:
        raise SelectionError(str(exc)) from None


def with_conditions(specs: tuple[CodecSpec, ...], conditions_given: tuple[str, ...]) -> tuple[CodecSpec, ...]:
    """Each configuration followed by itself through each --condition (`generations=N` standing for gen=2 ...
    gen=N); SelectionError in one line for a condition that does not parse."""
    from codecarena.conditions.spec import ConditionError, expand
    from codecarena.specs import SpecError, canonical_condition

    try:
        parsed = [canonical_condition(text) for given in conditions_given for text in expand(given)]
    except (ConditionError, SpecError) as exc:
        raise SelectionError(f"--condition: {exc}") from None
    out: list[CodecSpec] = []
    for spec in specs:
        out.append(spec)
        out += [dataclasses.replace(spec, condition=condition) for condition in parsed
                if not spec.condition and not spec.channel]
    return tuple(out)


def _condition_sets(chosen: Selection, specs: tuple[CodecSpec, ...],
                    evalset: EvalSet) -> tuple[list[FileSet], list[tuple[str, str, Path]]]:
    """The --noise-dir and --rir-dir sets, loaded and pinned, and every condition checked against the set;
    SelectionError in one line naming the option, file or condition."""
    from codecarena.conditions import noise as noises
    from codecarena.conditions.sets import SetError
    from codecarena.conditions.spec import ConditionError

    try:
        # In arena samples: a reference resampled from another rate is about this long (one more for rounding).
        longest = max((-(-u.num_samples * ARENA_RATE // u.sample_rate) + 1 for u in evalset.utterances), default=0)
        found, folders = conditions.load_sets({"noise": chosen.noise_dirs, "rir": chosen.rir_dirs}, longest)
        conditions.check(specs, [noises.Source(u.id, u.speaker) for u in evalset.utterances], found)
    except (SetError, ConditionError) as exc:
        raise SelectionError(str(exc)) from None
    return found, folders


def with_channels(specs: tuple[CodecSpec, ...], channels: tuple[str, ...] | list[str]) -> tuple[CodecSpec, ...]:
    """Each configuration followed by itself through each --channel; SelectionError in one line for a
    channel that does not parse or a family whose payloads cannot cross one."""
    from codecarena.channel.library import channel_library
    from codecarena.channel.packets import cutting, frames_per_packet
    from codecarena.channel.spec import ChannelError, parse_channel
    from codecarena.registry.catalog import FAMILIES

    mistaken = [text for text in channels if text in CHANNEL_CHOICES]
    if mistaken:
        raise SelectionError(f"--channel {mistaken[0]}: --channel impairs the payloads (loss=5%, burst=10%,len=3, "
                             f"ber=1e-3; docs/channel.md); the audio channel of a multichannel file is --channels "
                             f"{mistaken[0]}")
    try:
        parsed = [parse_channel(text).canonical for text in channels]
    except ChannelError as exc:
        raise SelectionError(f"--channel: {exc}") from None
    out: list[CodecSpec] = []
    for spec in specs:
        out.append(spec)
        out += [dataclasses.replace(spec, channel=channel) for channel in parsed if not spec.channel]
    for spec in out:
        if spec.channel and FAMILIES[spec.family].channel is None:
            able = ", ".join(f for f, d in FAMILIES.items() if d.channel is not None)
            raise SelectionError(f"{spec.canonical}: {spec.family} declares no [channel] support, so its payloads "
                                 f"cannot cross a channel (families that can: {able})")
        if spec.channel:
            try:
                frames_per_packet(parse_channel(spec.channel), cutting(spec.family, spec.config, spec.options(),
                                                                       spec.canonical))
                channel_library(spec.family)
                offered = FAMILIES[spec.family].channel.policies  # type: ignore[union-attr]
                policy = parse_channel(spec.channel).policy
                if offered and policy not in offered:
                    raise ChannelError(f"{spec.canonical}: {spec.family} offers the arena's policies "
                                       f"{', '.join(offered)}, not policy={policy}")
            except ChannelError as exc:
                raise SelectionError(str(exc)) from None
    return tuple(out)


def _replay_sample(text: str | None, mode: str, set_name: str) -> int | None:
    """Rows per codec configuration that are replayed; None means all of them. By default every row of
    a cold run and of the smoke set, else the first row of each configuration."""
    if text is None:
        return None if mode == "cold" or set_name.split("[")[0] == "smoke" else 1
    if text == "all":
        return None
    if text.isdigit():
        return int(text)
    raise SelectionError(f"--replay-sample {text!r}: expected a number or 'all'")


def _warm_sample(text: str) -> int | None:
    """Rows per codec configuration whose cold stages repeat the codec call for the warm RTF (the first N
    of those that run cold); None means all of them."""
    if text == "all":
        return None
    try:
        count = int(text)
    except ValueError:
        raise SelectionError(f"--warm-sample {text!r}: expected a number or 'all'") from None
    if count < 0:
        raise SelectionError(f"--warm-sample {text}: must be >= 0 (or 'all')")
    return count


def named_out(text: str) -> Path:
    """--out as given, refused unless it can be a run directory (Path('') would mean the current
    directory)."""
    if not text.strip():
        raise RunError("--out '': no run directory named (leave --out out for runs/<set>-<plan hash>)")
    out = Path(text)
    check_run_dir(out, f"--out {out}")
    return out


def check_run_dir(out: Path, label: str) -> None:
    """Refuse, in one line and before any work, a run directory that is a file, lies under a file,
    or sits where this user cannot write; the run would otherwise stop midway with a traceback."""
    probe = out.absolute()
    while not os.path.lexists(probe):
        probe = probe.parent
    if probe == out.absolute() and not probe.is_dir():
        raise RunError(f"{label}: exists and is not a directory; name a run directory")
    if not probe.is_dir():
        raise RunError(f"{label}: {probe} is not a directory, so the run directory cannot be made there")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunError(f"{label}: {probe} is not writable by this user (permissions or a read-only file system)")
