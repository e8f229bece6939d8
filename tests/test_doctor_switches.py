"""The determinism doctor's switches without a GPU: the list, the not-applicable reasons, the option,
and what the probe sets in torch (the harness's own torch, in a fresh process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from codecarena.determinism.switches import BY_NAME, NAMES, SwitchError, not_applicable, parse_switches
from codecarena.specs import parse_spec
from conftest import codecarena


def test_list_switches_prints_every_control_with_what_it_sets() -> None:
    result = codecarena("determinism", "--list-switches")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(NAMES) == [
        "seeds_only", "cudnn_deterministic", "deterministic_algorithms", "tf32_off", "jit_fusion_on",
        "jit_fusion_off", "eager_snake_v1"]
    assert "CUBLAS_WORKSPACE_CONFIG=:4096:8" in result.stdout and "cudnn.benchmark = False" in result.stdout


def test_switches_option_parses_all_or_names_and_refuses_unknown_ones() -> None:
    assert parse_switches("all") == NAMES
    assert parse_switches("eager_snake_v1,seeds_only") == ("seeds_only", "eager_snake_v1")
    with pytest.raises(SwitchError, match="unknown tf32"):
        parse_switches("seeds_only,tf32")
    result = codecarena("determinism", "dac:16khz", "--switches", "tf32")
    assert result.returncode == 2 and "--switches 'tf32': unknown tf32" in result.stderr


@pytest.mark.parametrize("name", NAMES)
def test_each_switch_says_where_it_cannot_apply(name: str) -> None:
    dac, encodec = parse_spec("dac:16khz"), parse_spec("encodec:6k")
    switch = BY_NAME[name]
    on_cpu = not_applicable(switch, dac, "cpu")
    assert bool(on_cpu) == switch.cuda_only
    assert not_applicable(switch, dac, "cuda:0") == ""
    if switch.cuda_only:
        assert on_cpu == "not applicable on cpu: it changes CUDA settings only"
    if name == "eager_snake_v1":
        assert not_applicable(switch, encodec, "cuda") == ("not applicable to encodec: the variant eager_snake_v1 "
                                                           "declares no change to its model")


def test_the_probe_sets_and_reads_back_each_switch_in_torch() -> None:
    # A fresh interpreter (the harness never imports torch): the switches as the probe applies them.
    code = ("import json, os; os.environ['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'\n"
            "from codecarena.determinism.probe import apply_switches\n"
            "print(json.dumps(apply_switches(('seeds_only', 'cudnn_deterministic', 'deterministic_algorithms', "
            "'tf32_off', 'jit_fusion_off'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    applied = json.loads(done.stdout.splitlines()[-1])
    assert applied["seeds"] == {"random": 0, "numpy": 0, "torch": 0}
    assert applied["cudnn_deterministic"] == {"cudnn_deterministic": True, "cudnn_benchmark": False}
    assert applied["deterministic_algorithms"] == {"deterministic_algorithms": True,
                                                   "cublas_workspace_config": ":4096:8"}
    assert applied["tf32_off"] == {"matmul_allow_tf32": False, "cudnn_allow_tf32": False}
    fuser = applied["jit_fusion_off"]
    assert fuser["can_fuse_on_gpu"] is False and fuser["texpr_fuser_enabled"] is False
    assert fuser["nvfuser"].startswith(("absent in torch", "off", "not set:"))
    nothing = subprocess.run([sys.executable, "-c", "import json; from codecarena.determinism.probe import "
                              "apply_switches; print(json.dumps(apply_switches(())))"],
                             capture_output=True, text=True, check=True)
    assert json.loads(nothing.stdout.splitlines()[-1]) == {}  # no switch: not even seeds (the plain controls)
