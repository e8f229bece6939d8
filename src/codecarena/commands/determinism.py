"""`codecarena determinism CODEC`: the determinism doctor from the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecarena.commands.common import CliError, add_device_arg, add_runtime_python_arg, device_option

# Long enough for the encoder's receptive field on speech; with TorchScript fusion on, the fuser runs
# through its interpreter on this CPU build (no LLVM), about 10 s per DAC encode of 0.02 s, so the
# default drops to a few frames there.
DEFAULT_SECONDS = 1.0
DEFAULT_SECONDS_FUSED = 0.05
DEFAULT_INPUT = "en_librispeech_1089-134686-0000"  # smoke set, 10.4 s, speech from 0.5 s


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = subparsers.add_parser("determinism", help="cold/warm, cross-process and attention-backend controls of a torch "
                                                  "codec's encoder, with a layer trace of any divergence")
    p.add_argument("codec", nargs="?", help="codec spec of a torch family (e.g. dac:16khz)")
    p.add_argument("--switches", default="", metavar="all|NAME,...",
                   help="also probe these controls of the GPU case, each in fresh processes on the device "
                        "(--list-switches shows them; one that cannot apply is listed with why)")
    p.add_argument("--list-switches", action="store_true", help="print the switches and what each sets, then exit")
    p.add_argument("--weights", default="real", metavar="real|synthetic[:SEED]")
    p.add_argument("--variant", default="", metavar="NAME", help="numerical variant to apply (e.g. eager_snake_v1)")
    p.add_argument("--jit-fusion", choices=["on", "off"], default="off",
                   help="on: TorchScript CPU fusion with the tensor-expression fuser (how the cold/warm divergence "
                        "of docs/determinism.md is provoked without a GPU); off: torch's defaults")
    add_device_arg(p, "the probed model")
    p.add_argument("--input", type=Path, help=f"a 16 kHz mono wav (default: smoke-set {DEFAULT_INPUT})")
    p.add_argument("--data-dir", type=Path, help="local mirror of the smoke set")
    p.add_argument("--start", type=float, default=None,
                   help="seconds into the input (default: the loudest window of the probed length, since rounding "
                        "differences can vanish on near-silence)")
    p.add_argument("--seconds", type=float, default=None,
                   help=f"length probed (default {DEFAULT_SECONDS} s; {DEFAULT_SECONDS_FUSED} s with --jit-fusion on)")
    p.add_argument("--out", type=Path, help="evidence folder (default determinism/<codec>-<variant>-fusion-<on|off>)")
    p.add_argument("--memory-limit", default=None, help="memory guard limit per probe process (default half of RAM)")
    p.add_argument("--inject-divergence", default="", metavar="MODULE",
                   help="detector self-check: perturb this module's output by one ulp on the first encode; the "
                        "evidence is marked as a self-check")
    add_runtime_python_arg(p)


def run(args: argparse.Namespace) -> int:
    from codecarena import selection
    from codecarena.console import console
    from codecarena.datasets import load_smoke
    from codecarena.determinism.doctor import DoctorError, diagnose, loudest_window
    from codecarena.determinism.switches import SwitchError, listing, parse_switches
    from codecarena.registry.catalog import FAMILIES
    from codecarena.runtime.limits import parse_limits
    from codecarena.specs import parse_spec

    if args.list_switches:
        console.print(listing(), end="", markup=False, soft_wrap=True)
        return 0
    if args.codec is None:
        raise CliError("determinism: name the codec spec of a torch family (e.g. dac:16khz)")
    try:
        switches = parse_switches(args.switches) if args.switches else ()
    except SwitchError as exc:
        raise CliError(str(exc)) from None
    device = device_option(args.device)
    spec = parse_spec(args.codec)
    if FAMILIES[spec.family].origin == "user":
        raise CliError(f"{spec.family} is a user codec: the determinism doctor probes built-in torch families (a user "
                       "codec runs only in its sandbox's stages: `codecarena run`)")
    if FAMILIES[spec.family].supported_weights == "none":
        raise CliError(f"{spec.family} is not a torch model; the determinism doctor probes torch codecs")
    weights = selection.canonical_weights(args.weights)
    if weights == "user":
        raise CliError("--weights user (a checkpoint pinned with `registry pin`) is for `codecarena run` only")
    runtime = selection.runtimes((spec,), weights, args.runtime_python)[spec.family]
    # A device the runtime cannot use is refused before any probe runs.
    selection.probe_devices((spec,), {spec.family: runtime}, device)
    variant = selection.check_variant(args.variant, (spec,))
    seconds = args.seconds if args.seconds is not None else (
        DEFAULT_SECONDS_FUSED if args.jit_fusion == "on" else DEFAULT_SECONDS)
    if args.input is not None:
        input_path = args.input
    else:
        smoke = load_smoke(data_dir=args.data_dir)
        input_path = next(u.path for u in smoke.utterances if u.id == DEFAULT_INPUT)
    start = args.start if args.start is not None else loudest_window(input_path, seconds)
    out = args.out or Path("determinism") / (f"{spec.slug}-{variant or 'default'}-fusion-{args.jit_fusion}"
                                             + (f"-{device.replace(':', '')}" if device != "cpu" else ""))
    limit = parse_limits(args.memory_limit).memory_limit_bytes
    console.print(f"probing {spec.canonical} on {device} (variant {variant or 'none'}, fusion {args.jit_fusion}"
                  f"{', switches ' + ','.join(switches) if switches else ''}) on "
                  f"{seconds} s of {input_path.name} from {start:.3f} s; evidence in {out}")
    try:
        evidence = diagnose(spec, weights=weights, variant=variant, jit_fusion=args.jit_fusion, input_path=input_path,
                            start_s=start, seconds=seconds, python=runtime["interpreter"], out=out,
                            limit_bytes=limit, inject=args.inject_divergence, device=device, switches=switches,
                            runtime=runtime)
    except DoctorError as exc:
        raise CliError(str(exc)) from None
    console.print((out / "summary.txt").read_text(encoding="utf-8"), end="")
    console.print(f"evidence: {out / 'evidence.json'}")
    return 1 if evidence["verdict"] == "divergent" else 0
