"""Every path the project cites exists in the repository, and no document outside it is cited.

Scanned files: the code (text files under `src/codecarena`, which also holds the registry's family
TOMLs and lock files, and the Python and shell files under `bench` and `scripts`) and the docs
(Markdown and text files under `docs`, and `README.md`). Tests are not scanned.

What counts as a cited path:
1. A token that starts with `docs/`, `src/`, `tests/`, `bench/` or `scripts/` (relative to the
   repository root) or `codecarena/` (relative to `src`), backticked or not, and not preceded by a
   letter, digit, `_`, `.`, `/` or `-`: so a URL or `../elsewhere/docs/x.md` is not read as a
   repository path. Trailing `.`, `,`, `:` and `;` are sentence punctuation, not part of the path.
   A `<placeholder>` or `{placeholder}` stands for part of one path segment, and `*` is a glob: such
   a path must match at least one file. A path ending in `/` names a folder.
2. In a Markdown file, the target of a relative link `[text](target)` or image `![alt](target)`,
   resolved against the file's folder (a `#fragment` is dropped; URLs and in-page anchors are not
   paths). It must stay inside the repository.
3. In a registry file (family TOML or lock file), a bare `NAME.md`: the registry's notes cite the
   docs by file name (`pitfalls.md`), which means `docs/NAME.md`.

A document outside the repository is cited when a path through a `shared/` folder lies under its
`docs/` or names a Markdown file (`../shared/docs/census.md`, `/work/shared/models/x/PROVENANCE.md`).
Naming the local data and model mirrors themselves (`CODECARENA_DATA=../shared/data/speech`,
`CODECARENA_MODELS=../shared/models`) says where this machine keeps its inputs, and is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "src" / "codecarena"
REGISTRY_DIRS = (PACKAGE / "registry" / "families", PACKAGE / "registry" / "locks")
CODE_SUFFIXES = {".py", ".toml", ".txt", ".md", ".css", ".js", ".sh"}

REPO_PATH = re.compile(r"(?<![A-Za-z0-9_./-])((?:docs|src|tests|bench|scripts|codecarena)/[A-Za-z0-9_.*<>{}|/-]*)")
PLACEHOLDER = re.compile(r"<[^<>]*>|\{[^{}]*\}")
MARKDOWN_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
BARE_DOC = re.compile(r"(?<![A-Za-z0-9_./-])([A-Za-z0-9_-]+\.md)\b")
OUTSIDE_DOC = re.compile(r"(?<![A-Za-z0-9_-])shared/(?:docs\b[^\s`'\"()<>\[\]]*|[^\s`'\"()<>\[\]]*\.md\b)")


@dataclass(frozen=True)
class Citation:
    file: Path
    line: int
    text: str  # as written
    target: str  # the repository-relative path or glob it must resolve to


def scanned_files() -> list[Path]:
    code = [p for p in PACKAGE.rglob("*") if p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts]
    code += [p for folder in ("bench", "scripts") for p in (REPO / folder).rglob("*")
             if p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts]
    docs = [p for p in (REPO / "docs").rglob("*") if p.suffix in {".md", ".txt"}] + [REPO / "README.md"]
    return sorted(p for p in code + docs if p.is_file())


def _repo_target(token: str) -> str:
    token = token.rstrip(".,:;")
    if token.startswith("codecarena/"):
        token = "src/" + token
    return PLACEHOLDER.sub("*", token)


def citations(path: Path, text: str) -> list[Citation]:
    """The paths `text` (the contents of `path`) cites, by the rules in this module's docstring."""
    found: list[Citation] = []
    registry = any(folder in path.parents for folder in REGISTRY_DIRS)
    for number, line in enumerate(text.splitlines(), start=1):
        for match in REPO_PATH.finditer(line):
            found.append(Citation(path, number, match.group(1), _repo_target(match.group(1))))
        if path.suffix == ".md":
            for match in MARKDOWN_LINK.finditer(line):
                link = match.group(1).split("#", 1)[0]
                if link and not URL.match(link):
                    resolved = (path.parent / link).resolve()
                    target = str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(resolved)
                    found.append(Citation(path, number, match.group(1), target))
        if registry:
            for match in BARE_DOC.finditer(line):
                found.append(Citation(path, number, match.group(1), "docs/" + match.group(1)))
    return found


def resolves(target: str) -> bool:
    if target.startswith("/"):
        return False  # outside the repository
    if "*" in target:
        return any(REPO.glob(target.rstrip("/")))
    return (REPO / target).is_dir() if target.endswith("/") else (REPO / target).exists()


def outside_documents(text: str) -> list[tuple[int, str]]:
    return [(number, match.group(0)) for number, line in enumerate(text.splitlines(), start=1)
            for match in OUTSIDE_DOC.finditer(line)]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


def test_the_rules_read_citations_as_documented() -> None:
    note = PACKAGE / "registry" / "families" / "example.toml"
    text = ('# census row (docs/census.md), see `docs/registry.md`. '
            'Layout: src/codecarena/codecs/<name>/lock.txt\n'
            'notes = "thread count (pitfalls.md)"; url = "https://example.org/docs/x.md"; '
            'other = "../shared/docs/y.md"\n'
            'source = f"codecarena/variants/{name}.py", ends a sentence: docs/metrics.md.\n')
    assert [(c.line, c.target) for c in citations(note, text)] == [
        (1, "docs/census.md"), (1, "docs/registry.md"), (1, "src/codecarena/codecs/*/lock.txt"),
        (2, "docs/pitfalls.md"),
        (3, "src/codecarena/variants/*.py"), (3, "docs/metrics.md")]
    page = REPO / "docs" / "example.md"
    links = ("[a](performance.md#ray) ![b](img/report-smoke.png) [c](https://x.org/a.md) [d](#status) "
             "[e](../../out.md)\n")
    assert [c.target for c in citations(page, links)] == [
        "docs/performance.md", "docs/img/report-smoke.png", str(REPO.parent / "out.md")]
    assert not resolves(str(REPO.parent / "out.md"))
    assert resolves("docs/") and resolves("src/codecarena/codecs/*/lock.txt") and not resolves("docs/nonesuch.md")
    assert outside_documents("see ../shared/docs/census.md and /work/shared/models/lyra_v2/PROVENANCE.md\n"
                             "CODECARENA_DATA=../shared/data/speech CODECARENA_MODELS=../shared/models\n") == [
        (1, "shared/docs/census.md"), (1, "shared/models/lyra_v2/PROVENANCE.md")]


def test_every_cited_path_exists_in_the_repository() -> None:
    found = [c for path in scanned_files() for c in citations(path, path.read_text(encoding="utf-8"))]
    # The scan reads real citations from code, registry files and docs alike (it never passes vacuously).
    kinds = {c.file.suffix for c in found} | {"registry" for c in found if c.file.parent in REGISTRY_DIRS}
    assert {".py", ".md", "registry"} <= kinds and len(found) > 100
    missing = [f"{_where(c.file, c.line)}: {c.text}" for c in found if not resolves(c.target)]
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_no_document_outside_the_repository_is_cited() -> None:
    cited = [f"{_where(path, line)}: {text}" for path in scanned_files()
             for line, text in outside_documents(path.read_text(encoding="utf-8"))]
    assert not cited, "cites a document outside the repository (write what is needed into docs/):\n" + "\n".join(cited)
