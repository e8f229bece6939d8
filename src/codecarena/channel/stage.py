"""The harness's channel step of a row: the clean payload the encoder wrote crosses the row's channel,
and the decoder gets the impaired payload (run directory: `channel/<configuration>/<utterance>.ccap`,
its trace beside it as `.trace.json`). What the row records of it is `record()`'s dict, with, for a
family whose tokens the arena's token policy fills, how many tokens the flipped bits changed
(channel/token_errors.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codecarena.channel.impair import Trace, impair_file
from codecarena.channel.packets import Cutting
from codecarena.channel.spec import parse_channel
from codecarena.channel.token_errors import NOT_APPLICABLE, token_errors
from codecarena.files import sha256_file
from codecarena.payload import read_payload
from codecarena.registry.catalog import FAMILIES
from codecarena.rundir import RowFiles, RunDir

#: The keys of a row's `channel` record (docs/results.md).
RECORD_KEYS = ("channel", "model", "parameters", "seed", "policy", "concealment", "payload", "payload_sha256",
               "payload_bytes", "trace", "trace_sha256", "unit", "units", "lost", "lost_fraction", "bits",
               "flipped_bits", "bit_error_fraction", *NOT_APPLICABLE)


def who_conceals(family: str) -> str:
    """"codec" or "arena", as the family declares; ValueError for a family whose payloads cannot cross a channel."""
    support = FAMILIES[family].channel
    if support is None:
        raise ValueError(f"{family} declares no [channel] support: its payloads cannot cross a channel (families "
                         f"that can: {', '.join(f for f, d in FAMILIES.items() if d.channel is not None)})")
    return support.concealment


def tokens_record(family: str, clean: Path, impaired: Path, trace: Trace) -> dict[str, Any]:
    """The record's token fields: for a family whose lost frames the token policy fills, its tokens
    and how many the trace's flipped bits changed (the clean payload against the impaired one, the
    trace's lost frames left out); null for every other family. ChannelError or PayloadError."""
    support = FAMILIES[family].channel
    if support is None or not support.tokens:
        return dict(NOT_APPLICABLE)
    return token_errors(read_payload(clean), read_payload(impaired), trace.lost_frames()).record()


def cross(channel_text: str, family: str, cut: Cutting, utterance: str, run: RunDir,
          files: RowFiles) -> tuple[Path, dict]:
    """Impair the row's clean payload into its impaired payload and trace, packetised as `cut` (the
    configuration's frames, channel/packets.py) says; the impaired payload's path and the row's record.
    ChannelError, PayloadError or OSError when it cannot be done."""
    channel = parse_channel(channel_text)
    files.trace.parent.mkdir(parents=True, exist_ok=True)
    trace = impair_file(files.payload, files.impaired, files.trace, channel, utterance, cut)
    return files.impaired, record(trace, channel_text, who_conceals(family), run, files.impaired, files.trace,
                                  tokens_record(family, files.payload, files.impaired, trace))


def record(trace: Trace, channel_text: str, concealment: str, run: RunDir, impaired: Path,
           trace_path: Path, tokens: dict[str, Any]) -> dict[str, Any]:
    channel = parse_channel(channel_text)
    return {
        "channel": channel.canonical, "model": channel.model, "parameters": channel.parameters(),
        "seed": channel.seed, "policy": channel.policy, "concealment": concealment,
        "payload": run.relative(impaired), "payload_sha256": sha256_file(impaired),
        "payload_bytes": impaired.stat().st_size, "trace": run.relative(trace_path),
        "trace_sha256": sha256_file(trace_path), "unit": trace.unit, "units": trace.units, "lost": len(trace.lost),
        "lost_fraction": len(trace.lost) / trace.units if trace.units else 0.0, "bits": trace.bits,
        "flipped_bits": len(trace.flipped),
        "bit_error_fraction": len(trace.flipped) / trace.bits if trace.bits else 0.0, **tokens,
    }


def files_verify(channel: dict[str, Any] | None, run: RunDir) -> bool:
    """A row's impaired payload and trace still hash as it says (True for a row that crossed no channel)."""
    return channel is None or run.hold(((channel.get("payload"), channel.get("payload_sha256")),
                                        (channel.get("trace"), channel.get("trace_sha256"))))
