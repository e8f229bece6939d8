"""eager_snake_v1: every Snake1d of one loaded model evaluated eagerly instead of through TorchScript.

DAC's `Snake1d.forward` calls a `@torch.jit.script` function; TorchScript's profiling executor runs
its unoptimised graph on the first calls and a fused kernel afterwards, and the two round
differently, so the first (cold) encode can give other codes than later (warm) ones
(docs/determinism.md). This variant swaps each Snake1d *instance* in the given model for
`EagerSnake1d`, which keeps the very same `alpha` Parameter object (state-dict keys and values are
unchanged) and evaluates the same expression in eager PyTorch. No class, module-level function or
library code is patched: another model loaded in the same process keeps its original modules.
"""

from __future__ import annotations

import torch
from torch import nn

NAME = "eager_snake_v1"
TARGET = "Snake1d"


class EagerSnake1d(nn.Module):
    """x + 1/(alpha + 1e-9) * sin(alpha * x)^2, in the upstream order of operations."""

    def __init__(self, alpha: nn.Parameter) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(shape[0], shape[1], -1)
        x = x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)
        return x.reshape(shape)


def apply(model: nn.Module) -> int:
    """Replace every Snake1d instance owned by `model`; an error if there is none."""
    targets = [(name, module) for name, module in model.named_modules() if type(module).__name__ == TARGET]
    if not targets:
        raise ValueError(f"variant {NAME}: the model contains no {TARGET} module; it does not apply")
    for name, module in targets:
        alpha = module.alpha
        if not isinstance(alpha, nn.Parameter):
            raise ValueError(f"variant {NAME}: {name} has no alpha Parameter")
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, EagerSnake1d(alpha))
    return len(targets)
