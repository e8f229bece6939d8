"""Bytes and files: encoding, the strict parser (docs/payload-format.md, section 6) and atomic
writes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import mmap
import os
import secrets
from pathlib import Path
from typing import Any

from codecarena.payload.fields import (
    _CODES_KEYS, _DIGEST_SIZE, FORMAT_VERSION, _HEADER_KEYS, JSON, MAGIC, MAX_BIT_WIDTH, MAX_HEADER_BYTES,
    _MAX_INT_CHARS, _PACKETS_KEYS, _PREFIX, PayloadError, _check_int, _check_meta, _check_shape,
    _check_text, _q, _type_name,
)
from codecarena.payload.packing import _Section, _check_code_section, pack_codes, _varint, _walk_packets
from codecarena.payload.model import CodeStream, PacketStream, Payload, Stream
from codecarena.plural import counted


# --- encoding -----------------------------------------------------------------


def _canonical_json(obj: object) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _stream_header(stream: Stream) -> dict[str, JSON]:
    if isinstance(stream, CodeStream):
        return {"name": stream.name, "kind": "codes", "bit_width": stream.bit_width, "shape": list(stream.shape)}
    return {"name": stream.name, "kind": "packets", "count": stream._packet_count()}


def encode_payload(p: Payload) -> bytes:
    if not isinstance(p, Payload):
        raise TypeError(f"encode_payload needs a Payload, got {type(p).__name__}")
    header = {key: getattr(p, key) for key in _HEADER_KEYS - {"streams"}}
    header["streams"] = [_stream_header(s) for s in p.streams]
    header_bytes = _canonical_json(header)
    if len(header_bytes) > MAX_HEADER_BYTES:
        raise PayloadError(f"header is {len(header_bytes)} bytes, more than {MAX_HEADER_BYTES}")
    parts: list[bytes | memoryview] = [_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header_bytes)), header_bytes]
    for stream in p.streams:
        if stream._section is not None:
            # A parsed stream's section is already in its one valid encoding.
            parts.append(stream._section.view())
        elif isinstance(stream, CodeStream):
            parts.append(pack_codes(stream.values, stream.bit_width))
        else:
            for packet in stream.packets:
                parts.append(_varint(len(packet)))
                parts.append(packet)
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


# --- decoding -----------------------------------------------------------------


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would silently keep the last one.
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise PayloadError(f"header JSON has duplicate key {_q(key)}")
        obj[key] = value
    return obj


def _reject_constant(token: str) -> Any:
    raise PayloadError(f"header JSON contains {token}, which is not allowed")


def _parse_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise PayloadError(f"header JSON number {token[:40]} is out of range")
    return value


def _parse_int(token: str) -> int:
    if len(token) > _MAX_INT_CHARS:
        raise PayloadError(f"header JSON integer with {len(token)} characters is out of range")
    return int(token)


def _check_stream_specs(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise PayloadError(f"header: streams must be an array, got {_type_name(value)}")
    specs = []
    seen: set[str] = set()
    for i, spec in enumerate(value):
        what = f"header: streams[{i}]"
        if not isinstance(spec, dict):
            raise PayloadError(f"{what} must be an object, got {_type_name(spec)}")
        if "kind" not in spec:
            raise PayloadError(f"{what}: missing key 'kind'")
        kind = spec["kind"]
        if kind == "codes":
            _check_keys(spec, _CODES_KEYS, what)
        elif kind == "packets":
            _check_keys(spec, _PACKETS_KEYS, what)
        else:
            raise PayloadError(f"{what}: kind must be 'codes' or 'packets', got {kind!r}"[:200])
        name = _check_text(spec["name"], f"{what}.name", allow_empty=False)
        if name in seen:
            raise PayloadError(f"header: duplicate stream name {_q(name)}")
        seen.add(name)
        if kind == "codes":
            bit_width = _check_int(spec["bit_width"], f"{what}.bit_width", 1, MAX_BIT_WIDTH)
            shape = _check_shape(spec["shape"], f"{what}.shape")
            specs.append({"name": name, "kind": kind, "bit_width": bit_width, "shape": shape})
        else:
            count = _check_int(spec["count"], f"{what}.count", 0)
            specs.append({"name": name, "kind": kind, "count": count})
    return specs


def _check_keys(obj: dict[str, Any], expected: frozenset[str], what: str) -> None:
    missing = sorted(expected - obj.keys())
    if missing:
        raise PayloadError(f"{what}: missing key {_q(missing[0])}")
    extra = sorted(obj.keys() - expected)
    if extra:
        raise PayloadError(f"{what}: unexpected key {_q(extra[0])}")


def _parse_header(raw: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PayloadError(f"header is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        obj = json.loads(
            text,
            object_pairs_hook=_reject_duplicate_keys,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
        )
    except PayloadError:
        raise
    except RecursionError:
        raise PayloadError("header is not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise PayloadError(f"header is not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise PayloadError(f"header must be a JSON object, got {_type_name(obj)}")
    _check_keys(obj, _HEADER_KEYS, "header")
    meta = _check_meta(obj.__getitem__, "header: ")
    specs = _check_stream_specs(obj["streams"])
    # Checked last so that a hand-edited header gets the schema message first.
    if _canonical_json(obj) != raw:
        raise PayloadError(
            "header JSON is not canonical (needs sorted keys, no whitespace, ASCII only"
            " with \\u escapes, shortest number forms)"
        )
    return meta, specs


def _amount(n: int) -> str:
    # A hostile shape can declare a 1234-digit byte count; the message stays one short line.
    return str(n) if n < 10**40 else f"at least 2**{n.bit_length() - 1}"


def _locate_sections(data: bytes, pos: int, specs: list[dict[str, Any]]) -> tuple[list[tuple[_Section, int]], int]:
    """Every stream's section, with its packet bytes for a packet stream; sizes are checked before
    anything is read, and nothing is allocated per code or per packet."""
    sections: list[tuple[_Section, int]] = []
    for spec in specs:
        name = spec["name"]
        left = len(data) - pos
        if spec["kind"] == "codes":
            # Exact, and cheap even for a hostile shape: at most MAX_NDIM factors, each below 2**64.
            count = math.prod(spec["shape"])
            need = (count * spec["bit_width"] + 7) // 8
            if need > left:
                raise PayloadError(f"truncated: stream {_q(name)} needs {_amount(need)} bytes, {left} left")
            sections.append((_Section(data, pos, pos + need, count), 0))
            pos += need
            continue
        count = spec["count"]
        # Every packet costs at least its one-byte length; this bounds the walk.
        if count > left:
            raise PayloadError(
                f"truncated: stream {_q(name)} needs at least {counted(count, 'byte')} for "
                f"{counted(count, 'packet')}, {left} left"
            )
        end, content = _walk_packets(data, pos, count, name)
        sections.append((_Section(data, pos, end, count), content))
        pos = end
    return sections, pos


def _tail_digest_ok(data: bytes) -> bool:
    """Whether the last 32 bytes are the SHA-256 of everything before them."""
    if len(data) < _PREFIX.size + _DIGEST_SIZE:
        return False
    return hashlib.sha256(memoryview(data)[:-_DIGEST_SIZE]).digest() == data[-_DIGEST_SIZE:]


def _immutable(data: bytes | bytearray | memoryview | mmap.mmap) -> bytes | mmap.mmap:
    """`data` as parsed streams may go on reading it: bytes (what files and request bodies arrive
    as) and a read-only mapping (the service's request body, whose pages stay the file's, not the
    process's memory) as they are, anything else copied once."""
    if not isinstance(data, (bytes, bytearray, memoryview, mmap.mmap)):
        raise TypeError(f"decode_payload needs bytes, got {type(data).__name__}")
    if isinstance(data, bytes):
        return data
    if isinstance(data, mmap.mmap):
        with memoryview(data) as view:
            if view.readonly:
                return data
    return bytes(data)


def _decode_header(data: bytes | mmap.mmap) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """Steps 1 to 4 of the validation order: the header's fields, its stream specs and where the
    sections start."""
    n = len(data)
    if n == 0:
        raise PayloadError("empty file")
    # Magic before length, so that a short foreign file is called foreign.
    if not (data[:4] == MAGIC if n >= 4 else MAGIC.startswith(data[:n])):
        raise PayloadError(f"not a codecarena payload (magic {data[:4]!r}, expected {MAGIC!r})")
    if n < _PREFIX.size:
        raise PayloadError(f"too short: {counted(n, 'byte')}, the fixed prefix alone is {_PREFIX.size}")
    _, version, header_len = _PREFIX.unpack_from(data)
    # Version before the checksum: a later version may checksum differently.
    if version != FORMAT_VERSION:
        raise PayloadError(
            f"unsupported format version {version} (this reader supports version {FORMAT_VERSION})"
        )
    header_end = _PREFIX.size + header_len
    if header_end > n:
        raise PayloadError(f"truncated: header needs {counted(header_len, 'byte')}, {n - _PREFIX.size} left")
    try:
        meta, specs = _parse_header(data[_PREFIX.size : header_end])
    except PayloadError as e:
        # The checksum's position depends on the header, but a file written in
        # one piece still ends with it; if that fails too, the header problem
        # is most likely damage, so say so first. (No room for a checksum at
        # all: nothing to compare, so just the header problem.)
        if n < header_end + _DIGEST_SIZE or _tail_digest_ok(data):
            raise
        raise PayloadError(f"corrupted: sha256 mismatch ({e})") from None
    return meta, specs, header_end


def decode_header(data: bytes | bytearray | memoryview | mmap.mmap) -> dict[str, Any]:
    """The header's fields (every Payload field but streams), checked as decode_payload checks
    them, without reading the sections: what a reader can refuse a payload for before it touches
    the rest of the file. It is not a verified payload: decode_payload still has to parse it."""
    return _decode_header(_immutable(data))[0]


def decode_payload(data: bytes | bytearray | memoryview | mmap.mmap) -> Payload:
    """Parse and verify a payload; any problem raises PayloadError, nothing else.

    Order of checks (docs/payload-format.md, section 6): fixed prefix,
    header, section sizes, checksum, then the section contents.
    """
    data = _immutable(data)
    n = len(data)
    meta, specs, header_end = _decode_header(data)
    # Sizes before checksum, so that a short file says "truncated".
    sections, end = _locate_sections(data, header_end, specs)
    left = n - end
    if left < _DIGEST_SIZE:
        raise PayloadError(f"truncated: checksum needs {_DIGEST_SIZE} bytes, {left} left")
    if hashlib.sha256(memoryview(data)[:end]).digest() != data[end : end + _DIGEST_SIZE]:
        raise PayloadError("corrupted: sha256 mismatch")
    if left > _DIGEST_SIZE:
        raise PayloadError(f"trailing bytes: {counted(left - _DIGEST_SIZE, 'byte')} after the checksum")
    # From here on the bytes are exactly what a writer produced, so any
    # complaint is about that writer, not about damage.
    # Every check is done here; values and packets are only materialised when a decoder reads them.
    streams: list[Stream] = []
    for spec, (section, content_bytes) in zip(specs, sections):
        if spec["kind"] == "codes":
            # Released however the check ends: a mapped file cannot be closed while a view of it lives
            # on, as it would in the traceback of the error.
            try:
                with section.view() as view:
                    _check_code_section(view, spec["bit_width"], section.count)
            except PayloadError as e:
                raise PayloadError(f"stream {_q(spec['name'])}: {e}") from None
            streams.append(CodeStream._parsed(spec["name"], spec["bit_width"], spec["shape"], section))
        else:
            streams.append(PacketStream._parsed(spec["name"], section, content_bytes))
    return Payload(streams=tuple(streams), **meta)


# --- files --------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not possible everywhere (e.g. Windows).
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_payload(path: Path, p: Payload, durable: bool = True) -> int:
    """Write atomically: readers see the old file or the whole new one, never a prefix.

    `durable` also fsyncs file and directory. The pipeline's workers pass False: a run keeps a row
    only while its files still match the row's sha256, so a payload lost in a crash is recomputed,
    and three fsyncs per row would dominate the cost of a fast codec in warm mode.
    Returns the number of bytes written. I/O failures raise OSError.
    """
    path = Path(path)
    data = encode_payload(p)  # before touching the disk, so a bad payload leaves nothing behind
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)
    return len(data)


def read_payload(path: Path) -> Payload:
    """decode_payload on a file; every error message starts with the path."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise PayloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PayloadError(f"{path}: is a directory, not a payload file") from None
    except OSError as e:
        raise PayloadError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return decode_payload(data)
    except PayloadError as e:
        raise PayloadError(f"{path}: {e}") from e
