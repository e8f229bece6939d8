"""PLCMOS (Diener et al., Interspeech 2023): the packet loss concealment challenges' own non-intrusive
MOS of the decoded audio, 1-5, from the `plcmos_v2.onnx` model inside `speechmos`.

The protocol is speechmos 0.0.1.1's `PLCMOS` (its final v2 model, "no-holdout"), unchanged: the
features are its own `stft_transform` (512-point Hamming STFT, hop 256, log power floored at -120 dB,
/ 20) of the whole utterance at 16 kHz, and the score is the mean of the model over 15 rater
embeddings, each 64 draws of N(0, 1), summed in round order as speechmos sums them. What differs:

- the 15 embeddings are drawn from a fixed seed (numpy's legacy `RandomState(RATER_SEED)`, whose
  stream numpy keeps the same across versions) instead of the global generator speechmos leaves
  unseeded, so a score repeats bit for bit (`audit --rescore`). The draw is a sample of raters: over
  20 seeds the score of an 8 s clean clip moved with a standard deviation of 0.005 (docs/metrics.md);
- the onnxruntime session runs one intra- and one inter-op thread (side by side with other scoring
  processes), on the metric device (onnxruntime's CUDA provider only, checked after the session is
  created, never a silent fallback to the CPU: metrics/engines.py). One round per call: the model takes
  a batch, but 15 copies of an utterance in one call were slower here and warn about the output shape.

Given the embeddings speechmos would draw after `np.random.seed(RATER_SEED)`, the score equals
speechmos's (a test).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from codecarena.metrics import engines

OUTPUTS = ("plcmos",)
RATER_ROUNDS = 15  # speechmos's embed_rounds for the v2 model
RATER_SEED = 0
RATER_SIZE = 64
MODEL_FILE = "plcmos_v2.onnx"


def model_path() -> Path:
    spec = importlib.util.find_spec("speechmos")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "plcmos_models" / MODEL_FILE


def rater_embeddings() -> np.ndarray:
    """The 15 rater embeddings, (rounds, 64) float32: the draws speechmos makes one round at a time
    from numpy's global generator, here from a fixed seed."""
    return np.random.RandomState(RATER_SEED).normal(size=(RATER_ROUNDS, RATER_SIZE)).astype(np.float32)


class Plcmos:
    def __init__(self, device: str = "cpu") -> None:
        """`device`: the metric device; on CUDA the session runs on onnxruntime's CUDA provider only."""
        import onnxruntime as ort
        from speechmos.plcmos import PLCMOS

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(model_path()), sess_options=options,
                                       providers=engines.onnx_providers(device))
        self._session = engines.require_providers(session, device, f"PLCMOS model {MODEL_FILE}")
        # speechmos's feature code, without its constructor (which opens a session of its own, on
        # every core and only on the CPU).
        self._features = PLCMOS.__new__(PLCMOS)
        self._embeddings = rater_embeddings()

    def score(self, audio: np.ndarray) -> float:
        """PLCMOS of audio at 16 kHz (the model's rate), samples within [-1, 1] as speechmos requires."""
        if not (np.all(audio >= -1.0) and np.all(audio <= 1.0)):
            raise ValueError("PLCMOS takes samples within [-1, 1] (speechmos refuses others); this audio has "
                             f"a peak of {float(np.max(np.abs(audio))):.4g}")
        features = np.float32(self._features.stft_transform(audio))[np.newaxis, np.newaxis, ...]
        total = 0.0
        for embedding in self._embeddings:
            inputs = {"degraded_audio": features, "rater_embed": embedding.reshape(1, -1)}
            total += float(np.asarray(self._session.run(None, inputs)[0]).reshape(-1)[0])  # type: ignore[attr-defined]
        return total / RATER_ROUNDS
