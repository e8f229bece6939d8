"""Would batching Whisper across utterances speed up the ASR metric? (issue #21)

codecarena transcribes one utterance at a time (`content.Transcriber.transcribe`: greedy, no
timestamps, one 30 s window). faster-whisper's batched inference (`BatchedInferencePipeline`)
batches the 30 s chunks of *one* long file after a VAD split, which gives nothing on utterances
that fit one window and would change the input. What could help is batching several utterances'
windows through the same model: the features each gets on its own in `transcribe` (log-mel of the
unpadded audio, padded to 3000 frames), one batched encoder call, one batched greedy `generate`,
the calls BatchedInferencePipeline makes internally.

This script times both on the smoke set's clips of one language (default: the first 4 English,
then Mandarin, each with its default model: Whisper tiny.en / base), on one CPU thread as the
scoring processes run, median of --repeats passes, and says whether every transcript is
identical. Usage:

    CODECARENA_DATA=... CODECARENA_MODELS=... .venv/bin/python bench/asr_batching.py [--clips 4]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import faster_whisper
import numpy as np
import soundfile as sf
from faster_whisper.audio import pad_or_trim

from codecarena.datasets import load_smoke
from codecarena.metrics.asr_models import default_choice, resolve
from codecarena.metrics.transcriber import Transcriber


def timed(run: Callable[[], list[str]], repeats: int) -> tuple[float, list[str]]:
    run()  # warm-up: the first call pays for lazy initialisation
    times, texts = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        texts = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    utterances = load_smoke(allow_download=False).utterances
    for language in ("en", "zh"):
        chosen = [u for u in utterances if u.language == language][:args.clips]
        audio = [sf.read(u.path, dtype="float32")[0] for u in chosen]
        transcriber = Transcriber(resolve(default_choice(language) or ""), language, threads=1)
        whisper = transcriber._model
        tokenizer = faster_whisper.tokenizer.Tokenizer(whisper.hf_tokenizer, whisper.model.is_multilingual,
                                                       task="transcribe", language=language)
        prompt = whisper.get_prompt(tokenizer, [], without_timestamps=True)

        def one_by_one() -> list[str]:
            return [transcriber.transcribe(a, 16000) for a in audio]

        def batched() -> list[str]:
            features = np.stack([pad_or_trim(whisper.feature_extractor(a)) for a in audio])
            results = whisper.model.generate(whisper.encode(features), [prompt] * len(audio), beam_size=1,
                                             max_length=448, suppress_blank=True, suppress_tokens=[-1])
            return [tokenizer.decode([t for t in r.sequences_ids[0] if t < tokenizer.eot]).strip() for r in results]

        single_s, single_texts = timed(one_by_one, args.repeats)
        batch_s, batch_texts = timed(batched, args.repeats)
        seconds = sum(len(a) for a in audio) / 16000
        same = sum(a == b for a, b in zip(single_texts, batch_texts))
        print(f"{language}: {len(audio)} clips, {seconds:.1f} s of audio, model {transcriber.model.name}, 1 thread")
        print(f"  one by one {single_s:.3f} s, batched {batch_s:.3f} s: batched is {single_s / batch_s:.2f}x faster; "
              f"identical transcripts {same}/{len(audio)}")


if __name__ == "__main__":
    main()
