"""`codecarena codecs` says whether each family runs here now, and what would make it run (issue 30:
it listed twelve families without saying which were ready: runtime built? weights present? synthetic only?)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from codecarena import readiness as module
from codecarena.registry.catalog import FAMILIES, parse_declaration
from codecarena.registry.entries import Runtime, entry_for_family, load_entry
from codecarena.readiness import INSTALL, readiness

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No runtime built, no model file cached, no mirror: a machine codecarena was just installed on."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODECARENA_MODELS", raising=False)


def _build_runtime(tmp_path: Path, registry_id: str) -> None:
    folder = tmp_path / "data" / "codecarena" / "envs" / registry_id
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("")
    (folder / "runtime.json").write_text("{}")


def _place_model_files(folder: Path, family: str) -> None:
    checkpoint = entry_for_family(family).checkpoint
    assert checkpoint is not None
    for pin in checkpoint.files:
        path = folder / checkpoint.mirror_dir / pin.name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.truncate(pin.bytes or 1)  # sparse: the size is what is looked at, the sha256 when it loads


def test_a_dsp_codec_of_the_harness_runs_now() -> None:
    for family in ("opus", "codec2", "pcm"):
        assert readiness(FAMILIES[family]) == module.Readiness("none", (), ())


def test_a_neural_family_needs_its_runtime_then_its_weights(tmp_path: Path) -> None:
    state = readiness(FAMILIES["encodec"])
    assert (state.runs, state.commands) == ("", ("codecarena env create encodec", "codecarena fetch encodec"))
    assert state.problems[0] == "its isolated runtime is not built"
    cache = tmp_path / "cache" / "codecarena" / "models"
    assert state.problems[1].startswith(f"model files not in {cache / 'encodec'}")
    _build_runtime(tmp_path, "encodec")
    state = readiness(FAMILIES["encodec"])
    assert (state.runs, state.commands) == ("synthetic", ("codecarena fetch encodec",))
    _place_model_files(tmp_path / "cache" / "codecarena" / "models", "encodec")
    assert readiness(FAMILIES["encodec"]) == module.Readiness("real", (), ())


def test_model_files_are_looked_for_in_the_mirror_when_one_is_set(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODECARENA_MODELS", str(tmp_path / "mirror"))
    state = readiness(FAMILIES["lyra"])
    assert state.runs == "" and state.problems[0].startswith(f"model files not in {tmp_path / 'mirror' / 'lyra_v2'}")
    # fetch fills the cache, which a run with a mirror never reads: say so before fetch.
    assert state.commands == ("unset CODECARENA_MODELS (or copy the files into that mirror)", "codecarena fetch lyra")
    _place_model_files(tmp_path / "mirror", "lyra")
    assert readiness(FAMILIES["lyra"]) == module.Readiness("real", (), ())


def test_a_family_the_registry_does_not_pin_runs_synthetic_weights_only(tmp_path: Path) -> None:
    _build_runtime(tmp_path, "fish_s2_codec")
    state = readiness(FAMILIES["fish_dac"])
    assert (state.runs, state.synthetic_only, state.commands) == ("synthetic", True, ())
    assert "registry entry fish_s2_codec does not pin its weights completely" in state.problems[0]


def test_harness_packages_and_binaries_off_their_pins_name_the_install_script(monkeypatch: pytest.MonkeyPatch) -> None:
    opus = dataclasses.replace(load_entry("opus"), runtime=Runtime("3.11", "main", "", ("av==0.0.1",)))
    monkeypatch.setattr(module, "entry_for_family", lambda family: opus)
    state = readiness(FAMILIES["opus"])
    assert state.runs == "" and state.commands == (INSTALL,)
    assert state.problems[0].startswith("packages not installed at their pins: av==0.0.1 (found ")
    if shutil.which("dpkg-query") is None:
        pytest.skip("no dpkg here: the command-line families' binaries cannot be pinned")
    g722 = dataclasses.replace(load_entry("g722"), source_debian_packages=("ffmpeg=0.0-fake",))
    monkeypatch.setattr(module, "entry_for_family", lambda family: g722)
    state = readiness(FAMILIES["g722"])
    assert state.runs == "" and state.commands == (INSTALL,) and "the registry pins 0.0-fake" in state.problems[0]


def test_a_user_codec_whose_source_changed_runs_only_when_added_again(tmp_path: Path) -> None:
    from codecarena.registry import user_units

    source = tmp_path / "adpcm.py"
    shutil.copy(REPO / "examples" / "adpcm" / "adpcm.py", source)
    declaration = (REPO / "examples" / "adpcm" / "adpcm.toml").read_text(encoding="utf-8")
    family = dataclasses.replace(parse_declaration(declaration, "adpcm.toml", ""), origin="user")
    user_units.save(user_units.UserUnit(family.name, user_units.now(), declaration, user_units.source_of(source),
                                        (), ""), {})
    assert readiness(family) == module.Readiness("none", (), ())
    source.write_text(source.read_text() + "\n# edited\n")
    state = readiness(family)
    assert state.runs == "" and state.problems == (f"its source {source} changed since it was added",)
    assert state.commands == (f"codecarena codec add {family.name} --module {source}",)
    source.unlink()
    state = readiness(family)
    assert state.runs == "" and state.problems == (f"{source}: the source of this user codec is gone",)


def test_codecs_says_for_every_family_whether_it_runs_here(capsys: pytest.CaptureFixture[str]) -> None:
    from codecarena import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["codecs"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.count("\n  here: ") == len(FAMILIES)
    assert "  here: does not run yet: its isolated runtime is not built; model files not in " in out
    assert "  to run it: codecarena env create dac, then codecarena fetch dac\n" in out
    assert "to run it: codecarena env create xcodec2, then codecarena run --weights synthetic" in out
    assert "\nruns here now: opus, codec2, pcm, g722" in out
