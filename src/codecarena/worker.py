"""The worker: one stage (encode or decode) of one row, in a fresh process.

Run as `python -m codecarena.worker JOB.json`. The decode stage receives only a payload path: it
learns the codec, its configuration and the original length from the payload file itself.
Timing is split into imports, model load, I/O and compute; process start-up is measured by the
harness from the spawn time to `STARTED_AT`. A user codec's worker is started as
`python -m codecarena.worker --sandbox FAMILY FOLDER (JOB.json | --persistent | --check)` and enters
its sandbox (codecarena/sandbox/enter.py) before anything else, numpy included.

Long because it is the whole of a worker process in one file: the codec service declares its sha256
as the worker's source (`sources.worker` of `/v1/provenance`), so what encodes, decodes and writes the
files a row rests on stays where that hash covers it.
"""

import time

STARTED_AT = time.time()

import dataclasses  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


#: In a worker forked from a template (codecarena/worker_template.py): its RSS at the fork, the
#: template's pages it shares, from which its high-water mark was restarted; 0 in a new interpreter.
SHARED_AT_FORK = 0


def _maxrss_bytes() -> int:
    """This process's own peak RSS. VmHWM is per address space and starts afresh at exec, while
    getrusage's ru_maxrss also carries the parent's peak at fork time (Linux keeps it across
    exec), which would charge a large harness's memory to every worker. A forked worker's is its
    peak above what it shared with its template at the fork."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return max(0, int(line.split()[1]) * 1024 - SHARED_AT_FORK)
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


#: Why the sandbox this worker was asked for could not be entered: every job then fails with it.
SANDBOX_ERROR = ""


def run(job_path: Path, loaded_adapters: dict[tuple[str, str, str], tuple[Any, dict[str, Any]]] | None = None) -> int:
    """One job. A persistent worker passes `loaded_adapters`, so each (codec, weights, variant) is
    loaded once and its later jobs report load_s 0."""
    from codecarena.runtime.protocol import PROTOCOL_VERSION, StageReport, read_job, write_report

    job = read_job(job_path)
    times = {"imports_s": 0.0, "load_s": 0.0, "io_s": 0.0, "compute_s": 0.0}
    model: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    warm: list[float] = []
    audio_s = 0.0
    error = ""
    device: dict[str, Any] | None = None
    cuda: Any = None
    try:
        if SANDBOX_ERROR:
            raise PermissionError(f"the sandbox could not be entered: {SANDBOX_ERROR}")
        spec, loaded = _codec_of(job, times)
        _check_sandbox(spec, job, loaded_adapters)
        adapter = _loaded_adapter(job, spec, loaded, loaded_adapters, times, model)
        if loaded is not None and dict(loaded.checkpoint) != model.get("checkpoint", {}):
            # One check for every family: a decoder never decodes codes made with other weights.
            raise ValueError(f"payload was encoded with checkpoint {dict(loaded.checkpoint)}, "
                             f"this decoder loads {model.get('checkpoint', {})}")
        if hasattr(adapter, "use_device"):  # a torch model: the device and the settings it runs under
            from codecarena.device_probe import device_info

            device = device_info(job.device).to_dict()
            cuda = cuda_of(job.device)
        if cuda is not None:
            cuda.reset_peak_memory_stats()
        if job.stage == "encode":
            audio_s, facts = _encode(job, spec, adapter, model, times, warm, cuda)
        elif job.stage == "stream":
            if job.variant:
                raise ValueError("the stream stage runs upstream numerics only; it takes no variant")
            audio_s, facts = _stream(job, spec, adapter, model)
        else:
            assert loaded is not None
            audio_s, facts = _decode(job, loaded, adapter, times, warm, cuda)
    except Exception as exc:  # every failure becomes a structured, one-line reason in the report
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        traceback.print_exc()
    report = StageReport(
        version=PROTOCOL_VERSION, stage=job.stage, ok=not error, error=error, pid=os.getpid(), started_at=STARTED_AT,
        imports_s=times["imports_s"], load_s=times["load_s"], io_s=times["io_s"],
        compute_s=times["compute_s"], warm_compute_s=warm, maxrss_bytes=_maxrss_bytes(),
        peak_device_memory_bytes=_peak_device_memory(cuda),
        audio_s=audio_s, model=model, facts=facts, runtime=_runtime(), device=device,
    )
    try:
        write_report(Path(job.report), report)
    except (TypeError, ValueError) as exc:
        # An adapter that reports a value JSON cannot hold must still leave a report saying so.
        error = f"stage report not serialisable: {exc}"
        report = dataclasses.replace(report, ok=False, error=error, model={}, facts={}, device=None)
        write_report(Path(job.report), report)
    return 0 if not error else 2


def _codec_of(job: Any, times: dict[str, float]) -> tuple[Any, Any]:
    """The codec spec the job runs, and for a decode the payload it decodes (whose own header names
    the codec: the decoder is given nothing else). The worker's imports are timed here."""
    t = time.perf_counter()
    import numpy as np  # noqa: F401
    import soundfile  # noqa: F401
    import soxr  # noqa: F401

    from codecarena import payload as payload_mod
    from codecarena.specs import parse_spec
    times["imports_s"] += time.perf_counter() - t

    if job.stage in ("encode", "stream"):
        return parse_spec(job.codec), None
    if job.stage != "decode":
        raise ValueError(f"unknown stage {job.stage!r}")
    t = time.perf_counter()
    loaded = payload_mod.read_payload(Path(job.input))
    times["io_s"] += time.perf_counter() - t
    spec = parse_spec(loaded.codec)
    if spec.config_dict() != dict(loaded.config):
        raise ValueError(f"{job.input}: payload config {dict(loaded.config)} disagrees with its "
                         f"codec spec {spec.canonical} ({spec.config_dict()})")
    return spec, loaded


def _loaded_adapter(job: Any, spec: Any, loaded: Any, loaded_adapters: dict[tuple[str, str, str], Any] | None,
                    times: dict[str, float], model: dict[str, Any]) -> Any:
    """The adapter of the job's codec, loaded (or a persistent worker's, loaded before) through the one
    loading path (codecs/loading.py); `model` gets the facts of its load as they come (a variant that
    fails still leaves the load's facts in the report). A decoder takes the weights and variant its
    payload names."""
    t = time.perf_counter()
    from codecarena.codecs.loading import adapter_module, checkpoint_paths

    module, user_codec = adapter_module(spec.family)
    times["imports_s"] += time.perf_counter() - t

    weights = job.weights
    if loaded is not None:
        identity = dict(loaded.checkpoint)
        weights = (f"synthetic:{identity.get('seed')}" if identity.get("weights") == "synthetic"
                   else "user" if identity.get("pinned_by") == "user" else "real")
    variant = loaded.variant if loaded is not None else job.variant
    t = time.perf_counter()
    key = (spec.canonical, weights, variant)
    cached = loaded_adapters is not None and key in loaded_adapters
    if cached:
        adapter, facts = loaded_adapters[key]  # type: ignore[index]
        model.update(facts)
    else:
        adapter = module.ADAPTER(spec, weights)
        use_device(adapter, spec.family, job.device)
        adapter.checkpoints = checkpoint_paths(spec.family)
        # A user codec's checkpoint identity is its pin, whatever its adapter reports.
        model.update({**adapter.load(), **user_codec})
        if variant:
            model["variant"] = apply_variant(adapter, variant)
        if loaded_adapters is not None:
            loaded_adapters[key] = (adapter, dict(model))
    times["load_s"] = 0.0 if cached else time.perf_counter() - t
    return adapter


def _check_sandbox(spec: Any, job: Any, loaded_adapters: dict[tuple[str, str, str], Any] | None) -> None:
    """A user codec runs only in its own sandbox, writing into its folder; a persistent sandbox serves
    one configuration (the first it loaded) and nothing else (docs/security.md)."""
    from codecarena.sandbox.enter import ACTIVE, refusal

    refused = refusal(spec.family, [job.output, job.report])
    served = {key[0] for key in loaded_adapters or ()} - {spec.canonical}
    if not refused and ACTIVE and served:
        refused = (f"this persistent worker is the sandbox of user codec configuration {served.pop()}; it serves "
                   f"no other ({spec.canonical})")
    if not refused and ACTIVE and job.device != "cpu":
        refused = f"a user codec's sandbox opens no device but /dev/null: it runs on the CPU, not on {job.device}"
    if refused:
        raise PermissionError(refused)


def use_device(adapter: Any, family: str, device: str) -> None:
    """Put a torch adapter on the job's device before it loads; any other runs on the CPU only."""
    if hasattr(adapter, "use_device"):
        adapter.use_device(device)
    elif device != "cpu":
        raise ValueError(f"{family} is not a torch family: it runs on the CPU only, not on {device}")


def cuda_of(device: str) -> Any:
    """torch.cuda when the stage runs on a CUDA device, whose calls return before the work is done;
    None on any other device, whose calls are done when they return."""
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda


def _synchronize(cuda: Any) -> None:
    if cuda is not None:
        cuda.synchronize()


def _peak_device_memory(cuda: Any) -> int | None:
    """Peak bytes allocated on the CUDA device since the model was loaded (its weights included)."""
    return int(cuda.max_memory_allocated()) if cuda is not None else None


def apply_variant(adapter: Any, name: str) -> dict[str, Any]:
    """Apply a named numerical variant to the adapter's loaded torch model; what it did, for the record."""
    from codecarena import variants

    model = adapter.torch_model()
    if model is None:
        raise ValueError(f"variant {name}: {adapter.spec.canonical} is not a torch model")
    replaced = variants.apply(name, model)
    return {**variants.provenance(name), "replaced_modules": replaced}


def make_payload(spec: Any, encoded: Any, model: dict[str, Any], variant: str, rate: int, num_samples: int,
                 codec_rate: int) -> Any:
    from codecarena.payload import Payload

    return Payload(codec=spec.canonical, family=spec.family, config=spec.config_dict(), variant=variant,
                   checkpoint=model.get("checkpoint", {}), sample_rate=rate, num_samples=num_samples, channels=1,
                   codec_sample_rate=codec_rate, streams=encoded.streams, side_info=encoded.side_info)


def _runtime() -> dict[str, Any]:
    numpy = sys.modules.get("numpy")
    return {"executable": sys.executable, "python": sys.version.split()[0],
            "numpy": getattr(numpy, "__version__", None)}


def _timed(fn: Any, times: dict[str, float], key: str, cuda: Any = None) -> Any:
    # On CUDA the clock is read only once the device is idle: before, so no earlier work is charged
    # to this call, and after, so all of its work is.
    _synchronize(cuda)
    t = time.perf_counter()
    result = fn()
    _synchronize(cuda)
    times[key] += time.perf_counter() - t
    return result


def _warm(fn: Any, repeats: int, warm: list[float], cuda: Any = None) -> None:
    # The first (cold) call already ran, and on a GPU paid for kernel selection, autotuning and JIT;
    # these repeats measure the steady state in this process.
    for _ in range(repeats):
        _synchronize(cuda)
        t = time.perf_counter()
        fn()
        _synchronize(cuda)
        warm.append(time.perf_counter() - t)


def _encode(job: Any, spec: Any, adapter: Any, model: dict[str, Any], times: dict[str, float],
            warm: list[float], cuda: Any = None) -> tuple[float, dict]:
    import numpy as np
    import soundfile as sf
    import soxr

    from codecarena.payload import write_payload

    def read() -> tuple[np.ndarray, int]:
        audio, rate = sf.read(job.input, dtype="float64", always_2d=False)
        if audio.ndim != 1:
            raise ValueError(f"{job.input}: expected mono audio, got {audio.shape[1]} channels")
        if rate != job.arena_rate:
            raise ValueError(f"{job.input}: sample rate {rate} Hz, the arena runs at {job.arena_rate} Hz")
        if adapter.input_rate != rate:
            audio = soxr.resample(audio, rate, adapter.input_rate, quality="HQ")
        return audio, rate

    (audio, rate) = _timed(read, times, "io_s")
    num_samples = sf.info(job.input).frames
    encoded = _timed(lambda: adapter.encode(audio), times, "compute_s", cuda)
    payload = make_payload(spec, encoded, model, job.variant, rate, num_samples, adapter.input_rate)
    _timed(lambda: write_payload(Path(job.output), payload, durable=False), times, "io_s")
    _warm(lambda: adapter.encode(audio), job.warm_repeats, warm, cuda)
    facts = dict(encoded.facts)
    facts["resampled_to"] = adapter.input_rate if adapter.input_rate != rate else None
    facts["representation_bits"] = payload.representation_bits()
    return num_samples / rate, facts


def _float_audio(audio: Any) -> Any:
    """A decoder's audio as float64, refused unless it is a numpy array of real floating-point
    samples: integer PCM taken as sample values clipped (int16: 99.6% of samples), and complex,
    boolean or object samples, or a list, are not audio whatever they convert to."""
    import numpy as np

    if not isinstance(audio, np.ndarray) or audio.dtype.kind != "f":
        got = f"{audio.dtype} samples" if isinstance(audio, np.ndarray) else f"a {type(audio).__name__}"
        raise ValueError(f"the decoder returned {got}, not audio: return a numpy array of float samples in [-1, 1]")
    return audio.astype(np.float64, copy=False)


def _arena_tokens(family: str) -> bool:
    """Whether the family's lost token frames get the arena's token policy (its `[channel] tokens`)."""
    from codecarena.registry.catalog import FAMILIES

    declared = FAMILIES.get(family)
    return bool(declared and declared.channel and declared.channel.tokens)


def _decode(job: Any, payload: Any, adapter: Any, times: dict[str, float], warm: list[float],
            cuda: Any = None) -> tuple[float, dict]:
    import numpy as np
    import soundfile as sf
    import soxr

    from codecarena.pcm16 import to_int16
    from codecarena.files import exclusive_temp
    from codecarena.plural import counted

    # The payload's header is a claim: restoring to a rate or length the codes do not hold would
    # write (and allocate) whatever a forged header asks for, so both are checked before restoring.
    if payload.sample_rate != job.arena_rate:
        raise ValueError(f"{job.input}: payload declares {payload.sample_rate} Hz, the arena runs at {job.arena_rate} Hz")
    receiver: dict[str, Any] = {}
    if _arena_tokens(payload.family):  # a neural codec's lost token frames: the arena's policy, before decoding
        from codecarena.channel.tokens import conceal_tokens

        payload, receiver = conceal_tokens(payload)
    decoded = _timed(lambda: adapter.decode(payload), times, "compute_s", cuda)
    # What any adapter returns is checked before it is used: a user's codec may return anything.
    if type(decoded.sample_rate) is not int or not 1000 <= decoded.sample_rate <= 768_000:
        raise ValueError(f"the decoder returned a sample rate of {decoded.sample_rate!r}, not a rate of 1000 to "
                         "768000 Hz")
    audio = _float_audio(decoded.audio)
    if audio.ndim != 1:
        raise ValueError(f"the decoder returned audio of shape {audio.shape}, not mono samples")
    nonfinite = int(np.count_nonzero(~np.isfinite(audio)))
    if nonfinite:
        raise ValueError(f"decoder produced {counted(nonfinite, 'non-finite sample')}")
    native_samples = len(audio)
    if decoded.sample_rate != payload.sample_rate:
        audio = soxr.resample(audio, decoded.sample_rate, payload.sample_rate, quality="HQ")
    resampled = len(audio)
    target = payload.num_samples
    tolerance = adapter.length_tolerance(payload.sample_rate)
    if abs(resampled - target) > tolerance:
        raise ValueError(f"{job.input}: decoded length was off by {counted(abs(resampled - target), 'sample')} from the "
                         f"declared {target} before restoration, beyond the codec's tolerance of {tolerance}")
    trimmed = max(0, resampled - target)
    padded = max(0, target - resampled)
    restored = np.concatenate([audio[:target], np.zeros(padded)])
    pcm = to_int16(restored)

    def write() -> None:
        out = Path(job.output)
        # A random exclusive name, removed on failure: a full disk must not leave half a wav behind,
        # and a link planted at a fixed temporary name must not be written through.
        with exclusive_temp(out) as (fd, tmp), open(fd, "wb", closefd=False) as fh:
            sf.write(fh, pcm, payload.sample_rate, subtype="PCM_16", format="WAV")
            fh.flush()
            os.replace(tmp, out)

    _timed(write, times, "io_s")
    _warm(lambda: adapter.decode(payload), job.warm_repeats, warm, cuda)
    rms = float(np.sqrt(np.mean(np.square(pcm / 32768.0)))) if len(pcm) else 0.0
    facts = {
        "decoder_rate": decoded.sample_rate,
        "decoded_samples_native": native_samples,
        "decoded_samples_arena": resampled,
        "trimmed_samples": trimmed,
        "padded_samples": padded,
        "length_tolerance": tolerance,
        "clipped_samples": int(np.count_nonzero((pcm == 32767) | (pcm == -32768))),
        "rms_dbfs": 20 * math.log10(rms) if rms > 0 else None,
    }
    if decoded.facts or receiver:  # e.g. how the decoder concealed what a channel lost (docs/channel.md)
        facts["receiver"] = {**decoded.facts, **receiver}
    return payload.num_samples / payload.sample_rate, facts


def _stream(job: Any, spec: Any, adapter: Any, model: dict[str, Any]) -> tuple[float, dict]:
    """Frame-by-frame encode -> packet -> decode through fresh stream state, timed per frame, and
    compared bit for bit with the whole-utterance encode and decode of the same audio."""
    import numpy as np
    import soundfile as sf
    import soxr

    from codecarena.pcm16 import to_int16
    from codecarena.alignment import find_delay

    if not hasattr(adapter, "new_encoder"):
        raise ValueError(f"{spec.canonical} has no frame-streaming interface")
    audio, rate = sf.read(job.input, dtype="float64")
    if rate != adapter.input_rate or audio.ndim != 1:
        raise ValueError(f"{job.input}: streaming needs mono audio at {adapter.input_rate} Hz, got {rate} Hz")
    whole = adapter.encode(audio)
    payload = make_payload(spec, whole, model, "", rate, len(audio), adapter.input_rate)
    whole_audio = to_int16(adapter.decode(payload).audio)
    frame = int(whole.side_info.get("frame_samples") or adapter.stream_frame_samples)
    samples = to_int16(audio)
    samples = np.concatenate([samples, np.zeros(-len(samples) % frame, dtype=np.int16)])
    encoder, decoder = adapter.new_encoder(), adapter.new_decoder()
    packets, pieces, frame_ms = [], [], []
    first_packet_at, first_sample_ms = None, None
    for start in range(0, len(samples), frame):
        t = time.perf_counter()
        packet = encoder.encode_frame(samples[start:start + frame])
        first_packet_at = first_packet_at or time.perf_counter()
        pieces.append(decoder.decode_packet(packet))
        frame_ms.append((time.perf_counter() - t) * 1000)
        if first_sample_ms is None and len(pieces[-1]):
            # Compute time from the first packet handed to the decoder to its first samples out (the
            # frames a real-time receiver waits for are the algorithmic latency, reported apart).
            first_sample_ms = (time.perf_counter() - first_packet_at) * 1000
        packets.append(packet)
    for packet in getattr(encoder, "flush", list)():  # the packets an encoder emits at the end (Opus: one)
        pieces.append(decoder.decode_packet(packet))
        packets.append(packet)
    streamed = np.concatenate(pieces)
    out_rate = getattr(decoder, "rate", rate)
    heard = streamed.astype(np.float64) / 32768.0
    if out_rate != rate:
        heard = soxr.resample(heard, out_rate, rate, quality="HQ")
    delay = find_delay(audio, heard[: len(audio)], int(0.1 * rate))
    budget_ms = 1000 * frame / rate
    declared = adapter.stream_latency_ms(whole) if hasattr(adapter, "stream_latency_ms") else \
        {"frame_ms": budget_ms, "lookahead_ms": 0.0}
    p50, p95, p99 = (float(np.percentile(frame_ms, q)) for q in (50, 95, 99))
    return len(audio) / rate, {
        "frames": len(packets),
        "frame_ms": budget_ms,
        "packets_identical": packets == list(whole.streams[0].packets),
        "audio_identical": bool(np.array_equal(streamed, whole_audio)),
        "measured_delay_samples": delay.delay_samples,
        "measured_delay_correlation": delay.correlation,
        "algorithmic_latency_ms": budget_ms + 1000 * max(0, delay.delay_samples) / rate,
        "declared_latency_ms": {**declared, "total_ms": declared["frame_ms"] + declared["lookahead_ms"]},
        "first_packet_to_first_sample_ms": first_sample_ms,
        "frame_compute_ms": {"p50": p50, "p95": p95, "p99": p99, "max": float(max(frame_ms))},
        "realtime_budget_ms": budget_ms,
        "frames_over_budget": sum(ms > budget_ms for ms in frame_ms),
    }


def persistent() -> int:
    """`python -m codecarena.worker --persistent`: one job path per stdin line, one JSON line per
    finished job on stdout ({"job": path, "exit": status}); models stay loaded between jobs."""
    import json

    from codecarena.sandbox.namespace import end_descendants

    loaded: dict[tuple[str, str, str], tuple[Any, dict[str, Any]]] = {}
    out = sys.stdout
    # Libraries that print would corrupt the reply stream: everything else goes to stderr.
    sys.stdout = sys.stderr
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        status = run(Path(path), loaded)
        # Nothing a job started outlives it: in its own PID namespace, the worker ends them all.
        end_descendants()
        out.write(json.dumps({"job": path, "exit": status}) + "\n")
        out.flush()
    return 0


def _enter_sandbox(family: str, folder: str) -> None:
    global SANDBOX_ERROR
    from codecarena.sandbox.enter import SandboxError, enter

    try:
        enter(family, Path(folder))
    except SandboxError as exc:
        SANDBOX_ERROR = str(exc)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--sandbox"] and len(args) == 4:
        family, folder, args = args[1], args[2], args[3:]
        _enter_sandbox(family, folder)
        if args == ["--check"]:  # `codec add`: import the codec as a worker does, and check what it exports
            from codecarena.codecs.loading import check_adapter

            if SANDBOX_ERROR:
                sys.exit(f"the sandbox could not be entered: {SANDBOX_ERROR}")
            check_adapter(family)
            sys.exit(0)
    if args == ["--persistent"]:
        sys.exit(persistent())
    if len(args) != 1 or args[0].startswith("--"):
        print("usage: python -m codecarena.worker [--sandbox FAMILY FOLDER] (JOB.json | --persistent | --check)",
              file=sys.stderr)
        sys.exit(64)
    sys.exit(run(Path(args[0])))


if __name__ == "__main__":
    main()
