#!/usr/bin/env python3
"""Generate src/codecarena/data/smoke.json from the speech mirror's manifest.json.

Usage: python scripts/make_smoke_manifest.py [MIRROR_MANIFEST] [-o OUT]

The mirror manifest (default /work/shared/data/speech/manifest.json) is the research record; smoke.json
is the small, stable subset codecarena needs to find, fetch, convert and verify each clip. Re-run this
script instead of editing smoke.json by hand: the tests check that the two agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = Path("/work/shared/data/speech/manifest.json")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "codecarena" / "data" / "smoke.json"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
DESCRIPTION = (
    "Ten real 16 kHz mono 16-bit speech clips: six English (LibriSpeech test-clean/dev-clean, LJ Speech) "
    "and four Mandarin (AISHELL-1), with transcripts and the critical words (numbers, negations) a content "
    "metric must check. Each clip is fetched from a pinned public GitHub commit and verified by sha256."
)


def conversion_of(item: dict[str, Any]) -> str:
    """Pick the conversion from the original's format, and cross-check the mirror's prose description."""
    fmt = item["original_format"]
    text = item["conversion"]
    if fmt["channels"] != 1:
        raise SystemExit(f"{item['id']}: original has {fmt['channels']} channels; only mono is supported")
    if fmt["sample_rate"] != item["sample_rate"]:
        kind = "resample_soxr_vhq"
        ok = "soxr" in text and "VHQ" in text
    elif fmt["container"] == "FLAC":
        kind = "flac_to_wav"
        ok = "FLAC" in text and "WAV" in text
    else:
        kind = "none"
        ok = text.startswith("none") and item["original_sha256"] == item["sha256"]
    if not ok:
        raise SystemExit(f"{item['id']}: conversion {kind!r} does not match the mirror's description {text!r}")
    return kind


def attribution_of(item: dict[str, Any]) -> str:
    corpus = item["corpus"]
    if item.get("corpus_subset"):
        corpus = f"{corpus}, {item['corpus_subset']}"
    return (
        f"{corpus}; file {item['source_path']} from github.com/{item['source_repository']} "
        f"at commit {item['source_commit']}"
    )


def utterance_of(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item["id"],
        "file": item["file"],
        "language": item["language"],
        "speaker": item["speaker"],
        "transcript": item["transcript"],
        "critical": [{"kind": c["kind"], "text": c["text"]} for c in item["critical"]],
        "license": item["license"],
        "attribution": attribution_of(item),
        "sample_rate": item["sample_rate"],
        "num_samples": item["num_samples"],
        "sha256": item["sha256"],
        "source": {
            "url": RAW_URL.format(
                repo=item["source_repository"], commit=item["source_commit"], path=item["source_path"]
            ),
            "sha256": item["original_sha256"],
            "conversion": conversion_of(item),
            "sample_rate": item["original_format"]["sample_rate"],
        },
    }


def check_files(mirror: Path, items: list[dict[str, Any]]) -> None:
    """Catch a stale mirror manifest early: the hashes we publish must match the files beside it."""
    for item in items:
        for name, expected in ((item["file"], item["sha256"]), (item["original_file"], item["original_sha256"])):
            path = mirror / name
            if not path.is_file():
                continue  # a partial mirror is fine for generation; the tests verify the full one
            actual = hashlib.sha256(path.read_bytes()).hexdigest()
            if actual != expected:
                raise SystemExit(f"{path}: sha256 {actual} does not match the mirror manifest ({expected})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE, help="mirror manifest.json")
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT, help="where to write smoke.json")
    args = parser.parse_args(argv)

    items = json.loads(args.source.read_text(encoding="utf-8"))
    if not isinstance(items, list):
        raise SystemExit(f"{args.source}: expected a JSON list of clips")
    check_files(args.source.parent, items)
    doc = {
        "format": "codecarena-set",
        "version": 1,
        "name": "smoke",
        "description": DESCRIPTION,
        # Sorted so that regenerating never reorders the set (results are keyed and compared by id).
        "utterances": [utterance_of(item) for item in sorted(items, key=lambda i: i["id"])],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(doc['utterances'])} utterances)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
