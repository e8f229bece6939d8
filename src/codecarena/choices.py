"""The values and defaults the command line offers for options that the library checks itself.

They live in this module, which imports nothing, so that `codecarena --help`, `--version` and a
mistyped option are answered without importing the library (numpy, scipy, Rich, DuckDB): the parser
is built from every command module, and at module level a command imports only the standard library,
`commands.common`, this module and a few like it (`tests/test_cli.py` checks it and measures the
start). The library modules that check these values import them from here.
"""

from __future__ import annotations

# run: the codec configurations of a run that names none (pipeline/prepare.py).
DEFAULT_CODECS = ("opus:6k", "opus:12k", "codec2:3200", "codec2:700C", "pcm:16")

# run --input: how a multichannel file is taken (input_sets.load_input_dir), and the corpus layouts
# (corpora.load_corpus).
CHANNEL_CHOICES = ("mix", "left", "right", "each")
CORPUS_LAYOUTS = ("auto", "plain", "librispeech", "aishell", "kaldi")

# run --channel's policy=: the arena's policies for a lost frame of a decoder without concealment of its
# own (registry/channel_support.py; each family's [channel] policies offers some of them).
ARENA_POLICIES = ("repeat", "silence", "zero")

# audit --rescore without a number: rows rescored per codec configuration (results/rescore.py).
DEFAULT_ROWS_PER_CODEC = 2

# leaderboard (results/leaderboard.py). The groups of columns the terminal table (--columns) and the
# report (checkboxes) show or hide together; a metric output is "content" when it scores the ASR
# transcript, else "quality"; "listening" holds the MUSHRA columns of the runs' listening tests.
COLUMN_GROUPS = ("rate", "quality", "content", "listening", "cost", "checks")
BY_CHOICES = ("language",)
CI_UNITS = ("utterance", "speaker")
SORT_BY_RATE = "kbps"

# report (results/report/): how audio is embedded, and --listen's default: every utterance of a group
# up to LISTEN_ALL_UP_TO; beyond it each configuration's worst, median and best, and LISTEN_SAMPLE
# drawn at random.
AUDIO_MODES = ("flac", "wav", "none")
LISTEN_ALL_UP_TO = 50
LISTEN_SAMPLE = 6

# serve and service-check: where the bearer token is read from when --token is not given.
TOKEN_ENV = "CODECARENA_SERVICE_TOKEN"

# ledger --stability: how far the shifted encode's input is delayed (docs/ledger.md).
STABILITY_SHIFT_MS = 5.0
