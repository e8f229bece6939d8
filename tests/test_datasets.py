"""Tests for codecarena.datasets: the smoke manifest, mirror/cache/download resolution, input folders.

Network: only a local http.server on 127.0.0.1. The smoke audio comes from the local mirror
($CODECARENA_DATA, else /work/shared/data/speech) and is only ever copied into tmp_path.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from codecarena import datasets
from codecarena.audio_input import AudioInputError, check_audio_file
from codecarena.datasets import (
    DatasetError,
    default_cache_dir,
    load_smoke,
    smoke_manifest,
)
from codecarena.files import DownloadError, download_verified, sha256_file
from codecarena.input_sets import load_input_dir

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("CODECARENA_DATA") or "/work/shared/data/speech")
RAW_PREFIX = "https://raw.githubusercontent.com/"

needs_mirror = pytest.mark.skipif(
    not (MIRROR / "manifest.json").is_file(),
    reason=f"speech mirror not found at {MIRROR} (set CODECARENA_DATA to a copy of the smoke set)",
)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # CI sets CODECARENA_DATA; tests that want it set it explicitly. Never touch the real ~/.cache.
    monkeypatch.delenv("CODECARENA_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _copy_mirror(dest: Path) -> Path:
    dest.mkdir()
    for u in smoke_manifest()["utterances"]:
        shutil.copy(MIRROR / u["file"], dest / u["file"])
    return dest


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------------------------------ manifest


def test_smoke_manifest_is_valid_and_balanced() -> None:
    m = smoke_manifest()
    assert (m["format"], m["version"], m["name"]) == ("codecarena-set", 1, "smoke")
    utts = m["utterances"]
    assert len(utts) == 10
    assert len({u["id"] for u in utts}) == 10
    assert Counter(u["language"] for u in utts) == {"en": 6, "zh": 4}
    assert Counter(u["source"]["conversion"] for u in utts) == {"none": 4, "flac_to_wav": 3, "resample_soxr_vhq": 3}
    for u in utts:
        assert u["sample_rate"] == 16000
        assert u["transcript"]
        assert u["license"] and u["attribution"]
        # Pinned to a full commit hash, never a branch.
        repo_commit = u["source"]["url"].removeprefix(RAW_PREFIX).split("/")
        assert u["source"]["url"].startswith(RAW_PREFIX) and len(repo_commit[2]) == 40
        assert repo_commit[2] in u["attribution"]
    assert any(u["critical"] for u in utts)


def test_smoke_manifest_rejects_unknown_version(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.loads(datasets._smoke_manifest_bytes())
    doc["version"] = 2
    monkeypatch.setattr(datasets, "_smoke_manifest_bytes", lambda: json.dumps(doc).encode())
    with pytest.raises(DatasetError, match=r"smoke\.json: version: unsupported version 2"):
        smoke_manifest()


def test_smoke_manifest_rejects_path_in_file_name(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.loads(datasets._smoke_manifest_bytes())
    doc["utterances"][0]["file"] = "../escape.wav"
    monkeypatch.setattr(datasets, "_smoke_manifest_bytes", lambda: json.dumps(doc).encode())
    with pytest.raises(DatasetError, match=r"utterances\[0\]\.file"):
        smoke_manifest()


@needs_mirror
def test_smoke_json_is_what_the_script_generates(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_smoke_manifest.py"), str(MIRROR / "manifest.json"), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == (REPO / "src" / "codecarena" / "data" / "smoke.json").read_bytes()


# -------------------------------------------------------------------------------------- mirror / cache


@needs_mirror
def test_load_smoke_from_mirror() -> None:
    s = load_smoke(data_dir=MIRROR)
    raw = datasets._smoke_manifest_bytes()
    assert s.name == "smoke"
    assert s.source == f"mirror {MIRROR.resolve()}"
    assert s.manifest_sha256 == hashlib.sha256(raw).hexdigest()
    assert len(s.utterances) == 10
    for u in s.utterances:
        assert u.path.is_absolute() and u.path.parent == MIRROR.resolve()
        assert u.sample_rate == 16000 and u.language in ("en", "zh") and u.transcript
        info = sf.info(str(u.path))
        assert (info.samplerate, info.channels, info.frames, info.subtype) == (16000, 1, u.num_samples, "PCM_16")
    crit = {u.id: u.critical for u in s.utterances}
    assert crit["en_ljspeech_LJ002-0020"] == (("number", "EIGHTEEN THIRTEEN"),)


@needs_mirror
def test_load_smoke_uses_codecarena_data_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODECARENA_DATA", str(MIRROR))
    assert load_smoke().source == f"mirror {MIRROR.resolve()}"


@needs_mirror
def test_tampered_mirror_is_rejected(tmp_path: Path) -> None:
    mirror = _copy_mirror(tmp_path / "mirror")
    victim = mirror / "zh_aishell1_BAC009S0002W0123.wav"
    expected = sha256_file(victim)
    _flip_last_byte(victim)
    with pytest.raises(DatasetError) as err:
        load_smoke(data_dir=mirror)
    msg = str(err.value)
    assert str(victim) in msg and expected in msg and sha256_file(victim) in msg
    assert "\n" not in msg


@needs_mirror
def test_mirror_missing_file_is_rejected_not_downloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = _copy_mirror(tmp_path / "mirror")
    (mirror / "en_ljspeech_LJ002-0035.wav").unlink()

    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a mirror must not fall back to downloading")

    monkeypatch.setattr(datasets, "download_verified", no_network)
    with pytest.raises(DatasetError, match=r"en_ljspeech_LJ002-0035\.wav: missing"):
        load_smoke(data_dir=mirror)


def test_data_dir_that_is_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="CODECARENA_DATA"):
        load_smoke(data_dir=tmp_path / "nope")


def test_offline_with_nothing_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"CODECARENA_DATA.*--data-dir") as err:
        load_smoke(cache_dir=tmp_path / "cache", allow_download=False)
    assert "\n" not in str(err.value)


def test_unreachable_download_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A closed port on 127.0.0.1 stands in for "no internet".
    _serve_manifest_from(monkeypatch, "http://127.0.0.1:9/")
    with pytest.raises(DatasetError, match=r"download failed.*CODECARENA_DATA.*--data-dir"):
        load_smoke(cache_dir=tmp_path / "cache")


def test_default_cache_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_cache_dir() == tmp_path / "xdg-cache" / "codecarena" / "data" / "smoke"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "codecarena" / "data" / "smoke"


# ------------------------------------------------------------------------------------------- download


class _Server:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self) -> None:
                server.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def path_for(self, url: str) -> Path:
        return self.root / url.removeprefix(RAW_PREFIX).removeprefix(self.base)


def _serve_manifest_from(monkeypatch: pytest.MonkeyPatch, base: str) -> None:
    raw = datasets._smoke_manifest_bytes().decode("utf-8").replace(RAW_PREFIX, base)
    monkeypatch.setattr(datasets, "_smoke_manifest_bytes", lambda: raw.encode("utf-8"))


@pytest.fixture
def origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    """A local stand-in for raw.githubusercontent.com holding every smoke original at its pinned path."""
    if not (MIRROR / "original").is_dir():
        pytest.skip(f"{MIRROR}/original not found; needed to serve downloads locally")
    mirror_items = {i["id"]: i for i in json.loads((MIRROR / "manifest.json").read_text(encoding="utf-8"))}
    srv = _Server(tmp_path / "origin")
    for u in smoke_manifest()["utterances"]:
        target = srv.path_for(u["source"]["url"])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(MIRROR / mirror_items[u["id"]]["original_file"], target)
    _serve_manifest_from(monkeypatch, srv.base)
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()


def test_download_converts_and_verifies_then_uses_cache(origin: _Server, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    s = load_smoke(cache_dir=cache)
    assert s.source == "download"
    assert len(origin.requests) == 10
    manifest = {u["id"]: u for u in smoke_manifest()["utterances"]}
    for u in s.utterances:
        assert u.path == (cache / manifest[u.id]["file"]).resolve()
        assert sha256_file(u.path) == manifest[u.id]["sha256"] == u.sha256
    # Converted items (flac_to_wav, resample_soxr_vhq) reproduce the mirror's bytes exactly.
    assert {manifest[u.id]["source"]["conversion"] for u in s.utterances} == {"none", "flac_to_wav", "resample_soxr_vhq"}
    for u in s.utterances:
        assert u.path.read_bytes() == (MIRROR / u.path.name).read_bytes()
    # Nothing but the final wavs is left in the cache (no originals, no temp files).
    assert sorted(p.name for p in cache.iterdir()) == sorted(m["file"] for m in manifest.values())

    again = load_smoke(cache_dir=cache)
    assert again.source == f"cache {cache.resolve()}"
    assert len(origin.requests) == 10  # nothing fetched the second time
    assert (again.utterances, again.manifest_sha256) == (s.utterances, s.manifest_sha256)


def test_default_cache_is_used_when_no_dir_given(origin: _Server, tmp_path: Path) -> None:
    s = load_smoke()
    assert s.source == "download"
    assert len(s.utterances) == 10
    assert all(u.path.parent == default_cache_dir().resolve() for u in s.utterances)
    assert load_smoke().source.startswith("cache ")


@pytest.mark.parametrize(
    ("utt_id", "conversion"),
    [("en_librispeech_1089-134686-0001", "flac_to_wav"), ("en_ljspeech_LJ002-0020", "resample_soxr_vhq"),
     ("zh_aishell1_BAC009S0002W0123", "none")],
)
def test_tampered_download_is_rejected_and_discarded(
    origin: _Server, tmp_path: Path, utt_id: str, conversion: str
) -> None:
    entry = next(u for u in smoke_manifest()["utterances"] if u["id"] == utt_id)
    assert entry["source"]["conversion"] == conversion
    served = origin.path_for(entry["source"]["url"])
    _flip_last_byte(served)
    cache = tmp_path / "cache"
    with pytest.raises(DatasetError) as err:
        load_smoke(cache_dir=cache)
    msg = str(err.value)
    assert entry["source"]["sha256"] in msg and sha256_file(served) in msg
    assert "\n" not in msg
    assert not (cache / entry["file"]).exists()
    assert not [p for p in cache.rglob("*") if p.name.startswith(".")]  # no temp files or dirs left behind


def test_download_verified_direct(origin: _Server, tmp_path: Path) -> None:
    entry = next(u for u in smoke_manifest()["utterances"] if u["source"]["conversion"] == "none")
    url, sha = entry["source"]["url"], entry["source"]["sha256"]
    size = origin.path_for(url).stat().st_size
    dest = tmp_path / "dl" / "x.wav"

    with pytest.raises(DownloadError, match=f"expected {size + 1} bytes, got {size}"):
        download_verified(url, dest, sha, size=size + 1)
    assert not dest.parent.exists() or not list(dest.parent.iterdir())

    assert download_verified(url, dest, sha, size=size) == dest and sha256_file(dest) == sha
    n = len(origin.requests)
    download_verified(url, dest, sha)
    assert len(origin.requests) == n  # already there with the right hash: no request

    with pytest.raises(DownloadError, match=r"download failed \(HTTP Error 404"):
        download_verified(origin.base + "no/such/file.wav", tmp_path / "dl" / "y.wav", sha)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["x.wav"]


def test_corrupt_cache_entry_is_refetched(origin: _Server, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_smoke(cache_dir=cache)
    victim = cache / "en_ljspeech_LJ002-0035.wav"
    _flip_last_byte(victim)
    with pytest.raises(DatasetError, match="downloads are disabled"):
        load_smoke(cache_dir=cache, allow_download=False)
    n = len(origin.requests)
    assert load_smoke(cache_dir=cache).source == "download"
    assert len(origin.requests) == n + 1
    assert victim.read_bytes() == (MIRROR / victim.name).read_bytes()


# ------------------------------------------------------------------------------------------ input dir


def _tone(n: int, channels: int = 1) -> np.ndarray:
    t = np.arange(n) / 8000.0
    y = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)
    return y if channels == 1 else np.stack([y] * channels, axis=1)


def test_load_input_dir_with_transcripts(tmp_path: Path) -> None:
    root = tmp_path / "my set"
    (root / "84" / "121123").mkdir(parents=True)
    (root / "extra").mkdir()
    sf.write(str(root / "84" / "121123" / "84-121123-0000.flac"), _tone(8000), 16000, subtype="PCM_16")
    sf.write(str(root / "84" / "121123" / "84-121123-0001.wav"), _tone(4000), 8000, subtype="PCM_16")
    (root / "84" / "121123" / "84-121123.trans.txt").write_text(
        "84-121123-0000 GO DO YOU HEAR\n84-121123-0001 BUT IN LESS THAN FIVE MINUTES\n84-121123-0099 NO SUCH FILE\n",
        encoding="utf-8",
    )
    sf.write(str(root / "extra" / "b.wav"), _tone(2400), 24000, subtype="PCM_16")
    sf.write(str(root / "a.wav"), _tone(1600) / 32768, 16000, subtype="FLOAT")
    (root / "notes.txt").write_text("not audio", encoding="utf-8")
    (root / "manifest.json").write_text(
        json.dumps([
            {"file": "extra/b.wav", "transcript": "两个", "language": "zh", "id": "custom_b"},
            {"file": "84/121123/84-121123-0001.wav", "transcript": "OVERRIDDEN"},
        ], ensure_ascii=False),
        encoding="utf-8",
    )

    s = load_input_dir(root)
    assert s.name == "input:my set"
    assert s.source == f"input {root.resolve()}"
    by_id = {u.id: u for u in s.utterances}
    assert [u.id for u in s.utterances] == ["84__121123__84-121123-0000", "84__121123__84-121123-0001", "a", "custom_b"]
    assert by_id["84__121123__84-121123-0000"].transcript == "GO DO YOU HEAR"
    assert by_id["84__121123__84-121123-0001"].transcript == "OVERRIDDEN"  # manifest.json wins over trans.txt
    assert by_id["a"].transcript is None and by_id["a"].language == "" and by_id["a"].speaker == ""
    assert (by_id["custom_b"].transcript, by_id["custom_b"].language) == ("两个", "zh")
    # Real rates, never resampled.
    assert [(u.sample_rate, u.num_samples) for u in s.utterances] == [(16000, 8000), (8000, 4000), (16000, 1600), (24000, 2400)]
    for u in s.utterances:
        assert u.path.is_absolute() and u.sha256 == sha256_file(u.path) and u.critical == ()

    # The set's identity follows transcripts and audio bytes.
    assert load_input_dir(root).manifest_sha256 == s.manifest_sha256
    (root / "84" / "121123" / "84-121123.trans.txt").write_text("84-121123-0000 GO\n", encoding="utf-8")
    assert load_input_dir(root).manifest_sha256 != s.manifest_sha256


def test_input_manifest_naming_unknown_file_is_rejected(tmp_path: Path) -> None:
    sf.write(str(tmp_path / "a.wav"), _tone(1600), 16000)
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "b.wav", "transcript": "x"}]), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"manifest\.json: entry 0: 'b\.wav'"):
        load_input_dir(tmp_path)


def _stereo(n: int, rate: int) -> np.ndarray:
    """Left and right clearly different: a 220 Hz and a 330 Hz tone."""
    t = np.arange(n) / rate
    return np.stack([0.3 * np.sin(2 * np.pi * 220 * t), 0.2 * np.sin(2 * np.pi * 330 * t)], axis=1)


def test_multichannel_input_follows_the_channel_policy(tmp_path: Path) -> None:
    sf.write(str(tmp_path / "mono.wav"), _tone(1600), 16000)
    sf.write(str(tmp_path / "stereo.wav"), _stereo(1600, 16000), 16000, subtype="PCM_16")
    sets = {policy: load_input_dir(tmp_path, policy) for policy in ("mix", "left", "right", "each")}
    assert [(u.id, u.channel) for u in sets["mix"].utterances] == [("mono", ""), ("stereo", "mix")]
    assert [(u.id, u.channel) for u in sets["each"].utterances] == [("mono", ""), ("stereo__ch1", "ch1"),
                                                                   ("stereo__ch2", "ch2")]
    # Left and right are different audio under one file hash: the set's identity tells them apart.
    assert len({s.manifest_sha256 for s in sets.values()}) == 4
    assert sets["mix"].utterances[0].converted is False and sets["mix"].utterances[1].converted is True
    sf.write(str(tmp_path / "three.wav"), np.zeros((1600, 3)) + 0.1, 16000)
    with pytest.raises(DatasetError, match=r"three\.wav: 3 channels; --channels left names one of two"):
        load_input_dir(tmp_path, "left")
    with pytest.raises(DatasetError, match=r"--channels both: expected one of mix, left, right, each"):
        load_input_dir(tmp_path, "both")


def test_any_audio_is_read_by_content_and_what_is_not_audio_is_listed(tmp_path: Path) -> None:
    import av

    speech = _stereo(22050, 44100)
    sf.write(str(tmp_path / "talk.mp3"), speech, 44100, format="MP3", subtype="MPEG_LAYER_III")
    sf.write(str(tmp_path / "talk2.ogg"), speech, 44100, format="OGG", subtype="VORBIS")
    sf.write(str(tmp_path / "disguised.wav"), speech, 44100, format="MP3", subtype="MPEG_LAYER_III")
    with av.open(str(tmp_path / "phone.m4a"), "w", format="mp4") as out:  # AAC: only FFmpeg reads it
        stream = out.add_stream("aac", rate=44100)
        stream.layout = "stereo"
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(speech.T, dtype=np.float32), format="fltp",
                                           layout="stereo")
        frame.sample_rate = 44100
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    sf.write(str(tmp_path / "plain.flac"), _tone(1600), 16000)
    (tmp_path / "slides.pdf").write_bytes(b"%PDF-1.4 not audio")
    (tmp_path / "notes.txt").write_text("metadata, not probed", encoding="utf-8")
    s = load_input_dir(tmp_path)
    by_id = {u.id: u for u in s.utterances}
    assert sorted(by_id) == ["disguised", "phone", "plain", "talk", "talk2"]
    assert s.skipped == (("slides.pdf", s.skipped[0][1]),) and s.skipped[0][1].startswith("unreadable audio (libsndfile:")
    assert by_id["plain"].converted is False and by_id["plain"].source_format == ""
    assert by_id["talk"].source_format.startswith("MP3 MPEG_LAYER_III (libsndfile), 44100 Hz, 2 channels")
    assert by_id["talk2"].source_format.startswith("OGG VORBIS (libsndfile)")
    assert "(FFmpeg via PyAV), 44100 Hz, 2 channels" in by_id["phone"].source_format
    assert by_id["disguised"].source_format.endswith("its content is MP3, not the .wav its name says")
    for u in by_id.values():
        assert u.sample_rate in (16000, 44100) and u.num_samples >= 1600
    # A file named as audio that nothing reads is listed like any other unreadable file; the rest is read.
    (tmp_path / "broken.m4a").write_bytes(b"\x00" * 64)
    s = load_input_dir(tmp_path)
    assert sorted(u.id for u in s.utterances) == sorted(by_id)
    assert [name for name, _ in s.skipped] == ["broken.m4a", "slides.pdf"]
    assert s.skipped[0][1].startswith("unreadable audio (libsndfile:")


def _folder_skips(folder: Path, name: str, reason: str) -> None:
    """A damaged file beside a good one: checked alone it is refused naming the file; in the folder it
    is listed as skipped with the same reason and the good file is read."""
    with pytest.raises(AudioInputError, match=rf"{re.escape(name)}: {reason}"):
        check_audio_file(folder / name)
    sf.write(str(folder / "good.wav"), _tone(16000), 16000, subtype="PCM_16")
    s = load_input_dir(folder)
    assert [u.id for u in s.utterances] == ["good"]
    assert [name_ for name_, _ in s.skipped] == [name] and re.fullmatch(reason, s.skipped[0][1])


def test_truncated_wav_is_refused_alone_and_skipped_in_a_folder(tmp_path: Path) -> None:
    path = tmp_path / "cut.wav"
    sf.write(str(path), _tone(16000), 16000, subtype="PCM_16")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    # The trap this guards against: libsndfile opens it happily, just with fewer frames.
    assert sf.info(str(path)).frames == 16000 - 500
    _folder_skips(tmp_path, "cut.wav", r"truncated: data chunk declares 32000 bytes but only 31000 are present")


def test_truncated_flac_is_refused_alone_and_skipped_in_a_folder(tmp_path: Path) -> None:
    path = tmp_path / "cut.flac"
    sf.write(str(path), (np.random.default_rng(0).standard_normal(48000) * 3000).astype(np.int16), 16000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _folder_skips(tmp_path, "cut.flac", r"(truncated|unreadable).*")


def test_unreadable_wav_is_refused_alone_and_skipped_in_a_folder(tmp_path: Path) -> None:
    (tmp_path / "junk.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio")
    _folder_skips(tmp_path, "junk.wav", r"unreadable audio \(libsndfile: .*No 'data' chunk.*")


def test_a_folder_of_only_unreadable_files_is_an_error_naming_one(tmp_path: Path) -> None:
    (tmp_path / "noise.wav").write_bytes(np.random.default_rng(1).bytes(4096))
    with pytest.raises(DatasetError, match=r"no audio files found \(1 skipped, e\.g\. noise\.wav: unreadable audio"):
        load_input_dir(tmp_path)


def test_empty_or_missing_folder_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no audio here", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"empty: no audio files found"):
        load_input_dir(tmp_path / "empty")
    with pytest.raises(DatasetError, match="not a directory"):
        load_input_dir(tmp_path / "missing")


# ------------------------------------------------------------------- --input FILE, --language-from-folders


def test_input_can_be_one_audio_file(tmp_path: Path) -> None:
    # Issue 30: `--input FILE` was refused with "input folder does not exist" although the file exists.
    from codecarena.selection import evaluation_set

    sf.write(str(tmp_path / "take 1.mp3"), _stereo(22050, 44100), 44100, format="MP3", subtype="MPEG_LAYER_III")
    sf.write(str(tmp_path / "clip.wav"), _tone(16000), 16000, subtype="PCM_16")
    s = evaluation_set(tmp_path / "clip.wav", "auto", "en", None, False, None, None)
    assert (s.name, s.source) == ("input:clip.wav", f"input {(tmp_path / 'clip.wav').resolve()}")
    (u,) = s.utterances
    assert (u.id, u.language, u.transcript, u.num_samples, u.converted) == ("clip", "en", None, 16000, False)
    plain = evaluation_set(tmp_path / "clip.wav", "auto", "", None, False, None, None)
    assert s.manifest_sha256 != plain.manifest_sha256  # --language is part of the set's identity
    # Only this file is read: not its neighbours, nor a manifest beside it.
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "other.wav"}]), encoding="utf-8")
    assert [u.id for u in evaluation_set(tmp_path / "clip.wav", "plain", "", None, False, None, None).utterances] \
        == ["clip"]


def test_an_input_file_that_cannot_be_used_is_one_error_naming_it(tmp_path: Path) -> None:
    from codecarena.corpora import load_corpus

    sf.write(str(tmp_path / "clip.wav"), _tone(16000), 16000, subtype="PCM_16")
    (tmp_path / "slides.pdf").write_bytes(b"%PDF-1.4 not audio")
    sf.write(str(tmp_path / "my clip.wav"), _tone(16000), 16000, subtype="PCM_16")
    cases = [(tmp_path / "slides.pdf", "auto", r"slides\.pdf: unreadable audio"),
             (tmp_path / "my clip.wav", "auto", r"my clip\.wav: utterance id"),
             (tmp_path / "clip.wav", "kaldi", r"clip\.wav: a single file; --corpus kaldi reads a folder"),
             (tmp_path / "gone.wav", "auto", r"gone\.wav: does not exist \(--input takes an audio file or a folder")]
    for path, layout, message in cases:
        with pytest.raises(DatasetError, match=message):
            load_corpus(path, layout)
    with pytest.raises(DatasetError, match=r"clip\.wav: a single file; --language-from-folders reads a folder"):
        load_corpus(tmp_path / "clip.wav", language_from_folders=True)


def test_languages_can_come_from_the_first_folder(tmp_path: Path) -> None:
    for name in ("en/a.wav", "zh/day 1/b.wav", "pt-BR/c.wav", "top.wav"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(tmp_path / name), _tone(1600), 16000, subtype="PCM_16")
    (tmp_path / "manifest.json").write_text(json.dumps([
        {"file": "top.wav", "language": "fr"}, {"file": "zh/day 1/b.wav", "id": "b", "transcript": "两个"}],
        ensure_ascii=False), encoding="utf-8")
    plain = load_input_dir(tmp_path)
    assert {u.id: u.language for u in plain.utterances} == {"en__a": "", "b": "", "pt-BR__c": "", "top": "fr"}
    s = load_input_dir(tmp_path, language_from_folders=True)
    assert {u.id: u.language for u in s.utterances} == {"en__a": "en", "b": "zh", "pt-BR__c": "pt-BR", "top": "fr"}
    # A folder that is no language, or a manifest its folder contradicts, is an error, not a guess.
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "en/a.wav", "language": "de"}]), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"manifest\.json: en/a\.wav is declared 'de', but --language-from-"
                                           r"folders reads 'en' from its folder"):
        load_input_dir(tmp_path, language_from_folders=True)
    (tmp_path / "manifest.json").unlink()
    (tmp_path / "Takes").mkdir()
    sf.write(str(tmp_path / "Takes" / "d.wav"), _tone(1600), 16000, subtype="PCM_16")
    with pytest.raises(DatasetError, match=r"Takes/: 'Takes' is not a language tag codecarena knows \(a language "
                                           r"Whisper transcribes"):
        load_input_dir(tmp_path, language_from_folders=True)


@pytest.mark.parametrize("folder", ["xx_long_name", "old_runs", "raw_data", "old", "tlh", "en-GB-oxendict", "e"])
def test_a_folder_named_like_a_language_code_that_names_none_is_an_error(tmp_path: Path, folder: str) -> None:
    """#36 (17): these passed a pattern of 2-3 letters and subtags and became languages."""
    (tmp_path / "en").mkdir()
    (tmp_path / folder).mkdir()
    for name in ("en/a.wav", f"{folder}/b.wav"):
        sf.write(str(tmp_path / name), _tone(1600), 16000, subtype="PCM_16")
    with pytest.raises(DatasetError) as refused:
        load_input_dir(tmp_path, language_from_folders=True)
    assert str(refused.value) == (
        f"{tmp_path / folder}/: {folder!r} is not a language tag codecarena knows (a language Whisper transcribes (en, "
        "zh, de, fr, pt, ..., and yue), optionally with a script and a region (zh-Hans, pt-BR, en_US)), and "
        "--language-from-folders reads each first folder as one: rename it, move its files or leave the option out")


@pytest.mark.parametrize("tag", ["en", "EN", "zh_CN", "pt-BR", "zh-Hans", "zh-Hant-TW", "es-419", "yue", "haw", "jw"])
def test_a_language_whisper_transcribes_with_a_script_and_a_region_is_a_language(tag: str) -> None:
    from codecarena.languages import language_problem

    assert language_problem(tag) == ""


@pytest.mark.parametrize("tag", ["xx", "old_runs", "english", "en-", "en--US", "en-US-Hans", "en-GB-oxendict",
                                 "[/x]", "tlh", "e\x1bn", ""])
def test_anything_else_is_no_language(tag: str) -> None:
    from codecarena.languages import language_problem

    assert language_problem(tag).startswith(f"{tag!r} is not a language tag codecarena knows")


def test_a_manifest_language_and_a_language_option_follow_the_same_rule(tmp_path: Path) -> None:
    from codecarena.selection import SelectionError, evaluation_set, scorer

    sf.write(str(tmp_path / "a.wav"), _tone(1600), 16000, subtype="PCM_16")
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "a.wav", "language": "raw_data"}]))
    with pytest.raises(DatasetError, match=r"manifest\.json: entry 0: language 'raw_data' is not a language tag "
                                           r"codecarena knows .*; leave it out for a language no recogniser here knows"):
        load_input_dir(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "a.wav", "language": ""}]))
    assert load_input_dir(tmp_path).utterances[0].language == ""  # "" declares none
    with pytest.raises(SelectionError, match=r"--language 'old_runs' is not a language tag codecarena knows"):
        evaluation_set(tmp_path, "auto", "old_runs", None, False, None, None)
    assert evaluation_set(tmp_path, "auto", "pt-BR", None, False, None, None).utterances[0].language == "pt-BR"
    with pytest.raises(SelectionError, match=r"--asr-model 'tlh=base': 'tlh' is not a language tag codecarena knows"):
        scorer("asr", ["tlh=base"])


def test_the_readme_manifest_example_reads_as_it_says(tmp_path: Path) -> None:
    """The manifest.json of README.md ("Your own audio"), on files of those names, gives what its table says."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    example = readme.split("### Your own audio", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    for item in json.loads(example):
        (tmp_path / item["file"]).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(tmp_path / item["file"]), _tone(16000), 16000, format="WAV", subtype="PCM_16")
    (tmp_path / "manifest.json").write_text(example, encoding="utf-8")
    by_id = {u.id: u for u in load_input_dir(tmp_path).utterances}
    assert sorted(by_id) == ["en__door", "take3", "zh_weather"]
    assert (by_id["en__door"].language, by_id["en__door"].speaker) == ("en", "anna")
    assert by_id["zh_weather"].critical == (("number", "六月"),)
    assert by_id["zh_weather"].transcript == "今天六月底天气不好"
    assert (by_id["take3"].language, by_id["take3"].license, by_id["take3"].transcript) == ("", "CC-BY-4.0", None)


def test_languages_from_folders_is_for_plain_folders(tmp_path: Path) -> None:
    from codecarena.corpora import load_corpus

    (tmp_path / "en").mkdir()
    sf.write(str(tmp_path / "en" / "1-2-0000.wav"), _tone(1600), 16000, subtype="PCM_16")
    (tmp_path / "en" / "1-2.trans.txt").write_text("1-2-0000 HELLO\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"--language-from-folders reads plain folders, and this is a librispeech"):
        load_corpus(tmp_path, language_from_folders=True)
    s = load_corpus(tmp_path, "plain", language_from_folders=True)
    assert [(u.language, u.transcript) for u in s.utterances] == [("en", "HELLO")]
