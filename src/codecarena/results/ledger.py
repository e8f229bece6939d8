"""The bitrate ledger: per codec configuration, the rate it claims (with its source) beside the rates
measured from the run's payload files, and what a language model would see in its tokens.

Everything here is derived from files the run keeps (the rows, the payload files, the stability
measurements under `stability/`) and from the claims in the registry, so `codecarena audit` derives
the ledger again and reports every value of `summary.json`'s `ledger` that no longer matches. The
statistics, with their formulas and references, are in docs/ledger.md:

- rates: claimed (`results/claimed.py`), representation, payload (the container's overhead), a command-line bitstream's
  framing bits, the achievable rate (the streams losslessly coded by `results/coder.py` over the whole
  run) and the empirical entropy bound;
- per codebook over the whole run (never per clip): tokens, frame rate, utilisation, entropy,
  perplexity;
- token stability, from the extra encodes `codecarena ledger RUN --stability` makes
  (`results/stability.py`): re-encode idempotence and shift stability per codebook.

A code stream's last axis is its frames and every leading index a codebook (RVQ codes are
quantizers x frames). Codes of at most 16 bits are tokens of a codebook of 2**bit_width entries;
wider codes (a Codec 2 frame is several quantiser indices side by side) and packet streams are coded,
and their entropy taken, as bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codecarena.framing import FramingError, parse
from codecarena.files import json_differences, sha256_file
from codecarena.payload import CodeStream, PacketStream, Payload, PayloadError, pack_codes, read_payload
from codecarena.registry.catalog import FAMILIES
from codecarena.results.claimed import claim_check, claim_for, variable_rate
from codecarena.results.coder import CODER, Encoder
from codecarena.results.schema import Row
from codecarena.rundir import RunDir, UnsafePathError
from codecarena.specs import SpecError, bare_canonical, parse_configuration

# 2: a claim on a configuration in its family's variable-rate mode (registry/claims.py, VariableRate) is a
# target, checked with the declared tolerance (`claim_check.variable`; results/claimed.py). `build` derives
# a ledger of either version, so the audit checks one in the version it was written in.
LEDGER_VERSION = 2
LEDGER_VERSIONS = (1, 2)
#: Codes of at most this many bits are tokens of a codebook; wider ones are coded as bytes.
TOKEN_MAX_BITS = 16
STABILITY_FORMAT = "codecarena-stability"
STABILITY_VERSION = 1
#: The two extra encodes of a stability measurement, by the name of their payload's part.
STABILITY_PARTS = ("reencode", "shift")


class LedgerError(ValueError):
    """A stability record that does not parse (one line naming the file)."""


# ---------------------------------------------------------------------------------------------
# Streams of one configuration, accumulated over the run


@dataclass(frozen=True)
class Layout:
    """A stream as the ledger reads it: tokens of `codebooks` codebooks, or bytes."""
    name: str
    kind: str  # "codes" or "packets"
    bit_width: int | None
    codebooks: int | None  # code streams: product of the shape's leading axes

    @property
    def tokens(self) -> bool:
        return self.kind == "codes" and self.bit_width is not None and self.bit_width <= TOKEN_MAX_BITS

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "bit_width": self.bit_width, "codebooks": self.codebooks,
                "unit": "token" if self.tokens else "byte"}


def layout_of(payload: Payload) -> tuple[Layout, ...]:
    out = []
    for stream in payload.streams:
        if isinstance(stream, CodeStream):
            out.append(Layout(stream.name, "codes", stream.bit_width, math.prod(stream.shape[:-1])))
        else:
            out.append(Layout(stream.name, "packets", None, None))
    return tuple(out)


def codebook_rows(stream: CodeStream) -> np.ndarray:
    """A token stream as (codebooks, frames)."""
    return np.asarray(stream.values, dtype=np.int64).reshape(math.prod(stream.shape[:-1]), stream.shape[-1])


def stream_bytes(stream: CodeStream | PacketStream) -> np.ndarray:
    """What a stream that is not tokens is coded as: its packets' bytes, or its codes' packed bits."""
    if isinstance(stream, PacketStream):
        data = b"".join(stream.packets)
    else:
        data = pack_codes(stream.values, stream.bit_width)
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


class _Sequence:
    """One coded sequence over the run (a codebook's tokens, or a stream's bytes): the coder and the counts."""

    def __init__(self, alphabet: int) -> None:
        self.alphabet = alphabet
        self.encoder = Encoder(alphabet)
        self.counts = np.zeros(alphabet, dtype=np.int64)

    def feed(self, symbols: np.ndarray) -> None:
        self.encoder.feed(symbols)
        self.counts += np.bincount(symbols, minlength=self.alphabet)

    def stats(self, seconds: float) -> dict[str, Any]:
        n = int(self.counts.sum())
        used = self.counts[self.counts > 0]
        p = used / n if n else used.astype(np.float64)
        entropy = 0.0 - float(np.sum(p * np.log2(p)))  # 0.0 - ...: one symbol gives 0.0, never -0.0
        coded = 8 * len(self.encoder.finish())
        return {"symbols": n, "alphabet": self.alphabet, "used": int(used.size),
                "utilisation": used.size / self.alphabet, "entropy_bits": entropy, "perplexity": 2.0 ** entropy,
                "rate_hz": n / seconds if seconds else None, "coded_bits": coded,
                "coded_bits_per_symbol": coded / n if n else None}


def _framing_bits(row: Row, payload: Payload) -> int | None:
    """A command-line codec's framing bits, parsed again from the bitstream the payload carries."""
    family = FAMILIES.get(row.family)
    if family is None or family.command is None:
        return None
    try:
        (packet,) = payload.packet_stream("bitstream").packets
        return parse(family.command.framing, packet).framing_bits
    except (PayloadError, FramingError, ValueError):
        return None


def _rates(ok: list[Row], seconds: float) -> dict[str, Any]:
    bits = sum(r.representation_bits or 0 for r in ok)
    payload_bits = 8 * sum(r.payload_bytes or 0 for r in ok)
    return {"representation_bps": bits / seconds if seconds else None,
            "payload_bps": payload_bits / seconds if seconds else None,
            "container_bps": (payload_bits - bits) / seconds if seconds else None}


def codec_entry(rows: list[Row], run: RunDir, version: int = LEDGER_VERSION) -> dict[str, Any]:
    """The ledger of one codec configuration, from its rows (in plan order) and their payload files, in
    the reading of ledger `version`."""
    first = rows[0]
    ok = [r for r in rows if r.status == "ok"]
    seconds = sum(r.num_samples / r.sample_rate for r in ok)
    claim = claim_for(first)
    entry: dict[str, Any] = {
        "codec": first.codec, "family": first.family, "weights": first.weights, "registry": first.registry,
        "utterances": len(ok), "audio_s": seconds, "claim": claim.record() if claim else None,
        **_rates(ok, seconds), "framing_bps": None, "achievable_bps": None, "entropy_bps": None,
        "configuration": None, "streams": [], "codebooks": [], "token_rate": None, "stability": None, "error": "",
    }
    try:
        entry.update(_measure(ok, run, seconds) or {})
    except (PayloadError, UnsafePathError, OSError, ValueError) as exc:
        entry["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # The claim is the codec's: a command-line bitstream's own file format (its framing) is not charged to it.
    codec_bps = entry["representation_bps"]
    if codec_bps is not None and entry["framing_bps"] is not None:
        codec_bps -= entry["framing_bps"]
    entry["claim_check"] = claim_check(claim, codec_bps, variable_rate(first), first.config, version)
    return entry


class Accumulator:
    """The streams of one configuration's payloads, fed in plan order: one coded sequence per codebook
    (or per byte stream) carried across utterances, with its counts and frames."""

    def __init__(self) -> None:
        self.layout: tuple[Layout, ...] | None = None
        self.sample_rate = 0
        self.sequences: dict[tuple[int, int], _Sequence] = {}  # (stream index, codebook) -> its sequence
        self.frames: dict[int, int] = {}

    def add(self, payload: Payload, where: str) -> None:
        here = layout_of(payload)
        if self.layout is None:
            self.layout, self.sample_rate = here, payload.codec_sample_rate
        elif here != self.layout:
            raise ValueError(f"{where}: its payload's streams {[s.describe() for s in here]} differ from the first "
                             f"payload's {[s.describe() for s in self.layout]}")
        for index, (spec, stream) in enumerate(zip(here, payload.streams)):
            if isinstance(stream, CodeStream):
                self.frames[index] = self.frames.get(index, 0) + stream.shape[-1]
            if spec.tokens:
                assert isinstance(stream, CodeStream) and spec.bit_width is not None
                codes = codebook_rows(stream)
                for book in range(codes.shape[0]):
                    self.sequences.setdefault((index, book), _Sequence(1 << spec.bit_width)).feed(codes[book])
            else:
                self.sequences.setdefault((index, 0), _Sequence(256)).feed(stream_bytes(stream))

    def result(self, seconds: float) -> dict[str, Any]:
        """Streams, codebooks and rates over `seconds` of audio (the coders are finished here, once)."""
        layout = self.layout or ()
        stats = {key: seq.stats(seconds) for key, seq in self.sequences.items()}
        streams = []
        for index, spec in enumerate(layout):
            mine = [s for (i, _), s in stats.items() if i == index]
            frames = self.frames.get(index)
            streams.append({**spec.describe(), "frames": frames,
                            "frame_rate_hz": frames / seconds if frames is not None and seconds else None,
                            "symbols": sum(s["symbols"] for s in mine),
                            "entropy_bits": sum(s["entropy_bits"] * s["symbols"] for s in mine),
                            "coded_bits": sum(s["coded_bits"] for s in mine)})
        codebooks = [{"stream": layout[i].name, "codebook": book, "size": s["alphabet"], "tokens": s["symbols"],
                      "used": s["used"], "utilisation": s["utilisation"], "entropy_bits": s["entropy_bits"],
                      "perplexity": s["perplexity"], "token_rate": s["rate_hz"],
                      "coded_bits_per_token": s["coded_bits_per_symbol"]}
                     for (i, book), s in stats.items() if layout[i].tokens]
        tokens = sum(c["tokens"] for c in codebooks)
        return {
            "streams": streams, "codebooks": codebooks,
            "token_rate": tokens / seconds if codebooks and seconds else None,
            "achievable_bps": sum(s["coded_bits"] for s in streams) / seconds if seconds else None,
            "entropy_bps": sum(s["entropy_bits"] for s in streams) / seconds if seconds else None,
        }


def _measure(ok: list[Row], run: RunDir, seconds: float) -> dict[str, Any] | None:
    if not ok:
        return None
    streams = Accumulator()
    framing: int | None = 0
    for row in ok:
        if row.payload is None:
            raise ValueError(f"{row.utterance}: an ok row without a payload")
        payload = read_payload(run.resolve(row.payload))
        streams.add(payload, row.utterance)
        bits = _framing_bits(row, payload)
        framing = None if bits is None or framing is None else framing + bits
    assert streams.layout is not None
    measured = streams.result(seconds)
    return {
        **measured,
        "configuration": {"config": ok[0].config, "codec_sample_rate": streams.sample_rate,
                          "codebooks": sum(s.codebooks or 0 for s in streams.layout if s.tokens),
                          "bit_widths": [s.bit_width for s in streams.layout]},
        "framing_bps": framing / seconds if framing is not None and seconds else None,
        "stability": _stability(ok, run, streams.layout, measured["codebooks"]) if measured["codebooks"] else None,
    }


# ---------------------------------------------------------------------------------------------
# Token stability: the records `codecarena ledger --stability` writes, and what they give


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
        raise LedgerError(f"{where}: {key} must be a string")
    return value


def parse_stability(path: Path) -> StabilityRecord:
    """A stability record, strictly: exact keys and types, or LedgerError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LedgerError(f"{path}: unreadable stability record ({exc})") from None
    keys = {"format", "version", "codec", "utterance", "payload_sha256", "decoded_sha256", "reference_sha256",
            "shift_samples", *STABILITY_PARTS}
    if not isinstance(data, dict) or set(data) != keys:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise LedgerError(f"{path}: a stability record has exactly the keys {sorted(keys)}, found {found}")
    if data["format"] != STABILITY_FORMAT or data["version"] != STABILITY_VERSION:
        raise LedgerError(f"{path}: not a {STABILITY_FORMAT} record of version {STABILITY_VERSION}")
    shift = data["shift_samples"]
    if not isinstance(shift, int) or isinstance(shift, bool) or shift < 0:
        raise LedgerError(f"{path}: shift_samples must be a non-negative integer")
    parts = []
    for part in STABILITY_PARTS:
        item = data[part]
        if not isinstance(item, dict) or set(item) != {"sha256", "error"}:
            raise LedgerError(f"{path}: {part} must be {{\"sha256\": ..., \"error\": ...}}")
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
        raise ValueError(f"{path.name}: {payload.num_samples} samples at {payload.sample_rate} Hz, expected {samples} "
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


def _stability(ok: list[Row], run: RunDir, layout: tuple[Layout, ...],
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
        except LedgerError as exc:
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


# ---------------------------------------------------------------------------------------------
# The run's ledger


def build(rows: list[Row], run: RunDir, version: int = LEDGER_VERSION) -> dict[str, Any]:
    """The ledger of a run: one entry per codec configuration, in the order of `rows` (plan order); an
    earlier `version` (LEDGER_VERSIONS) derives a ledger as that version wrote it."""
    by_codec: dict[str, list[Row]] = {}
    for row in rows:
        by_codec.setdefault(row.codec, []).append(row)
    return {"version": version, "coder": CODER, "token_max_bits": TOKEN_MAX_BITS,
            "codecs": [codec_entry(group, run, version) for group in by_codec.values()]}


def ledger_problems(summary: dict[str, Any], rows: list[Row], run: RunDir) -> list[str]:
    """The stored ledger against the one the files give; [] when summary.json holds none (a run made
    before the ledger: `codecarena ledger RUN --update` writes it)."""
    if "ledger" not in summary:
        return []
    stored = summary["ledger"].get("version") if isinstance(summary["ledger"], dict) else None
    derived = json.loads(json.dumps(build(rows, run, stored if stored in LEDGER_VERSIONS else LEDGER_VERSION)))
    return json_differences("summary.ledger", summary["ledger"], derived, "summary.json", "the payload files")
