"""Peak memory of parsing the worst-case payloads that a default service accepts.

Usage: .venv/bin/python bench/payload_memory.py [--mib 64]

The service's default body limit is 64 MiB (`codecarena serve --max-bytes 64M`). Per byte, the
densest payloads for a parser are one stream of 1-bit codes (8 codes per byte) and one stream of
zero-length packets (one packet per length byte). Each is written to a temporary file straight from
docs/payload-format.md (the module's own encoder would need 8 bytes per code just to build it), then
parsed with read_payload in a fresh interpreter, followed by representation_bits() as the pipeline,
`audit` and the service do. The child reports the rise of its peak RSS (VmHWM, reset through
/proc/self/clear_refs after a warm-up parse of a tiny file) and the wall time of the parse. The
file's own bytes (read_bytes) are part of the peak, so the floor is a ratio of 1. Nothing is
asserted: read the ratios (tests/test_payload.py asserts the 4x bound on 2 MiB files). Linux only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

CHILD = """
import sys, time
from codecarena.payload import read_payload

def kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

read_payload(sys.argv[1]).representation_bits()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = kib("VmHWM")
start = time.perf_counter()
bits = read_payload(sys.argv[2]).representation_bits()
seconds = time.perf_counter() - start
print((kib("VmHWM") - before) * 1024, seconds, bits)
"""


def payload_file(streams: list[dict[str, object]], body: bytes) -> bytes:
    header = {
        "channels": 1, "checkpoint": {}, "codec": "pcm:16", "codec_sample_rate": 16000, "config": {},
        "family": "pcm", "num_samples": 0, "sample_rate": 16000, "side_info": {}, "streams": streams,
        "variant": "",
    }
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    head = b"CCAP" + struct.pack(">HI", 1, len(text)) + text + body
    return head + hashlib.sha256(head).digest()


def worst_cases(total: int) -> dict[str, tuple[bytes, int]]:
    """name: (file bytes of `total` bytes or just under, expected representation bits)."""
    # Prefix, checksum and a header of under 300 bytes; the body takes the rest, rounded to whole bytes.
    n = total - 10 - 32 - 300
    codes = bytes(range(256)) * (n // 256) + bytes(n % 256)
    return {
        "1-bit codes": (payload_file([{"bit_width": 1, "kind": "codes", "name": "c", "shape": [8 * n]}], codes), 8 * n),
        "empty packets": (payload_file([{"count": n, "kind": "packets", "name": "p"}], bytes(n)), 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64,
                        help="payload size in MiB (default 64, the service's default limit)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    print(f"python {sys.version.split()[0]}; payloads of at most {args.mib} MiB parsed with read_payload")
    print(f"{'payload':<14} {'bytes':>10} {'peak RSS rise':>14} {'ratio':>6} {'parse s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.ccap"
        small.write_bytes(payload_file([{"count": 1, "kind": "packets", "name": "p"}], b"\x00"))
        for name, (data, bits) in worst_cases(args.mib * 2**20).items():
            path = Path(tmp) / "big.ccap"
            path.write_bytes(data)
            del data
            out = subprocess.run([sys.executable, "-c", CHILD, str(small), str(path)], env=env,
                                 capture_output=True, text=True, check=True).stdout.split()
            peak, seconds, got = int(out[0]), float(out[1]), int(out[2])
            if got != bits:
                raise SystemExit(f"{name}: representation_bits() gave {got}, the file holds {bits}")
            size = path.stat().st_size
            print(f"{name:<14} {size:>10} {peak / 2**20:>10.1f} MiB {peak / size:>6.2f} {seconds:>8.2f}")


if __name__ == "__main__":
    main()
