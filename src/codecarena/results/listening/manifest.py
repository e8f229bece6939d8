"""What the page is given: the test as the listener's browser needs it, and the page's own files.

The page (static/listen.html, listen.js, listen.css) is the same for the local server and for a
static bundle; `manifest.json` tells it which it runs under. It holds the trials with their stimuli
by sha256 (each fetched as `audio/<sha256>.wav`), the test's seed (the page derives the listener's
orders itself, as design.py does), the training's labels, and the rule for a stimulus to count as
played. It names no codec: a listener sees opaque condition ids, never what produced a stimulus
(the hidden reference's bytes are the open reference's, so the blinding is against the ears, not
against a listener reading the page's network traffic: docs/listening.md).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from codecarena.results.listening.answers import MIN_HEARD_S, NO_PREFERENCE
from codecarena.results.listening.definition import ListeningTest, Trial

MANIFEST_VERSION = 1
PAGE_FILES = {"index.html": "listen.html", "listen.js": "listen.js", "listen.css": "listen.css"}
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8"}


def page_file(name: str) -> bytes:
    """One of the page's files (by its name in a bundle: index.html, listen.js, listen.css)."""
    return (resources.files("codecarena.results.listening") / "static" / PAGE_FILES[name]).read_bytes()


def _training_labels(test: ListeningTest) -> dict[str, str]:
    labels, n = {}, 0
    for c in test.conditions:
        if c.role == "hidden_reference":
            labels[c.id] = "the reference itself (hidden among the stimuli in a trial)"
        elif c.role == "anchor":
            labels[c.id] = f"low-pass anchor, {c.cutoff_hz / 1000:g} kHz" if c.cutoff_hz else "anchor"
        else:
            n += 1
            labels[c.id] = f"system {n}"
    return labels


def _trial(trial: Trial) -> dict[str, Any]:
    return {"id": trial.id, "duration_s": trial.duration_s, "reference": trial.reference,
            "stimuli": dict(trial.stimuli)}


def client_manifest(test: ListeningTest, mode: str) -> dict[str, Any]:
    """The page's manifest for `mode` ("server": answers are posted; "static": kept in the browser and
    downloaded as a file)."""
    shas = sorted({sha for t in [*test.trials, test.training] for sha in [t.reference, *t.stimuli.values()]})
    return {"version": MANIFEST_VERSION, "mode": mode, "test": test.name, "kind": test.kind,
            "test_sha256": test.test_sha256, "seed": test.seed, "conditions": test.condition_ids,
            "no_preference": test.no_preference, "no_preference_id": NO_PREFERENCE, "min_heard_s": MIN_HEARD_S,
            "trials": [_trial(t) for t in test.trials], "training": _trial(test.training),
            "training_labels": _training_labels(test),
            "audio": {sha: f"audio/{sha}.wav" for sha in shas}}
