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
  (`results/stability.py`; their records and what they give: `results/stability_record.py`):
  re-encode idempotence and shift stability per codebook.

A code stream's last axis is its frames and every leading index a codebook (RVQ codes are
quantizers x frames). Codes of at most 16 bits are tokens of a codebook of 2**bit_width entries;
wider codes (a Codec 2 frame is several quantiser indices side by side) and packet streams are coded,
and their entropy taken, as bytes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from codecarena.framing import FramingError, parse
from codecarena.files import json_differences
from codecarena.payload import CodeStream, Payload, PayloadError, read_payload
from codecarena.registry.catalog import FAMILIES
from codecarena.results.claimed import claim_check, claim_for, variable_rate
from codecarena.results.coder import CODER, Encoder
from codecarena.results.schema import Row
from codecarena.results.stability_record import derive_stability
from codecarena.results.token_layout import TOKEN_MAX_BITS, Layout, codebook_rows, layout_of, stream_bytes
from codecarena.rundir import RunDir, UnsafePathError

# 2: a claim on a configuration in its family's variable-rate mode (registry/claims.py, VariableRate) is a
# target, checked with the declared tolerance (`claim_check.variable`; results/claimed.py). `build` derives
# a ledger of either version, so the audit checks one in the version it was written in.
LEDGER_VERSION = 2
LEDGER_VERSIONS = (1, 2)


# ---------------------------------------------------------------------------------------------
# Streams of one configuration, accumulated over the run


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
        "stability": derive_stability(ok, run, streams.layout, measured["codebooks"]) if measured["codebooks"] else None,
    }


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
