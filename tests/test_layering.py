"""The architecture docs/architecture.md states, checked on the code's own imports (`src/codecarena` and
the scripts of `bench/`, which import codecarena).

What is read from the docs: the layers (docs/architecture.md after `<!-- layers -->`, from the bottom up;
a module belongs to the layer of the longest backticked name that covers it, relative to `codecarena`),
the upward imports allowed (after `<!-- upward imports -->`: none today), the modules that may import
code by name (after `<!-- imports by name -->`) and the public plugin API (docs/plugins.md after
`<!-- public api -->`). Every import counts, at module level or in a function: a lazy import is still an
arrow. The rules:

- layers: an import points to the same layer or a lower one;
- no import cycle between modules, and none between folders (a folder is a name's first two parts:
  `codecarena.results`, `codecarena.pipeline`);
- the harness never imports the codec side: no codecarena module outside the layer named `codec side`
  imports one inside it (bench scripts run codecs in-process, as a worker does, and may);
- an adapter (a module of a unit folder `codecs/<name>/`) imports only the public plugin API and its own
  unit, and nothing outside a unit imports it: units are loaded by name, by `codecs/loading.py`;
- code is imported by name (`importlib.import_module`, `__import__`) only where the docs say why;
- every import of codecarena resolves: the module exists and defines the name imported (a moved module
  leaves no stale import behind, in a function or in a bench script);
- a module over MODULE_LINES lines, or a function over FUNCTION_LINES, says why in its docstring: a
  line that starts with `Long because` (docs/architecture.md, "Long modules and functions").

Each rule has a test that plants a violation in a tiny fake source tree and sees the check catch it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "codecarena"
BENCH = REPO / "bench"
DOC = REPO / "docs" / "architecture.md"
PLUGINS_DOC = REPO / "docs" / "plugins.md"
CODEC_SIDE = "codec side"
MODULE_LINES = 400
FUNCTION_LINES = 80
REASON = re.compile(r"^\s*Long because \S", re.MULTILINE)
BY_NAME_CALLS = {"import_module", "__import__"}

def modules(root: Path = SRC) -> dict[str, Path]:
    """Every Python module under `root`, by dotted name relative to root's parent (`codecarena.x.y`, or
    `bench.x` for the bench scripts)."""
    found = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def all_modules() -> dict[str, Path]:
    return {**modules(SRC), **modules(BENCH)}


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _import_targets(name: str, path: Path, mods: dict[str, Path]) -> Iterable[tuple[str, str | None]]:
    """(module, imported name or None) for every import of a codecarena name in the module: `import a.b`
    gives (a.b, None), `from a import b` gives (a, b)."""
    package = _package(name, path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                yield base, alias.name


def imports(mods: dict[str, Path]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a codecarena module. `from pkg import mod` is an arrow
    to pkg.mod (and to pkg only for names that are not modules)."""
    def owner(target: str) -> str:
        while target not in mods and "." in target:
            target = target.rpartition(".")[0]
        return target

    arrows = set()
    for name, path in mods.items():
        for base, imported in _import_targets(name, path, mods):
            full = f"{base}.{imported}" if imported else base
            target = full if full in mods else base
            if target.split(".")[0] == "codecarena" and target != "codecarena":
                found = owner(target)
                if found != name and found in mods:
                    arrows.add((name, found))
    return arrows


def _bound_names(path: Path) -> set[str] | None:
    """The names a module binds at its top level (in `if`, `try` and `with` blocks too); None when it
    could bind any name (`from x import *`, a module `__getattr__`)."""
    names: set[str] = set()

    def targets(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                targets(element)

    def visit(body: list[ast.stmt]) -> bool:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name == "__getattr__":
                    return False
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    targets(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return False
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.If):
                if not (visit(node.body) and visit(node.orelse)):
                    return False
            elif isinstance(node, ast.Try):
                blocks = [node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)]
                if not all(visit(block) for block in blocks):
                    return False
            elif isinstance(node, ast.With) and not visit(node.body):
                return False
        return True

    return names if visit(ast.parse(path.read_text(encoding="utf-8")).body) else None


def unresolved(mods: dict[str, Path]) -> list[str]:
    """Imports of codecarena that name a module that does not exist, or a name the module does not define."""
    problems = []
    bound: dict[str, set[str] | None] = {}
    for name, path in sorted(mods.items()):
        for base, imported in _import_targets(name, path, mods):
            if base.split(".")[0] != "codecarena" or (base == "codecarena" and imported is None):
                continue
            if base not in mods:
                problems.append(f"{name}: imports {base}, which does not exist")
                continue
            if imported is None or f"{base}.{imported}" in mods:
                continue
            if base not in bound:
                bound[base] = _bound_names(mods[base])
            names = bound[base]
            if names is not None and imported not in names:
                problems.append(f"{name}: imports {imported} from {base}, which does not define it")
    return problems


def _table(marker: str, doc: Path = DOC) -> list[list[str]]:
    text = doc.read_text(encoding="utf-8")
    assert marker in text, f"{doc}: no {marker} table"
    rows = []
    for line in text.split(marker, 1)[1].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if set(cells[0]) <= set("-: "):
            continue
        rows.append(cells)
    return rows[1:]  # the header row


def _names(cell: str) -> list[str]:
    return [f"codecarena.{m}" for m in re.findall(r"`([\w.]+)`", cell)]


def layers() -> list[tuple[str, list[str]]]:
    return [(cells[0], _names(cells[1])) for cells in _table("<!-- layers -->")]


def allowed_upward() -> set[tuple[str, str]]:
    return {(f"codecarena.{a.strip('`')}", f"codecarena.{b.strip('`')}") for a, b, *_ in _table("<!-- upward imports -->")}


def allowed_by_name() -> set[str]:
    return {name for cells in _table("<!-- imports by name -->") for name in _names(cells[0])}


def public_api() -> set[str]:
    return {m for cells in _table("<!-- public api -->", PLUGINS_DOC) for m in re.findall(r"`([\w.]+)`", cells[0])}


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    best: tuple[int, int] | None = None
    for index, (_, names) in enumerate(table):
        for covered in names:
            if module == covered or module.startswith(covered + "."):
                if best is None or len(covered) > best[1]:
                    best = (index, len(covered))
    return best[0] if best else None


def upward_imports(arrows: set[tuple[str, str]], table: list[tuple[str, list[str]]],
                   allowed: set[tuple[str, str]] = frozenset()) -> list[str]:  # type: ignore[assignment]
    found = []
    for a, b in sorted(arrows):
        la, lb = layer_of(a, table), layer_of(b, table)
        if la is not None and lb is not None and lb > la and (a, b) not in allowed:
            found.append(f"{a} ({table[la][0]}) -> {b} ({table[lb][0]})")
    return found


def cycle(arrows: set[tuple[str, str]]) -> list[str]:
    """One import cycle (its modules, the first repeated at the end), or []."""
    graph: dict[str, set[str]] = {}
    for a, b in arrows:
        graph.setdefault(a, set()).add(b)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            if nxt not in done:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        done.add(node)
        return []

    for node in sorted(graph):
        if node not in done and (found := visit(node, [node])):
            return found
    return []


def folder(module: str) -> str:
    return ".".join(module.split(".")[:2])


def folder_cycle(arrows: set[tuple[str, str]]) -> list[str]:
    """One cycle between folders, with the imports that make each of its steps, or []."""
    steps: dict[tuple[str, str], list[str]] = {}
    for a, b in sorted(arrows):
        if folder(a) != folder(b):
            steps.setdefault((folder(a), folder(b)), []).append(f"{a} -> {b}")
    found = cycle(set(steps))
    return [f"{x} -> {y}: {', '.join(steps[(x, y)])}" for x, y in zip(found, found[1:])]


def codec_side_imports(arrows: set[tuple[str, str]], codec_side: list[str]) -> list[str]:
    """Imports of the codec side by a codecarena module outside it."""
    def inside(module: str) -> bool:
        return any(module == c or module.startswith(c + ".") for c in codec_side)

    return sorted(f"{a} -> {b}" for a, b in arrows if a.startswith("codecarena.") and inside(b) and not inside(a))


def units(mods: dict[str, Path]) -> set[str]:
    """The unit folders: packages directly under codecarena.codecs."""
    return {name for name, path in mods.items()
            if path.name == "__init__.py" and name.rpartition(".")[0] == "codecarena.codecs"}


def adapter_imports(arrows: set[tuple[str, str]], mods: dict[str, Path], public: set[str]) -> list[str]:
    """Imports by a unit of anything but the public plugin API and its own unit, and imports of a unit's
    modules from outside it."""
    def unit_of(module: str) -> str | None:
        return next((u for u in units(mods) if module == u or module.startswith(u + ".")), None)

    found = []
    for a, b in sorted(arrows):
        ua, ub = unit_of(a), unit_of(b)
        if ua is not None and ub != ua and b not in public:
            found.append(f"{a} -> {b} (outside the public plugin API and its unit)")
        elif ub is not None and ua != ub:
            found.append(f"{a} -> {b} (a unit's modules are loaded by name, by codecs/loading.py)")
    return found


def imports_by_name(mods: dict[str, Path], allowed: set[str]) -> list[str]:
    """Calls that import code by name (`importlib.import_module`, `__import__`) outside the allowed modules."""
    found = []
    for name, path in sorted(mods.items()):
        if name in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                called = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if called in BY_NAME_CALLS:
                    found.append(f"{name}:{node.lineno}: {called}(...)")
    return found


def long_without_reason(mods: dict[str, Path], module_lines: int = MODULE_LINES,
                        function_lines: int = FUNCTION_LINES) -> dict[str, int]:
    """Modules and functions (by qualified name) over their limit whose docstring gives no `Long
    because` line, with their length in lines."""
    found = {}
    for name, path in sorted(mods.items()):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        lines = len(text.splitlines())
        if lines > module_lines and not REASON.search(ast.get_docstring(tree) or ""):
            found[name] = lines

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qualified = f"{prefix}.{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        length = (child.end_lineno or child.lineno) - child.lineno + 1
                        if length > function_lines and not REASON.search(ast.get_docstring(child) or ""):
                            found[qualified] = length
                    visit(child, qualified)
                else:
                    visit(child, prefix)

        visit(tree, name)
    return found


# The rules on the code.

def test_every_module_has_a_layer_and_the_tables_name_only_real_modules() -> None:
    table, mods = layers(), modules()
    assert len(table) >= 5 and CODEC_SIDE in [name for name, _ in table]
    missing = sorted(m for m in mods if m != "codecarena" and layer_of(m, table) is None)
    assert not missing, f"modules in no layer of {DOC.name}: {missing}"
    named = [n for _, names in table for n in names] + sorted(allowed_by_name()) + sorted(public_api())
    unknown = sorted(n for n in named if n not in mods)
    assert not unknown, f"the docs name modules that do not exist: {unknown}"


def test_no_import_points_to_a_higher_layer() -> None:
    upward = upward_imports(imports(all_modules()), layers(), allowed_upward())
    assert not upward, "imports against the layering of docs/architecture.md:\n" + "\n".join(upward)


def test_no_import_cycle_between_modules_or_folders() -> None:
    arrows = imports(all_modules())
    assert cycle(arrows) == []
    assert folder_cycle(arrows) == []


def test_the_harness_never_imports_the_codec_side() -> None:
    codec_side = dict(layers())[CODEC_SIDE]
    assert codec_side_imports(imports(all_modules()), codec_side) == []


def test_adapters_import_only_the_public_plugin_api_and_their_unit() -> None:
    mods = all_modules()
    public = public_api()
    assert "codecarena.plugin" in public and len(units(mods)) >= 12
    assert adapter_imports(imports(mods), mods, public) == []
    for module in sorted(public):  # each public module says what is public
        tree = ast.parse(mods[module].read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
                   for n in tree.body), f"{module} has no __all__"


def test_code_is_imported_by_name_only_where_the_docs_say_why() -> None:
    assert imports_by_name(all_modules(), allowed_by_name()) == []


def test_every_import_of_codecarena_resolves() -> None:
    assert unresolved(all_modules()) == []


def test_long_modules_and_functions_say_why() -> None:
    long = long_without_reason(all_modules())
    assert long == {}, f"over {MODULE_LINES} (module) or {FUNCTION_LINES} (function) lines without a " \
        f"`Long because` line in the docstring: {long}"


def test_the_cli_only_dispatches() -> None:
    assert len((SRC / "cli.py").read_text(encoding="utf-8").splitlines()) < 150


# Each check catches a planted violation.

def _fake(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    """A fake codecarena package (and bench folder) holding `files` (path -> text) besides every
    `__init__.py` its folders need."""
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.parents:
            if parent == tmp_path or parent.name == "bench":
                break
            if not (parent / "__init__.py").exists():
                (parent / "__init__.py").write_text("")
    found = modules(tmp_path / "codecarena")
    if (tmp_path / "bench").is_dir():
        found.update(modules(tmp_path / "bench"))
    return found


def test_the_checks_catch_an_upward_import_and_a_module_cycle(tmp_path: Path) -> None:
    """A fake codecarena whose ground floor imports the CLI, lazily, and two modules that import
    each other through `from package import module`."""
    mods = _fake(tmp_path, {"codecarena/cli.py": "", "codecarena/files.py": "def f():\n    from codecarena import cli\n",
                            "codecarena/results/schema.py": "from codecarena.results import store\n",
                            "codecarena/results/store.py": "from . import schema\n"})
    arrows = imports(mods)
    assert ("codecarena.files", "codecarena.cli") in arrows
    assert upward_imports(arrows, layers()) == ["codecarena.files (ground) -> codecarena.cli (commands)"]
    assert upward_imports(arrows, layers(), {("codecarena.files", "codecarena.cli")}) == []
    assert cycle(arrows) in (["codecarena.results.schema", "codecarena.results.store", "codecarena.results.schema"],
                             ["codecarena.results.store", "codecarena.results.schema", "codecarena.results.store"])


def test_the_folder_check_catches_a_loop_no_module_cycle_makes(tmp_path: Path) -> None:
    """registry.rules imports runtime.venvs, which imports registry.entries: no module cycle, a folder loop."""
    mods = _fake(tmp_path, {"codecarena/registry/entries.py": "",
                            "codecarena/registry/rules.py": "from codecarena.runtime import venvs\n",
                            "codecarena/runtime/venvs.py": "from codecarena.registry.entries import x\n"})
    arrows = imports(mods)
    assert cycle(arrows) == []
    assert folder_cycle(arrows) in (
        ["codecarena.registry -> codecarena.runtime: codecarena.registry.rules -> codecarena.runtime.venvs",
         "codecarena.runtime -> codecarena.registry: codecarena.runtime.venvs -> codecarena.registry.entries"],
        ["codecarena.runtime -> codecarena.registry: codecarena.runtime.venvs -> codecarena.registry.entries",
         "codecarena.registry -> codecarena.runtime: codecarena.registry.rules -> codecarena.runtime.venvs"])


def test_the_codec_side_check_catches_the_harness_importing_it(tmp_path: Path) -> None:
    """The ledger takes a framing parser from codecs/ (as it did before #37), lazily; the worker may
    import the loading path, and a bench script may too."""
    mods = _fake(tmp_path, {"codecarena/codecs/framing.py": "", "codecarena/codecs/loading.py": "",
                            "codecarena/results/ledger.py": "def f():\n    from codecarena.codecs.framing import parse\n",
                            "codecarena/worker.py": "from codecarena.codecs import loading\n",
                            "bench/throughput.py": "from codecarena.codecs.loading import adapter_module\n"})
    side = ["codecarena.codecs", "codecarena.worker"]
    assert codec_side_imports(imports(mods), side) == ["codecarena.results.ledger -> codecarena.codecs.framing"]


def test_the_adapter_check_catches_a_private_import_and_an_adapter_importing_another(tmp_path: Path) -> None:
    """Fish's adapter takes DAC's (as before #37), DAC's a private weights module; Opus's own libopus and
    the public API are fine; the worker importing an adapter by name in code is caught too."""
    mods = _fake(tmp_path, {"codecarena/plugin/__init__.py": "", "codecarena/plugin/torch.py": "",
                            "codecarena/codecs/torch_weights.py": "",
                            "codecarena/codecs/dac/adapter.py": "from codecarena.plugin.torch import x\n"
                                                                "from codecarena.codecs.torch_weights import y\n",
                            "codecarena/codecs/fish_dac/adapter.py": "from codecarena.codecs.dac.adapter import z\n",
                            "codecarena/codecs/opus/adapter.py": "from codecarena.codecs.opus import libopus\n"
                                                                 "from codecarena.plugin import Adapter\n",
                            "codecarena/codecs/opus/libopus.py": "",
                            "codecarena/worker.py": "from codecarena.codecs.pcm import adapter\n",
                            "codecarena/codecs/pcm/adapter.py": ""})
    assert units(mods) == {f"codecarena.codecs.{u}" for u in ("dac", "fish_dac", "opus", "pcm")}
    assert adapter_imports(imports(mods), mods, {"codecarena.plugin", "codecarena.plugin.torch"}) == [
        "codecarena.codecs.dac.adapter -> codecarena.codecs.torch_weights (outside the public plugin API and its unit)",
        "codecarena.codecs.fish_dac.adapter -> codecarena.codecs.dac.adapter (outside the public plugin API and its "
        "unit)",
        "codecarena.worker -> codecarena.codecs.pcm.adapter (a unit's modules are loaded by name, by "
        "codecs/loading.py)",
    ]


def test_the_by_name_check_catches_a_loader_of_its_own(tmp_path: Path) -> None:
    """The determinism probe importing an adapter module itself (as before #37), and a bench script doing
    the same with `__import__`; the loading path may."""
    mods = _fake(tmp_path, {"codecarena/codecs/loading.py": "import importlib\nimportlib.import_module('x')\n",
                            "codecarena/determinism/probe.py": "def run(m):\n    import importlib\n"
                                                               "    return importlib.import_module(m)\n",
                            "bench/throughput.py": "adapter = __import__('codecarena.codecs.opus.adapter')\n"})
    assert imports_by_name(mods, {"codecarena.codecs.loading"}) == ["bench.throughput:1: __import__(...)",
                                                                    "codecarena.determinism.probe:3: import_module(...)"]


def test_the_resolution_check_catches_stale_imports(tmp_path: Path) -> None:
    """A bench script importing a module that moved, a function importing a name its module no longer
    defines; names bound in `if`/`try` blocks, submodules and `import a.b` of a real module resolve."""
    mods = _fake(tmp_path, {"codecarena/pcm16.py": "try:\n    import numpy\nexcept ImportError:\n    pass\n"
                                                    "def to_int16(a):\n    return a\n",
                            "codecarena/worker.py": "import codecarena.pcm16\nfrom codecarena import pcm16\n"
                                                    "from codecarena.pcm16 import numpy, to_int16\n"
                                                    "def f():\n    from codecarena.pcm16 import from_int16\n",
                            "bench/throughput.py": "from codecarena.codecs.base import to_int16\n"})
    assert unresolved(mods) == ["bench.throughput: imports codecarena.codecs.base, which does not exist",
                                "codecarena.worker: imports from_int16 from codecarena.pcm16, which does not define it"]


def test_the_length_check_catches_a_long_module_and_function_without_a_reason(tmp_path: Path) -> None:
    body = "    x = 1\n" * 5
    mods = _fake(tmp_path, {
        "codecarena/quiet.py": '"""Short."""\n' + "x = 1\n" * 12,
        "codecarena/said.py": '"""Long.\n\nLong because the format has many fields.\n"""\n' + "x = 1\n" * 12,
        "codecarena/funcs.py": f'"""Long because it holds three cases."""\ndef plain():\n{body}\nclass A:\n    def method(self):\n        """Doc."""\n{body.replace("    ", "        ")}'
                               f'def reasoned():\n    """Long because every step must see the same lock."""\n{body}',
    })
    assert long_without_reason(mods, module_lines=10, function_lines=5) == {
        "codecarena.quiet": 13, "codecarena.funcs.plain": 6, "codecarena.funcs.A.method": 7}
