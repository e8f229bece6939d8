"""`rows.jsonl` of a run (`RunDir.rows`): appended one row at a time (crash-safe), rewritten atomically,
read strictly in plan order."""

from __future__ import annotations

import json
import os

from codecarena.diskspace import DiskFullError, is_disk_full
from codecarena.files import open_unlinked, parse_json, replace_text
from codecarena.results.schema import Row, SchemaError, parse_row
from codecarena.rundir import RunDir


class StoreError(ValueError):
    """A run directory whose files cannot be trusted as they are."""


def append_row(run: RunDir, row: Row) -> None:
    line = (json.dumps(row.to_dict(), sort_keys=True, allow_nan=False) + "\n").encode()
    # One write() on an O_APPEND descriptor: a killed process leaves either the whole line or a torn
    # tail without newline, which load_rows recognises and drops. No fsync per row (it cost more than
    # a warm Opus row's own overhead): an OS crash may lose the last lines, or files they name, and
    # resume recomputes exactly those, since it keeps only rows whose files still match their hashes.
    path = run.rows
    fd = open_unlinked(path, append=True)
    before = os.fstat(fd).st_size
    try:
        view = memoryview(line)
        while view:  # a nearly full disk takes part of a write and refuses the rest
            view = view[os.write(fd, view):]
    except OSError as exc:
        # Leave the file as it was: the completed rows before this one must stay readable.
        os.ftruncate(fd, before)
        if is_disk_full(exc):
            raise DiskFullError(path, len(line)) from None
        raise
    finally:
        os.close(fd)


def load_rows(run: RunDir, order: list[tuple[str, str]]) -> tuple[list[Row], bool]:
    """Rows in the plan's order `order` (codec, utterance keys; rows.jsonl itself is in completion
    order, since rows run in parallel; rows outside the plan come last, in file order), and whether a
    torn final line (an interrupted append) was dropped."""
    path = run.rows
    if not path.exists():
        return [], False
    data = path.read_bytes()
    torn = bool(data) and not data.endswith(b"\n")
    lines = data.split(b"\n")
    complete = lines[:-1]
    rows: list[Row] = []
    for number, raw in enumerate(complete, start=1):
        try:
            rows.append(parse_row(parse_json(raw)))
        except (ValueError, SchemaError) as exc:
            raise StoreError(f"{path}: line {number} is not a valid row ({exc})") from None
    return _in_plan_order(rows, order), torn


def _in_plan_order(rows: list[Row], keys: list[tuple[str, str]]) -> list[Row]:
    order = {key: i for i, key in enumerate(keys)}
    return sorted(rows, key=lambda row: order.get(row.key, len(order)))


def rewrite_rows(run: RunDir, rows: list[Row]) -> None:
    text = "".join(json.dumps(row.to_dict(), sort_keys=True, allow_nan=False) + "\n" for row in rows)
    replace_text(run.rows, text, durable=True)
