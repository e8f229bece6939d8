"""`codecarena fetch` against a local file server: good, tampered and truncated files."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from conftest import REPO, codecarena, registry_fork

MODELS = Path(os.environ.get("CODECARENA_MODELS", REPO.parent / "shared" / "models"))
PINNED_URL = "https://raw.githubusercontent.com/google/lyra/47698dadf0010abff6a848e02642f55f806d4842/lyra/model_coeffs/"


class _Counting(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        type(self).requests.append(self.path)
        super().do_GET()


def _serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A file server on 127.0.0.1 for `root`, counting requests; and its base URL."""
    _Counting.requests = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: _Counting(*a, directory=str(root), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def served_registry(tmp_path: Path):  # type: ignore[no-untyped-def]
    if not (MODELS / "lyra_v2" / "lyragan.tflite").is_file():
        pytest.skip(f"Lyra model mirror not found at {MODELS}; set CODECARENA_MODELS")
    root = tmp_path / "served"
    shutil.copytree(MODELS / "lyra_v2", root)
    for f in root.iterdir():
        f.chmod(0o644)
    server, base = _serve(root)
    toml = registry_fork(tmp_path, "lyra_v2")
    registry = toml.parent.parent
    toml.write_text(toml.read_text().replace(PINNED_URL, f"{base}/"))
    env = {"CODECARENA_REGISTRY": str(registry), "XDG_CACHE_HOME": str(tmp_path / "cache"), "CODECARENA_MODELS": ""}
    yield root, env, tmp_path / "cache" / "codecarena" / "models" / "lyra_v2"
    server.shutdown()


def test_fetch_downloads_verifies_and_does_not_download_again(served_registry) -> None:  # type: ignore[no-untyped-def]
    root, env, cache = served_registry
    first = codecarena("fetch", "lyra:6000", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert sorted(_Counting.requests) == ["/lyragan.tflite", "/quantizer.tflite", "/soundstream_encoder.tflite"]
    for name in ("lyragan.tflite", "quantizer.tflite", "soundstream_encoder.tflite"):
        assert (cache / name).read_bytes() == (root / name).read_bytes()
    assert "sha256 841ee05989687d32d1f616a8ad1419fc7eda37599d3c05c7cf5a0d60ccf8ac5c verified" in first.stdout
    second = codecarena("fetch", "lyra_v2", env=env)
    assert second.returncode == 0 and len(_Counting.requests) == 3


@pytest.mark.parametrize("damage, needle", [
    ("tamper", "sha256 mismatch: expected 50e7839cda4f30599a3a34cfaddcd9c98449b049eee884e1a74295780448ad06, actual "),
    ("truncate", "size mismatch: expected 1475160 bytes, got 1475000"),
])
def test_fetch_refuses_a_bad_file_and_deletes_it(served_registry, damage: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    root, env, cache = served_registry
    victim = root / "lyragan.tflite"
    data = victim.read_bytes()
    victim.write_bytes(data[:1475000] if damage == "truncate" else data[:500] + bytes([data[500] ^ 1]) + data[501:])
    result = codecarena("fetch", "lyra_v2", env=env)
    assert result.returncode == 2
    assert needle in result.stderr and "lyragan.tflite" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (cache / "lyragan.tflite").exists()
    assert not [p for p in cache.iterdir() if p.name.endswith(".part")]


def test_fetch_from_a_mirror_reads_no_network(served_registry) -> None:  # type: ignore[no-untyped-def]
    _, env, _ = served_registry
    result = codecarena("fetch", "lyra_v2", "--mirror", MODELS, env=env)
    assert result.returncode == 0, result.stderr
    assert _Counting.requests == []
    assert str(MODELS / "lyra_v2" / "quantizer.tflite") in result.stdout


@pytest.fixture
def served_dac(tmp_path: Path):  # type: ignore[no-untyped-def]
    """DAC's registry entry with its three release files replaced by served random bytes; the 24 kHz
    file keeps no size (never published), as in the shipped entry."""
    import hashlib
    import re

    import numpy as np

    root = tmp_path / "served"
    root.mkdir()
    rng = np.random.default_rng(0)
    toml = registry_fork(tmp_path, "dac")
    registry = toml.parent.parent
    text = toml.read_text()
    server, base = _serve(root)
    for name, old_sha in re.findall(r'name = "([^"]+)"\nurl = "[^"]+"\n(?:bytes = \d+\n)?sha256 = "([0-9a-f]{64})"', text):
        data = rng.bytes(1000 + len(name))
        (root / name).write_bytes(data)
        text = text.replace(old_sha, hashlib.sha256(data).hexdigest())
        text = re.sub(rf'(name = "{re.escape(name)}"\nurl = ")[^"]+(")', rf"\g<1>{base}/{name}\g<2>", text)
        text = re.sub(rf'(name = "{re.escape(name)}"\nurl = "[^"]+"\nbytes = )\d+', rf"\g<1>{len(data)}", text)
    toml.write_text(text)
    env = {"CODECARENA_REGISTRY": str(registry), "XDG_CACHE_HOME": str(tmp_path / "cache"), "CODECARENA_MODELS": ""}
    yield root, env, tmp_path / "cache" / "codecarena" / "models" / "dac"
    server.shutdown()


def test_fetch_of_one_configuration_and_a_size_never_published(served_dac) -> None:  # type: ignore[no-untyped-def]
    root, env, cache = served_dac
    first = codecarena("fetch", "dac:24khz", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _Counting.requests == ["/weights_24khz.pth"]  # only that configuration's file
    assert (cache / "weights_24khz.pth").read_bytes() == (root / "weights_24khz.pth").read_bytes()
    assert "size never published: recorded now" in first.stdout
    recorded = json.loads((cache / "sizes.json").read_text())
    assert recorded["weights_24khz.pth"]["bytes"] == (root / "weights_24khz.pth").stat().st_size
    again = codecarena("fetch", "dac:24khz", env=env)
    assert again.returncode == 0 and _Counting.requests == ["/weights_24khz.pth"]  # nothing downloaded twice
    # Without a published size, a tampered file is still refused by its sha256.
    (cache / "weights_24khz.pth").unlink()
    victim = root / "weights_24khz.pth"
    victim.write_bytes(victim.read_bytes()[:-1] + b"x")
    bad = codecarena("fetch", "dac:24khz", env=env)
    assert bad.returncode == 2 and "sha256 mismatch" in bad.stderr and not (cache / "weights_24khz.pth").exists()


def test_fetch_from_files_downloaded_elsewhere(served_dac, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, env, cache = served_dac
    elsewhere = tmp_path / "usb"
    elsewhere.mkdir()
    shutil.copy(root / "weights_16khz.pth", elsewhere / "renamed-on-the-way.bin")  # matched by hash, not name
    result = codecarena("fetch", "dac:16khz", "--from", elsewhere, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (cache / "weights_16khz.pth").read_bytes() == (root / "weights_16khz.pth").read_bytes()
    assert _Counting.requests == []
    wrong = tmp_path / "wrong.pth"
    wrong.write_bytes(b"not the pinned file")
    refused = codecarena("fetch", "dac:16khz", "--from", wrong, env=env)
    assert refused.returncode == 2 and "matches no pinned file" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # Another configuration's file is not this configuration's.
    other = codecarena("fetch", "dac:16khz", "--from", root / "weights.pth", env=env)
    assert other.returncode == 2 and "matches no pinned file" in other.stderr


def test_fetch_from_a_snapshot_folder_skips_files_that_are_not_pinned(served_dac, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A downloaded snapshot holds a LICENSE (sorted before the weights) and a README (after them):
    # both are skipped with a note, every pinned file is imported, and the command succeeds.
    root, env, cache = served_dac
    snapshot = tmp_path / "snapshot"
    shutil.copytree(root, snapshot)
    (snapshot / "LICENSE").write_text("MIT License\n")
    (snapshot / "zz-README.md").write_text("# DAC\n")
    result = codecarena("fetch", "dac", "--from", snapshot, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("weights.pth", "weights_16khz.pth", "weights_24khz.pth"):
        assert (cache / name).read_bytes() == (root / name).read_bytes()
    skipped = [line for line in result.stdout.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 2 and "LICENSE" in skipped[0] and "zz-README.md" in skipped[1]
    assert "not in" not in result.stdout
    # A folder holding no pinned file at all is an error, in one line.
    empty = tmp_path / "docs-only"
    empty.mkdir()
    (empty / "LICENSE").write_text("MIT License\n")
    none = codecarena("fetch", "dac", "--from", empty, env=env)
    assert none.returncode == 2 and len(none.stderr.strip().splitlines()) == 1
    assert "none of its files is a pinned file of dac" in none.stderr


def _one_file_checkpoint(data: bytes):  # type: ignore[no-untyped-def]
    import hashlib

    from codecarena.registry.entries import Checkpoint, CheckpointFile

    pin = CheckpointFile("w.pth", "https://example.org/w.pth", len(data), hashlib.sha256(data).hexdigest(), "both")
    return pin, Checkpoint("r1", "MIT", False, "fam", (pin,))


def test_fetch_from_compares_sizes_before_hashing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecarena import checkpoints

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pin, checkpoint = _one_file_checkpoint(b"pinned weights")
    big = tmp_path / "other-release.pth"
    with open(big, "wb") as fh:
        fh.truncate(256 << 20)  # sparse: takes no disk, and must never be read
    hashed: list[Path] = []
    real = checkpoints.sha256_file
    monkeypatch.setattr(checkpoints, "sha256_file", lambda p: hashed.append(p) or real(p))
    with pytest.raises(checkpoints.CheckpointError, match="matches no pinned file") as refused:
        checkpoints.import_file(checkpoint, big)
    assert hashed == []
    assert str(refused.value) == (f"{big}: 268435456 bytes matches no pinned file's size (w.pth 14 bytes); "
                                  "not imported")
    good = tmp_path / "renamed.bin"
    good.write_bytes(b"pinned weights")
    assert checkpoints.import_file(checkpoint, good) == (pin, tmp_path / "cache" / "codecarena" / "models" / "fam" / "w.pth")


def test_fetch_from_for_a_family_without_model_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "opus.bin").write_bytes(b"x")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = codecarena("fetch", "opus", "--from", tmp_path / "opus.bin", env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line == f"codecarena: error: fetch opus --from {tmp_path / 'opus.bin'}: opus needs no model files; nothing to import"
    assert not (tmp_path / "cache").exists()


def test_fetch_from_on_a_full_cache_names_the_cache_and_the_fetch(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from codecarena import checkpoints
    from codecarena.diskspace import DiskFullError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _, checkpoint = _one_file_checkpoint(b"pinned weights")
    source = tmp_path / "usb" / "w.pth"
    source.parent.mkdir()
    source.write_bytes(b"pinned weights")

    def full(src: Path, dst: Path) -> None:
        # What shutil.copyfile raises on a full destination: the error names the source file.
        raise OSError(errno.ENOSPC, "No space left on device", str(src), None, str(dst))

    monkeypatch.setattr(checkpoints.shutil, "copyfile", full)
    with pytest.raises(DiskFullError) as caught:
        checkpoints.import_file(checkpoint, source)
    cache = tmp_path / "cache" / "codecarena" / "models" / "fam"
    message = str(caught.value)
    assert message.startswith(f"{cache}: no space left on device (") and str(source.parent) not in message
    assert "rerun the same `codecarena fetch` command" in message and "resume" not in message
    assert list(cache.iterdir()) == []  # no partial file left behind
