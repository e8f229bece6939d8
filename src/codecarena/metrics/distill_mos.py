"""Distill-MOS (Stahl and Gamper, 2025): a learned no-reference MOS of the decoded speech, 1-5.

The model is `distillmos` 0.9.1's `ConvTransformerSQAModel` with the `distill_mos_v7.pt` weights that
ship in its wheel (a complex-spectrogram CNN and transformer distilled from XLS-R based speech quality
models). It takes 16 kHz audio, cuts it into 7.68 s windows 1 s apart (shorter audio is zero padded),
peak-normalises each window and averages the window scores: the package's own protocol, unchanged.

`distillmos` imports torchaudio at module level for its command-line file loader only. torchaudio has
no release for the pinned torch 2.13, so codecarena installs `distillmos` and `xls-r-sqa` without their
declared dependencies and, while importing the model module, lends it a placeholder `torchaudio` that
fails loudly if anything calls it; codecarena hands the model audio it has read itself. One torch
thread, so the score repeats bit for bit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import types

import numpy as np

OUTPUTS = ("distill_mos",)


class _NoTorchaudio(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"torchaudio.{name} is not available to Distill-MOS in codecarena "
                           "(only the package's command-line loader uses it)")


def _import_model_class() -> type:
    if importlib.util.find_spec("torchaudio") is not None:
        from distillmos import ConvTransformerSQAModel
        return ConvTransformerSQAModel
    sys.modules["torchaudio"] = _NoTorchaudio("torchaudio")
    try:
        from distillmos import ConvTransformerSQAModel
    finally:
        del sys.modules["torchaudio"]
    return ConvTransformerSQAModel


class DistillMos:
    def __init__(self, device: str = "cpu") -> None:
        """`device`: the metric device (checked usable before any row: metrics/engines.py)."""
        import torch

        torch.set_num_threads(1)
        self._torch = torch
        self._device = torch.device(device)
        model_class = _import_model_class()
        with contextlib.redirect_stdout(io.StringIO()):  # the constructor prints where it loaded the weights from
            self._model = model_class().eval().to(self._device)

    def score(self, audio: np.ndarray) -> float:
        """Distill-MOS of audio at 16 kHz."""
        x = self._torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None, :].to(self._device)
        with self._torch.no_grad():
            return float(self._model(x).reshape(-1)[0])
