"""User pins: the overlay outside the package, strictly parsed, with the files kept and verified."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codecarena import checkpoints
from codecarena.registry import user_pins
from conftest import codecarena


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


def test_a_pin_is_kept_found_and_loaded_verified(home: Path) -> None:
    weights = home / "ft.pt"
    weights.write_bytes(b"fine-tuned weights")
    made = user_pins.pin("dac", "16khz", [weights], "https://example.org/ft.pt")
    assert user_pins.find("dac", "16khz") == made and user_pins.find("dac", "24khz") is None
    (f,) = made.files
    assert (f.name, f.bytes, f.origin) == ("ft.pt", 18, "https://example.org/ft.pt")
    folder, data = checkpoints.read_checkpoint(made.checkpoint(), models_dir=user_pins.pins_dir())
    assert data == {"ft.pt": b"fine-tuned weights"} and folder == user_pins.pins_dir() / "dac-16khz"
    # A pin without a configuration serves every one; a pin for one configuration comes first.
    every = user_pins.pin("dac", "", [weights])
    assert user_pins.find("dac", "24khz") == every and user_pins.find("dac", "16khz") == made
    assert every.files[0].origin == str(weights.resolve())
    # The kept file changed afterwards: refused by its hash.
    kept = user_pins.pins_dir() / "dac-16khz" / "ft.pt"
    kept.unlink()
    kept.write_bytes(b"fine-tuned weightz")
    with pytest.raises(checkpoints.CheckpointError, match="sha256 mismatch"):
        checkpoints.read_checkpoint(made.checkpoint(), models_dir=user_pins.pins_dir())


@pytest.mark.parametrize("damage", [
    lambda d: d.update(version=2),
    lambda d: d["pins"][0]["files"][0].update(sha256="abc"),
    lambda d: d["pins"][0]["files"][0].update(name="../escape"),
    lambda d: d["pins"][0].update(extra=1),
    # Issue 28: a bool is not a size, nor is a size no file reaches.
    lambda d: d["pins"][0]["files"][0].update(bytes=True),
    lambda d: d["pins"][0]["files"][0].update(bytes=10**30),
    # Issue 28: a family or configuration that climbs out of user-pins (its files would be hashed there).
    lambda d: d["pins"][0].update(family="../../elsewhere"),
    lambda d: d["pins"][0].update(config="../../elsewhere"),
    lambda d: d["pins"][0].update(family=".."),
    lambda d: d["pins"][0].update(config=""),
    # Issue 28: one configuration pinned twice, and one file listed twice in a pin.
    lambda d: d["pins"].append(json.loads(json.dumps(d["pins"][0]))),
    lambda d: d["pins"][0]["files"].append(dict(d["pins"][0]["files"][0])),
])
def test_the_overlay_is_parsed_strictly(home: Path, damage) -> None:  # type: ignore[no-untyped-def]
    weights = home / "ft.pt"
    weights.write_bytes(b"x")
    user_pins.pin("encodec", "", [weights])
    path = user_pins.pins_dir() / "pins.json"
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data))
    with pytest.raises(user_pins.UserPinError, match=str(path)):
        user_pins.load()


def test_registry_pin_refuses_what_it_cannot_pin(home: Path) -> None:
    env = {"XDG_DATA_HOME": str(home / "data")}
    weights = home / "ft.pt"
    weights.write_bytes(b"x")
    dsp = codecarena("registry", "pin", "opus:6k", "--file", weights, env=env)
    assert dsp.returncode == 2 and "user pins are for the neural families" in dsp.stderr
    config = codecarena("registry", "pin", "dac:8khz", "--file", weights, env=env)
    assert config.returncode == 2 and "no configuration '8khz'" in config.stderr
    missing = codecarena("registry", "pin", "dac", "--file", home / "absent.pt", env=env)
    assert missing.returncode == 2 and "absent.pt: no such file" in missing.stderr
    assert not (home / "data" / "codecarena" / "user-pins" / "pins.json").exists()


@pytest.mark.parametrize("command", [["serve", "--codec", "dac:16khz", "--port", "9"], ["determinism", "dac:16khz"]])
def test_user_weights_are_for_run_only(command: list[str]) -> None:
    result = codecarena(*command, "--weights", "user")
    assert result.returncode == 2 and "is for `codecarena run` only" in result.stderr


def test_registry_pin_on_a_full_disk_names_the_pins_folder_and_the_pin_command(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    from codecarena import cli

    weights = home / "usb" / "ft.pt"
    weights.parent.mkdir()
    weights.write_bytes(b"fine-tuned weights")

    def full(source: Path, dest: Path, sha256: str) -> bool:
        # What a copy raises on a full destination: the error names the source file.
        raise OSError(errno.ENOSPC, "No space left on device", str(source), None, str(dest))

    monkeypatch.setattr(user_pins, "copy_verified", full)
    with pytest.raises(SystemExit) as exited:
        cli.main(["registry", "pin", "dac:16khz", "--file", str(weights)])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"codecarena: error: {user_pins.pins_dir()}: no space left on device (")
    assert "about 0.0 MiB needed); the pin was not recorded" in line and str(weights.parent) not in line
    assert line.endswith("rerun the same `codecarena registry pin` command") and "resume" not in line
    assert not (user_pins.pins_dir() / "pins.json").exists()


@pytest.mark.parametrize("family, config", [("../escape", ""), ("dac", "../../escape"), ("dac", "all/..")])
def test_a_pin_that_would_climb_out_of_user_pins_is_refused(home: Path, family: str, config: str) -> None:
    weights = home / "ft.pt"
    weights.write_bytes(b"x")
    with pytest.raises(user_pins.UserPinError, match="is not a name|nor a name"):
        user_pins.pin(family, config, [weights])
    assert not user_pins.pins_dir().exists() and sorted(p.name for p in home.iterdir()) == ["ft.pt"]


def test_the_kept_pin_is_a_copy_that_survives_the_original_being_saved_again(home: Path) -> None:
    # Issue 28, defect 5: a hard link shared the original's bytes, so continued training that saves
    # over the original in place changed the pinned checkpoint.
    weights = home / "ft.pt"
    weights.write_bytes(b"epoch 10")
    made = user_pins.pin("dac", "16khz", [weights])
    with open(weights, "r+b") as original:  # saved again in place: the same inode
        original.write(b"epoch 11")
    folder, data = checkpoints.read_checkpoint(made.checkpoint(), models_dir=user_pins.pins_dir())
    assert data == {"ft.pt": b"epoch 10"}
    assert not any(p.name.endswith(".tmp") for p in folder.iterdir())


def test_a_symlinked_file_pins_the_bytes_it_points_to(home: Path) -> None:
    store = home / "store"
    store.mkdir()
    (store / "blob-1").write_bytes(b"fine-tuned")
    link = home / "model.pt"
    link.symlink_to(Path("store") / "blob-1")  # relative, as checkpoint stores make them
    made = user_pins.pin("dac", "16khz", [link])
    kept = user_pins.pins_dir() / "dac-16khz" / "model.pt"
    assert not kept.is_symlink() and made.files[0].origin == str(store / "blob-1")
    (store / "blob-1").unlink()  # the store cleaned up: the pin keeps its own bytes
    _, data = checkpoints.read_checkpoint(made.checkpoint(), models_dir=user_pins.pins_dir())
    assert data == {"model.pt": b"fine-tuned"}
