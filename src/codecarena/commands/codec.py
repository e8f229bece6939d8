"""`codecarena codec add|list|show|remove`: the user's own codecs (registry/user_units.py, docs/plugins.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from codecarena.commands.common import CliError
from codecarena.text import printable

if TYPE_CHECKING:
    from codecarena.registry.catalog import Family
    from codecarena.registry.user_units import UserUnit

# What every runtime's worker imports besides the codec's own packages, at the harness's versions
# (pyseccomp: the sandbox's seccomp filter, codecarena/sandbox/syscalls.py).
WORKER_BASE = ("numpy", "soundfile", "soxr", "pyseccomp")


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    codec = subparsers.add_parser("codec", help="add, list, show or remove your own codecs")
    sub = codec.add_subparsers(dest="codec_command", required=True)
    add = sub.add_parser("add", help="pin a codec of yours (a Python module or package, or a command-line codec) "
                                     "so that `run --codec NAME:CONFIG` runs it")
    add.add_argument("name", help="the family name its codec specs use (lower-case letters, digits, '_')")
    add.add_argument("--module", type=Path, help="a .py file or a package folder that exports ADAPTER "
                                                 "(codecarena.plugin.Adapter)")
    add.add_argument("--declaration", type=Path,
                     help="its codec.toml (default: MODULE.toml beside a .py file, else codec.toml beside or "
                          "inside the module)")
    add.add_argument("--requirements", type=Path,
                     help="requirements of its own runtime, built now in isolation (default: it runs in "
                          "codecarena's environment, numpy and soundfile available)")
    add.add_argument("--checkpoint", type=Path, action="append", default=[],
                     help="a model file it loads (repeat for several); pinned by size and sha256, a copy kept")
    sub.add_parser("list", help="your codecs, their pins and, in one word, whether each runs now (else what to do)")
    show = sub.add_parser("show", help="one codec: its source and pins, declaration, runtime and whether it runs now")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print its record (unit.json) as it is kept instead")
    remove = sub.add_parser("remove", help="forget a codec (its runtime and kept checkpoints too)")
    remove.add_argument("name")


def run(args: argparse.Namespace) -> int:
    from codecarena.commands.codec_view import list_codecs, show_codec
    from codecarena.registry import user_units

    if args.codec_command == "add":
        return _add(args)
    if args.codec_command == "list":
        return list_codecs()
    problem = user_units.name_problem(args.name)
    if problem:
        raise CliError(problem)
    if args.codec_command == "show":
        return show_codec(args.name, args.json)
    from codecarena.console import console
    from codecarena.runtime import venvs

    removed = user_units.remove(args.name)
    venvs.remove(f"{user_units.REGISTRY_PREFIX}{args.name}")
    console.print(f"user codec {args.name}: {'removed' if removed else 'not found'}")
    return 0 if removed else 2


def _declaration_file(args: argparse.Namespace) -> Path:
    if args.declaration is not None:
        return args.declaration
    if args.module is None:
        raise CliError("codec add: give --module (a Python codec) or --declaration (a command-line codec)")
    module: Path = args.module
    candidates = [module.with_suffix(".toml"), module.parent / "codec.toml"] if module.suffix == ".py" \
        else [module / "codec.toml", module.parent / "codec.toml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise CliError(f"{module}: no declaration found ({' or '.join(map(str, candidates))}); write one "
                   "(docs/plugins.md) or name it with --declaration")


def _add(args: argparse.Namespace) -> int:
    from codecarena.console import console
    from codecarena.plural import counted
    from codecarena.registry import user_units
    from codecarena.registry.catalog import BUILTIN, parse_declaration
    from codecarena.registry.strict import RegistryError

    name = args.name
    problem = user_units.name_problem(name)
    if problem:
        raise CliError(problem)
    if name in BUILTIN:
        raise CliError(f"{name} is a built-in family; give your codec another name")
    declaration_file = _declaration_file(args)
    try:
        declaration = declaration_file.read_text(encoding="utf-8")
        family = parse_declaration(declaration, str(declaration_file), "", user=True)
    except OSError as exc:
        raise CliError(f"{declaration_file}: cannot be read ({exc.strerror})") from None
    except RegistryError as exc:
        raise CliError(str(exc)) from None
    if family.name != name:
        raise CliError(f"{declaration_file}: declares the family {family.name!r}, not {name!r}")
    if family.command is not None:
        return _add_command(args, declaration, declaration_file, family)
    if args.module is None:
        raise CliError(f"{declaration_file}: a Python codec needs --module (the file or package exporting ADAPTER)")
    try:
        source = user_units.source_of(args.module)
        files = [user_units.checkpoint_file(path) for path in args.checkpoint]
    except FileNotFoundError:
        raise CliError(f"{args.module}: no such file or folder") from None
    except user_units.UserUnitError as exc:
        raise CliError(str(exc)) from None
    if len({f.name for f in files}) != len(files):
        raise CliError(f"two --checkpoint files share a name: {[f.name for f in files]}")
    if (family.supported_weights == "none") == bool(files):
        raise CliError(f"{declaration_file}: supported_weights is {family.supported_weights!r} but "
                       f"{counted(len(files), '--checkpoint file')} given (none for 'none', one or more otherwise)")
    requirements = _requirements(args.requirements)
    unit = user_units.UserUnit(name, user_units.now(), declaration, source, tuple(files), requirements)
    try:
        user_units.save(unit, {f.name: path for f, path in zip(files, args.checkpoint)})
    except user_units.UserUnitError as exc:
        raise CliError(str(exc)) from None
    try:
        interpreter = _runtime(unit)
        _check_adapter(interpreter, name)
    except CliError:
        user_units.remove(name)
        raise
    git = f", git {source.git_commit[:12]}{' (dirty)' if source.git_dirty else ''}" if source.git_commit else ""
    console.print(f"user codec {name} added: {source.kind} {source.path} (sha256 {source.sha256[:12]}...{git}); "
                  f"{counted(len(files), 'checkpoint')}; runtime "
                  f"{'its own, ' + str(interpreter) if requirements else 'codecarena environment'}")
    console.print(f"run it with: codecarena run --codec {name}:{family.default_config}")
    return 0


def _add_command(args: argparse.Namespace, declaration: str, declaration_file: Path, family: Family) -> int:
    """A command-line codec: its declaration is its source; each program it runs is pinned by sha256,
    and so is every shared library it loads (BINARY_PIN_RULE, registry/libraries.py)."""
    from codecarena.console import console
    from codecarena.plural import counted
    from codecarena.registry import libraries, user_units
    from codecarena.registry.binaries import BinaryError, identify
    from codecarena.registry.catalog import BINARY_PIN_RULE

    if args.module is not None or args.requirements is not None or args.checkpoint:
        raise CliError(f"{declaration_file}: a command-line codec (kind = \"command\") takes no --module, "
                       "--requirements or --checkpoint: its programs are what it runs")
    assert family.command is not None
    name, pins, loaded = family.name, [], []
    for binary in family.command.binaries:
        try:
            identity = identify(binary.name, binary.path)
            loaded += libraries.pin(binary.name, identity.resolved)
        except (BinaryError, libraries.LibraryError) as exc:
            raise CliError(f"{declaration_file}: {exc}") from None
        if binary.sha256 and binary.sha256 != identity.sha256:
            raise CliError(f"{declaration_file}: binary {binary.name} ({identity.resolved}) has sha256 "
                           f"{identity.sha256}, not the {binary.sha256} its declaration pins ({BINARY_PIN_RULE})")
        pins.append((binary.name, identity.sha256))
    unit = user_units.UserUnit(name, user_units.now(), declaration, None, (), "", tuple(sorted(pins)), tuple(loaded))
    user_units.save(unit, {})
    console.print(f"user codec {name} added: a command-line codec running "
                  + ", ".join(f"{b} (sha256 {sha[:12]}...)" for b, sha in pins)
                  + f"; {counted(len({lib.path for lib in loaded}), 'shared library', 'shared libraries')} "
                    "it loads pinned by sha256")
    console.print(f"run it with: codecarena run --codec {name}:{family.default_config}")
    return 0


def _requirements(path: Path | None) -> str:
    """The requirements file's text plus the worker's base at the harness's versions (a runtime's
    worker imports them); "" when there is none (it runs in codecarena's environment)."""
    if path is None:
        return ""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{path}: cannot be read ({exc.strerror})") from None
    from importlib import metadata

    base = "".join(f"{package}=={metadata.version(package)}\n" for package in WORKER_BASE)
    return f"{text.rstrip()}\n# the worker's base, at codecarena's own versions\n{base}"


def _runtime(unit: UserUnit) -> str:
    """The interpreter its workers use: its own runtime, built now from its requirements (the
    resolved versions recorded), else codecarena's."""
    from codecarena.console import console
    from codecarena.runtime import venvs

    if not unit.requirements:
        venvs.remove(unit.registry_id)
        return sys.executable
    try:
        current = venvs.describe_isolated(unit.registry_id, "")
        if venvs.recorded_lock(unit.registry_id) == unit.requirements:
            return str(current["interpreter"])
    except venvs.RuntimeMissing:
        pass
    console.print(f"building the runtime of user codec {unit.name} in {venvs.env_dir(unit.registry_id)} ...")
    try:
        folder = venvs.build(unit.registry_id, unit.requirements)
    except venvs.RuntimeMissing as exc:
        raise CliError(str(exc)) from None
    return str(folder / "bin" / "python")


def _check_adapter(interpreter: str, name: str) -> None:
    """Import the codec in its runtime, in its sandbox, as a worker would, and check what it exports."""
    import subprocess
    import tempfile

    from codecarena.runtime.launch import worker_command
    from codecarena.runtime.private import prepare

    with tempfile.TemporaryDirectory() as scratch:
        prepare(Path(scratch))
        command, env = worker_command(interpreter, name, Path(scratch), "--check")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        except subprocess.TimeoutExpired:
            raise CliError(f"user codec {name}: importing it took over 600 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CliError(f"user codec {name} does not load: {printable(last)}")
