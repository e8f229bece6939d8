"""Import a user codec from the bytes whose sha256 was checked against its pin, and from nothing else.

A module file is read once, hashed and compiled from those bytes. A package folder is read once, every
file into memory (`files.tree_bytes`, `__pycache__` left out, as `codec add` hashed it), the hash over
those bytes is checked, and its modules are imported from them by a finder placed first on
`sys.meta_path`, which answers for the package's every submodule: a module is compiled from its
pinned source, never loaded from a bytecode cache (a `__pycache__/*.pyc` planted beside the source,
with the source's mtime and size in its header, is what Python's own loader would run), and a
submodule that is not a `.py` file of the pinned package (an extension module, a file added since)
is refused, not looked up on disk. `get_data` serves the package's other files from the same bytes.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from codecarena.files import tree_bytes


class PinnedFinder(importlib.abc.MetaPathFinder):
    """The modules of one package, from its pinned bytes (relative path -> bytes)."""

    def __init__(self, name: str, root: Path, files: dict[str, bytes]) -> None:
        self.name, self.root, self.files = name, root, files

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name and not fullname.startswith(self.name + "."):
            return None
        relative = fullname[len(self.name) + 1:].replace(".", "/")
        for source, package in ((f"{relative}/__init__.py" if relative else "__init__.py", True),
                                (f"{relative}.py", False)):
            if source in self.files:
                spec = importlib.machinery.ModuleSpec(fullname, PinnedLoader(self, source),
                                                      origin=str(self.root / source), is_package=package)
                if package:
                    spec.submodule_search_locations = [str(self.root / relative)]
                spec.has_location = True
                return spec
        raise ModuleNotFoundError(f"{fullname}: not a Python source file of the pinned package {self.root} "
                                  "(only its pinned .py files are imported)", name=fullname)


class PinnedLoader(importlib.abc.Loader):
    def __init__(self, finder: PinnedFinder, source: str) -> None:
        self.finder, self.source = finder, source

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        code = compile(self.finder.files[self.source], str(self.finder.root / self.source), "exec", dont_inherit=True)
        exec(code, module.__dict__)

    def get_source(self, fullname: str) -> str:
        return self.finder.files[self.source].decode("utf-8", "replace")

    def get_data(self, path: str) -> bytes:
        try:
            return self.finder.files[str(Path(path).relative_to(self.finder.root))]
        except (KeyError, ValueError):
            raise OSError(f"{path}: not a file of the pinned package {self.finder.root}") from None


def import_file(name: str, path: Path, check: Callable[[str], None]) -> ModuleType:
    """Module `name` compiled from the bytes of `path`, once `check(their sha256)` returned."""
    code = path.read_bytes()
    check(hashlib.sha256(code).hexdigest())
    module = ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(code, str(path), "exec", dont_inherit=True), module.__dict__)
    return module


def import_package(name: str, root: Path, check: Callable[[str], None]) -> ModuleType:
    """Package `name` from the files of `root` as read once, once `check(their tree sha256)` returned."""
    files, digest = tree_bytes(root)
    check(digest)
    sys.meta_path.insert(0, PinnedFinder(name, root, files))
    __import__(name)
    return sys.modules[name]
