"""`--weights real` through each torch family's real loader, on a test registry whose pins are the
hashes of synthetic checkpoint files (real weights cannot be downloaded here): the files are imported
with `fetch --from`, as on an air-gapped machine, then a run loads them as the family's pinned
checkpoint. Rows say real, carry the registry's checkpoint identity, and the audit passes."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import SHORT_CLIPS, codecarena, need_mirror, registry_fork, rows_of

pytestmark = pytest.mark.slow

# registry entry -> (codec configuration, {pinned file name: synthetic file, relative to the synthetic cache})
CASES = {
    "encodec": ("encodec:1.5k", {"encodec_24khz-d7cc33bc.th": "encodec/encodec_24khz-v1-seed0.pt"}),
    "dac": ("dac:16khz", {"weights_16khz.pth": "dac/dac_16khz-v1-seed0.pt"}),
    "snac": ("snac:24khz", {"pytorch_model.bin": "snac/snac_24khz-v1-seed0/pytorch_model.bin",
                            "config.json": "snac/snac_24khz-v1-seed0/config.json"}),
    "mimi": ("mimi:8", {"model.safetensors": "mimi/mimi-v1-seed0/model.safetensors",
                        "config.json": "mimi/mimi-v1-seed0/config.json",
                        "preprocessor_config.json": None}),
    "bigcodec": ("bigcodec:16khz", {"bigcodec.pt": "bigcodec/bigcodec-v1-seed0.pt"}),
    "wavtokenizer_large_speech_75": ("wavtokenizer:24khz", {
        "wavtokenizer_large_speech_320_24k.ckpt":
            "wavtokenizer_large_speech_75/wavtokenizer_large_speech_75-v1-seed0.pt"}),
}


def _pin_files(tmp_path: Path, family: str, files: dict[str, Path]) -> dict[str, str]:
    """Point the family's pins at `files` (name -> file): sha256 and size replaced in its TOML, in a
    registry fork under `tmp_path`.
    EnCodec's URL is hash-named, so its name follows the new hash. Returns name -> new name."""
    toml = registry_fork(tmp_path, family)
    text = toml.read_text()
    names = {}
    for name, path in files.items():
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        block = re.search(rf'name = "{re.escape(name)}"\nurl = "[^"]+"\n(?:bytes = \d+\n)?sha256 = "[0-9a-f]{{64}}"',
                          text)
        assert block, (family, name)
        new = re.sub(r'sha256 = "[0-9a-f]{64}"', f'sha256 = "{sha}"', block.group(0))
        new = re.sub(r"bytes = \d+", f"bytes = {len(data)}", new)
        renamed = name.replace("d7cc33bc", sha[:8])
        new = new.replace(name, renamed)
        text = text.replace(block.group(0), new)
        names[name] = renamed
    toml.write_text(text)
    return names


@pytest.mark.parametrize("family", CASES)
def test_real_weights_load_through_the_family_loader(family: str, runtime_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    codec, sources = CASES[family]
    env = runtime_env(family)
    clips = tmp_path / "in"
    clips.mkdir()
    shutil.copy(need_mirror() / SHORT_CLIPS[0], clips / SHORT_CLIPS[0])
    # The synthetic checkpoint, generated (once per session) by a synthetic run: the family's own
    # tests usually made it already in this session's cache.
    synthetic = Path(env["XDG_CACHE_HOME"]) / "codecarena" / "models" / "synthetic"
    if not all((synthetic / relative).exists() for relative in sources.values() if relative is not None):
        made = codecarena("run", "--input", clips, "--weights", "synthetic", "--codec", codec, "--metrics", "none",
                          "--out", tmp_path / "synthetic", env=env)
        assert made.returncode == 0, made.stdout + made.stderr
    elsewhere = tmp_path / "downloaded-elsewhere"
    elsewhere.mkdir()
    files = {}
    for name, relative in sources.items():
        if relative is None:  # a file the loader verifies but does not read
            (elsewhere / name).write_text("{}\n")
        else:
            shutil.copy(synthetic / relative, elsewhere / name)
        files[name] = elsewhere / name
    _pin_files(tmp_path, family, files)
    registry = tmp_path / "registry"
    real_env = {**env, "CODECARENA_REGISTRY": str(registry), "XDG_CACHE_HOME": str(tmp_path / "cache"),
                "CODECARENA_MODELS": ""}
    audit = codecarena("registry", "audit", env=real_env)
    assert audit.returncode == 0, audit.stdout  # the test registry's pins are complete

    absent = codecarena("run", "--input", clips, "--codec", codec, "--no-download", "--metrics", "none",
                        "--out", tmp_path / "absent", env=real_env)
    assert absent.returncode == 2 and f"codecarena fetch {codec}" in absent.stderr

    imported = codecarena("fetch", codec, "--from", elsewhere, env=real_env)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    out = tmp_path / "real"
    result = codecarena("run", "--input", clips, "--codec", codec, "--no-download", "--metrics", "none",
                        "--out", out, env=real_env)
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = rows_of(out)
    entry = json.loads(json.dumps(row["checkpoint"]))
    assert row["weights"] == "real" and row["status"] == "ok" and row["replay_identical"] is True
    assert entry["registry"] == family and "weights" not in entry
    assert {name: sha for name, sha in entry.items() if name not in ("registry", "revision")} == {
        name: hashlib.sha256(path.read_bytes()).hexdigest()
        for name, path in zip(_renamed(family, files), files.values())}
    assert codecarena("audit", out, env=real_env).returncode == 0
    # Other weights presented as the registry's pin (a user's file, an edited identity) are refused.
    lines = (out / "rows.jsonl").read_text().splitlines()
    forged = json.loads(lines[0])
    forged["checkpoint"] = {**forged["checkpoint"], "revision": "0" * 40}
    (out / "rows.jsonl").write_text(json.dumps(forged) + "\n")
    refused = codecarena("audit", out, env=real_env)
    assert refused.returncode == 1 and "row says weights 'real' (the registry's pin) but its checkpoint" in refused.stdout


def _renamed(family: str, files: dict[str, Path]) -> list[str]:
    if family != "encodec":
        return list(files)
    (path,) = files.values()
    return [f"encodec_24khz-{hashlib.sha256(path.read_bytes()).hexdigest()[:8]}.th"]


def test_a_user_pinned_checkpoint_runs_labelled_pinned_by_user(runtime_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = runtime_env("encodec")
    clips = tmp_path / "in"
    clips.mkdir()
    shutil.copy(need_mirror() / SHORT_CLIPS[0], clips / SHORT_CLIPS[0])
    made = codecarena("run", "--input", clips, "--weights", "synthetic", "--codec", "encodec:1.5k", "--metrics", "none",
                      "--out", tmp_path / "synthetic", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    finetune = tmp_path / "my_finetune.pt"
    shutil.copy(Path(env["XDG_CACHE_HOME"]) / "codecarena" / "models" / "synthetic" / "encodec" /
                "encodec_24khz-v1-seed0.pt", finetune)
    user_env = {**env, "XDG_DATA_HOME": env["XDG_DATA_HOME"], "XDG_CACHE_HOME": str(tmp_path / "cache"),
                "CODECARENA_MODELS": ""}
    none_yet = codecarena("run", "--input", clips, "--codec", "encodec:1.5k", "--weights", "user", "--metrics", "none",
                          "--out", tmp_path / "none", env=user_env)
    assert none_yet.returncode == 2 and "codecarena registry pin encodec:1.5k --file PATH" in none_yet.stderr
    pinned = codecarena("registry", "pin", "encodec:1.5k", "--file", finetune, "--url", "https://example.org/ft.pt",
                        env=user_env)
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    try:
        listed = codecarena("registry", "audit", env=user_env)
        assert listed.returncode == 0, listed.stdout
        assert "user pin (not a registry pin) encodec:1.5k: my_finetune.pt" in listed.stdout
        out = tmp_path / "user"
        result = codecarena("run", "--input", clips, "--codec", "encodec:1.5k", "--weights", "user", "--metrics", "none",
                            "--out", out, env=user_env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "pinned by user" in result.stdout
        (row,) = rows_of(out)
        assert row["weights"] == "user" and row["checkpoint"]["pinned_by"] == "user"
        assert row["checkpoint"]["my_finetune.pt"] == hashlib.sha256(finetune.read_bytes()).hexdigest()
        assert codecarena("audit", out, env=user_env).returncode == 0
        board = codecarena("leaderboard", out, env=user_env)
        assert board.returncode == 0 and "pinned by user" in board.stdout
        report = codecarena("report", out, "--out", tmp_path / "report" / "report.html", env=user_env)
        assert report.returncode == 0, report.stderr
        assert "pinned by user" in (tmp_path / "report" / "report.html").read_text()
        # Presented as the registry's pin, the same row is refused.
        forged = {**row, "weights": "real"}
        (out / "rows.jsonl").write_text(json.dumps(forged) + "\n")
        refused = codecarena("audit", out, env=user_env)
        assert refused.returncode == 1 and "row says weights 'real'" in refused.stdout
        # A checkpoint whose keys are not EnCodec's is refused by the family's loader.
        alien = tmp_path / "alien.pt"
        import torch

        torch.save({"not.encodec": torch.zeros(1)}, alien)
        assert codecarena("registry", "pin", "encodec:1.5k", "--file", alien, env=user_env).returncode == 0
        wrong = codecarena("run", "--input", clips, "--codec", "encodec:1.5k", "--weights", "user", "--metrics", "none",
                           "--out", tmp_path / "alien-run", env=user_env)
        assert wrong.returncode == 1
        (failed,) = rows_of(tmp_path / "alien-run")
        assert "checkpoint does not match the architecture" in failed["error"]
    finally:
        shutil.rmtree(Path(env["XDG_DATA_HOME"]) / "codecarena" / "user-pins", ignore_errors=True)
