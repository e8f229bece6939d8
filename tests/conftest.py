from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# CI lays shared/ beside the clone; CODECARENA_DATA overrides.
MIRROR = Path(os.environ.get("CODECARENA_DATA", REPO.parent / "shared" / "data" / "speech"))
# The two shortest English clips of the smoke set (about 1.5 s each) keep pipeline tests quick.
SHORT_CLIPS = ("en_ljspeech_LJ002-0020.wav", "en_ljspeech_LJ002-0035.wav")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="also run tests marked slow (CI=true does too)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow") or os.environ.get("CI", "").lower() == "true":
        return
    skip = pytest.mark.skip(reason="slow: run with --slow or CI=true")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def registry_fork(tmp_path: Path, registry_id: str) -> Path:
    """A registry fork (`$CODECARENA_REGISTRY` = the returned file's grandparent) holding a copy of one
    entry's TOML, for a test to edit, and its runtime lock beside it."""
    from codecarena.registry.entries import entry_file, load_entry, lock_file

    families = tmp_path / "registry" / "families"
    families.mkdir(parents=True, exist_ok=True)
    text = entry_file(registry_id).read_text(encoding="utf-8")
    entry = load_entry(registry_id)
    if entry.runtime.lock:
        (families / f"{registry_id}.lock.txt").write_text(lock_file(entry).read_text(encoding="utf-8"))
        text = text.replace(f'lock = "{entry.runtime.lock}"', f'lock = "{registry_id}.lock.txt"')
    toml = families / f"{registry_id}.toml"
    toml.write_text(text)
    return toml


def need_mirror() -> Path:
    if not (MIRROR / "manifest.json").is_file():
        pytest.skip(f"smoke-set mirror not found at {MIRROR}; set CODECARENA_DATA")
    return MIRROR


@pytest.fixture
def speech_dir(tmp_path: Path) -> Path:
    """A folder of real 16 kHz speech under names codecarena has never seen."""
    mirror = need_mirror()
    folder = tmp_path / "speech"
    folder.mkdir()
    for i, name in enumerate(SHORT_CLIPS):
        shutil.copy(mirror / name, folder / f"clip{i}.wav")
    return folder


def rows_of(run_dir: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]


def runtime_python(env: dict[str, str], family: str) -> str:
    """The interpreter of a family's runtime built under `runtime_env`'s data home."""
    return str(Path(env["XDG_DATA_HOME"]) / "codecarena" / "envs" / family / "bin" / "python")


@pytest.fixture(scope="session")
def runtime_env(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """`runtime_env(family)`: a hermetic data and cache home, shared by the whole session, with that
    family's runtime built from its lock file once (and its synthetic checkpoints cached once)."""
    home = tmp_path_factory.mktemp("runtimes")
    env = {"XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
           # The synthetic-weight generators inside the workers read the smoke set.
           "CODECARENA_DATA": str(MIRROR)}
    built: set[str] = set()

    def build(family: str) -> dict[str, str]:
        need_mirror()
        if family not in built:
            created = codecarena("env", "create", family, env=env)
            assert created.returncode == 0, created.stdout + created.stderr
            built.add(family)
        return env

    return build


def synthetic_run(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, name: str, codecs: tuple[str, ...],
                  clips: tuple[str, ...] = SHORT_CLIPS, weights: str = "synthetic", metrics: str = "none") -> Path:
    """A family test's run: `codecs` on copies of smoke-set `clips`, in a runtime built by `runtime_env`."""
    folder = tmp_path_factory.mktemp("in")
    for clip in clips:
        shutil.copy(need_mirror() / clip, folder / clip)
    out = tmp_path_factory.mktemp(name) / "run"
    result = codecarena("run", "--input", folder, "--weights", weights, *(a for c in codecs for a in ("--codec", c)),
                        "--metrics", metrics, "--out", out, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def codecarena(*args: str | Path, check: bool = False, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a fresh process, as a user would."""
    result = subprocess.run([sys.executable, "-m", "codecarena", *map(str, args)], capture_output=True,
                            text=True, env={**os.environ, **(env or {}), "COLUMNS": "200"}, cwd=cwd,
                            timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"codecarena {args} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result
