"""The torch part of the public adapter API (`codecarena.plugin.torch`): `TorchAdapter.load()` is the one
load of every torch family (threads, the weights choice, a strict load, eval mode, the common facts),
checked here on a tiny torch model in this process, through the real checkpoint readers.

Expected side facts are counted by hand: Linear(4, 2) holds 4 x 2 + 2 = 10 float32 parameters,
Linear(2, 2) 6 and Linear(2, 4) 12; a side ships its half plus the quantizer.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conftest import REPO
from test_model_loading import pinned
from codecarena.plugin import Decoded, Encoded, Payload
from codecarena.plugin.torch import TorchAdapter, rvq_codes, rvq_encoded
from codecarena.registry import entries
from codecarena.registry.entries import load_entry
from codecarena.specs import parse_spec

# A real torch family's spec: its declaration supplies the `threads` option the template reads.
SPEC = "encodec:6k,threads=1"


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(4, 2)
        self.quantizer = torch.nn.Linear(2, 2)
        self.decoder = torch.nn.Linear(2, 4)


def seeded_state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return Tiny().state_dict()


class TinyAdapter(TorchAdapter):
    input_rate = 16000
    registry_id = "encodec"
    synthetic_name = "tiny-v1"

    def synthetic_state(self, seed: int) -> dict[str, Any]:
        return seeded_state(seed)

    def build_model(self) -> Tiny:
        return Tiny()  # in training mode, as built

    def after_load(self) -> dict[str, Any]:
        # "checkpoint" too: the identity the payload records must not be replaceable by a family's facts.
        return {"bits_per_code": 3, "checkpoint": "forged"}

    def encode(self, audio: np.ndarray) -> Encoded:
        return rvq_encoded(torch.zeros((1, 1, len(audio)), dtype=torch.int64), 3)

    def decode(self, payload: Payload) -> Decoded:
        return Decoded(rvq_codes(payload)[0, 0].numpy().astype(np.float64), self.input_rate)


@pytest.fixture(autouse=True)
def torch_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A private cache, and torch's thread count restored: load() sets it for the whole process."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def assert_holds(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    loaded = model.state_dict()
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_load_reads_synthetic_weights_back_from_their_file_and_records_the_common_facts(tmp_path: Path) -> None:
    torch.set_num_threads(2)
    adapter = TinyAdapter(parse_spec(SPEC), "synthetic:3")
    facts = adapter.load()
    path = tmp_path / "cache" / "codecarena" / "models" / "synthetic" / "encodec" / "tiny-v1-seed3.pt"
    assert facts == {
        "weights": "synthetic",
        "checkpoint": {"registry": "encodec", "weights": "synthetic", "seed": "3", "file": "tiny-v1-seed3.pt",
                       "sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        "encoder_parameters": 16, "encoder_model_bytes": 64, "decoder_parameters": 18, "decoder_model_bytes": 72,
        "bits_per_code": 3, "torch": torch.__version__, "threads": 1,
    }
    assert torch.get_num_threads() == 1
    assert adapter.torch_model() is adapter.model and not adapter.model.training
    assert_holds(adapter.model, seeded_state(3))
    assert_holds(adapter.model, torch.load(path, weights_only=True))


def test_load_refuses_a_synthetic_checkpoint_that_does_not_match_the_architecture() -> None:
    class Extra(TinyAdapter):
        synthetic_name = "tiny-extra-v1"

        def synthetic_state(self, seed: int) -> dict[str, Any]:
            return {**seeded_state(seed), "extra": torch.zeros(1)}

    with pytest.raises(ValueError, match=r"tiny-extra-v1-seed0\.pt: checkpoint does not match the architecture: "
                                         r"unexpected keys \['extra'\]"):
        Extra(parse_spec(SPEC), "synthetic").load()


def test_a_torch_family_without_a_threads_option_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^pcm: a torch family declares an int option `threads` in its codec.toml$"):
        TinyAdapter(parse_spec("pcm"), "synthetic").load()


def test_load_takes_real_weights_from_the_registry_pin_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    torch.save(seeded_state(5), buffer)
    checkpoint = pinned(tmp_path, {"tiny.pt": buffer.getvalue()})
    monkeypatch.setattr(entries, "load_entry",
                        lambda registry_id: dataclasses.replace(load_entry(registry_id), checkpoint=checkpoint))
    monkeypatch.setenv("CODECARENA_MODELS", str(tmp_path))
    adapter = TinyAdapter(parse_spec(SPEC), "real")
    facts = adapter.load()
    assert facts["weights"] == "real" and facts["checkpoint"] == checkpoint.identity("encodec")
    assert_holds(adapter.model, seeded_state(5))


def test_codecarena_plugin_imports_without_torch() -> None:
    # The harness side imports the API's declarations; only a torch family's runtime has torch.
    code = ("import sys; sys.modules['torch'] = None; import codecarena.plugin\n"
            "try:\n    import codecarena.plugin.torch\nexcept ImportError:\n    print('no torch part')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "no torch part\n", result.stderr


def test_no_torch_family_repeats_the_load_template() -> None:
    # Each torch family overrides hooks; the thread count, the weights choice and the common facts
    # live once, in TorchAdapter.load.
    families = 0
    for path in sorted((REPO / "src" / "codecarena" / "codecs").glob("*/adapter.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") == "TorchAdapter" for b in node.bases):
                families += 1
                methods = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
                assert "load" not in methods, f"{path}: {node.name} defines its own load()"
        called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not {"set_num_threads", "get_num_threads"} & called and "parse_weights" not in named, path
    assert families == 8


def test_load_itself_moves_the_model_to_the_adapters_device() -> None:
    """The real load() with synthetic weights, on torch's `meta` device (no GPU here): the weights are
    parsed and loaded on the CPU, then load() moves the model; `meta` survives that move (it keeps shapes,
    drops values), so every parameter and buffer ends there and the facts are still counted."""
    adapter = TinyAdapter(parse_spec(SPEC), "synthetic:3")
    adapter.use_device("meta")
    facts = adapter.load()
    assert {t.device.type for t in (*adapter.model.parameters(), *adapter.model.buffers())} == {"meta"}
    assert (facts["encoder_parameters"], facts["decoder_parameters"]) == (16, 18)
    on_cpu = TinyAdapter(parse_spec(SPEC), "synthetic:3")
    on_cpu.load()
    assert next(on_cpu.model.parameters()).device.type == "cpu"
