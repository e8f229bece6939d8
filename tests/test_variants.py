"""eager_snake_v1 on a model of our own (fast, main environment's torch), and on DAC 16 kHz in its runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from codecarena import variants

torch = pytest.importorskip("torch")


@torch.jit.script
def snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    shape = x.shape
    x = x.reshape(shape[0], shape[1], -1)
    x = x + (alpha + 1e-9).reciprocal() * torch.sin(alpha * x).pow(2)
    return x.reshape(shape)


class Snake1d(torch.nn.Module):
    """The upstream DAC/SNAC activation, as a test double with the same name and expression."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = torch.nn.Parameter(torch.rand(1, channels, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return snake(x, self.alpha)


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv1d(1, 4, 3), Snake1d(4),
                               torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3), Snake1d(4)))


def test_swaps_instances_keeping_the_parameters_and_the_state_dict() -> None:
    model = small_model()
    alphas = [m.alpha for m in model.modules() if isinstance(m, Snake1d)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(1, 1, 50)
    expected = model(x)
    assert variants.apply("eager_snake_v1", model) == 2
    assert not any(isinstance(m, Snake1d) for m in model.modules())
    assert [m.alpha for m in model.modules() if type(m).__name__ == "EagerSnake1d"] == alphas
    assert all(a is b for a, b in zip(alphas, [m.alpha for m in model.modules() if hasattr(m, "alpha")]))
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    # Same expression: equal to the scripted path up to rounding (bit equality is what the doctor measures).
    assert torch.allclose(model(x), expected, atol=1e-6)


def test_patches_nothing_global() -> None:
    forward, scripted = Snake1d.forward, snake
    variants.apply("eager_snake_v1", small_model())
    other = small_model()
    assert sum(isinstance(m, Snake1d) for m in other.modules()) == 2
    assert Snake1d.forward is forward and snake is scripted


def test_a_model_without_snake_is_an_error_not_a_no_op() -> None:
    with pytest.raises(ValueError, match="contains no Snake1d"):
        variants.apply("eager_snake_v1", torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_unknown_variant_and_recorded_source_hash() -> None:
    with pytest.raises(variants.VariantError, match="unknown variant"):
        variants.check_name("eager_snake_v2")
    record = variants.provenance("eager_snake_v1")
    import hashlib

    source = Path(variants.__file__).with_name("eager_snake_v1.py")
    assert record["source_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()


def test_run_refuses_a_variant_for_a_family_it_does_not_apply_to(speech_dir: Path, tmp_path: Path) -> None:
    from conftest import codecarena

    result = codecarena("run", "--input", speech_dir, "--codec", "opus:6k", "--variant", "eager_snake_v1",
                        "--out", tmp_path / "r")
    assert result.returncode == 2 and "variant eager_snake_v1 does not apply to opus" in result.stderr
    result = codecarena("run", "--input", speech_dir, "--codec", "opus:6k", "--variant", "fast_math",
                        "--out", tmp_path / "r")
    assert result.returncode == 2 and "unknown variant 'fast_math'" in result.stderr
    assert not (tmp_path / "r").exists()
