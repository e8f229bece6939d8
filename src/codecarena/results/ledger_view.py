"""The bitrate ledger as people read it: the cells the `ledger` command, the leaderboard and the report
show for a ledger entry (`results/ledger.py`). Numbers go through `results/formatting.py`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from codecarena.results.formatting import fmt_kbps, fmt_num, weights_label

#: How a claim check reads: measured within the claim's tolerance, above it or below it; on a configuration
#: in its family's variable-rate mode the claim is a target, and missing it is said, not alarmed.
FLAGS = {"ok": "ok", "over": "OVER", "under": "UNDER", "over_target": "above target", "under_target": "below target"}
#: The flags that mark a claim as not met (shown as an alarm).
ALARMS = ("over", "under")


def entries(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ledger entries a summary.json holds ([] for a summary written before the ledger)."""
    ledger = (summary or {}).get("ledger")
    return list(ledger.get("codecs", [])) if isinstance(ledger, dict) else []


def entry_for(summary: dict[str, Any] | None, codec: str) -> dict[str, Any] | None:
    return next((e for e in entries(summary) if e.get("codec") == codec), None)


def claimed(entry: dict[str, Any]) -> str:
    """`1.100 (paper)`, or `-` without a claim."""
    claim = entry.get("claim")
    return "-" if not claim else f"{fmt_kbps(claim['bps'])} ({claim['source']})"


def check(entry: dict[str, Any]) -> str:
    """The codec's measured rate against the claim: `+0.5% ok`, `-25.0% UNDER`; a variable-rate
    configuration's against its target: `-9.6% ok (VBR target)`, `-31.0% below target (VBR)`."""
    result = entry.get("claim_check")
    if not result:
        return "-"
    text = f"{100 * result['difference']:+.1f}% {FLAGS[result['flag']]}"
    variable = result.get("variable")
    if variable:
        text += f" ({variable['option']}={variable['value']}: a target)"
    return text


def configuration(entry: dict[str, Any]) -> str:
    """What ran, from the payloads: per stream its codebooks x bit width (or bytes) at its frame rate."""
    parts = []
    for s in entry.get("streams") or []:
        if s["unit"] == "token":
            rate = f" @ {fmt_num(s['frame_rate_hz'], 2)} Hz" if s.get("frame_rate_hz") is not None else ""
            parts.append(f"{s['name']}: {s['codebooks']} x {s['bit_width']} bit{rate}")
        elif s["kind"] == "codes":
            parts.append(f"{s['name']}: {s['bit_width']}-bit codes @ {fmt_num(s['frame_rate_hz'], 2)} Hz")
        else:
            parts.append(f"{s['name']}: packets")
    return "; ".join(parts) or "-"


def utilisation(entry: dict[str, Any]) -> str:
    """The codebooks' utilisation, as the range over codebooks (one value for one codebook)."""
    values = [c["utilisation"] for c in entry.get("codebooks") or []]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return fmt_num(low) if low == high else f"{fmt_num(low)}-{fmt_num(high)}"


def entropy(entry: dict[str, Any]) -> str:
    """Mean entropy in bits per token over the codebooks, and the first codebook's perplexity."""
    books = entry.get("codebooks") or []
    if not books:
        return "-"
    mean = sum(c["entropy_bits"] for c in books) / len(books)
    return f"{fmt_num(mean, 2)} (ppl {fmt_num(books[0]['perplexity'], 0)})"


def stability(entry: dict[str, Any], key: str) -> str:
    """`first/all` codebooks' idempotence or shift stability; `not measured` for a token codec without
    a measurement, `-` for a codec without tokens."""
    if not entry.get("codebooks"):
        return "-"
    result = entry.get("stability")
    if not result:
        return "not measured"
    return f"{fmt_num(result[f'{key}_first'])}/{fmt_num(result[key])}"


def clean(entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries a ledger table shows, and the channel configurations (`SPEC@CHANNEL`) it leaves out:
    those whose clean configuration has an entry of its own, whose payloads, and so whose rates and
    tokens, they are (the channel impairs a copy the decoder gets, docs/channel.md)."""
    codecs = {e["codec"] for e in entries}
    out = [e["codec"] for e in entries if "@" in e["codec"] and e["codec"].partition("@")[0] in codecs]
    return [e for e in entries if e["codec"] not in out], out


def left_out_note(codecs: list[str]) -> str:
    """The line under a ledger that left channel configurations out; "" when it left none."""
    if not codecs:
        return ""
    return (f"{len(codecs)} configuration{'s' if len(codecs) != 1 else ''} through a channel left out "
            f"({', '.join(codecs)}): each encodes exactly as its clean configuration, whose ledger it shares")


def labelled(entries: list[dict[str, Any]], rows: Iterable[Any]) -> list[dict[str, Any]]:
    """The entries with what labels their weights as every other table does: a user codec's source
    (`user_codec`) and an external runtime (`runtime`), from the run's rows (the ledger does not record
    them: they label the configuration, they are not measurements)."""
    user: dict[str, str] = {}
    external: set[str] = set()
    for row in rows:
        user[row.codec] = max(user.get(row.codec, ""), row.user_codec)
        if row.external_runtime:
            external.add(row.codec)
    return [{**e, "user_codec": user.get(e["codec"], ""), "runtime": "external" if e["codec"] in external else ""}
            for e in entries]


def weights(entry: dict[str, Any]) -> str:
    """The weights label of every table (`formatting.weights_label`): "user codec <sha12>" for a user codec."""
    return weights_label(entry["weights"], entry.get("user_codec") or "", entry.get("runtime") or "")


#: The rate table: (header, cell).
RATE_COLUMNS = (
    ("codec", lambda e: e["codec"]),
    ("weights", weights),
    ("claimed kbps", claimed),
    ("repr kbps", lambda e: fmt_kbps(e["representation_bps"])),
    ("vs claim", check),
    ("payload kbps", lambda e: fmt_kbps(e["payload_bps"])),
    ("container kbps", lambda e: fmt_kbps(e["container_bps"])),
    ("framing kbps", lambda e: fmt_kbps(e["framing_bps"])),
    ("order-0 achievable kbps", lambda e: fmt_kbps(e["achievable_bps"])),
    ("entropy kbps", lambda e: fmt_kbps(e["entropy_bps"])),
)

#: The token table: (header, cell).
TOKEN_COLUMNS = (
    ("codec", lambda e: e["codec"]),
    ("weights", weights),
    ("streams (from the payloads)", configuration),
    ("tokens/s", lambda e: fmt_num(e["token_rate"], 1)),
    ("utilisation", utilisation),
    ("entropy bits/token", entropy),
    ("idempotence first/all", lambda e: stability(e, "idempotence")),
    ("shift stability first/all", lambda e: stability(e, "shift_stability")),
)

#: The per-codebook table: (header, cell).
CODEBOOK_COLUMNS = (
    ("stream", lambda c: c["stream"]),
    ("codebook", lambda c: str(c["codebook"])),
    ("size", lambda c: str(c["size"])),
    ("tokens/s", lambda c: fmt_num(c["token_rate"], 1)),
    ("used", lambda c: str(c["used"])),
    ("utilisation", lambda c: fmt_num(c["utilisation"])),
    ("entropy bits", lambda c: fmt_num(c["entropy_bits"])),
    ("perplexity", lambda c: fmt_num(c["perplexity"], 1)),
    ("coded bits/token", lambda c: fmt_num(c["coded_bits_per_token"])),
)


def codebook_stability(entry: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """A configuration's per-codebook stability, by (stream, codebook)."""
    result = entry.get("stability") or {}
    return {(c["stream"], c["codebook"]): c for c in result.get("codebooks", [])}


def notes(entry: dict[str, Any]) -> list[str]:
    """What a table cannot say: the claim's reference, an error, stability rows skipped."""
    out = []
    claim = entry.get("claim")
    if claim:
        options = ", ".join(f"{k}={v}" for k, v in claim["options"].items())
        variable = (entry.get("claim_check") or {}).get("variable")
        # A variable rate follows the content: the claim is the average aimed at, checked with its own tolerance.
        how = (f"{variable['option']}={variable['value']}: a target, tolerance {100 * variable['tolerance']:g}%"
               if variable else f"tolerance {100 * claim['tolerance']:g}%")
        out.append(f"{entry['codec']}: claimed {fmt_kbps(claim['bps'])} kbps ({claim['source']}"
                   f"{'; with ' + options if options else ''}; {how}): {claim['reference']}"
                   + (f". A variable rate: {variable['reference']}" if variable else ""))
    if entry.get("error"):
        out.append(f"{entry['codec']}: no ledger measurement: {entry['error']}")
    for skip in (entry.get("stability") or {}).get("skipped", []):
        what = " ".join(x for x in (skip["utterance"], skip["part"]) if x)
        out.append(f"{entry['codec']} {what}: stability not counted: {skip['reason']}")
    return out
