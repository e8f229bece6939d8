"""Model files are read once (what is hashed is what is loaded) and parsed by weights-only readers."""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import io
import os
import pickle
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import REPO
from codecarena import checkpoints
from codecarena.plugin import torch as torch_weights
from codecarena.registry import entries
from codecarena.registry.entries import Checkpoint, CheckpointFile, load_entry
from codecarena.specs import parse_spec

MODELS = Path(os.environ.get("CODECARENA_MODELS", REPO.parent / "shared" / "models"))


class Planted:
    """Pickles as a call that creates `marker`: only an unpickler that runs code would create it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (shutil.copy, (__file__, str(self.marker)))


def opens_under(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Names of the files under `folder` opened through Python's open (hashing and pathlib both
    use it), with a count each."""
    seen: Counter[str] = Counter()
    real_open = builtins.open

    def spy(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(file, (str, os.PathLike)) and Path(file).resolve().is_relative_to(folder.resolve()):
            seen[Path(file).name] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    monkeypatch.setattr(io, "open", spy)
    return seen


def pinned(folder: Path, files: dict[str, bytes]) -> Checkpoint:
    """A checkpoint pinning `files`, written under `folder`/ckpt (a models mirror)."""
    (folder / "ckpt").mkdir(parents=True)
    pins = []
    for name, data in files.items():
        (folder / "ckpt" / name).write_bytes(data)
        pins.append(CheckpointFile(name, f"http://127.0.0.1:9/{name}", len(data), hashlib.sha256(data).hexdigest(),
                                   "both"))
    return Checkpoint("0" * 40, "test", False, "ckpt", tuple(pins))


def test_lyra_reads_each_model_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Verifying a file by path and then loading it by path again would load whatever replaced it in
    # between: each file must be opened exactly once, and the interpreters built from those bytes.
    if not (MODELS / "lyra_v2" / "lyragan.tflite").is_file():
        pytest.skip(f"Lyra model mirror not found at {MODELS}; set CODECARENA_MODELS")
    from codecarena.codecs.lyra.adapter import LyraAdapter

    shutil.copytree(MODELS / "lyra_v2", tmp_path / "lyra_v2")
    monkeypatch.setenv("CODECARENA_MODELS", str(tmp_path))
    opened = opens_under(tmp_path, monkeypatch)
    adapter = LyraAdapter(parse_spec("lyra:3200"), "real")
    facts = adapter.load()
    names = [f.name for f in load_entry("lyra_v2").checkpoint.files]  # type: ignore[union-attr]
    assert opened == Counter(names)
    assert facts["checkpoint"] == load_entry("lyra_v2").checkpoint.identity("lyra_v2")  # type: ignore[union-attr]
    assert all(hashlib.sha256(adapter.models[n]).hexdigest() == facts["checkpoint"][n] for n in names)


def test_read_checkpoint_returns_the_verified_bytes_reading_each_file_once(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"a.bin": b"weights a" * 100, "b.bin": b"weights b" * 50}
    checkpoint = pinned(tmp_path, files)
    opened = opens_under(tmp_path, monkeypatch)
    folder, data = checkpoints.read_checkpoint(checkpoint, models_dir=tmp_path)
    assert folder == tmp_path / "ckpt" and data == files
    assert opened == Counter(list(files))


@pytest.mark.parametrize("damage, needle", [
    ("flip", "a.bin: sha256 mismatch: expected "),
    ("grow", "a.bin: 901 bytes, pinned 900; refusing to load"),
    ("remove", "a.bin: checkpoint file missing"),
])
def test_read_checkpoint_refuses_a_file_that_is_not_the_pinned_one(tmp_path: Path, damage: str, needle: str) -> None:
    checkpoint = pinned(tmp_path, {"a.bin": b"weights a" * 100})
    path = tmp_path / "ckpt" / "a.bin"
    if damage == "flip":
        path.write_bytes(b"W" + path.read_bytes()[1:])
    elif damage == "grow":
        path.write_bytes(path.read_bytes() + b"!")
    else:
        path.unlink()
    with pytest.raises(checkpoints.CheckpointError, match=needle):
        checkpoints.read_checkpoint(checkpoint, models_dir=tmp_path)


def test_read_checkpoint_refuses_a_file_that_grows_while_it_is_read(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = pinned(tmp_path, {"a.bin": b"weights a" * 100})
    path = tmp_path / "ckpt" / "a.bin"
    real_fstat = os.fstat

    def fstat_then_append(fd: int) -> os.stat_result:
        # The size is taken first; a writer then appends before the bytes are read.
        result = real_fstat(fd)
        with open(path, "ab") as fh:
            fh.write(b"appended")
        return result

    monkeypatch.setattr(checkpoints.os, "fstat", fstat_then_append)
    with pytest.raises(checkpoints.CheckpointError, match="a.bin: changed while being read"):
        checkpoints.read_checkpoint(checkpoint, models_dir=tmp_path)


@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
def test_a_checkpoint_holding_code_is_refused_in_one_line_and_nothing_runs(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "ckpt.pt"
    if kind == "pickle":
        path.write_bytes(pickle.dumps({"weight": Planted(marker)}))
    else:
        torch.save({"weight": torch.zeros(2), "extra": Planted(marker)}, path)
    with pytest.raises(ValueError) as caught:
        torch_weights.weights_only_load(path, path.read_bytes())
    message = str(caught.value)
    assert message.startswith(f"{path}: not a plain weights file (torch.load with weights_only=True refused it: ")
    assert "\n" not in message and "weights_only=False" not in message
    assert not marker.exists()


def test_torch_synthetic_weights_are_read_once_and_identified_by_the_bytes_parsed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    state = {"layer.weight": torch.arange(6.0).reshape(2, 3)}
    torch_weights.synthetic_file_weights("encodec", "tiny", 7, lambda seed: state)  # generates the file
    path = tmp_path / "cache" / "codecarena" / "models" / "synthetic" / "encodec" / "tiny-seed7.pt"
    opened = opens_under(tmp_path / "cache", monkeypatch)
    weights = torch_weights.synthetic_file_weights("encodec", "tiny", 7, lambda seed: state)
    assert opened == Counter({path.name: 1})
    assert weights.identity["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert torch.equal(weights.state["layer.weight"], state["layer.weight"])


def test_torch_real_weights_are_read_once_verified_and_refused_when_tampered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    torch.save({"layer.weight": torch.ones(3)}, buffer)
    checkpoint = pinned(tmp_path, {"model.pt": buffer.getvalue()})
    monkeypatch.setattr(entries, "load_entry",
                        lambda registry_id: dataclasses.replace(load_entry(registry_id), checkpoint=checkpoint))
    monkeypatch.setenv("CODECARENA_MODELS", str(tmp_path))
    opened = opens_under(tmp_path, monkeypatch)
    weights = torch_weights.pinned_file_weights("encodec", "real", "unused")
    assert opened == Counter({"model.pt": 1})
    assert torch.equal(weights.state["layer.weight"], torch.ones(3))
    assert weights.identity == checkpoint.identity("encodec")
    data = buffer.getvalue()
    (tmp_path / "ckpt" / "model.pt").write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    with pytest.raises(checkpoints.CheckpointError, match="model.pt: sha256 mismatch"):
        torch_weights.pinned_file_weights("encodec", "real", "unused")
