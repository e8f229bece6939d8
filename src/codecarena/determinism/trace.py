"""Layer-hash tracing: forward hooks that hash every module's inputs and outputs, per call.

Runs inside a codec runtime (imports torch); `divergence` reads the records it leaves.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterator

import torch
from torch import nn

from codecarena.determinism.divergence import Record


def tensors_of(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_of(item)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors_of(value[key])
    elif hasattr(value, "to_tuple"):  # transformers' ModelOutput
        yield from tensors_of(value.to_tuple())


def hash_tensors(value: Any) -> str:
    digest = hashlib.sha256()
    for tensor in tensors_of(value):
        t = tensor.detach().contiguous().cpu()
        digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def hash_tensor(tensor: torch.Tensor) -> str:
    return hash_tensors(tensor)


class LayerTracer:
    """Attach to a model; every `call()` block collects one list of records."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.calls: list[list[Record]] = []
        self._current: list[Record] | None = None
        self._seen: dict[str, int] = {}
        self._handles = [module.register_forward_hook(self._hook(name))
                         for name, module in model.named_modules() if name]

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self._current is None:
                return
            occurrence = self._seen.get(name, 0)
            self._seen[name] = occurrence + 1
            self._current.append(Record(name, occurrence, type(module).__name__, hash_tensors(args),
                                        hash_tensors(output)))
        return hook

    def start(self) -> None:
        self._current, self._seen = [], {}

    def stop(self) -> None:
        assert self._current is not None
        self.calls.append(self._current)
        self._current = None

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
