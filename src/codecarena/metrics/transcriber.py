"""The recogniser of the content metrics: deterministic Whisper transcription (faster-whisper, greedy,
fixed temperature), so one audio file always gives one transcript, with what Whisper reported of each
segment (`Heard`). Which Whisper serves a language is chosen in ``codecarena/metrics/asr_models.py``;
every file of the model is verified before it loads. The metrics themselves: codecarena/metrics/content.py.

Decoding settings (``Transcriber.settings`` records them for the run card):
the utterance's language, task "transcribe", beam_size 1, best_of 1, temperature 0.0 (a single
value: no temperature fallback), condition_on_previous_text False, vad_filter False,
without_timestamps True, and no segment is ever skipped or re-decoded by a
heuristic: compression_ratio_threshold, log_prob_threshold and no_speech_threshold
are all None (with a single temperature they could only make Whisper drop a window
it judged silent; a codec that turns speech into noise should be scored on whatever
Whisper hears, and an empty transcript scores WER 1.0 anyway). The same thresholds
judge the transcript afterwards instead (metrics/asr_checks.py): text Whisper wrote where it
heard no speech, or that loops, is kept and marked suspect. Segment texts are
stripped and joined with one space. Audio must be 16 kHz, mono, float, finite and at
most 30 s long (one Whisper window): with without_timestamps=True a full window can
lose whole utterances, so longer audio raises ValueError instead of being scored wrongly.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from codecarena.files import sha256_json
from codecarena.metrics.asr_checks import Segment
from codecarena.metrics.asr_models import AsrModel
from codecarena.metrics.asr_models import primary_language as _primary_language
from codecarena.metrics.max_audio import ASR_MAX_AUDIO_S as MAX_AUDIO_S

ASR_SAMPLE_RATE = 16000
# The scoring process logs every transcription (at INFO) to its log: the count is how a benchmark
# sees that each reference is transcribed once.
log = logging.getLogger("codecarena.asr")


@dataclass(frozen=True)
class Heard:
    """A transcript and what Whisper reported of each of its segments."""

    text: str
    segments: tuple[Segment, ...] = ()


class Transcriber:
    """Deterministic Whisper transcription of 16 kHz mono audio (float32, greedy) on the CPU or a CUDA device."""

    def __init__(self, model: AsrModel, language: str = "en", threads: int = 1, device: str = "cpu") -> None:
        """`model` is a verified folder (asr_models.resolve): its files are the hashed bytes. `device`:
        the metric device, cpu or cuda[:N] (checked usable before any row: metrics/engines.py)."""
        model_dir = model.path
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        lang = _primary_language(language)

        import ctranslate2
        import faster_whisper

        from codecarena.metrics.engines import ASR_COMPUTE_TYPE, MetricDeviceError, device_index

        kind = device.split(":")[0]
        if kind not in ("cpu", "cuda"):
            raise MetricDeviceError(f"CTranslate2 runs on the CPU or CUDA, not on {device}")
        self.model = model
        self.language = lang
        self._model = faster_whisper.WhisperModel(
            str(model_dir), device=kind, device_index=device_index(device) if kind == "cuda" else 0,
            compute_type=ASR_COMPUTE_TYPE, cpu_threads=int(threads), num_workers=1, local_files_only=True,
        )
        if self._model.model.device != kind:
            raise MetricDeviceError(f"CTranslate2 loaded the ASR model on {self._model.model.device}, not {device}")
        if lang != "en" and not self._model.model.is_multilingual:
            raise ValueError(f"the ASR model at {model_dir} is English-only; cannot transcribe {language!r}")
        self._decode_options: dict[str, Any] = {
            "language": lang,
            "task": "transcribe",
            "beam_size": 1,
            "best_of": 1,
            "patience": 1.0,
            "length_penalty": 1.0,
            "repetition_penalty": 1.0,
            "no_repeat_ngram_size": 0,
            "temperature": 0.0,
            "compression_ratio_threshold": None,
            "log_prob_threshold": None,
            "no_speech_threshold": None,
            "condition_on_previous_text": False,
            "initial_prompt": None,
            "prefix": None,
            "suppress_blank": True,
            "suppress_tokens": [-1],
            "without_timestamps": True,
            "word_timestamps": False,
            "vad_filter": False,
            "hotwords": None,
            "chunk_length": None,
            "max_new_tokens": None,
        }
        # Everything that decides the transcript, and nothing about where the files lie: reference
        # transcripts are cached under its hash.
        self.identity: dict[str, Any] = {
            "engine": "faster-whisper",
            "faster_whisper_version": faster_whisper.__version__,
            "ctranslate2_version": ctranslate2.__version__,
            "model": model.identity(),
            "model_multilingual": bool(self._model.model.is_multilingual),
            "device": device,
            "compute_type": ASR_COMPUTE_TYPE,
            "cpu_threads": int(threads),
            "num_workers": 1,
            "sample_rate": ASR_SAMPLE_RATE,
            "max_audio_s": MAX_AUDIO_S,
            "segment_join": "strip each segment text, join with one space",
            **{k: (list(v) if isinstance(v, list) else v) for k, v in self._decode_options.items()},
        }
        self.identity_sha256 = sha256_json(self.identity)
        self.settings: dict[str, Any] = {**self.identity, "model_dir": str(model_dir),
                                         "model_sha256": model.model_sha256, "identity_sha256": self.identity_sha256}

    def row_identity(self) -> dict[str, Any]:
        """What every ASR record names: the model, the language, and the hash of all the settings
        (run.json holds them in full under that hash)."""
        return {"model": self.model.name, "model_sha256": self.model.model_sha256, "language": self.language,
                "settings_sha256": self.identity_sha256}

    def transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        """Transcript of mono float audio at 16 kHz (other rates raise ValueError)."""
        return self.hear(audio, sample_rate).text

    def hear(self, audio: np.ndarray, sample_rate: int) -> Heard:
        """The transcript of `transcribe`, with what Whisper reported of each segment."""
        if int(sample_rate) != ASR_SAMPLE_RATE:
            raise ValueError(f"ASR needs {ASR_SAMPLE_RATE} Hz audio, got {sample_rate} Hz; resample first")
        samples = np.asarray(audio)
        if samples.ndim != 1:
            raise ValueError(f"ASR needs mono audio (a 1-D array), got shape {samples.shape}")
        if samples.size == 0:
            raise ValueError("ASR got empty audio")
        if samples.size > MAX_AUDIO_S * ASR_SAMPLE_RATE:
            raise ValueError(f"ASR audio is {samples.size / ASR_SAMPLE_RATE:.2f} s long; at most {MAX_AUDIO_S:g} s "
                             "(one Whisper window) is transcribed reliably with without_timestamps=True; split it")
        if not np.issubdtype(samples.dtype, np.floating):
            raise ValueError(f"ASR needs float audio in [-1, 1], got dtype {samples.dtype}")
        if not np.all(np.isfinite(samples)):
            raise ValueError("ASR got audio with NaN or infinite samples")
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        start = time.perf_counter()
        segments = list(self._model.transcribe(samples, **self._decode_options)[0])
        texts = [segment.text.strip() for segment in segments]
        if log.isEnabledFor(logging.INFO):
            log.info("transcribed %.2f s of audio (float32 sha256 %s) in %.2f s (whisper %s, %s)",
                     samples.size / ASR_SAMPLE_RATE, hashlib.sha256(samples.tobytes()).hexdigest()[:16],
                     time.perf_counter() - start, self.model.name, self.language)
        return Heard(" ".join(text for text in texts if text),
                     tuple(Segment(float(s.no_speech_prob), float(s.avg_logprob), float(s.compression_ratio))
                           for s in segments))
