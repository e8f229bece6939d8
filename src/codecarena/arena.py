"""The arena's one sample rate: every reference, decoded file, payload header and metric is at it."""

ARENA_RATE = 16000
