"""`codecarena score`: score decoded files against references with the same metrics as a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecarena.commands.common import CliError, add_device_arg, add_metric_args, device_option


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    score = subparsers.add_parser("score", help="score decoded files against references with the same metrics")
    score.add_argument("ref_dir", type=Path, help="reference wav/flac folder (transcripts as for --input)")
    score.add_argument("dec_dir", type=Path,
                       help="decoded files with the same relative names; with --recursive, references in subfolders "
                            "DEC_DIR does not have are listed, not scored")
    score.add_argument("--recursive", action="store_true",
                       help="also read REF_DIR's subfolders (default: its top folder only; subfolders are named)")
    score.add_argument("--json", type=Path, help="also write every score to this JSON file")
    add_device_arg(score, "learned metrics")
    add_metric_args(score)


def run(args: argparse.Namespace) -> int:
    from codecarena import selection
    from codecarena.arena import ARENA_RATE
    from codecarena.audio_input import check_audio_file
    from codecarena.plural import counted, verb
    from codecarena.console import console, print_quality
    from codecarena.input_sets import load_input_dir
    from codecarena.files import write_json
    from codecarena.metrics.guarded import GuardedScorer
    from codecarena.metrics.scorer import UtteranceInfo
    from codecarena.results.summary import metric_stats
    from codecarena.runtime.limits import parse_limits

    metric_device = device_option(args.metric_device or device_option(args.device), "--metric-device")
    # Asked before any file is read or model verified; the refusal names the flag the user typed.
    selection.check_metric_device(selection.select_metrics(args.metrics), metric_device,
                                  "--metric-device" if args.metric_device else "--device")
    if not args.recursive and args.ref_dir.is_dir():
        # A mirror keeps its originals in a subfolder (original/): they are not references unless asked for.
        for sub in sorted(p.name for p in args.ref_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            console.print(f"{sub}/: subfolder not read (use --recursive)", style="yellow", soft_wrap=True)
    refs = load_input_dir(args.ref_dir, recursive=args.recursive)
    scorer = selection.scorer(args.metrics, args.asr_model, (u.language for u in refs.utterances), metric_device)
    if scorer is None:
        raise CliError("--metrics none leaves nothing to score")
    pairs, unmatched = [], []
    for utt in refs.utterances:
        relative = utt.path.relative_to(args.ref_dir.resolve())
        candidates = [args.dec_dir / relative.with_suffix(s) for s in (".wav", ".flac")]
        dec_path = next((c for c in candidates if c.is_file()), None)
        if dec_path is None:
            # A folder DEC_DIR lacks altogether (a mirror's original/) is not part of this scoring; a file
            # missing beside its decoded neighbours is a decode that went wrong.
            if (args.dec_dir / relative.parent).is_dir():
                raise CliError(f"{args.dec_dir}: no decoded file for {relative}")
            unmatched.append(relative)
            continue
        if utt.converted:
            raise CliError(f"{utt.path}: a reference must be mono wav or flac ({utt.source_format or utt.channel})")
        decoded = check_audio_file(dec_path)  # an AudioInputError: main prints it as one line naming the file
        if decoded.channels != 1:
            raise CliError(f"{dec_path}: expected mono audio")
        if ((utt.sample_rate, utt.num_samples) != (decoded.sample_rate, decoded.num_samples)
                or utt.sample_rate != ARENA_RATE):
            raise CliError(f"{dec_path}: {decoded.num_samples} samples at {decoded.sample_rate} Hz, its reference has "
                           f"{utt.num_samples} at {utt.sample_rate} Hz; both must be 16 kHz and of equal length")
        pairs.append((utt, dec_path))
    if not pairs:
        raise CliError(f"{args.dec_dir}: no decoded file has the relative name of a reference in {args.ref_dir} "
                       f"(e.g. {unmatched[0].with_suffix('.wav')})")
    # References in folders the decoded set does not have are named, never scored.
    if unmatched:
        folders = sorted({str(r.parent) for r in unmatched})
        n = len(unmatched)
        console.print(f"{n} of {counted(len(refs.utterances), 'reference')} {verb(n, 'has', 'have')} no decoded "
                      "file in "
                      f"{args.dec_dir} and {verb(n, 'is', 'are')} not scored (in {', '.join(folders[:5])}"
                      f"{' ...' if len(folders) > 5 else ''}; e.g. {unmatched[0]})", style="yellow", soft_wrap=True)
    for name, reason in refs.skipped:
        console.print(f"{args.ref_dir / name}: skipped, {reason}", style="yellow", soft_wrap=True)
    # A metric's native crash fails that metric in a scoring process, never this command.
    guarded = GuardedScorer(scorer.metrics, scorer.asr_models, parse_limits(None), log_path=None,
                            metric_device=metric_device)
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
        # Version 2 added metric_devices: where each metric was computed (metrics/engines.py).
        write_json(args.json, {"version": 2, "metrics": scorer.describe(u.language for u in refs.utterances),
                               "metric_devices": guarded.devices, "scores": scored})
        console.print(f"scores written to {args.json}")
    return 0
