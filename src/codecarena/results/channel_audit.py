"""What the audit re-derives of a row whose payload crossed a channel (docs/channel.md): the impaired
payload and its trace are the files the row names, the trace is what the row's channel draws for its
utterance, the clean payload with the trace applied is the impaired payload byte for byte, the impaired
payload passes the payload parser, the record's counts are the trace's (and its tokens changed those of
the clean payload against that impaired payload), and the decoder's report says who concealed the losses."""

from __future__ import annotations

from pathlib import Path

from codecarena.channel.impair import rederive
from codecarena.channel.packets import cutting
from codecarena.channel.spec import ChannelError
from codecarena.channel.stage import RECORD_KEYS, tokens_record, who_conceals
from codecarena.channel.token_errors import NOT_APPLICABLE
from codecarena.files import sha256_file
from codecarena.payload import PayloadError, read_payload
from codecarena.rundir import RunDir, UnsafePathError
from codecarena.results.schema import ADDED_CHANNEL_FIELDS, Row
from codecarena.specs import SpecError, parse_configuration


def decoder_input(row: Row, run: RunDir) -> Path:
    """The payload the row's decoder got: the impaired one when the row crossed a channel."""
    return run.resolve(row.channel["payload"] if row.channel else row.payload)  # type: ignore[arg-type]


def channel_problems(row: Row, run: RunDir, where: str) -> list[str]:
    configured = row.codec.partition("@")[2]
    record = row.channel
    if record is None:
        return [f"{where}: its configuration names channel {configured} but the row records none"
                ] if configured else []
    if sorted(record) != sorted(RECORD_KEYS):
        return [f"{where}: its channel record does not have the keys {', '.join(RECORD_KEYS)}"]
    if record["channel"] != configured:
        return [f"{where}: its channel record is of {record['channel']!r}, its configuration's channel is {configured!r}"]
    if row.status != "ok":
        return []
    problems: list[str] = []
    try:
        impaired, trace_path, clean = (run.resolve(record["payload"]), run.resolve(record["trace"]),
                                       run.resolve(row.payload))  # type: ignore[arg-type]
    except UnsafePathError as exc:
        return [f"{where}: channel file path: {exc}"]
    for path, key in ((impaired, "payload"), (trace_path, "trace")):
        if not path.is_file():
            problems.append(f"{where}: channel {key} {record[key]} is missing")
        elif sha256_file(path) != record[f"{key}_sha256"]:
            problems.append(f"{where}: channel {key} {record[key]} sha256 differs from the row")
    if problems:
        return problems
    if impaired.stat().st_size != record["payload_bytes"]:
        problems.append(f"{where}: impaired payload is {impaired.stat().st_size} bytes, the row says "
                        f"{record['payload_bytes']}")
    try:
        read_payload(impaired)
        spec = parse_configuration(row.codec)
        cut = cutting(spec.family, spec.config, spec.options(), row.codec)
        trace, found = rederive(clean, trace_path, configured, row.utterance, cut)
    except (ChannelError, PayloadError, SpecError) as exc:
        return [*problems, f"{where}: {exc}"]
    problems += [f"{where}: {problem}" for problem in found]
    try:
        # Rows before version 11 did not count tokens: their fields must be null, as the parser reads them.
        tokens = (dict(NOT_APPLICABLE) if row.version <= max(ADDED_CHANNEL_FIELDS)
                  else tokens_record(row.family, clean, impaired, trace))
    except (ChannelError, PayloadError) as exc:
        return [*problems, f"{where}: {exc}"]
    counted = {"units": trace.units, "lost": len(trace.lost), "bits": trace.bits, "flipped_bits": len(trace.flipped),
               "payload_sha256": trace.impaired_payload_sha256, **tokens}
    problems += [f"{where}: the channel record says {key} {record[key]!r}, its trace gives {value!r}"
                 for key, value in counted.items() if record[key] != value]
    receiver = row.codec_facts.get("decode", {}).get("receiver", {})
    declared = who_conceals(row.family)
    if record["concealment"] != declared or receiver.get("by") != declared:
        problems.append(f"{where}: {row.family} declares concealment by the {declared}; the row records "
                        f"{record['concealment']!r} and its decoder reported {receiver.get('by')!r}")
    return problems
