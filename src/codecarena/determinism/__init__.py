"""The determinism doctor: controls that detect divergent encodes, and a tracer that locates them.

`probe` and `trace` run inside a codec's runtime (they import torch); `doctor` is the harness side
that starts probe processes, compares them and writes the evidence file.
"""
