"""The ground floor every layer may use: hashes of files and JSON, atomic JSON writes and strict reads,
verified downloads, and codecarena's cache and data folders. Standard library only, so the codec
runtimes' workers load it too.

Atomic writes: readers see the old file or the whole new one, never a prefix, and a failed write leaves
no temporary file behind. Downloads never leave a partial or wrong file.

No write follows a link: a run directory restored from an archive may hold a symlink or a hard link at
any name codecarena writes, pointing at a file outside it. Temporary files are therefore created
exclusively under random names (`exclusive_temp`), renamed over their destination (a rename replaces
the link itself, never its target), and files written in place (logs, locks, rows.jsonl) are opened
without following a symlink and refused when another name links to them (`open_unlinked`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from codecarena.diskspace import DiskFullError, is_disk_full


class JSONFileError(ValueError):
    """A JSON file that is missing or does not parse; the message names it."""


class LinkedFileError(OSError):
    """A file codecarena would write in place that is a symlink, a hard link or not a regular file."""


class DownloadError(ValueError):
    """A download that did not give the pinned bytes; nothing was left at the destination."""


class DownloadFailed(DownloadError):
    """The network part failed (offline, HTTP error), as opposed to a verification failure."""


def _xdg(variable: str, default: str) -> Path:
    # XDG says relative values must be ignored.
    value = os.environ.get(variable, "")
    return (Path(value) if value and os.path.isabs(value) else Path.home() / default) / "codecarena"


def cache_home() -> Path:
    """`$XDG_CACHE_HOME/codecarena` (default `~/.cache/codecarena`): the smoke set, model files."""
    return _xdg("XDG_CACHE_HOME", ".cache")


def data_home() -> Path:
    """`$XDG_DATA_HOME/codecarena` (default `~/.local/share/codecarena`): isolated runtimes."""
    return _xdg("XDG_DATA_HOME", ".local/share")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _tree(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        yield str(path.relative_to(root)), path.read_bytes()


def tree_sha256(root: Path) -> str:
    """One hash of a folder's files (their relative paths and bytes, in sorted order; `__pycache__`
    left out): which code a copy of a package, or a user's codec package, is."""
    return tree_bytes(root, keep=False)[1]


def tree_bytes(root: Path, keep: bool = True) -> tuple[dict[str, bytes], str]:
    """A folder's files as tree_sha256 reads them, each read once, and their tree_sha256: what is
    hashed is what the caller holds (relative path -> bytes; nothing when `keep` is false)."""
    digest = hashlib.sha256()
    files = {}
    for name, data in _tree(root):
        digest.update(name.encode() + b"\0" + data + b"\0")
        if keep:
            files[name] = data
    return files, digest.hexdigest()


def sha256_json(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# Bounds on what a JSON file codecarena reads may hold, far beyond anything it writes: deeper
# nesting would overflow a reader's recursion, a larger integer its float conversions (up to 2**53 a
# float, DuckDB's DOUBLE and JavaScript hold every integer exactly), a larger float its sums and squares.
MAX_JSON_DEPTH = 32
MAX_JSON_INT = 2**53
MAX_JSON_FLOAT = 1e100


def parse_json(text: str | bytes) -> Any:
    """JSON from a file someone else may have written, or ValueError naming what it holds beyond the
    bounds above: NaN or infinity, a number out of range, nesting deeper than MAX_JSON_DEPTH."""
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_bounded_float)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    pending = [(data, 0)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (dict, list)):
            if depth == MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            pending += [(item, depth + 1) for item in (value.values() if isinstance(value, dict) else value)]
    return data


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a number codecarena reads")


def _bounded_int(token: str) -> int:
    digits = len(token.lstrip("-"))
    # Digits first (2**53 has 16): a hostile integer may have thousands, too many to convert or show.
    if digits > 16 or abs(int(token)) > MAX_JSON_INT:
        shown = token if digits <= 20 else f"{token[:12]}... ({digits} digits)"
        raise ValueError(f"integer {shown} is beyond +-2**53")
    return int(token)


def _bounded_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value) or abs(value) > MAX_JSON_FLOAT:
        raise ValueError(f"number {token[:40]} is beyond +-{MAX_JSON_FLOAT:g}")
    return value


def read_json(path: Path) -> Any:
    """`path` parsed by parse_json; JSONFileError naming the file when it is missing or not valid."""
    try:
        return parse_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JSONFileError(f"{path}: missing") from None
    except ValueError as exc:
        raise JSONFileError(f"{path}: not valid JSON ({exc})") from None


def json_differences(path: str, stored: Any, derived: Any, stored_name: str, derived_name: str) -> list[str]:
    """One line per value of a stored JSON document that the files no longer give, recursively (numbers
    equal to 1e-12, relatively or absolutely): what the audit reports of summary.json."""
    if isinstance(stored, dict) and isinstance(derived, dict):
        return [line for key in sorted(set(stored) | set(derived))
                for line in json_differences(f"{path}.{key}", stored.get(key), derived.get(key), stored_name,
                                             derived_name)]
    if isinstance(stored, list) and isinstance(derived, list) and len(stored) == len(derived):
        return [line for i, (a, b) in enumerate(zip(stored, derived))
                for line in json_differences(f"{path}[{i}]", a, b, stored_name, derived_name)]
    if isinstance(stored, float) or isinstance(derived, float):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (stored, derived))
        same = numbers and math.isclose(float(stored), float(derived), rel_tol=1e-12, abs_tol=1e-12)
    else:
        same = stored == derived and type(stored) is type(derived)
    return [] if same else [f"{path}: {stored_name} says {stored!r}, {derived_name} give {derived!r}"]


def write_json(path: Path, data: Any, durable: bool = True) -> None:
    """Atomic replace; `durable` also fsyncs (the worker protocol's job and report files are
    transient and skip it: a crash loses the stage either way)."""
    replace_text(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n", durable)


def replace_text(path: Path, text: str, durable: bool = True) -> None:
    """Write a temporary file beside `path` and rename it over `path`; on any failure the temporary
    file is removed and `path` keeps its old content."""
    try:
        with exclusive_temp(path) as (fd, tmp):
            with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as fh:
                fh.write(text)
                fh.flush()
                if durable:
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFullError(path, len(text.encode())) from None
        raise


@contextlib.contextmanager
def exclusive_temp(path: Path) -> Iterator[tuple[int, Path]]:
    """A new file beside `path` under a random hidden name (created with O_EXCL, so no planted link
    can be opened through), as (descriptor, path); the descriptor is closed and the file removed at
    the end unless the caller renamed it over `path` first."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        yield fd, tmp
    finally:
        os.close(fd)
        tmp.unlink(missing_ok=True)


def copy_verified(source: Path, dest: Path, sha256: str) -> bool:
    """Copy `source` to `dest` if the copy's bytes hash to `sha256` (returns True), else leave `dest`
    as it was (returns False: the source changed since it was hashed). A copy, never a link: a link
    shares the original's bytes, so an edit or a re-save of the original in place would change it."""
    with exclusive_temp(dest) as (fd, tmp):
        with open(source, "rb") as src, open(fd, "wb", closefd=False) as out:
            shutil.copyfileobj(src, out, 1 << 20)
        if sha256_file(tmp) != sha256:
            return False
        os.replace(tmp, dest)
    return True


def open_unlinked(path: Path, *, append: bool = False, truncate: bool = True) -> int:
    """A descriptor for writing `path` in place, created when missing, refused with LinkedFileError
    when `path` is a symlink, has other hard links or is not a regular file: writing through any of
    them would change a file elsewhere. With `append`, writes go to the end; otherwise the file is
    emptied, only once it is known to be ours (`truncate=False` keeps it, for lock files)."""
    # O_NONBLOCK: a planted FIFO must fail the open, not hang it; it is cleared once the file is known.
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if os.path.islink(path):
            raise LinkedFileError(f"{path}: is a symbolic link; codecarena does not write through links "
                                  "(remove it)") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"has {info.st_nlink} hard links"
        raise LinkedFileError(f"{path}: {what}; codecarena does not write through links (remove it)")
    os.set_blocking(fd, True)
    if not append and truncate:
        os.ftruncate(fd, 0)
    return fd


def download_verified(url: str, dest: Path, sha256: str, size: int | None = None,
                      on_chunk: Callable[[int], None] | None = None) -> Path:
    """Fetch `url` to `dest` only if its bytes hash to `sha256`; never leave a partial or wrong file."""
    dest = Path(dest)
    sha256 = sha256.lower()
    if dest.is_file() and sha256_file(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Temp file in the destination folder so the final os.replace is atomic (same filesystem).
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        n = 0
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
                while chunk := resp.read(1 << 16):
                    out.write(chunk)
                    h.update(chunk)
                    n += len(chunk)
                    if on_chunk:
                        on_chunk(len(chunk))
        except (urllib.error.URLError, OSError, ValueError) as e:
            # Plain URLError wraps the socket error in .reason; HTTPError's str() carries the status code.
            reason = e.reason if type(e) is urllib.error.URLError else e
            raise DownloadFailed(f"{url}: download failed ({reason})") from e
        actual = h.hexdigest()
        if size is not None and n != size:
            raise DownloadError(f"{url}: size mismatch: expected {size} bytes, got {n} (sha256 {actual}); discarded")
        if actual != sha256:
            raise DownloadError(f"{url}: sha256 mismatch: expected {sha256}, actual {actual}; discarded")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest
