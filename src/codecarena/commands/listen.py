"""`codecarena listen`: a listening test (MUSHRA after ITU-R BS.1534-3, or A/B) on runs' own decoded
audio, served to browsers from this machine, exported as a static bundle, or summarised."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from codecarena.commands.common import CliError

if TYPE_CHECKING:
    from codecarena.results.listening.definition import ListeningTest
    from codecarena.results.run import Run

DEFAULT_PORT = 8770


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = subparsers.add_parser("listen", help="a listening test (MUSHRA or A/B) on runs' own decoded audio, in the "
                                             "browser; ratings tied to the stimuli's sha256 (docs/listening.md)")
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="runs of one evaluation set; the test lives in the first one's listening/ folder")
    p.add_argument("--name", default=None, help="the test's name (default mushra, or ab with --ab)")
    p.add_argument("--codec", action="append", default=[], metavar="SPEC|RUN/SPEC",
                   help="a configuration to test, repeatable (default every configuration of the runs)")
    p.add_argument("--utterance", action="append", default=[], metavar="ID",
                   help="an utterance to make a trial of, repeatable (default a sample of --trials)")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="trials per listener when utterances are sampled (default 10), taken in turn per language")
    p.add_argument("--training", default=None, metavar="ID", help="the training trial's utterance (default one "
                                                                   "that is not a trial, if there is one)")
    p.add_argument("--seed", type=int, default=None, help="seed of the sample and of every listener's orders "
                                                          "(default drawn at random; recorded in test.json)")
    p.add_argument("--ab", default=None, metavar="A,B", help="an A/B preference test of two configurations "
                                                             "instead of MUSHRA")
    p.add_argument("--no-preference", action="store_true", help="A/B: allow answering 'no preference'")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--build-only", action="store_true", help="build (or check) the test and exit")
    action.add_argument("--export", type=Path, metavar="DIR",
                        help="write a static bundle of the test (HTML, JavaScript, audio, manifest with hashes) to DIR")
    action.add_argument("--import", dest="import_file", type=Path, metavar="FILE",
                        help="check a ratings file downloaded from a static bundle and add it to the run")
    action.add_argument("--results", action="store_true",
                        help="print the results (screening, MUSHRA, correlations) and write results.json")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; anything else warns)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--read-timeout", type=float, default=30.0,
                   help="seconds a client has to send a request's headers, and again its body (default 30)")


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _design_given(args: argparse.Namespace) -> bool:
    return bool(args.codec or args.utterance or args.trials is not None or args.training or args.seed is not None
                or args.ab or args.no_preference)


def _test(args: argparse.Namespace, runs: list[Run]) -> ListeningTest:
    """The test named, built now or as built before (the same design asked again, or none asked)."""
    from codecarena.results.listening import anchors
    from codecarena.results.listening.build import DEFAULT_TRIALS, Design, build, design_differences
    from codecarena.results.listening.definition import load_test, save_test, stimulus_paths, stimulus_problems

    home = runs[0].dir
    kind = "ab" if args.ab else "mushra"
    name = args.name or kind
    exists = home.listening_file(name, "test.json").exists()
    if not exists and (args.results or args.export):
        raise CliError(f"{home.root}: no listening test {name!r} (build it first: codecarena listen RUN_DIR ...)")
    existing = load_test(home, name) if exists else None
    if existing is not None and not _design_given(args):
        test = existing
    else:
        if args.ab and len(args.ab.split(",")) != 2:
            raise CliError(f"--ab {args.ab}: name two configurations, A,B")
        if args.no_preference and not args.ab:
            raise CliError("--no-preference is an A/B option; add --ab A,B")
        if args.trials is not None and args.trials < 1:
            raise CliError(f"--trials {args.trials}: must be at least 1")
        design = Design(name=name, kind=kind, codecs=tuple(args.ab.split(",") if args.ab else args.codec),
                        utterances=tuple(args.utterance), trials=args.trials or DEFAULT_TRIALS,
                        seed=args.seed if args.seed is not None else existing.seed if existing else None,
                        training=args.training, no_preference=args.no_preference)
        test, made = build(runs, design)
        if existing is not None:
            differs = design_differences(existing, test)
            if differs:
                raise CliError(f"{home.listening_file(name, 'test.json')}: a test named {name} was built on "
                               f"{existing.created_at} with another {', '.join(differs)}; its ratings belong to it: "
                               "choose another --name")
            test = existing
        else:
            with home.locked():
                for path, data in made.items():
                    anchors.write_file(path, data)
                save_test(home, test)
    problems = stimulus_problems(stimulus_paths(home, test))
    if problems:
        raise CliError(f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return test


def _describe(test: ListeningTest) -> list[str]:
    from codecarena.results.listening.definition import HIDDEN_REFERENCE

    lines = [f"test {test.name} ({test.kind}, sha256 {test.test_sha256[:12]}, seed {test.seed}): "
             f"{len(test.trials)} trials, training on {test.training.utterance}"]
    levels = {f.sha256: f.level_db for f in test.files}
    for c in test.conditions:
        if test.kind == "mushra":
            gap = [levels[t.stimuli[c.id]] - levels[t.stimuli[HIDDEN_REFERENCE]] for t in test.trials]
            mean_gap = sum(gap) / len(gap)
            note = (f"; {mean_gap:+.1f} dB from the reference on average (BS.1534-3 asks for aligned levels; the "
                    "decoded bytes are played as they are)") if abs(mean_gap) > 1.0 and c.role == "codec" else ""
        else:
            note = ""
        lines.append(f"  {c.id}: {c.label}{note}")
    return lines


def _results_lines(document: dict[str, Any]) -> list[str]:
    from codecarena.results.formatting import fmt_interval, fmt_num

    lines = [f"screening: {document['screening']}"]
    for s in document["listeners"]:
        lines.append(f"  listener {s['listener']}: {s['status']}" + (f" ({'; '.join(s['reasons'])})" if s["reasons"] else ""))
    for note in document["notes"]:
        lines.append(f"note: {note}")
    if "ab" in document:
        ab = document["ab"]
        ci = fmt_interval(ab["ci95"]) if ab["ci95"] else ab["ci_note"]
        lines.append(f"A/B: {ab['a_label']} chosen {ab['a']}, {ab['b_label']} {ab['b']}, no preference "
                     f"{ab['no_preference']}; share of A {fmt_num(ab['share_a'])} {ci}, p = {fmt_num(ab['p_value'])}")
        return lines
    lines.append("MUSHRA (mean, 95% interval resampling listeners and utterances; BS.1534-3's t-interval):")
    for c in document["conditions"]:
        if "mean" not in c:
            lines.append(f"  {c['label']}: no included listener")
            continue
        ci = fmt_interval(c["ci95"], 1) if c["ci95"] else c["ci_note"]
        t = fmt_interval(c["ci95_t"], 1) if c["ci95_t"] else "-"
        lines.append(f"  {c['label']}: {c['mean']:.1f} {ci}; t {t}; {c['n_listeners']} listeners, "
                     f"{c['n_ratings']} ratings")
    lines.append("which metric predicts your listeners (agreement; sign turned where lower is better):")
    for m in sorted(document["correlations"]["metrics"], key=lambda m: document["correlations"]["ranking"].index(m["metric"])):
        cells = [f"{level} " + " ".join(f"{k[0]}={fmt_num(m[level][k]['agreement'])}" for k in
                                        ("pearson", "spearman", "kendall")) + f" (n={m[level]['n']})"
                 for level in ("stimulus", "system")]
        lines.append(f"  {m['label']}: " + "; ".join(cells))
    return lines


def _serve(args: argparse.Namespace, runs: list[Run], test: ListeningTest) -> None:
    import uvicorn

    from codecarena.results.listening.definition import stimulus_paths
    from codecarena.results.listening.results import derive, write_results
    from codecarena.results.listening.server import ServerConfig, create_app
    from codecarena.service.app import header_deadline_protocol
    from codecarena.service.check import is_loopback

    home = runs[0].dir
    loopback = is_loopback(args.host)
    if not loopback:
        print(f"codecarena listen: warning: --host {args.host} accepts connections from other machines; anyone who "
              "reaches it can submit answers under any listener id", file=sys.stderr, flush=True)
    config = ServerConfig(home=home, test=test, audio=stimulus_paths(home, test), read_timeout=args.read_timeout,
                          loopback_port=args.port if loopback else None)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with home.locked():
            print(f"codecarena listen: test {test.name} on http://{args.host}:{args.port}/?listener=ID ; answers go to "
                  f"{home.root / 'listening' / test.name / 'listeners'}", flush=True)
            try:
                uvicorn.run(create_app(config), host=args.host, port=args.port, log_level="warning",
                            http=header_deadline_protocol(args.read_timeout), timeout_keep_alive=5)
            finally:
                try:
                    write_results(derive(home, test.name))
                except ValueError as exc:
                    print(f"codecarena listen: results.json not written: {exc}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.plural import counted
    from codecarena.results.listening.definition import load_test, test_names
    from codecarena.results.listening.export import export_bundle, import_ratings
    from codecarena.results.listening.results import derive, write_results
    from codecarena.results.record import RunLoadError
    from codecarena.results.run import Run

    if not (0 < args.port < 65536) or not args.read_timeout > 0:
        raise CliError(f"--port {args.port} / --read-timeout {args.read_timeout:g}: a port 1-65535 and a positive time")
    try:
        runs = [Run.open(d) for d in args.run_dirs]
    except RunLoadError as exc:
        raise CliError(str(exc)) from None
    home = runs[0].dir
    if args.import_file is not None:
        if _design_given(args):
            raise CliError("--import adds ratings to a test already built; it takes no design option")
        with home.locked():
            test, listener, count = import_ratings(home, [load_test(home, n) for n in test_names(home)],
                                                   args.import_file)
            write_results(derive(home, test.name))
        console.print(f"imported {counted(count, 'answer')} of listener {listener} into test {test.name} of {home.root}; "
                      "results.json written again")
        return 0
    if (args.results or args.export) and _design_given(args):
        raise CliError("--results and --export use a test already built; they take no design option")
    test = _test(args, runs)
    for line in _describe(test):
        console.print(line, soft_wrap=True)
    if args.export:
        written = export_bundle(home, test, args.export)
        console.print(f"wrote {len(written)} files to {args.export}: serve it with any static web server; each "
                      f"listener downloads their answers, which `codecarena listen {home.root} --import FILE` adds")
    elif args.results:
        results = derive(home, test.name)
        with home.locked():
            write_results(results)
        for line in _results_lines(results.document):
            console.print(line, soft_wrap=True)
    elif not args.build_only:
        _serve(args, runs, test)
    return 0
