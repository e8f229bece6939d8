"""The run's own copy of a reference is named by what the file holds (issue 28, #2): a WAV named
`take.wav.bak`, `x.wave` or with no suffix at all used to stop the whole run, because the copy kept
the input's suffix and the run directory accepts only .wav and .flac."""

from __future__ import annotations

import shutil
from pathlib import Path

import soundfile as sf

from conftest import MIRROR, SHORT_CLIPS, codecarena, need_mirror, rows_of


def test_references_are_named_by_content_not_by_the_input_name(tmp_path: Path) -> None:
    need_mirror()
    folder = tmp_path / "in"
    folder.mkdir()
    clip = MIRROR / SHORT_CLIPS[0]
    for name in ("take.wav.bak", "x.wave", "noext"):
        shutil.copy(clip, folder / name)
    audio, rate = sf.read(clip, dtype="int16")
    sf.write(folder / "lossless.audio", audio, rate, format="FLAC", subtype="PCM_16")
    out = tmp_path / "run"
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = rows_of(out)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    by_kind = {Path(r["reference"]).suffix: sf.info(str(out / r["reference"])).format for r in rows}
    assert by_kind == {".wav": "WAV", ".flac": "FLAC"}
    assert codecarena("audit", out).returncode == 0


def test_a_directory_where_a_reference_copy_goes_is_refused_in_one_line(tmp_path: Path) -> None:
    need_mirror()
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(MIRROR / SHORT_CLIPS[0], folder / "clip0.wav")
    out = tmp_path / "run"
    (out / "references" / "clip0.wav" / "someones").mkdir(parents=True)
    result = codecarena("run", "--input", folder, "--codec", "pcm:16", "--metrics", "none", "--out", out)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "references/clip0.wav: is not a file" in line and "move or remove it" in line
    assert (out / "references" / "clip0.wav" / "someones").is_dir()
