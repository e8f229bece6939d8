"""Speaker similarity: cosine of Resemblyzer (GE2E) embeddings of reference and decoded audio.

Both signals are at 16 kHz, a need the metric declares (below that, speaker similarity is
misleading). Resemblyzer's own
preprocessing (volume normalisation and VAD trimming) is applied to both. Its embeddings are L2
normalised, so the cosine is their dot product, on a -1..1 scale (not 0..100).
"""

from __future__ import annotations

import numpy as np

OUTPUTS = ("speaker_sim",)


class SpeakerSimilarity:
    def __init__(self, device: str = "cpu") -> None:
        """`device`: the metric device (checked usable before any row: metrics/engines.py); embeddings
        come back to the CPU as NumPy arrays whatever it is."""
        import warnings

        import torch

        with warnings.catch_warnings():
            # webrtcvad (under resemblyzer) imports the deprecated pkg_resources; harmless noise.
            warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
            from resemblyzer import VoiceEncoder, preprocess_wav

        # One thread: the same embedding bits on any machine size.
        torch.set_num_threads(1)
        self._encoder = VoiceEncoder(device, verbose=False)
        self._preprocess = preprocess_wav

    def embed(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        wav = self._preprocess(np.asarray(audio, dtype=np.float64), source_sr=sample_rate)
        if len(wav) == 0:
            raise ValueError("no voiced audio left after Resemblyzer's VAD trimming")
        return np.asarray(self._encoder.embed_utterance(wav), dtype=np.float64)

    def similarity_to(self, reference_embedding: np.ndarray | list[float], decoded: np.ndarray,
                      sample_rate: int) -> float:
        """The cosine of a reference's embedding (computed once per reference) and the decoded audio's."""
        a, b = np.asarray(reference_embedding, dtype=np.float64), self.embed(decoded, sample_rate)
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
