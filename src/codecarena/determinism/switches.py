"""The doctor's switches: the controls of the GPU case (docs/determinism.md) as named settings, each
probed in fresh processes on the chosen device.

Harness side: names, what each sets, and where it applies; nothing here imports torch (the probe,
inside the codec's runtime, applies them: `probe.apply_switches`). Every switch probe also seeds
Python, NumPy and torch first, so `seeds_only` is the baseline the others add one setting to.
"""

from __future__ import annotations

from dataclasses import dataclass

from codecarena.determinism.probe_job import CUBLAS_WORKSPACE
from codecarena.registry.catalog import FAMILIES
from codecarena.specs import CodecSpec



@dataclass(frozen=True)
class Switch:
    name: str
    sets: str  # what the probe sets, in words (what --list-switches prints)
    cuda_only: bool  # a setting that changes nothing off CUDA
    variant: str = ""  # a numerical variant applied to the loaded model instead of a torch setting


SWITCHES: tuple[Switch, ...] = (
    Switch("seeds_only", "random, numpy and torch seeded with 0 (torch.manual_seed also seeds every CUDA device); "
                         "nothing else changed", cuda_only=False),
    Switch("cudnn_deterministic", "torch.backends.cudnn.deterministic = True, torch.backends.cudnn.benchmark = False",
           cuda_only=True),
    Switch("deterministic_algorithms", f"torch.use_deterministic_algorithms(True) with "
                                       f"CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} (set before torch is imported)",
           cuda_only=False),
    Switch("tf32_off", "torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False",
           cuda_only=True),
    Switch("jit_fusion_on", "the TorchScript GPU fuser on: torch._C._jit_override_can_fuse_on_gpu(True) and the "
                            "tensor-expression fuser enabled (nvFuser instead where this torch still has it); the "
                            "probe records what it could set", cuda_only=True),
    Switch("jit_fusion_off", "the TorchScript GPU fuser off: torch._C._jit_override_can_fuse_on_gpu(False), the "
                             "tensor-expression fuser disabled (and nvFuser where this torch has it)", cuda_only=True),
    Switch("eager_snake_v1", "the eager_snake_v1 variant: every Snake1d evaluated eagerly (codecarena/variants)",
           cuda_only=False, variant="eager_snake_v1"),
)
NAMES = tuple(s.name for s in SWITCHES)
BY_NAME = {s.name: s for s in SWITCHES}


class SwitchError(ValueError):
    """A --switches value naming no switch."""


def parse_switches(text: str) -> tuple[str, ...]:
    """`all` or a comma list of names, in the order of SWITCHES."""
    if text.strip() == "all":
        return NAMES
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BY_NAME]
    if unknown or not names:
        raise SwitchError(f"--switches {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'no switch named'}; "
                          f"known: all or {', '.join(NAMES)}")
    return tuple(name for name in NAMES if name in names)


def not_applicable(switch: Switch, spec: CodecSpec, device: str) -> str:
    """Why a switch cannot be probed for this codec on this device; "" when it can."""
    if switch.cuda_only and not device.startswith("cuda"):
        return f"not applicable on {device}: it changes CUDA settings only"
    if switch.variant and switch.variant not in FAMILIES[spec.family].variants:
        return f"not applicable to {spec.family}: the variant {switch.variant} declares no change to its model"
    return ""


def listing() -> str:
    """What `determinism --list-switches` prints."""
    width = max(len(name) for name in NAMES)
    lines = [f"{s.name:<{width}}  {'CUDA only' if s.cuda_only else 'any device':<10}  {s.sets}" for s in SWITCHES]
    return "\n".join(lines) + "\n"
