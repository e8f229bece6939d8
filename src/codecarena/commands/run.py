"""`codecarena run`: encode, decode and replay every codec x utterance into a run directory."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from codecarena.arena import ARENA_RATE
from codecarena.choices import CHANNEL_CHOICES, CORPUS_LAYOUTS
from codecarena.commands.common import CliError, add_device_arg, add_metric_args, add_runtime_python_arg, device_option
from codecarena.runtime.limits import DEFAULT_POLL_S, DEFAULT_TIMEOUT_S
from codecarena.text import printable

if TYPE_CHECKING:
    from rich.text import Text

    from codecarena.datasets import EvalSet
    from codecarena.pipeline import Executor
    from codecarena.specs import CodecSpec

DEFAULT_CODECS = ("opus:6k", "opus:12k", "codec2:3200", "codec2:700C", "pcm:16")


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    run = subparsers.add_parser("run", help="encode, decode and replay every codec x utterance into a run directory")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--set", default="smoke", choices=["smoke"], help="built-in evaluation set")
    source.add_argument("--input", type=Path, metavar="FOLDER|FILE",
                        help="evaluate your own audio instead: a folder of audio files (with an optional "
                             "manifest.json giving each its language, speaker and transcript; see README) or one "
                             "file; any format libsndfile or FFmpeg reads, recognised by content: wav, flac, mp3, "
                             "ogg, m4a, ...")
    run.add_argument("--channels", default="mix", choices=CHANNEL_CHOICES,
                     help="multichannel --input files: mix (the mean of the channels, default), left, right, or "
                          "each (one utterance per channel, ids <id>__ch<k>); recorded per utterance")
    run.add_argument("--language", default="",
                     help="language of --input files that declare none (e.g. en: enables English ASR metrics); a "
                          "language Whisper transcribes, optionally with a script and region (zh-Hans, pt-BR)")
    run.add_argument("--language-from-folders", action="store_true",
                     help="a plain --input folder: each file's language is the name of its first folder "
                          "(en/a.wav, zh/b.wav); a first folder that names no language Whisper transcribes is an "
                          "error")
    run.add_argument("--data-dir", type=Path, help="local mirror of the smoke set (else $CODECARENA_DATA, cache, download)")
    run.add_argument("--no-download", action="store_true", help="never download the smoke set or model files")
    run.add_argument("--models-dir", type=Path,
                     help="local mirror of model files, laid out <family>/<file> (else $CODECARENA_MODELS, cache, download)")
    run.add_argument("--weights", default="real", metavar="real|user|synthetic[:SEED]",
                     help="neural families: the registry's pinned real weights (default), the checkpoint you pinned "
                          "with `registry pin` (every output says pinned by user), or seeded random weights saved to "
                          "a checkpoint and loaded through the real loader (every output says weights: synthetic)")
    run.add_argument("--codec", action="append", dest="codecs", metavar="SPEC",
                     help=f"codec spec, repeatable (default: {' '.join(DEFAULT_CODECS)})")
    run.add_argument("--channel", action="append", dest="channel_specs", metavar="CHANNEL",
                     help="also run every codec configuration through this channel, repeatable: loss=R%% (independent "
                          "packet loss), burst=R%%,len=B (Gilbert bursts), ber=X (bit errors), each with seed=N and "
                          "policy=repeat|silence; each is a configuration SPEC@CHANNEL beside the clean one "
                          "(docs/channel.md). Not --channels, which picks channels of multichannel input files")
    run.add_argument("--variant", default="", metavar="NAME",
                     help="a named numerical variant applied to every codec's loaded model and recorded in every row "
                          "(eager_snake_v1: Snake1d evaluated eagerly, see docs/determinism.md); default: upstream numerics")
    run.add_argument("--out", help="run directory (default: runs/<set>-<plan hash>, so a rerun resumes)")
    run.add_argument("--add", action="store_true",
                     help="add the --codec configurations to the run in --out (its other options must be the same); "
                          "its rows are kept and the run then covers every codec configuration")
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
    add_device_arg(run)
    add_metric_args(run)
    add_runtime_python_arg(run)


def with_channels(specs: tuple[CodecSpec, ...], channels: list[str]) -> tuple[CodecSpec, ...]:
    """Each configuration followed by itself through each --channel; CliError in one line for a channel
    that does not parse or a family whose payloads cannot cross one."""
    from codecarena.channel.spec import ChannelError, parse_channel
    from codecarena.registry.catalog import FAMILIES

    mistaken = [text for text in channels if text in CHANNEL_CHOICES]
    if mistaken:
        raise CliError(f"--channel {mistaken[0]}: --channel impairs the payloads (loss=5%, burst=10%,len=3, "
                       f"ber=1e-3; docs/channel.md); the audio channel of a multichannel file is --channels "
                       f"{mistaken[0]}")
    try:
        parsed = [parse_channel(text).canonical for text in channels]
    except ChannelError as exc:
        raise CliError(f"--channel: {exc}") from None
    out: list[CodecSpec] = []
    for spec in specs:
        out.append(spec)
        out += [dataclasses.replace(spec, channel=channel) for channel in parsed if not spec.channel]
    for spec in out:
        if spec.channel and FAMILIES[spec.family].channel is None:
            able = ", ".join(f for f, d in FAMILIES.items() if d.channel is not None)
            raise CliError(f"{spec.canonical}: {spec.family} declares no [channel] support, so its payloads cannot "
                           f"cross a channel (families that can: {able})")
    return tuple(out)


def _replay_sample(text: str | None, mode: str, set_name: str) -> int | None:
    """Rows per codec configuration that are replayed; None means all of them."""
    if text is None:
        return None if mode == "cold" or set_name.split("[")[0] == "smoke" else 1
    if text == "all":
        return None
    if text.isdigit():
        return int(text)
    raise CliError(f"--replay-sample {text!r}: expected a number or 'all'")


def _out_dir(text: str) -> Path:
    """--out as given, refused unless it can be a run directory (argparse's Path('') would mean the
    current directory)."""
    if not text.strip():
        raise CliError("--out '': no run directory named (leave --out out for runs/<set>-<plan hash>)")
    out = Path(text)
    _check_run_dir(out, f"--out {out}")
    return out


def _check_run_dir(out: Path, label: str) -> None:
    """Refuse, in one line and before any work, a run directory that is a file, lies under a file,
    or sits where this user cannot write; the run would otherwise stop midway with a traceback."""
    probe = out.absolute()
    while not os.path.lexists(probe):
        probe = probe.parent
    if probe == out.absolute() and not probe.is_dir():
        raise CliError(f"{label}: exists and is not a directory; name a run directory")
    if not probe.is_dir():
        raise CliError(f"{label}: {probe} is not a directory, so the run directory cannot be made there")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CliError(f"{label}: {probe} is not writable by this user (permissions or a read-only file system)")


def input_notes(evalset: EvalSet) -> list[Text]:
    """What the console says about the inputs before the first row: everything of the input that is
    skipped (with why and what to do) and every conversion a reference will go through."""
    from rich.text import Text

    lines = []
    if evalset.skipped:
        lines.append(Text(f"{len(evalset.skipped)} files or folders of the input are skipped, each with why "
                          "(listed in run.json as skipped_inputs); to include one, repair, convert or rename it as its "
                          "reason says:", style="yellow"))
        lines += [Text(f"  {name}: {reason}", style="yellow") for name, reason in evalset.skipped]
    converted = [u for u in evalset.utterances if u.converted or u.sample_rate != ARENA_RATE]
    if converted:
        lines.append(Text(f"{len(converted)} of {len(evalset.utterances)} utterances are converted before coding "
                          "(recorded in every row as reference_conversions):"))
        for u in converted:
            steps = [f"decode {u.source_format}"] if u.source_format else []
            if u.channel:
                steps.append({"mix": "downmix to mono"}.get(u.channel, f"take channel {u.channel}"))
            if u.sample_rate != ARENA_RATE:
                steps.append(f"resample {u.sample_rate} -> {ARENA_RATE} Hz (soxr VHQ)")
            lines.append(Text(f"  {u.id}: {'; '.join(steps)}"))
    return lines


def describe_set(evalset: EvalSet, configurations: int, out: Path) -> str:
    """The line that opens a run: the set, how many codec configurations, where it goes."""
    from codecarena.results.formatting import count

    return (f"set {evalset.name} ({count(len(evalset.utterances), 'utterance')}, {evalset.source}); "
            f"{count(configurations, 'codec configuration')}; run directory {out}")


def eta_s(elapsed_s: float, computed: int, remaining: int) -> float | None:
    """Seconds left at the pace of the rows computed in this session; resumed rows are read back in
    an instant and would make the pace look faster than it is. None before the first computed row."""
    if remaining == 0:
        return 0.0
    if computed == 0:
        return None
    return elapsed_s / computed * remaining


def eta_text(eta: float | None) -> str:
    return "unknown yet" if eta is None else f"{eta:.0f} s"


def one_line(text: str, limit: int = 200) -> str:
    """An error as one printable log line: whitespace runs collapsed, control characters written
    out (a row of an older run may hold a codec's escape sequences), cut at `limit` characters."""
    flat = printable(" ".join(text.split())) or "no error text"
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def _executor(args: argparse.Namespace) -> Executor:
    if args.executor == "ray":
        from codecarena.executors.ray_cluster import RayExecutor

        return RayExecutor(address=args.ray_address, workers=args.workers)
    from codecarena.executors.local import LocalExecutor

    return LocalExecutor(workers=args.workers)


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from codecarena import selection
    from codecarena.console import console, print_quality, print_summary
    from codecarena.files import sha256_json
    from codecarena.machine import describe
    from codecarena.pipeline import RunOptions, execute, plan_of, planned
    from codecarena.results.formatting import count, language_label
    from codecarena.results.summary import summarize
    from codecarena.results.verdict import verdict
    from codecarena.runtime.external import ExternalRuntime, external_mark
    from codecarena.runtime.limits import parse_limits
    from codecarena.specs import parse_configuration

    limits = parse_limits(args.memory_limit, args.guard_poll, args.stage_timeout)
    device = device_option(args.device)
    metric_device = device_option(args.metric_device or device, "--metric-device")
    out_arg = _out_dir(args.out) if args.out is not None else None
    specs = with_channels(tuple(parse_configuration(s) for s in (args.codecs or DEFAULT_CODECS)),
                          args.channel_specs or [])
    canon = [s.canonical for s in specs]
    if len(set(canon)) != len(canon):
        raise CliError(f"the same codec configuration is given twice: {canon}")
    if args.language_from_folders and args.input is None:
        raise CliError("--language-from-folders reads the folders of --input")
    evalset = selection.evaluation_set(args.input, args.corpus, args.language, args.data_dir, not args.no_download,
                                       args.limit, args.shard, args.channels, args.language_from_folders)
    if args.add and args.out is None:
        raise CliError("--add needs --out, the run directory to add codec configurations to")
    if args.cold_sample < 0:
        raise CliError("--cold-sample must be >= 0")
    replay_sample = _replay_sample(args.replay_sample, args.mode, evalset.name)
    if args.workers is not None and args.workers < 1:
        raise CliError("--workers must be at least 1")
    if args.ray_address and args.executor != "ray":
        raise CliError("--ray-address needs --executor ray")
    if args.warm_repeats < 0:
        raise CliError("--warm-repeats must be >= 0")
    languages = sorted({u.language for u in evalset.utterances if u.language})
    scorer = selection.scorer(args.metrics, args.asr_model, languages, metric_device)
    selection.check_metric_device(scorer)
    weights = selection.canonical_weights(args.weights)
    runtimes = selection.runtimes(specs, weights, args.runtime_python)
    # Every runtime that would run on the device is asked before anything is written: a device that is
    # not there fails the command, never a row.
    for registry_id, info in selection.probe_devices(specs, runtimes, device).items():
        for rec in runtimes.values():
            if rec["registry"] == registry_id:
                rec["device"] = info
    selection.pinned_checkpoints(specs, weights, allow_download=not args.no_download)
    opts = RunOptions(
        out=Path("."), codecs=specs, limits=limits, warm_repeats=args.warm_repeats,
        metrics=scorer.metrics if scorer else (),
        asr_models=tuple(sorted(scorer.asr_models.items())) if scorer else (),
        weights=weights, variant=selection.check_variant(args.variant, specs),
        runtimes=tuple((family, rec["registry"], rec["interpreter"], *external_mark(rec))
                       for family, rec in runtimes.items()),
        external=tuple(ExternalRuntime.of(family, rec) for family, rec in runtimes.items() if external_mark(rec)),
        mode=args.mode, cold_sample=args.cold_sample, replay_sample=replay_sample, device=device,
        metric_device=metric_device)
    if out_arg is None:
        digest = sha256_json(plan_of(evalset, opts))[:10]
        name = evalset.name.replace(":", "-").replace("/", "_")
        out = Path("runs") / f"{name}-{digest}"
        _check_run_dir(out, f"run directory {out}")
    else:
        out = out_arg
    opts = dataclasses.replace(opts, out=out)
    # The directory's run is checked before anything is printed about it (execute checks it again, locked).
    followed, _, earlier = planned(evalset, opts, add=args.add)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what the checks cannot foresee, e.g. a folder in /proc
        raise CliError(f"run directory {out}: cannot be made ({exc.strerror})") from None
    total = len(followed.codecs) * len(evalset.utterances)
    if args.add and earlier is not None:
        had = len(earlier.plan.codecs)
        added = [s.canonical for s in followed.codecs[had:]]
        console.print(f"adding {count(len(added), 'codec configuration')} ({', '.join(added)}) to the {had} of "
                      f"the run in {out}" if added else
                      f"no codec configuration to add: resuming the {had} of the run in {out}")
    console.print(describe_set(evalset, len(followed.codecs), out))
    for line in input_notes(evalset):
        console.print(line, soft_wrap=True)
    started = time.monotonic()
    # Piped to a file, a progress bar shows nothing until the end: one log line per row instead.
    log_lines = not console.is_terminal
    if log_lines:
        console.print("preparing: loading models and references (the first row waits for them)...")
    # The description holds a codec spec and an utterance id: shown as written, never read as markup.
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("eta {task.fields[eta]}"), console=console, transient=False,
                  disable=log_lines) as progress:
        task = progress.add_task("preparing references and starting workers (the first rows also load models)",
                                 total=total, eta="-")
        resumed_rows = []
        done = [0]

        def on_row(row, resumed: bool) -> None:  # type: ignore[no-untyped-def]
            tag = "resumed" if resumed else row.status
            if resumed:
                resumed_rows.append(row)
            done[0] += 1
            elapsed = time.monotonic() - started
            eta = eta_text(eta_s(elapsed, done[0] - len(resumed_rows), total - done[0]))
            progress.update(task, advance=1, description=f"{row.codec} {row.utterance} ({tag})", eta=eta)
            if log_lines:
                problem = "" if resumed else verdict(row).reason
                failure = f": {one_line(problem)}" if problem else ""
                console.print(f"row {done[0]}/{total} {row.codec} {row.utterance} {tag}; elapsed {elapsed:.0f} s, "
                              f"eta {eta}{failure}", soft_wrap=True, markup=False)

        run_info = describe(args.command_line)
        run_info["metrics"] = scorer.describe(languages) if scorer else []
        run_info["runtimes"] = {rec["registry"]: rec for rec in runtimes.values()}
        rows = execute(evalset, opts, run_info, _executor(args), on_row, scorer, add=args.add)
    if resumed_rows:
        console.print(f"{len(resumed_rows)} complete rows resumed from the earlier run (files verified); "
                      f"{len(rows) - len(resumed_rows)} computed now")
    summary = summarize(rows)
    print_summary(summary)
    if scorer:
        print_quality({c["codec"]: c["metrics"] for c in summary["codecs"]})
        languages = sorted({lang for c in summary["codecs"] for lang in c["by_language"]})
        # A pooled mean hides a codec that fails one language: with two or more, each has its table.
        for language in languages if len(languages) > 1 else ():
            groups = {c["codec"]: c["by_language"][language] for c in summary["codecs"] if language in c["by_language"]}
            utterances = max(g["utterances"] for g in groups.values())
            print_quality({codec: g["metrics"] for codec, g in groups.items()}, title=f"quality, "
                          f"{language_label(language)} only ({utterances} utterance{'s' if utterances != 1 else ''})")
    if "channels" in summary:
        from codecarena.results.robustness import text_lines

        for line in text_lines(summary["channels"]):
            console.print(line, soft_wrap=True, markup=False)
    failed = [r for r in rows if verdict(r).kind]
    console.print(f"run directory: {out}")
    if failed:
        console.print(f"{len(failed)} of {len(rows)} rows failed a stage or a check; see above and "
                      f"{out / 'rows.jsonl'}", style="red")
        return 1
    return 0
