"""Result rows as they land in `rows.jsonl`: frozen, versioned, parsed strictly.

Every field is documented in docs/results.md. A row holds everything needed to recompute the
summary, and names the files (relative to the run directory) that the auditor checks it against.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict, dataclass
from typing import Any

from codecarena.devices import DeviceError, parse_device
from codecarena.files import sha256_json
from codecarena.runtime.limits import StageLimits
from codecarena.runtime.stages import Stage

ROW_VERSION = 11
# Fields later versions added, with what an older row means by their absence. Version 1 rows predate
# warm execution: every stage ran cold and every row was replayed. Versions 1 and 2 kept the stage
# limits in the plan, not in the row, and did not record which metric code scored them. Versions
# 1 to 3 did not record how the reference was made from the input (None: not recorded) nor the
# utterance's speaker ("": unknown). Versions 1 to 4 carried no digest of their content (None). Versions
# 1 to 5 had no channel: every payload reached its decoder as the encoder wrote it (None). Versions 1 to 6
# did not record a device (None): codecarena ran every codec on the CPU then. Versions 1 to 7 did not
# record where each metric was computed (None): every metric ran on the CPU then. Versions 1 to 8 had no
# input condition: every encoder got the clean reference (None), and so no metrics against it (None).
# Versions 1 to 9 did not record which process ran each stage (its `process`, None): a cold stage was
# a new interpreter then, a warm one a persistent worker. Versions 1 to 10 did not record, in a channel
# record, how many tokens the flipped bits changed (null: not recorded; channel/token_errors.py).
ADDED_FIELDS = {
    1: {"mode": "cold", "replay_sampled": True, "scoring_s": None},
    2: {"limits": None, "metrics_code_sha256": None},
    3: {"reference_conversions": None, "speaker": ""},
    4: {"row_sha256": None},
    5: {"channel": None},
    6: {"device": None},
    7: {"metric_devices": None},
    8: {"condition": None, "input_metrics": None},
    9: {},
    10: {},
}
# Fields later versions added to each stage record, the same way.
ADDED_STAGE_FIELDS = {9: {"process": None}}
# Fields later versions added to a row's channel record (when it has one), the same way.
ADDED_CHANNEL_FIELDS = {10: {"tokens": None, "tokens_changed": None, "tokens_changed_fraction": None}}


class SchemaError(ValueError):
    """A row or record that does not match the schema."""


@dataclass(frozen=True)
class Row:
    version: int
    codec: str
    family: str
    config: dict[str, Any]
    registry: str  # the registry entry the codec family is pinned by
    checkpoint: dict[str, Any]  # checkpoint identity recorded in the payload ({} for DSP codecs)
    runtime: dict[str, Any]  # interpreter and numpy version the encode worker reported
    weights: str  # "none" for DSP codecs, "real" or "synthetic" for neural ones
    variant: str
    mode: str  # "cold" (a fresh worker process per stage) or "warm" (a persistent worker that keeps the model loaded)
    utterance: str
    language: str
    speaker: str  # the utterance's speaker as its set declares it; "" when unknown (and before version 4)
    sample_rate: int
    num_samples: int
    duration_s: float
    reference: str
    reference_sha256: str
    reference_resampled_from: int | None  # source rate when the reference was resampled to the arena rate
    # How the reference was made from the input file (decoded, downmixed, resampled, written), in order;
    # [] when it is the input's own bytes; None in rows before version 4.
    reference_conversions: list[str] | None
    payload: str | None
    payload_bytes: int | None
    payload_sha256: str | None
    representation_bits: int | None
    representation_bps: float | None
    payload_bps: float | None
    decoded: str | None
    decoded_sha256: str | None
    replay_sampled: bool  # whether this row was in the fresh-process replay sample
    replay_sha256: str | None
    replay_identical: bool | None
    decoded_samples: int | None
    trimmed_samples: int | None
    padded_samples: int | None
    length_tolerance: int | None
    finite: bool | None
    silent: bool | None
    clipped_samples: int | None
    checks_passed: bool
    codec_facts: dict[str, Any]
    metrics: dict[str, Any]  # output name -> {value, status (ok/failed/not_applicable), error, details}
    scoring_s: float | None  # wall seconds the quality metrics took for this row (None: not recorded)
    metrics_code_sha256: str | None  # the metric code that scored this row (None: no metrics, or a row before v3)
    limits: StageLimits | None  # memory limit, guard poll and stage timeout the stages ran under (None before v3)
    model: dict[str, Any]
    stages: list[Stage]
    status: str  # "ok" or "failed"
    error: str
    # The channel the payload crossed before its decoder got it (docs/channel.md): model, parameters,
    # the impaired payload and its trace with their sha256, what was lost and flipped; None when none.
    channel: dict[str, Any] | None
    # The device (docs/results.md, "Devices"): requested (the run's --device), device (where this row's
    # stages ran), applied (whether --device applies to its family: torch families only), info (the
    # device facts its encode worker reported; None without a torch model) and each stage's peak device
    # memory; None before version 7.
    device: dict[str, Any] | None
    # metric -> the device its values were computed on (--metric-device for the learned metrics, the CPU
    # for the others: metrics/engines.py); {} for a row without metric records; None before version 8.
    metric_devices: dict[str, str] | None
    # The condition the encoder's input went through (docs/conditions.md): the conditioned input and its
    # trace with their sha256, levels, clipping, what the condition achieved, a tandem's or generation's
    # hops and, for a generation, how many units its payload shares with the one before; None when the
    # encoder got the clean reference (and before version 9).
    condition: dict[str, Any] | None
    # For a row with a condition: the metrics that compare the decoded audio with a reference signal, against
    # the conditioned input (what the codec did with what it was given); `metrics` holds every metric against
    # the clean reference and the transcript, as for any row. None without a condition (and before version 9).
    input_metrics: dict[str, Any] | None
    # sha256 of every other field as the row was computed (None before version 5). Not a signature:
    # it detects a row edited afterwards (the audit fails it, a resume computes it again), while a
    # forger who recomputes it is left to what the audit re-derives (files, plan, --rescore).
    row_sha256: str | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.codec, self.utterance)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def user_codec(self) -> str:
        """"" for a built-in family; for a user codec (`codecarena codec add`), what its label shows:
        the first 12 hex digits of the source that made the row, or "command line"."""
        if not self.registry.startswith("user-"):
            return ""
        label = self.model.get("user_codec")
        source = label.get("source_sha256") if isinstance(label, dict) else None
        return source[:12] if isinstance(source, str) else "command line" if isinstance(label, dict) else "?"

    @property
    def scored_against(self) -> list[tuple[str, dict[str, Any]]]:
        """(the sha256 of a reference, the metric records scored against it): the clean reference and its
        `metrics`, and for a row with a condition its conditioned input and `input_metrics`."""
        found = [(self.reference_sha256, self.metrics)]
        if self.condition is not None and self.input_metrics is not None:
            found.append((str(self.condition.get("input_sha256")), self.input_metrics))
        return found

    @property
    def ran_on(self) -> str:
        """The device the row's stages ran on (`cpu` for a row before version 7: there was no other then)."""
        return str(self.device.get("device")) if self.device is not None else "cpu"

    @property
    def external_runtime(self) -> bool:
        """Whether the row's codec ran in an interpreter named with --runtime-python, not its pinned runtime."""
        return self.runtime.get("environment") == "external"

    @property
    def content_sha256(self) -> str:
        """The sha256 `row_sha256` must hold: of every other field, in the parsed form."""
        data = self.to_dict()
        del data["row_sha256"]
        # A row of an earlier version was hashed without the fields later versions added.
        for since, added in ADDED_FIELDS.items():
            if since >= self.version:
                for key in added:
                    data.pop(key, None)
                for stage in data["stages"]:
                    for key in ADDED_STAGE_FIELDS.get(since, {}):
                        stage.pop(key, None)
                for key in ADDED_CHANNEL_FIELDS.get(since, {}) if data.get("channel") is not None else ():
                    data["channel"].pop(key, None)
        return sha256_json(data)

    @property
    def intact(self) -> bool:
        """Whether the row carries a digest and its content still hashes to it."""
        return self.row_sha256 is not None and self.row_sha256 == self.content_sha256

    def sealed(self) -> Row:
        """The row as rows.jsonl gives it back (parsed: numbers typed as its fields say), with its digest."""
        parsed = parse_row({**self.to_dict(), "row_sha256": None})
        return dataclasses.replace(parsed, row_sha256=parsed.content_sha256)


def _check(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else from_dict(hint, value, where)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _check(value, option, where)
            except SchemaError:
                continue
        raise SchemaError(f"{where}: {value!r} is not {hint}")
    if origin is list:
        if not isinstance(value, list):
            raise SchemaError(f"{where}: expected a list")
        (item,) = typing.get_args(hint)
        return [_check(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(f"{where}: expected an object")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{where}: expected an integer, got {value!r}")
        return value
    if hint in (str, bool):
        if not isinstance(value, hint):
            raise SchemaError(f"{where}: expected {hint.__name__}, got {value!r}")
        return value
    raise SchemaError(f"{where}: unsupported type {hint}")


def from_dict(cls: Any, data: Any, where: str = "row") -> Any:
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: expected an object")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [n for n in names if n not in data]
    extra = [k for k in data if k not in hints]
    if missing or extra:
        raise SchemaError(f"{where}: missing keys {missing}, unexpected keys {extra}")
    return cls(**{n: _check(data[n], hints[n], f"{where}.{n}") for n in names})


def parse_row(data: Any) -> Row:
    version = data.get("version") if isinstance(data, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and 1 <= version < ROW_VERSION:
        for since in range(version, ROW_VERSION):
            # A row that already has a later version's fields is checked as it is (strictly, below).
            if not ADDED_FIELDS[since].keys() & data.keys():
                data = {**data, **ADDED_FIELDS[since]}
            stage_fields = ADDED_STAGE_FIELDS.get(since, {})
            if stage_fields and isinstance(data.get("stages"), list):
                data = {**data, "stages": [{**stage_fields, **stage} if isinstance(stage, dict) else stage
                                           for stage in data["stages"]]}
            channel_fields = ADDED_CHANNEL_FIELDS.get(since, {})
            if channel_fields and isinstance(data.get("channel"), dict):
                data = {**data, "channel": {**channel_fields, **data["channel"]}}
    row = from_dict(Row, data)
    if row.version not in range(1, ROW_VERSION + 1):
        raise SchemaError(f"row version {row.version}, expected 1 to {ROW_VERSION}")
    # Every rate and duration divides by these: a row that sets them to zero cannot be re-derived.
    if row.sample_rate < 1 or row.num_samples < 1:
        raise SchemaError(f"row has {row.num_samples} samples at {row.sample_rate} Hz; both must be positive")
    if row.status not in ("ok", "failed"):
        raise SchemaError(f"row status {row.status!r} is not ok/failed")
    if row.mode not in ("cold", "warm"):
        raise SchemaError(f"row mode {row.mode!r} is not cold/warm")
    if not row.replay_sampled and (row.replay_sha256 is not None or row.replay_identical is not None):
        raise SchemaError("a row outside the replay sample has no replay hash or verdict")
    for name, record in row.metrics.items():
        _check_metric(name, record)
    for name, record in (row.input_metrics or {}).items():
        _check_metric(name, record, "row.input_metrics")
    if row.input_metrics is not None and row.condition is None:
        raise SchemaError("row.input_metrics: only a row with a condition has metrics against its input")
    for name, device in (row.metric_devices or {}).items():
        try:
            if parse_device(device, f"row.metric_devices.{name}") != device:
                raise SchemaError(f"row.metric_devices.{name}: {device!r} is not spelled canonically")
        except DeviceError as exc:
            raise SchemaError(str(exc)) from None
    return row


METRIC_STATUSES = ("ok", "failed", "not_applicable", "suspect")


def _check_metric(name: str, record: Any, group: str = "row.metrics") -> None:
    where = f"{group}.{name}"
    if not isinstance(record, dict) or set(record) != {"value", "status", "error", "details"}:
        raise SchemaError(f"{where}: expected keys value, status, error, details")
    status, value, error = record["status"], record["value"], record["error"]
    if status not in METRIC_STATUSES:
        raise SchemaError(f"{where}: status {status!r} is not one of {METRIC_STATUSES}")
    if status == "ok":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or error is not None:
            raise SchemaError(f"{where}: an ok metric needs a number and no error")
    elif status == "suspect":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(error, str) or not error:
            raise SchemaError(f"{where}: a suspect metric needs a number and the reason it is suspect")
    elif value is not None or not isinstance(error, str) or not error:
        raise SchemaError(f"{where}: a {status} metric has a null value and a reason")
