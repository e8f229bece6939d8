"""The scoring process of a GuardedScorer: `python -m codecarena.metrics.scoring_process`.

It reads a WorkerConfig line, then one ScoreRequest per line on stdin, and answers with Event lines
on its own copy of stdout: "started" before each metric, "scored" with its records after it,
"finished" at the end of the request. Anything a library prints goes to stderr (the log), never
into the replies. It exits when stdin closes (the harness is gone or done).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import IO


def serve(config_line: str, requests: IO[str], replies: IO[str]) -> None:
    import soundfile as sf

    from codecarena.metrics.guarded import Event, decode_config, decode_request, encode
    from codecarena.metrics.scorer import Scorer, failed_records, read_hashed
    from codecarena.metrics.signal import SignalPair

    def send(event: Event) -> None:
        replies.write(encode(event))
        replies.flush()

    config = decode_config(config_line)
    scorer = Scorer(config.metrics, dict(config.asr_models),
                    Path(config.reference_results) if config.reference_results else None, config.metric_device)
    for line in requests:
        request = decode_request(line)
        try:
            reference, reference_sha256 = read_hashed(Path(request.reference))
            decoded, rate = sf.read(request.decoded, dtype="float64")
        except (OSError, RuntimeError) as exc:  # soundfile's errors are RuntimeErrors
            reason = f"cannot read the audio to score: {type(exc).__name__}: {exc}".splitlines()[0]
            for name in request.metrics:
                send(Event("scored", name, failed_records((name,), reason)))
            send(Event("finished"))
            continue
        pair = SignalPair(reference, decoded)
        for name in request.metrics:
            send(Event("started", name))
            send(Event("scored", name, scorer.score_metric(name, request.utterance, pair, rate, reference_sha256)))
        send(Event("finished"))


def main() -> int:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    # Native code that prints (to fd 1) would otherwise corrupt the replies.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # The log (stderr) gets one line per transcription: how often each reference was heard.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    logging.getLogger("codecarena.asr").setLevel(logging.INFO)
    config_line = sys.stdin.readline()
    if not config_line:
        return 0
    serve(config_line, sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
