"""The layering docs/architecture.md states, checked on the code's own imports.

docs/architecture.md holds, after the marker `<!-- layers -->`, a table of layers from the bottom
up; each row names modules or packages (relative to `codecarena`, backticked). A module belongs to the
layer of the longest name that covers it. Every import inside codecarena (at module level or in a
function: a lazy import is still an arrow) must point to the same layer or a lower one, and the
module graph must have no cycle. Upward imports would need a row in the table after
`<!-- upward imports -->`, with the reason; today it is empty.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "codecarena"
DOC = REPO / "docs" / "architecture.md"


def modules(src: Path = SRC) -> dict[str, Path]:
    found = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(src.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(mods: dict[str, Path]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a codecarena module. `from pkg import mod` is an arrow
    to pkg.mod (and to pkg only for names that are not modules)."""
    def owner(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    arrows = set()
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in mods else base)
            for target in targets:
                if target.split(".")[0] == "codecarena" and target != "codecarena":
                    imported = owner(target)
                    if imported != name:
                        arrows.add((name, imported))
    return arrows


def _table(marker: str) -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    assert marker in text, f"{DOC}: no {marker} table"
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


def layers() -> list[tuple[str, list[str]]]:
    return [(cells[0], [f"codecarena.{m}" for m in re.findall(r"`([\w.]+)`", cells[1])]) for cells in _table("<!-- layers -->")]


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    best: tuple[int, int] | None = None
    for index, (_, names) in enumerate(table):
        for covered in names:
            if module == covered or module.startswith(covered + "."):
                if best is None or len(covered) > best[1]:
                    best = (index, len(covered))
    return best[0] if best else None


def test_every_module_has_a_layer_and_the_table_names_only_real_modules() -> None:
    table, mods = layers(), modules()
    assert len(table) >= 5
    missing = sorted(m for m in mods if m != "codecarena" and layer_of(m, table) is None)
    assert not missing, f"modules in no layer of {DOC.name}: {missing}"
    unknown = sorted(n for _, names in table for n in names if n not in mods)
    assert not unknown, f"{DOC.name} names modules that do not exist: {unknown}"


def upward_imports(arrows: set[tuple[str, str]], table: list[tuple[str, list[str]]]) -> list[str]:
    allowed = {(f"codecarena.{a.strip('`')}", f"codecarena.{b.strip('`')}") for a, b, *_ in _table("<!-- upward imports -->")}
    return sorted(f"{a} ({table[layer_of(a, table)][0]}) -> {b} ({table[layer_of(b, table)][0]})"
                  for a, b in arrows if layer_of(b, table) > layer_of(a, table) and (a, b) not in allowed)


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


def test_no_import_points_to_a_higher_layer() -> None:
    upward = upward_imports(imports(modules()), layers())
    assert not upward, "imports against the layering of docs/architecture.md:\n" + "\n".join(upward)


def test_no_import_cycle() -> None:
    assert cycle(imports(modules())) == []


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    """A fake codecarena whose ground floor imports the CLI, lazily, and two modules that import
    each other through `from package import module`."""
    fake = tmp_path / "codecarena"
    (fake / "results").mkdir(parents=True)
    for name in ("__init__.py", "cli.py", "results/__init__.py", "results/store.py"):
        (fake / name).write_text("")
    (fake / "files.py").write_text("def f():\n    from codecarena import cli\n")
    (fake / "results" / "schema.py").write_text("from codecarena.results import store\n")
    (fake / "results" / "store.py").write_text("from . import schema\n")
    arrows = imports(modules(fake))
    assert ("codecarena.files", "codecarena.cli") in arrows
    assert upward_imports(arrows, layers()) == ["codecarena.files (ground) -> codecarena.cli (commands)"]
    assert cycle(arrows) in (["codecarena.results.schema", "codecarena.results.store", "codecarena.results.schema"],
                             ["codecarena.results.store", "codecarena.results.schema", "codecarena.results.store"])


def test_modules_stay_small_and_the_cli_only_dispatches() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}
    assert sizes["codecarena.cli"] < 150
    large = {name: n for name, n in sizes.items() if n > 600}
    assert not large, f"modules over 600 lines: {large}"
