"""The report's figures, drawn once per state of what they show.

Drawing the PNGs is most of what `codecarena report` spends (about 2 of 3 seconds on the README's main
job), and a report is often written again for a run whose rows did not change. A figure is kept under
`$XDG_CACHE_HOME/codecarena/report-plots/` by the sha256 of everything it is drawn from: the drawing
function's name and arguments (the leaderboard entries, themselves computed from the rows, the styles,
the metric), the source of plots.py and the matplotlib version. A changed row changes its entries and
so the key; nothing is reused across a change of the drawing code. The cache file (version 1) holds
the function's result as JSON, PNG bytes in base64; one that does not parse is drawn again and replaced.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from codecarena.files import cache_home, write_json
from codecarena.results.report import plots

VERSION = 1


def _folder() -> Path:
    return cache_home() / "report-plots"


def _key(name: str, args: tuple[Any, ...]) -> str:
    source = Path(plots.__file__).read_bytes()
    material = json.dumps([VERSION, name, args, hashlib.sha256(source).hexdigest(), metadata.version("matplotlib")],
                          sort_keys=True, default=repr, allow_nan=True)
    return hashlib.sha256(material.encode()).hexdigest()


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"png": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return base64.b64decode(value["png"], validate=True)
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def cached(draw: Callable[..., Any], *args: Any) -> Any:
    """`draw(*args)`, from the cache when it drew the same figure before."""
    path = _folder() / f"{_key(draw.__name__, args)}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") == VERSION:
            return _decode(data["result"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    result = draw(*args)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"version": VERSION, "result": _encode(result)}, durable=False)
    except OSError:
        pass  # a cache that cannot be written only costs the drawing again
    return result
