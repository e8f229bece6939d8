"""`codecarena run`: encode, decode and replay every codec x utterance into a run directory.

The options become a `Selection`; the library checks and resolves it into the run as one value
(`pipeline.prepare`), executes it, and `commands/run_view.py` prints what happens."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecarena.choices import ARENA_POLICIES, CHANNEL_CHOICES, CORPUS_LAYOUTS, DEFAULT_CODECS
from codecarena.commands.common import add_device_arg, add_metric_args, add_runtime_python_arg
from codecarena.runtime.limits import DEFAULT_POLL_S, DEFAULT_TIMEOUT_S


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
                          f"policy={'|'.join(ARENA_POLICIES)} (the arena's, for a decoder without concealment; each "
                          "family offers some of them); each is a configuration SPEC@CHANNEL beside the clean one "
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
    run.add_argument("--warm-repeats", type=int, default=2, help="timed in-process repeats after the cold call, in the rows of --warm-sample (default 2)")
    run.add_argument("--stage-timeout", default=str(DEFAULT_TIMEOUT_S),
                     help=f"seconds before a stage is killed (default {DEFAULT_TIMEOUT_S:g})")
    run.add_argument("--corpus", default="auto", choices=CORPUS_LAYOUTS,
                     help="layout of --input: librispeech (*.trans.txt), aishell (transcript file), kaldi (wav.scp + "
                          "text), plain, or auto (detect; see docs/performance.md)")
    run.add_argument("--limit-per-language", type=int, metavar="N",
                     help="only the first N utterances of each language (in the set's order), before --limit")
    run.add_argument("--limit", type=int, help="only the first N utterances (in sorted id order)")
    run.add_argument("--shard", metavar="K/N", help="only utterances whose index %% N == K (0 <= K < N), after --limit")
    _add_mode_args(run)
    run.add_argument("--executor", default="local", choices=["local", "ray"],
                     help="local: this machine (default); ray: actors on a Ray cluster (see docs/performance.md)")
    run.add_argument("--workers", type=int, default=None,
                     help="rows in flight at once (default: local, one per CPU core; ray, one per cluster CPU)")
    run.add_argument("--ray-address", default=None,
                     help="address of a running Ray cluster (default: start a local one on 127.0.0.1)")
    _add_condition_args(run)
    add_device_arg(run)
    add_metric_args(run)
    add_runtime_python_arg(run)


def _add_mode_args(run: argparse.ArgumentParser) -> None:
    run.add_argument("--mode", default="cold", choices=["cold", "warm"],
                     help="cold: a fresh worker process per stage (default); warm: one persistent worker per codec "
                          "runtime keeps the model loaded")
    run.add_argument("--fresh-interpreter", action="store_true",
                     help="start every fresh worker as a new interpreter instead of forking it from its runtime's "
                          "template, which has done the imports and nothing else (docs/performance.md)")
    run.add_argument("--cold-sample", type=int, default=1,
                     help="warm mode: the first N rows of each codec configuration still run cold (default 1)")
    run.add_argument("--replay-sample", default=None, metavar="N|all",
                     help="rows per codec configuration decoded again in a fresh process (default: all in cold mode "
                          "and for the smoke set, else 1)")
    run.add_argument("--warm-sample", default="3", metavar="N|all",
                     help="rows per codec configuration, of those that run cold, whose encode and decode repeat the "
                          "codec call --warm-repeats times for the warm RTF; the rest skip the repeats and have no "
                          "warm RTF (default 3; all: every cold row)")


def _add_condition_args(run: argparse.ArgumentParser) -> None:
    run.add_argument("--condition", action="append", dest="condition_specs", metavar="CONDITION",
                     help="also run every codec configuration on its input put through this condition, repeatable: "
                          "noise=white|pink|brown|babble|SET,snr=DB; rt60=SECONDS[,room=LxWxH]; rir=SET; level=DB; "
                          "tandem=CODEC_SPEC; gen=K, or generations=N for gen=2..N; noise, rt60 and rir take seed=N. "
                          "Each is a configuration SPEC%%CONDITION beside the clean one (docs/conditions.md)")
    run.add_argument("--noise-dir", action="append", dest="noise_dirs", default=[], metavar="[NAME=]DIR",
                     help="a folder of noise recordings (mono, 16 kHz) that noise=NAME draws from (NAME: the "
                          "folder's name unless given), every file pinned by sha256 in the plan; repeatable")
    run.add_argument("--rir-dir", action="append", dest="rir_dirs", default=[], metavar="[NAME=]DIR",
                     help="a folder of measured room impulse responses (mono, 16 kHz) that rir=NAME draws from, "
                          "pinned like --noise-dir; repeatable")


def run(args: argparse.Namespace) -> int:
    from codecarena.commands import run_view as view
    from codecarena.executors import executor_for
    from codecarena.pipeline.execute import execute
    from codecarena.pipeline.prepare import Selection, prepare

    plan = prepare(Selection(
        codecs=tuple(args.codecs or ()), channel_specs=tuple(args.channel_specs or ()),
        condition_specs=tuple(args.condition_specs or ()), noise_dirs=tuple(args.noise_dirs),
        rir_dirs=tuple(args.rir_dirs), input=args.input,
        corpus=args.corpus, language=args.language, language_from_folders=args.language_from_folders,
        channels=args.channels, data_dir=args.data_dir, download=not args.no_download, limit=args.limit,
        limit_per_language=args.limit_per_language, shard=args.shard, weights=args.weights, variant=args.variant,
        metrics=args.metrics, asr_models=tuple(args.asr_model), device=args.device, metric_device=args.metric_device,
        runtime_python=args.runtime_python, out=args.out, add=args.add, memory_limit=args.memory_limit,
        guard_poll=args.guard_poll, stage_timeout=args.stage_timeout, warm_repeats=args.warm_repeats,
        mode=args.mode, cold_sample=args.cold_sample, replay_sample=args.replay_sample,
        warm_sample=args.warm_sample, executor=args.executor,
        workers=args.workers, ray_address=args.ray_address, fresh_interpreter=args.fresh_interpreter,
        command=tuple(args.command_line)))
    view.opening(plan)
    with view.RowProgress(len(plan.codecs) * len(plan.evalset.utterances)) as progress:
        rows = execute(plan, executor_for(plan.execution), progress.on_row)
    return view.closing(plan, rows, progress.resumed)
