"""Token stability records: what `codecarena ledger RUN --stability` writes per row
(`stability/<codec>/<utterance>.json` beside two extra payloads, a re-encode of the decoded audio and
an encode of the input shifted), parsed strictly, and what they give over a configuration's rows:
re-encode idempotence and shift stability per codebook (docs/ledger.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.files import sha256_file
from codecarena.payload import Payload, PayloadError, read_payload
from codecarena.plural import counted
from codecarena.results.schema import Row
from codecarena.results.token_layout import Layout, codebook_rows, layout_of
from codecarena.rundir import RunDir, UnsafePathError
from codecarena.specs import SpecError, bare_canonical, parse_configuration

STABILITY_FORMAT = "codecarena-stability"
STABILITY_VERSION = 1
#: The two extra encodes of a stability measurement, by the name of their payload's part.
STABILITY_PARTS = ("reencode", "shift")


class StabilityRecordError(ValueError):
    """A stability record that does not parse (one line naming the file)."""


@dataclass(frozen=True)
class StabilityRecord:
    """One row's stability measurement (`stability/<codec>/<utterance>.json`): what it was measured on
    (the row's payload, decoded and reference hashes), the shift, and each extra encode's payload
    sha256 or why it failed."""
    codec: str
    utterance: str
    payload_sha256: str
    decoded_sha256: str
    reference_sha256: str
    shift_samples: int
    parts: tuple[tuple[str, str, str], ...]  # (part, payload sha256 or "", error or "")

    def to_dict(self) -> dict[str, Any]:
        return {"format": STABILITY_FORMAT, "version": STABILITY_VERSION, "codec": self.codec,
                "utterance": self.utterance, "payload_sha256": self.payload_sha256,
                "decoded_sha256": self.decoded_sha256, "reference_sha256": self.reference_sha256,
                "shift_samples": self.shift_samples,
                **{part: {"sha256": sha, "error": error} for part, sha, error in self.parts}}

    def measures(self, row: Row) -> bool:
        """Whether it was measured on this row's files as they are."""
        return (self.codec, self.utterance, self.payload_sha256, self.decoded_sha256, self.reference_sha256) == \
            (row.codec, row.utterance, row.payload_sha256, row.decoded_sha256, row.reference_sha256)


def _text(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise StabilityRecordError(f"{where}: {key} must be a string")
    return value


def parse_stability(path: Path) -> StabilityRecord:
    """A stability record, strictly: exact keys and types, or StabilityRecordError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StabilityRecordError(f"{path}: unreadable stability record ({exc})") from None
    keys = {"format", "version", "codec", "utterance", "payload_sha256", "decoded_sha256", "reference_sha256",
            "shift_samples", *STABILITY_PARTS}
    if not isinstance(data, dict) or set(data) != keys:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise StabilityRecordError(f"{path}: a stability record has exactly the keys {sorted(keys)}, found {found}")
    if data["format"] != STABILITY_FORMAT or data["version"] != STABILITY_VERSION:
        raise StabilityRecordError(f"{path}: not a {STABILITY_FORMAT} record of version {STABILITY_VERSION}")
    shift = data["shift_samples"]
    if not isinstance(shift, int) or isinstance(shift, bool) or shift < 0:
        raise StabilityRecordError(f"{path}: shift_samples must be a non-negative integer")
    parts = []
    for part in STABILITY_PARTS:
        item = data[part]
        if not isinstance(item, dict) or set(item) != {"sha256", "error"}:
            raise StabilityRecordError(f"{path}: {part} must be {{\"sha256\": ..., \"error\": ...}}")
        parts.append((part, _text(item, "sha256", f"{path}: {part}"), _text(item, "error", f"{path}: {part}")))
    return StabilityRecord(*(_text(data, k, str(path)) for k in ("codec", "utterance", "payload_sha256",
                                                                   "decoded_sha256", "reference_sha256")),
                           shift_samples=shift, parts=tuple(parts))


def stability_paths(run: RunDir, row: Row) -> dict[str, Path]:
    """The record and the two extra payloads of a row's stability measurement."""
    slug = parse_configuration(row.codec).slug
    return {"record": run.stability(slug, row.utterance, "json"),
            **{part: run.stability(slug, row.utterance, f"{part}.ccap") for part in STABILITY_PARTS}}


def _part_payload(path: Path, sha256: str, row: Row, samples: int, layout: tuple[Layout, ...]) -> Payload:
    """An extra encode's payload, checked against the record and the row: the same codec, weights and
    variant, the expected length, the same streams."""
    if not path.is_file():
        raise ValueError(f"{path.name} is missing")
    if sha256_file(path) != sha256:
        raise ValueError(f"{path.name}: its sha256 differs from the record's")
    payload = read_payload(path)
    if payload.codec != bare_canonical(row.codec) or dict(payload.checkpoint) != row.checkpoint or \
            payload.variant != row.variant:
        raise ValueError(f"{path.name}: encoded by {payload.codec} with another checkpoint or variant than the row")
    if payload.num_samples != samples or payload.sample_rate != row.sample_rate:
        raise ValueError(f"{path.name}: {counted(payload.num_samples, 'sample')} at {payload.sample_rate} Hz, "
                         f"expected {samples} "
                         f"at {row.sample_rate}")
    if layout_of(payload) != layout:
        raise ValueError(f"{path.name}: its streams differ from the row's payload's")
    return payload


def _agreement(a: np.ndarray, b: np.ndarray, offset: int) -> tuple[int, int]:
    """Tokens compared and equal when b is a's sequence `offset` frames later."""
    n = max(0, min(a.size, b.size - offset))
    return n, int(np.count_nonzero(a[:n] == b[offset:offset + n]))


def compare_tokens(original: Payload, other: Payload, layout: tuple[Layout, ...],
                   offsets: dict[tuple[int, int], int]) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (stream, codebook) of the token streams: (compared, equal), other's frames `offsets` later."""
    out = {}
    for index, spec in enumerate(layout):
        if not spec.tokens:
            continue
        mine = codebook_rows(original.streams[index])  # type: ignore[arg-type]
        theirs = codebook_rows(other.streams[index])  # type: ignore[arg-type]
        for book in range(mine.shape[0]):
            out[(index, book)] = _agreement(mine[book], theirs[book], offsets.get((index, book), 0))
    return out


def derive_stability(ok: list[Row], run: RunDir, layout: tuple[Layout, ...],
               codebooks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Re-encode idempotence and shift stability per codebook over the rows measured; None when no row
    of the configuration has a stability record."""
    names = {spec.name: i for i, spec in enumerate(layout)}
    rates = {(names[c["stream"]], c["codebook"]): c["token_rate"] for c in codebooks}
    totals: dict[str, dict[tuple[int, int], list[int]]] = {part: {} for part in STABILITY_PARTS}
    measured = {part: 0 for part in STABILITY_PARTS}
    skipped: list[dict[str, str]] = []
    shifts: set[int] = set()
    any_record = False
    for row in ok:
        try:
            paths = stability_paths(run, row)
        except (SpecError, UnsafePathError) as exc:
            skipped.append({"utterance": row.utterance, "part": "", "reason": str(exc)})
            continue
        if not paths["record"].is_file():
            continue
        any_record = True
        try:
            record = parse_stability(paths["record"])
        except StabilityRecordError as exc:
            skipped.append({"utterance": row.utterance, "part": "", "reason": str(exc)})
            continue
        if not record.measures(row):
            skipped.append({"utterance": row.utterance, "part": "",
                            "reason": "measured on other files than the row's (the row was computed again)"})
            continue
        shifts.add(record.shift_samples)
        original = read_payload(run.resolve(row.payload or ""))
        for part, sha, error in record.parts:
            if error:
                skipped.append({"utterance": row.utterance, "part": part, "reason": error})
                continue
            samples = row.num_samples + (record.shift_samples if part == "shift" else 0)
            try:
                other = _part_payload(paths[part], sha, row, samples, layout)
            except (ValueError, PayloadError) as exc:
                skipped.append({"utterance": row.utterance, "part": part, "reason": str(exc)})
                continue
            shift_s = record.shift_samples / row.sample_rate
            offsets = {key: round(shift_s * rate) for key, rate in rates.items()} if part == "shift" else {}
            for key, (n, equal) in compare_tokens(original, other, layout, offsets).items():
                total = totals[part].setdefault(key, [0, 0])
                total[0] += n
                total[1] += equal
            measured[part] += 1
    if not any_record:
        return None
    if len(shifts) > 1:
        skipped.append({"utterance": "", "part": "shift", "reason": f"rows measured with different shifts "
                                                                      f"{sorted(shifts)} samples"})
    per_book = []
    for key in sorted(rates):
        index, book = key
        cell: dict[str, Any] = {"stream": layout[index].name, "codebook": book}
        for part, label in (("reencode", "idempotence"), ("shift", "shift_stability")):
            n, equal = totals[part].get(key, (0, 0))
            cell[f"{label}_compared"] = n
            cell[label] = equal / n if n else None
        per_book.append(cell)

    def overall(label: str) -> float | None:
        n = sum(c[f"{label}_compared"] for c in per_book)
        return sum((c[label] or 0.0) * c[f"{label}_compared"] for c in per_book) / n if n else None

    return {"shift_samples": min(shifts) if len(shifts) == 1 else None,
            "utterances": {"reencode": measured["reencode"], "shift": measured["shift"]},
            "idempotence_first": per_book[0]["idempotence"] if per_book else None,
            "shift_stability_first": per_book[0]["shift_stability"] if per_book else None,
            "idempotence": overall("idempotence"), "shift_stability": overall("shift_stability"),
            "codebooks": per_book, "skipped": skipped}
