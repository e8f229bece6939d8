"""DNSMOS P.835 (SIG, BAK, OVRL) and P.808, non-intrusive, from the ONNX models inside `speechmos`.

The protocol is speechmos 0.0.1.1's `dnsmos.run`, unchanged: a clip shorter than the 9.01 s window is
tiled by repeating it; 9.01 s windows 1 s apart; per window the P.835 model on the samples and the
P.808 model on a 120-band mel spectrogram (librosa, 321-point FFT, hop 160, dB re. the window's
maximum, +40 / 40) of the window minus its last 160 samples; the P.835 outputs through the published
polynomials; means over windows. What differs is how the models are called: every window of an
utterance in one batched `run` per model, and onnxruntime sessions with one intra- and one inter-op
thread, so that scoring processes side by side do not fight over cores; on the metric device
(onnxruntime's CUDA provider, never a silent fallback to the CPU: metrics/engines.py). The scores
equal speechmos's (a test compares them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codecarena.arena import ARENA_RATE
from codecarena.metrics import engines

OUTPUTS = ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808")
INPUT_LENGTH_S = 9.01
# speechmos's polynomials for the (non-personalised) P.835 model.
_POLY_SIG = np.poly1d([-0.08397278, 1.22083953, 0.0052439])
_POLY_BAK = np.poly1d([-0.13166888, 1.60915514, -0.39604546])
_POLY_OVR = np.poly1d([-0.06766283, 1.11546468, 0.04602535])


def _session(path: Path, device: str) -> object:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), sess_options=options, providers=engines.onnx_providers(device))
    return engines.require_providers(session, device, f"DNSMOS model {path.name}")


def model_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("speechmos")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "dnsmos_models"


class Dnsmos:
    def __init__(self, device: str = "cpu") -> None:
        """`device`: the metric device; on CUDA the sessions run on onnxruntime's CUDA provider only."""
        import librosa

        self._librosa = librosa
        self._p835 = _session(model_dir() / "sig_bak_ovr.onnx", device)
        self._p808 = _session(model_dir() / "model_v8.onnx", device)

    def _melspec(self, window: np.ndarray) -> np.ndarray:
        mel = self._librosa.feature.melspectrogram(y=window, sr=ARENA_RATE, n_fft=321, hop_length=160, n_mels=120)
        return ((self._librosa.power_to_db(mel, ref=np.max) + 40) / 40).T

    def windows(self, audio: np.ndarray) -> np.ndarray:
        """The 9.01 s windows speechmos scores, stacked: (windows, samples)."""
        length = int(INPUT_LENGTH_S * ARENA_RATE)
        while len(audio) < length:
            audio = np.append(audio, audio)
        hops = int(np.floor(len(audio) / ARENA_RATE) - INPUT_LENGTH_S) + 1
        # speechmos's float arithmetic, kept: int((i + 9.01) * 16000) is 144159 for some i, and such a
        # window, one sample short, is skipped there, so here too.
        segments = [audio[int(i * ARENA_RATE):int((i + INPUT_LENGTH_S) * ARENA_RATE)] for i in range(hops)]
        return np.stack([segment for segment in segments if len(segment) == length])

    def score(self, audio: np.ndarray) -> dict[str, float]:
        """The four scores of audio at the arena rate (the rate of the DNSMOS models)."""
        if not np.any(audio):
            raise ValueError("DNSMOS of an all-zero signal is undefined")
        windows = self.windows(np.clip(audio, -1.0, 1.0))
        mels = np.stack([self._melspec(w[:-160]) for w in windows]).astype(np.float32)
        p808 = self._p808.run(None, {"input_1": mels})[0][:, 0]  # type: ignore[attr-defined]
        raw = self._p835.run(None, {"input_1": windows.astype(np.float32)})[0]  # type: ignore[attr-defined]
        return {
            "dnsmos_sig": float(np.mean(_POLY_SIG(raw[:, 0]))),
            "dnsmos_bak": float(np.mean(_POLY_BAK(raw[:, 1]))),
            "dnsmos_ovrl": float(np.mean(_POLY_OVR(raw[:, 2]))),
            "dnsmos_p808": float(np.mean(p808)),
        }
