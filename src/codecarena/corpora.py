"""Corpus readers for `--input`: LibriSpeech, AISHELL-1, Kaldi data directories and plain folders,
with the subset a run takes (`--limit-per-language`, `--limit`, `--shard`) applied to the sorted
listing before any audio is opened (to a loaded set for plain folders and the smoke set).

Every reader produces the same EvalSet the pipeline already takes; its identity (manifest hash)
covers the selected utterances' ids, audio sha256 and transcripts, so two shards or two limits are
two different sets and can never resume into each other's run directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from codecarena.choices import CORPUS_LAYOUTS
from codecarena.datasets import DatasetError, EvalSet, Utterance
from codecarena.files import sha256_file
from codecarena.input_sets import AUDIO_SUFFIXES, listing, load_input_dir, load_input_file, probe_audio
from codecarena.plural import counted
from codecarena.rundir import unsafe_id_reason
from codecarena.text import printable

# AISHELL-1 utterance ids: BAC009 + speaker S0002 + W + 4-digit index.
_AISHELL_ID = re.compile(r"^[A-Z]{3}\d{3}(S\d{4})W\d{4}$")


@dataclass(frozen=True)
class Shard:
    index: int
    count: int


def parse_shard(text: str) -> Shard:
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 0 <= int(match[1]) < int(match[2]):
        raise ValueError(f"--shard {text!r}: expected K/N with 0 <= K < N, e.g. 0/4")
    return Shard(int(match[1]), int(match[2]))


@dataclass(frozen=True)
class Subset:
    """The utterances of a set a run takes, chosen in this order: the first `per_language` of each
    language (in the set's order; an utterance that declares no language counts as `language`, the
    one --language gives it), then the first `limit` of those, then every `shard.count`-th of those
    from the `shard.index`-th. Shards of one subset are disjoint and together make it up."""
    limit: int | None = None
    shard: Shard | None = None
    per_language: int | None = None
    language: str = ""

    def choose(self, entries: list[tuple[str, str]]) -> list[str]:
        """The ids chosen of (id, language) entries in the set's order, in that order."""
        if self.per_language is not None and self.per_language < 1:
            raise ValueError(f"--limit-per-language {self.per_language}: expected at least 1")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit {self.limit}: expected at least 1")
        chosen = [utt for utt, _ in entries]
        if self.per_language is not None:
            taken: dict[str, int] = {}
            chosen = []
            for utt, language in entries:
                key = language or self.language
                if taken.get(key, 0) < self.per_language:
                    taken[key] = taken.get(key, 0) + 1
                    chosen.append(utt)
        chosen = chosen[:self.limit] if self.limit is not None else chosen
        if self.shard is not None:
            chosen = [u for i, u in enumerate(chosen) if i % self.shard.count == self.shard.index]
        if not chosen:
            raise ValueError("the --limit/--shard selection leaves no utterances")
        return chosen

    @property
    def suffix(self) -> str:
        """What the set's name carries of the subset, as `[limit_per_language=2,limit=3,shard=0/2]`."""
        parts = ([f"limit_per_language={self.per_language}"] if self.per_language is not None else []) + \
            ([f"limit={self.limit}"] if self.limit is not None else []) + \
            ([f"shard={self.shard.index}/{self.shard.count}"] if self.shard else [])
        return f"[{','.join(parts)}]" if parts else ""


def select(evalset: EvalSet, subset: Subset) -> EvalSet:
    """The subset of an already loaded set (the smoke set, a plain folder, one file)."""
    if not subset.suffix:
        return evalset
    keep = set(subset.choose([(u.id, u.language) for u in evalset.utterances]))
    utterances = tuple(u for u in evalset.utterances if u.id in keep)
    digest = hashlib.sha256(f"{evalset.manifest_sha256}:{subset.suffix}".encode()).hexdigest()
    return dataclasses.replace(evalset, name=evalset.name + subset.suffix, utterances=utterances,
                               manifest_sha256=digest)


@dataclass(frozen=True)
class _Entry:
    id: str
    path: Path
    transcript: str | None
    speaker: str
    language: str


def _safe_ids(ids: list[str], where: Path) -> list[str]:
    """Ids become file names in the run directory: refuse, with the file they came from, any that is not safe."""
    for utt in ids:
        if reason := unsafe_id_reason(utt):
            raise DatasetError(f"{printable(str(where))}: utterance id {reason}")
    return ids


def _build(name: str, source: str, entries: list[_Entry], skipped: list[tuple[str, str]] | None = None) -> EvalSet:
    """The set of `entries`; `skipped` is what the folder holds that was left out unread (hidden files, links
    to nothing), listed like a plain folder's."""
    utterances = []
    for e in entries:
        rate, frames = probe_audio(e.path)
        utterances.append(Utterance(id=e.id, path=e.path.resolve(), language=e.language, transcript=e.transcript,
                                    critical=(), sample_rate=rate, num_samples=frames, sha256=sha256_file(e.path),
                                    speaker=e.speaker, license=""))
    listing = [{"id": u.id, "sha256": u.sha256, "transcript": u.transcript, "speaker": u.speaker,
                "language": u.language} for u in utterances]
    canonical = json.dumps(listing, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return EvalSet(name, tuple(utterances), hashlib.sha256(canonical).hexdigest(), source, tuple(skipped or ()))


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{printable(str(path))}: unreadable ({exc})") from None


def _table(path: Path, required: bool = True) -> dict[str, str]:
    """Kaldi-style `key value...` lines; a duplicate key is an error, not a silent overwrite."""
    if not path.is_file():
        if required:
            raise DatasetError(f"{printable(str(path))}: missing (a Kaldi data directory needs wav.scp and text)")
        return {}
    table: dict[str, str] = {}
    for number, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        key, _, value = line.strip().partition(" ")
        if key in table:
            raise DatasetError(f"{printable(str(path))}:{number}: key {key!r} appears twice")
        table[key] = value.strip()
    return table


def _audio_by_stem(root: Path) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """Audio files by their stem, the utterance id of LibriSpeech and AISHELL (ids must be unique and
    safe), and what the folder holds that is left out unread."""
    files, left_out = listing(root, recursive=True)
    by_stem: dict[str, Path] = {}
    for path in (p for p in files if p.suffix.lower() in AUDIO_SUFFIXES):
        if path.stem in by_stem:
            raise DatasetError(f"{printable(str(path))}: id {path.stem!r} already used by "
                               f"{printable(str(by_stem[path.stem]))}")
        _safe_ids([path.stem], path)
        by_stem[path.stem] = path
    return by_stem, left_out


def load_kaldi(root: Path, subset: Subset) -> EvalSet:
    """wav.scp (`utt path`; relative paths from the data directory), text, and optional utt2spk.
    Pipe entries (`cmd |`) are refused: codecarena hashes the audio it scores, so it needs a file."""
    scp, text, spk = _table(root / "wav.scp"), _table(root / "text"), _table(root / "utt2spk", required=False)
    _safe_ids(list(scp), root / "wav.scp")
    for utt, value in scp.items():
        if value.endswith("|") or " " in value:
            raise DatasetError(f"{printable(str(root / 'wav.scp'))}: {utt}: {value!r} is a command or has extra "
                               "fields; only plain file paths are supported")
    no_text = sorted(set(scp) - set(text))
    if no_text:
        raise DatasetError(f"{printable(str(root / 'text'))}: no transcript for {counted(len(no_text), 'utterance')} "
                           f"of wav.scp, e.g. {no_text[0]}")
    entries = []
    for utt in subset.choose([(utt, "") for utt in sorted(scp)]):
        path = Path(scp[utt]) if Path(scp[utt]).is_absolute() else root / scp[utt]
        if not path.is_file():
            raise DatasetError(f"{printable(str(root / 'wav.scp'))}: {utt}: {printable(str(path))} does not exist")
        entries.append(_Entry(utt, path, text[utt], spk.get(utt, ""), ""))
    return _build(f"kaldi:{root.name}{subset.suffix}", f"kaldi {root}", entries)


def load_librispeech(root: Path, subset: Subset) -> EvalSet:
    """`SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt` beside `SPEAKER-CHAPTER-NNNN.flac`; English."""
    by_stem, left_out = _audio_by_stem(root)
    transcripts: dict[str, str] = {}
    for trans in sorted(root.rglob("*.trans.txt")):
        for number, line in enumerate(_read_lines(trans), 1):
            utt, _, words = line.strip().partition(" ")
            if utt in transcripts:
                raise DatasetError(f"{printable(str(trans))}:{number}: a second transcript for {utt!r}")
            if utt:
                transcripts[utt] = words.strip()
    if not transcripts:
        raise DatasetError(f"{printable(str(root))}: no *.trans.txt files (not a LibriSpeech-style directory)")
    entries = [_Entry(utt, by_stem[utt], transcripts.get(utt), utt.split("-")[0], "en")
               for utt in subset.choose([(utt, "en") for utt in sorted(by_stem)])]
    return _build(f"librispeech:{root.name}{subset.suffix}", f"librispeech {root}", entries, left_out)


def _aishell_transcripts(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*transcript*.txt") if p.is_file())


def load_aishell(root: Path, subset: Subset) -> EvalSet:
    """AISHELL-1: `wav/<split>/<speaker>/<id>.wav` and a transcript file of `<id> <words...>` lines.
    Transcripts are word-segmented with spaces, which Mandarin text does not have: they are joined.
    Utterances without a transcript line (AISHELL-1 has a few) are kept, transcript unknown."""
    files = _aishell_transcripts(root)
    if not files:
        raise DatasetError(f"{printable(str(root))}: no *transcript*.txt file (not an AISHELL-style directory)")
    transcripts: dict[str, str] = {}
    for trans in files:
        for number, line in enumerate(_read_lines(trans), 1):
            utt, _, words = line.strip().partition(" ")
            if utt in transcripts:
                raise DatasetError(f"{printable(str(trans))}:{number}: a second transcript for {utt!r}")
            if utt:
                transcripts[utt] = "".join(words.split())
    by_stem, left_out = _audio_by_stem(root)
    if not by_stem:
        raise DatasetError(f"{printable(str(root))}: no .wav or .flac files found")
    entries = []
    for utt in subset.choose([(utt, "zh") for utt in sorted(by_stem)]):
        match = _AISHELL_ID.match(utt)
        speaker = match[1] if match else by_stem[utt].parent.name
        entries.append(_Entry(utt, by_stem[utt], transcripts.get(utt), speaker, "zh"))
    return _build(f"aishell:{root.name}{subset.suffix}", f"aishell {root}", entries, left_out)


def detect_layout(root: Path) -> str:
    if (root / "wav.scp").is_file():
        return "kaldi"
    if (root / "manifest.json").is_file():
        return "plain"
    if next(root.rglob("*.trans.txt"), None) is not None:
        return "librispeech"
    if _aishell_transcripts(root):
        return "aishell"
    return "plain"


def load_corpus(path: Path, layout: str = "auto", limit: int | None = None, shard: Shard | None = None,
                channels: str = "mix", language_from_folders: bool = False, per_language: int | None = None,
                language: str = "") -> EvalSet:
    """A corpus in its layout, or one audio file, and of it the `Subset` of `per_language`, `limit` and
    `shard` (`language`: what an utterance that declares none counts as there); `channels` and
    `language_from_folders` apply to plain folders (the corpora's layouts are mono and declare their
    language)."""
    subset = Subset(limit, shard, per_language, language)
    root = Path(path).expanduser().resolve()
    if layout not in CORPUS_LAYOUTS:
        raise DatasetError(f"unknown corpus layout {layout!r}; expected one of {CORPUS_LAYOUTS}")
    if root.is_file():
        if layout not in ("auto", "plain") or language_from_folders:
            option = f"--corpus {layout}" if layout not in ("auto", "plain") else "--language-from-folders"
            raise DatasetError(f"{printable(str(root))}: a single file; {option} reads a folder")
        return select(load_input_file(root, channels), subset)
    if not root.is_dir():
        what = "is neither a file nor a folder" if root.exists() else "does not exist"
        raise DatasetError(f"{printable(str(root))}: {what} (--input takes an audio file or a folder of them)")
    chosen = detect_layout(root) if layout == "auto" else layout
    if language_from_folders and chosen != "plain":
        raise DatasetError(f"{printable(str(root))}: --language-from-folders reads plain folders, and this is a "
                           f"{chosen} corpus, which declares its own languages (--corpus plain reads it as plain)")
    try:
        if chosen == "kaldi":
            return load_kaldi(root, subset)
        if chosen == "librispeech":
            return load_librispeech(root, subset)
        if chosen == "aishell":
            return load_aishell(root, subset)
        # A plain folder (optionally with manifest.json) is small: load it, then select.
        return select(load_input_dir(root, channels, language_from_folders=language_from_folders), subset)
    except ValueError as exc:  # a --limit/--shard selection that leaves nothing
        raise DatasetError(str(exc)) from None
