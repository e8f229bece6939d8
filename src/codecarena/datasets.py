"""Evaluation sets (`EvalSet`, its `Utterance`s) and the built-in `smoke` set; the user's own folders
and files are read by `input_sets.py` into the same types.

Every audio file handed to the rest of codecarena has been sha256-verified (smoke) or fully decoded
and checked (input folders) first, so a benchmark result can always be traced to exact bytes.

Where the smoke set comes from, in order: an explicit `data_dir`, `$CODECARENA_DATA` (a mirror folder
holding the 16 kHz wavs by their `file` name), the cache (`default_cache_dir()`), and finally a
download of the pinned originals into the cache, converted locally and verified.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr

from codecarena.arena import ARENA_RATE
from codecarena.files import DownloadError, DownloadFailed, cache_home, download_verified, sha256_file
from codecarena.languages import language_problem
from codecarena.rundir import unsafe_id_reason
from codecarena.text import printable

__all__ = [
    "DatasetError",
    "EvalSet",
    "Utterance",
    "default_cache_dir",
    "load_smoke",
    "smoke_manifest",
]

SET_FORMAT = "codecarena-set"
SET_VERSION = 1
CONVERSIONS = ("none", "flac_to_wav", "resample_soxr_vhq")
DATA_ENV = "CODECARENA_DATA"
_FIX_HINT = f"set {DATA_ENV} or pass --data-dir to a local copy of the smoke set"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class DatasetError(Exception):
    """A data set could not be found, read or verified; the message names the file/variable and the problem."""


@dataclass(frozen=True)
class Utterance:
    id: str
    path: Path  # resolved, verified audio file (16 kHz mono PCM wav for the smoke set)
    language: str  # "en", "zh", or "" when unknown
    transcript: str | None
    critical: tuple[tuple[str, str], ...]  # (kind, text)
    sample_rate: int  # of the file at `path`
    num_samples: int
    sha256: str  # of the file at `path` (verified)
    speaker: str  # "" when unknown
    license: str  # "" when unknown
    # What the file holds when it is not the mono wav/flac codecs take as is: its reader's description
    # (audio_input.AudioFacts.described), and which channel the utterance is ("" for mono files; "mix",
    # "left", "right" or "ch<k>" of a multichannel file, per --channels). The run's reference is then
    # decoded, the channel taken, and resampled, each step announced and recorded in the rows.
    source_format: str = ""
    channel: str = ""
    # Which decoder read the file when it was checked ("soundfile" or "pyav", AudioFacts.reader): the
    # run's reference is decoded by the same one.
    reader: str = "soundfile"

    @property
    def converted(self) -> bool:
        """Whether the run's reference is decoded and rewritten rather than copied byte for byte."""
        return bool(self.source_format) or bool(self.channel)


@dataclass(frozen=True)
class EvalSet:
    name: str  # "smoke" or "input:<dir name>"
    utterances: tuple[Utterance, ...]
    manifest_sha256: str
    source: str  # "mirror /path", "cache /path", "download", "input /path"
    # What an input folder holds that is left out (a file, or a folder ending in "/"), with why and what
    # to do: listed on the console and in run.json, never scored.
    skipped: tuple[tuple[str, str], ...] = ()


# --------------------------------------------------------------------------------------------- helpers


def default_cache_dir() -> Path:
    return cache_home() / "data" / "smoke"


# ----------------------------------------------------------------------------------------- manifest


def _smoke_manifest_bytes() -> bytes:
    # A function (not a constant) so tests can substitute a manifest with rewritten URLs.
    return resources.files("codecarena").joinpath("data", "smoke.json").read_bytes()


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _validate_set(doc: Any, where: str) -> dict[str, Any]:
    def fail(field: str, problem: str) -> DatasetError:
        return DatasetError(f"{where}: {field}: {problem}")

    if not isinstance(doc, dict):
        raise fail("top level", "expected a JSON object")
    if doc.get("format") != SET_FORMAT:
        raise fail("format", f"expected {SET_FORMAT!r}, got {doc.get('format')!r}")
    if doc.get("version") != SET_VERSION or not _is_int(doc.get("version")):
        raise fail("version", f"unsupported version {doc.get('version')!r} (this codecarena reads {SET_VERSION})")
    if not isinstance(doc.get("name"), str) or not doc["name"]:
        raise fail("name", "expected a non-empty string")
    utts = doc.get("utterances")
    if not isinstance(utts, list) or not utts:
        raise fail("utterances", "expected a non-empty list")
    seen: set[str] = set()
    for i, u in enumerate(utts):
        at = f"utterances[{i}]"
        if not isinstance(u, dict):
            raise fail(at, "expected an object")
        for key in ("id", "file", "language", "speaker", "license", "attribution"):
            if not isinstance(u.get(key), str):
                raise fail(f"{at}.{key}", "expected a string")
        if unsafe_id_reason(u["id"]):
            raise fail(f"{at}.id", f"utterance id {unsafe_id_reason(u['id'])}")
        if language_problem(u["language"]):
            raise fail(f"{at}.language", printable(language_problem(u["language"])))
        if u["id"] in seen:
            raise fail(f"{at}.id", f"duplicate id {u['id']!r}")
        seen.add(u["id"])
        # `file` is joined onto a mirror/cache folder: it must be a bare file name.
        if u["file"] in ("", ".", "..") or Path(u["file"]).name != u["file"] or "\\" in u["file"]:
            raise fail(f"{at}.file", f"expected a bare file name, got {u['file']!r}")
        if u.get("transcript") is not None and not isinstance(u["transcript"], str):
            raise fail(f"{at}.transcript", "expected a string or null")
        crit = u.get("critical")
        if not isinstance(crit, list) or not all(
            isinstance(c, dict) and isinstance(c.get("kind"), str) and c["kind"] and isinstance(c.get("text"), str)
            for c in crit
        ):
            raise fail(f"{at}.critical", "expected a list of {kind, text} objects")
        for key in ("sample_rate", "num_samples"):
            if not _is_int(u.get(key)) or u[key] <= 0:
                raise fail(f"{at}.{key}", "expected a positive integer")
        if not isinstance(u.get("sha256"), str) or not _HEX64.fullmatch(u["sha256"]):
            raise fail(f"{at}.sha256", "expected 64 lowercase hex digits")
        src = u.get("source")
        if not isinstance(src, dict):
            raise fail(f"{at}.source", "expected an object")
        if not isinstance(src.get("url"), str) or not src["url"].startswith(("https://", "http://")):
            raise fail(f"{at}.source.url", "expected an http(s) URL")
        if not isinstance(src.get("sha256"), str) or not _HEX64.fullmatch(src["sha256"]):
            raise fail(f"{at}.source.sha256", "expected 64 lowercase hex digits")
        if src.get("conversion") not in CONVERSIONS:
            raise fail(f"{at}.source.conversion", f"expected one of {CONVERSIONS}, got {src.get('conversion')!r}")
        if not _is_int(src.get("sample_rate")) or src["sample_rate"] <= 0:
            raise fail(f"{at}.source.sample_rate", "expected a positive integer")
        if src["conversion"] == "none" and src["sha256"] != u["sha256"]:
            raise fail(f"{at}.source.sha256", "conversion 'none' requires the original and final sha256 to match")
    return doc


def smoke_manifest() -> dict[str, Any]:
    """The package's smoke.json, parsed and validated."""
    return _parse_smoke(_smoke_manifest_bytes())


def _parse_smoke(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"smoke.json: not valid UTF-8 JSON ({e})") from e
    return _validate_set(doc, "smoke.json")


# ------------------------------------------------------------------------------------------- smoke


def _smoke_utterance(entry: dict[str, Any], path: Path) -> Utterance:
    """Verify one smoke file (hash, then rate/length/channels) and describe it."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing (smoke utterance {entry['id']})")
    actual = sha256_file(path)
    if actual != entry["sha256"]:
        raise DatasetError(f"{path}: sha256 mismatch: expected {entry['sha256']}, actual {actual}")
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError) as e:
        raise DatasetError(f"{path}: unreadable audio ({e})") from e
    got = (info.samplerate, info.frames, info.channels)
    want = (entry["sample_rate"], entry["num_samples"], 1)
    if got != want:
        raise DatasetError(f"{path}: (rate, samples, channels) expected {want}, actual {got}")
    return Utterance(
        id=entry["id"],
        path=path.resolve(),
        language=entry["language"],
        transcript=entry.get("transcript"),
        critical=tuple((c["kind"], c["text"]) for c in entry["critical"]),
        sample_rate=info.samplerate,
        num_samples=info.frames,
        sha256=actual,
        speaker=entry["speaker"],
        license=entry["license"],
    )


def _write_pcm16(dest: Path, samples: np.ndarray, rate: int) -> None:
    sf.write(str(dest), samples, rate, format="WAV", subtype="PCM_16")


def _fetch_smoke_file(entry: dict[str, Any], cache: Path) -> None:
    """Download one original into the cache, convert it to the 16 kHz wav, verify, and move into place."""
    src = entry["source"]
    dest = cache / entry["file"]
    if src["conversion"] == "none":
        download_verified(src["url"], dest, entry["sha256"])
        return
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp_dir:
        tmp = Path(tmp_dir)
        suffix = Path(src["url"].rsplit("/", 1)[-1]).suffix or ".audio"
        original = download_verified(src["url"], tmp / f"original{suffix}", src["sha256"])
        out = tmp / "converted.wav"
        if src["conversion"] == "flac_to_wav":
            y, rate = sf.read(str(original), dtype="int16")
            _write_pcm16(out, y, rate)
        else:  # resample_soxr_vhq; these exact steps are what the published sha256 was made with
            y, rate = sf.read(str(original), dtype="float64")
            z = soxr.resample(y, rate, ARENA_RATE, quality="VHQ")
            _write_pcm16(out, np.clip(np.round(z * 32768), -32768, 32767).astype(np.int16), ARENA_RATE)
        actual = sha256_file(out)
        if actual != entry["sha256"]:
            raise DatasetError(
                f"{entry['file']}: converted ({src['conversion']}) sha256 mismatch: "
                f"expected {entry['sha256']}, actual {actual}; discarded"
            )
        os.replace(out, dest)


def _cached_ok(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == sha256


def load_smoke(
    data_dir: Path | None = None, cache_dir: Path | None = None, allow_download: bool = True
) -> EvalSet:
    raw = _smoke_manifest_bytes()
    manifest = _parse_smoke(raw)  # parse the very bytes we hash
    entries: list[dict[str, Any]] = manifest["utterances"]
    manifest_sha256 = hashlib.sha256(raw).hexdigest()

    if data_dir is None and os.environ.get(DATA_ENV):
        data_dir = Path(os.environ[DATA_ENV])
    if data_dir is not None:
        # A mirror is authoritative: a missing or altered file is an error, never a silent fallback.
        mirror = Path(data_dir).expanduser().resolve()
        if not mirror.is_dir():
            raise DatasetError(f"smoke data dir {mirror} (--data-dir / {DATA_ENV}): not a directory")
        utts = tuple(_smoke_utterance(e, mirror / e["file"]) for e in entries)
        return EvalSet(manifest["name"], utts, manifest_sha256, f"mirror {mirror}")

    cache = Path(cache_dir if cache_dir is not None else default_cache_dir()).expanduser().resolve()
    # The cache is ours: a missing or corrupt entry is (re)fetched when allowed.
    stale = [e for e in entries if not _cached_ok(cache / e["file"], e["sha256"])]
    if stale and not allow_download:
        raise DatasetError(
            f"smoke set: {len(stale)} of {len(entries)} files missing or wrong in cache {cache} "
            f"and downloads are disabled; {_FIX_HINT}"
        )
    for e in stale:
        try:
            _fetch_smoke_file(e, cache)
        except DownloadFailed as err:
            raise DatasetError(f"smoke set: {err}; offline? {_FIX_HINT}") from err
        except DownloadError as err:
            raise DatasetError(str(err)) from err
    utts = tuple(_smoke_utterance(e, cache / e["file"]) for e in entries)
    return EvalSet(manifest["name"], utts, manifest_sha256, "download" if stale else f"cache {cache}")
