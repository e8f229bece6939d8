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
