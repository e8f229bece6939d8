"""What a command asks to run, checked before any worker starts: the weights, the isolated runtime of
each codec family, a numerical variant, the metrics, the evaluation set and registry entries by name.

Every command that launches codec workers (run, determinism, serve) selects through here, so a refusal
reads the same whichever command meets it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from codecarena.weights import parse_weights
from codecarena.registry.catalog import FAMILIES, Command
from codecarena.corpora import Subset, load_corpus, parse_shard, select
from codecarena.datasets import EvalSet, load_smoke
from codecarena.languages import language_problem
from codecarena.metrics.declarations import select as select_metrics
from codecarena.metrics.scorer import Scorer
from codecarena.registry.entries import Entry, RegistryError, entry_for_family, load_entry
from codecarena.specs import CodecSpec


class SelectionError(Exception):
    """A selection that cannot run; the message says which part and why."""


def canonical_weights(text: str) -> str:
    """`real`, `user`, or `synthetic:SEED` with the seed spelled out (synthetic alone means seed 0)."""
    try:
        kind, seed = parse_weights(text)
    except ValueError as exc:
        raise SelectionError(str(exc)) from None
    return kind if kind in ("real", "user") else f"synthetic:{seed}"


def probe_devices(specs: Iterable[CodecSpec], runtimes: dict[str, dict[str, Any]], device: str) -> dict[str, Any]:
    """Registry id -> the device as each torch family's runtime sees it (devices.DeviceInfo as a dict),
    asked before any row; SelectionError naming the family and its interpreter when one cannot use it.
    On the CPU nothing is asked: every runtime can run there."""
    from codecarena.devices import DeviceError, probe

    found: dict[str, Any] = {}
    if device == "cpu":
        return found
    for family in dict.fromkeys(s.family for s in specs):
        record = runtimes[family]
        if not FAMILIES[family].torch or record["registry"] in found:
            continue
        try:
            found[record["registry"]] = probe(record["interpreter"], device).to_dict()
        except DeviceError as exc:
            raise SelectionError(f"--device {device}: {family}'s runtime cannot run there: {exc}") from None
    return found


def check_metric_device(metrics: Iterable[str], metric_device: str, option: str = "--metric-device",
                        python: str = sys.executable) -> None:
    """Before any metric model is read: each selected learned metric's library, in the scoring
    process's interpreter, must be able to use the metric device (metrics/engines.py); the metrics that
    run on the CPU only stay there. Never replaced by the CPU silently. `option` is the flag that chose
    the device (--device, when --metric-device was not given), which the refusal names."""
    from codecarena.metrics.engines import MetricDeviceError, probe

    try:
        probe(metrics, metric_device, python, option)
    except MetricDeviceError as exc:
        raise SelectionError(str(exc)) from None


def runtimes(specs: Iterable[CodecSpec], weights: str, runtime_python: str | None = None) -> dict[str, dict[str, Any]]:
    """Family -> the runtime record (registry id, interpreter, resolved packages) its workers use. With
    `runtime_python`, every family that has an isolated runtime runs in that interpreter instead
    (an external runtime, recorded as one); the others keep theirs."""
    from codecarena.registry_rules import pin_gaps
    from codecarena.runtime.external import ExternalRuntimeError, describe as describe_external
    from codecarena.runtime.venvs import describe as describe_runtime

    found = {}
    families = list(dict.fromkeys(s.family for s in specs))
    if runtime_python is not None and not any(
            FAMILIES[f].origin != "user" and entry_for_family(f).runtime.environment == "isolated" for f in families):
        raise SelectionError(f"--runtime-python {runtime_python}: none of {', '.join(families)} runs in an isolated "
                             "runtime (it replaces the runtime of torch families such as encodec or dac)")
    for family in families:
        if FAMILIES[family].origin == "user":
            found[family] = _user_runtime(family, weights)
            continue
        entry = entry_for_family(family)
        kind = FAMILIES[family].supported_weights
        if weights != "real" and kind == "real":
            raise SelectionError(f"{family}: runs its real weights only; --weights {weights} is not available for it")
        if weights == "user" and kind != "real_or_synthetic":
            raise SelectionError(f"{family}: takes no user-pinned checkpoint (--weights user is for neural families)")
        # A number is only as good as its pins: a floating or partial pin is refused, not warned about.
        # Synthetic weights of a neural family use no pinned checkpoint, and say so in every output; a
        # user's pin replaces the registry's checkpoint, never its source pin.
        synthetic = weights.startswith("synthetic") and kind == "real_or_synthetic"
        gaps = pin_gaps(entry)
        if weights == "user":
            gaps = [gap for gap in gaps if not gap.startswith("checkpoint")]
        if not synthetic and (gaps or (entry.status == "unpinned" and weights != "user")):
            synthetic_hint = ("; --weights synthetic runs its architecture with seeded weights"
                              if kind == "real_or_synthetic" else "")
            raise SelectionError(f"{entry.id}: registry pins are incomplete (status {entry.status}); "
                                 f"codecarena refuses to run it until they are supplied{synthetic_hint}")
        if runtime_python is not None and entry.runtime.environment == "isolated":
            try:
                found[family] = describe_external(runtime_python, entry)
            except ExternalRuntimeError as exc:
                raise SelectionError(str(exc)) from None
        else:
            found[family] = describe_runtime(entry)
        command = FAMILIES[family].command
        if command is not None:
            found[family]["binaries"] = _binaries(entry, command)
        if weights == "user":
            found[family] |= {"weights_license": "unknown (pinned by user)", "weights_non_commercial": False}
        elif not synthetic and entry.checkpoint is not None:
            # The licence of the weights the rows will come from, flagged when it forbids commercial use.
            found[family] |= {"weights_license": entry.checkpoint.license,
                              "weights_non_commercial": entry.checkpoint.non_commercial}
    return found


def _binaries(entry: Entry, command: Command) -> list[dict[str, Any]]:
    """A command-line family's binaries as they are now, checked against their pins before any row
    runs (the workers check them again): what run.json records."""
    from codecarena.registry.binaries import BinaryError, verify_command
    from codecarena.registry.entries import debian_versions

    try:
        return [identity.record() for identity in verify_command(command, debian_versions(entry))]
    except BinaryError as exc:
        raise SelectionError(f"{entry.id}: {exc}") from None


def _user_runtime(family: str, weights: str) -> dict[str, Any]:
    """A user codec's runtime (its own, built by `codec add` from its requirements, or the harness's),
    once its source and checkpoints are checked against their pins: a changed one stops the run
    before any row."""
    from codecarena.registry import user_units
    from codecarena.runtime.venvs import RuntimeMissing, describe_isolated, describe_main

    kind = FAMILIES[family].supported_weights
    if weights == "user" or (weights.startswith("synthetic") and kind != "real_or_synthetic"):
        raise SelectionError(f"{family}: a user codec runs the checkpoints it was added with; --weights {weights} "
                             "is not available for it")
    try:
        unit = user_units.load(family)
        if unit.source is not None and unit.source.current_sha256() != unit.source.sha256:
            raise SelectionError(f"{unit.source.path}: user codec {family}'s source changed since `codecarena codec "
                                 f"add`; add it again (codecarena codec add {family} ...) to run the new code")
        unit.verified_checkpoints()
        runtime = (describe_isolated(unit.registry_id, f"codecarena codec add {family} ... --requirements FILE")
                   if unit.requirements else describe_main(unit.registry_id))
    except (user_units.UserUnitError, user_units.UserCodecChanged, RuntimeMissing) as exc:
        raise SelectionError(str(exc)) from None
    command = FAMILIES[family].command
    if command is not None:
        from codecarena.registry.binaries import BinaryError, verify_command

        try:
            runtime["binaries"] = [identity.record() for identity in verify_command(command, {})]
        except BinaryError as exc:
            raise SelectionError(f"{family}: {exc}") from None
    return {**runtime, "user_codec": unit.label(), "weights_license": "unknown (user codec)",
            "weights_non_commercial": False}


def pinned_checkpoints(specs: Iterable[CodecSpec], weights: str, allow_download: bool) -> None:
    """With real weights, every pinned checkpoint file the chosen configurations load is in the mirror
    or the cache and verified, fetched here (once, with a progress bar) when absent and downloads are
    allowed: workers never download, and a missing file stops the run before its first row. With
    user weights, every configuration's user pin is present and verified."""
    from codecarena.checkpoints import CheckpointError, resolve

    if weights == "user":
        _user_checkpoints(specs)
        return
    if weights != "real":
        return
    for spec in specs:
        if FAMILIES[spec.family].origin == "user":
            continue  # checked with its runtime: a user codec's checkpoints are its own pins
        checkpoint = entry_for_family(spec.family).checkpoint
        if checkpoint is None:
            continue
        try:
            resolve(checkpoint.for_config(spec.config), allow_download=allow_download, progress=allow_download)
        except CheckpointError as exc:
            raise SelectionError(f"{spec.canonical}: real weights unavailable: {exc}; fetch them with "
                                 f"`codecarena fetch {spec.family}:{spec.config}` or set CODECARENA_MODELS "
                                 f"to a mirror") from None


def _user_checkpoints(specs: Iterable[CodecSpec]) -> None:
    """Every configuration has a user pin whose kept files still verify."""
    from codecarena.checkpoints import CheckpointError, resolve
    from codecarena.registry.user_pins import UserPinError, find, pins_dir

    for spec in specs:
        try:
            pin = find(spec.family, spec.config)
            if pin is None:
                raise UserPinError(f"no user pin (pin one with `codecarena registry pin {spec.family}:{spec.config} "
                                   f"--file PATH`)")
            resolve(pin.checkpoint(), models_dir=pins_dir(), allow_download=False)
        except (UserPinError, CheckpointError) as exc:
            raise SelectionError(f"{spec.canonical}: --weights user: {exc}") from None


def check_variant(name: str, specs: Iterable[CodecSpec]) -> str:
    """A known variant that every chosen family declares (the worker also refuses a model it finds
    nothing to replace in)."""
    from codecarena.variants import VariantError, check_name

    try:
        check_name(name)
    except VariantError as exc:
        raise SelectionError(str(exc)) from None
    if name:
        refused = sorted({s.family for s in specs if name not in FAMILIES[s.family].variants})
        if refused:
            raise SelectionError(
                f"variant {name} does not apply to {', '.join(refused)} "
                f"(it applies to {', '.join(f for f, fam in FAMILIES.items() if name in fam.variants)})")
    return name


def scorer(metrics: str, asr_models: Sequence[str], languages: Iterable[str] = (),
           metric_device: str = "cpu") -> Scorer | None:
    """The scorer of a comma list of metrics (None for `none`), with each LANG=NAME or LANG=DIR ASR
    model, and the default model of each of `languages` written out, so that a run's plan names the
    model of every language it scores, its learned metrics on `metric_device`. Every chosen model is
    verified first (SelectionError)."""
    from codecarena.metrics.asr_models import CATALOGUE, AsrModelError, default_choice, primary_language, resolve

    names = select_metrics(metrics)
    models: dict[str, str] = {}
    for item in asr_models:
        lang, sep, choice = item.partition("=")
        if sep and lang and language_problem(lang):
            raise SelectionError(f"--asr-model {item!r}: {language_problem(lang)}")
        if sep and lang and choice in CATALOGUE:
            models[primary_language(lang)] = choice
        elif sep and lang and Path(choice).is_dir():
            models[primary_language(lang)] = str(Path(choice).resolve())
        else:
            raise SelectionError(f"--asr-model {item!r}: expected LANG=NAME ({', '.join(CATALOGUE)}) "
                                 "or LANG=DIR with an existing model folder")
    if not names:
        return None
    if "asr" in names:
        for lang in filter(None, map(primary_language, languages)):
            choice = models.get(lang) or default_choice(lang)
            if choice is not None:
                models[lang] = choice
        # A model that is missing or differs from its pins stops the run before any row, not each row.
        for lang, choice in sorted(models.items()):
            try:
                resolve(choice)
            except AsrModelError as exc:
                raise SelectionError(f"ASR model for {lang!r}: {exc}") from None
    return Scorer(names, models, metric_device=metric_device)


def with_language(evalset: EvalSet, language: str) -> EvalSet:
    """Give utterances without a declared language the one the user named; the manifest hash
    changes with it, so the run's plan records the choice."""
    if not language:
        return evalset
    utterances = tuple(u if u.language else dataclasses.replace(u, language=language) for u in evalset.utterances)
    digest = hashlib.sha256(f"{evalset.manifest_sha256}:language={language}".encode()).hexdigest()
    return dataclasses.replace(evalset, utterances=utterances, manifest_sha256=digest)


def evaluation_set(input_path: Path | None, layout: str, language: str, data_dir: Path | None, allow_download: bool,
                   limit: int | None, shard: str | None, channels: str = "mix",
                   language_from_folders: bool = False, limit_per_language: int | None = None) -> EvalSet:
    """A folder of audio in the named corpus layout, or one audio file, or else the smoke set; then its
    subset: --limit-per-language, --limit and --shard (corpora.Subset)."""
    if language and language_problem(language):
        raise SelectionError(f"--language {language_problem(language)}; leave it out for a language no recogniser "
                             "here knows")
    try:
        parsed = parse_shard(shard) if shard else None
        if input_path is not None:
            return with_language(load_corpus(input_path, layout, limit, parsed, channels, language_from_folders,
                                             limit_per_language, language), language)
        return select(load_smoke(data_dir=data_dir, allow_download=allow_download),
                      Subset(limit, parsed, limit_per_language))
    except ValueError as exc:
        raise SelectionError(str(exc)) from None


def registry_entry(name: str) -> Entry:
    """The registry entry a name means: a registry id, or else a codec family (either may carry :CONFIG)."""
    family = name.partition(":")[0]
    try:
        return load_entry(family)
    except RegistryError:
        return entry_for_family(family)
