"""Evaluation sets of the user's own audio: an input folder (`run --input DIR`, `score`, the corpora of
`--corpus`) or one file (`run --input FILE`).

Every file is fully decoded and checked first (`audio_input.check_audio_file`), so a benchmark result can
always be traced to exact bytes; what is left out (hidden files, links to nothing, files that are not
audio, damaged audio) is listed with why and what to do, never scored. Transcripts and languages come
from LibriSpeech-style `*.trans.txt` files and a `manifest.json` (which wins), languages also from the
folder names (`--language-from-folders`); a multichannel file gives one utterance per `--channels`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from codecarena.audio_input import AudioFacts, AudioInputError, cancelled_downmix, check_audio_file, mislabelled
from codecarena.choices import CHANNEL_CHOICES
from codecarena.datasets import DatasetError, EvalSet, Utterance
from codecarena.files import parse_json, sha256_file
from codecarena.languages import language_problem
from codecarena.rundir import unsafe_id_reason
from codecarena.text import printable

AUDIO_SUFFIXES = (".wav", ".flac")
# Text beside the audio of an input folder (transcripts, manifests, notes): read as metadata where the
# folder's conventions say so, never probed as audio.
METADATA_SUFFIXES = (".txt", ".json", ".jsonl", ".csv", ".tsv", ".md", ".lab", ".textgrid", ".scp", ".yaml",
                     ".yml", ".ini", ".log")


def probe_audio(path: Path) -> tuple[int, int]:
    """(sample rate, frames) of a mono file that passed the shared input validation (`audio_input`), so
    bad files fail here, not mid-benchmark."""
    try:
        facts = check_audio_file(path)
    except AudioInputError as exc:
        raise DatasetError(str(exc)) from None
    if facts.channels != 1:
        raise DatasetError(f"{printable(str(path))}: {facts.channels} channels; only mono audio is supported")
    return facts.sample_rate, facts.num_samples



# --------------------------------------------------------------------------------------- input dir


def _input_metadata(root: Path, audio: list[Path]) -> dict[Path, dict[str, Any]]:
    """Per-file metadata from LibriSpeech-style *.trans.txt files, then manifest.json (which wins)."""
    meta: dict[Path, dict[str, Any]] = {p: {} for p in audio}
    by_dir_stem = {(p.parent, p.stem): p for p in audio}

    # LibriSpeech convention: a trans.txt covers the audio files in its own folder, keyed by stem.
    for trans in sorted(root.rglob("*.trans.txt")):
        try:
            lines = trans.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise DatasetError(f"{printable(str(trans))}: unreadable ({e})") from e
        for number, line in enumerate(lines, 1):
            utt_id, _, text = line.strip().partition(" ")
            if utt_id and (p := by_dir_stem.get((trans.parent, utt_id))):
                if "transcript" in meta[p]:
                    raise DatasetError(f"{printable(str(trans))}:{number}: a second transcript for {utt_id!r}")
                meta[p]["transcript"] = text.strip()

    manifest_path = root / "manifest.json"
    if manifest_path.is_file():
        where = printable(str(manifest_path))
        try:
            items = parse_json(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DatasetError(f"{where}: not valid JSON ({e})") from e
        if not isinstance(items, list):
            raise DatasetError(f"{where}: expected a list of objects with 'file'")
        listed: dict[Path, int] = {}
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("file"), str):
                raise DatasetError(f"{where}: entry {i}: expected an object with a 'file' string")
            p = root / item["file"]
            # Strict: a typo would otherwise silently drop a transcript.
            if p not in meta:
                raise DatasetError(f"{where}: entry {i}: {item['file']!r} is not an audio file in "
                                   f"{printable(str(root))}")
            # Two entries for one file would silently keep the last one's transcript.
            if p in listed:
                raise DatasetError(f"{where}: entry {i}: {item['file']!r} is already listed by entry {listed[p]}")
            listed[p] = i
            for key in ("transcript", "language", "id", "speaker", "license"):
                if key in item:
                    if not isinstance(item[key], str):
                        raise DatasetError(f"{where}: entry {i}: {key!r} must be a string")
                    # "" declares no language; any other must name one.
                    if key == "language" and item[key] and language_problem(item[key]):
                        raise DatasetError(f"{where}: entry {i}: language {printable(language_problem(item[key]))}; "
                                           "leave it out for a language no recogniser here knows")
                    meta[p][key] = item[key]
            if "critical" in item:
                crit = item["critical"]
                if not isinstance(crit, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("kind"), str) and isinstance(c.get("text"), str)
                    for c in crit
                ):
                    raise DatasetError(f"{where}: entry {i}: 'critical' must be a list of {{kind, text}}")
                meta[p]["critical"] = tuple((c["kind"], c["text"]) for c in crit)
    return meta


def _channel_views(facts: AudioFacts, policy: str) -> list[tuple[str, str]]:
    """(id suffix, channel) of each utterance a file gives under --channels `policy`."""
    if facts.channels == 1:
        return [("", "")]
    if policy == "each":
        return [(f"__ch{k + 1}", f"ch{k + 1}") for k in range(facts.channels)]
    return [("", policy)]


_HIDDEN = "hidden (its name starts with '.'), not read: rename it without the dot to include it"


def listing(root: Path, recursive: bool) -> tuple[list[Path], list[tuple[str, str]]]:
    """The files under `root` that may be audio, sorted by their path in it, and what is left out
    unread, with why and what to do: hidden files and folders (editor and OS droppings such as macOS
    "._x.wav", or a .git), links to nothing, links to folders (not followed), what is not a regular
    file (reading a pipe would block) and folders that cannot be listed. Text files are metadata."""
    files: list[Path] = []
    left_out: list[tuple[str, str]] = []

    def shown(path: Path) -> str:
        return printable(path.relative_to(root).as_posix())

    def unlistable(exc: OSError) -> None:
        left_out.append((shown(Path(str(exc.filename))) + "/", f"a folder that cannot be listed ({exc.strerror})"))

    for folder, folders, names in os.walk(root, onerror=unlistable):
        here = Path(folder)
        kept = []
        for name in sorted(folders) if recursive else ():
            if name.startswith("."):
                left_out.append((shown(here / name) + "/", f"a folder {_HIDDEN}"))
            elif (here / name).is_symlink():
                left_out.append((shown(here / name) + "/", "a link to a folder, not followed: pass that folder as "
                                                           "--input or copy its files here"))
            else:
                kept.append(name)
        folders[:] = kept
        for name in names:
            path = here / name
            if name.startswith("."):
                left_out.append((shown(path), f"a file {_HIDDEN}"))
            elif not path.exists():
                left_out.append((shown(path), f"a link to {printable(os.readlink(path))!r}, which does not exist: "
                                              "fix or remove the link"))
            elif not path.is_file():
                left_out.append((shown(path), "not a regular file (a pipe, socket or device), not read"))
            elif path.suffix.lower() not in METADATA_SUFFIXES:
                files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix()), left_out


def _nothing_to_use(root: Path, skipped: list[tuple[str, str]]) -> DatasetError:
    shown = f" ({len(skipped)} skipped, e.g. {skipped[0][0]}: {skipped[0][1]})" if skipped else ""
    return DatasetError(f"{printable(str(root))}: no audio files found{shown}")


def _folder_languages(root: Path, meta: dict[Path, dict[str, Any]]) -> None:
    """--language-from-folders: a file's language is the name of the first folder of its path under
    `root` (en/a.wav, zh/day1/b.wav); a file at the top keeps what manifest.json declares. The option
    says the folders are languages, so a first folder that names no language (languages.py), or a
    manifest language its folder contradicts, is an error rather than a guess."""
    for p, m in meta.items():
        parts = p.relative_to(root).parts
        if len(parts) < 2:
            continue
        folder = parts[0]
        problem = language_problem(folder)
        if problem:
            raise DatasetError(f"{printable(str(root / folder))}/: {printable(problem)}, and --language-from-folders "
                               "reads each first folder as one: rename it, move its files or leave the option out")
        if m.get("language", folder) != folder:
            raise DatasetError(f"{printable(str(root / 'manifest.json'))}: {printable('/'.join(parts))} is declared "
                               f"{m['language']!r}, but --language-from-folders reads {folder!r} from its folder")
        m["language"] = folder


def load_input_dir(path: Path, channels: str = "mix", recursive: bool = True,
                   language_from_folders: bool = False) -> EvalSet:
    """Every audio file under `path` (in its subfolders too unless `recursive` is False; sorted),
    recognised by content and checked. What cannot be used is listed in `skipped` with why and what
    to do, and the rest is read: files that are not audio or are refused audio, hidden files and
    folders, links to nothing, and files whose name is no safe utterance id and that manifest.json
    gives none (the id is the name, never a rewrite of it that two files could share). A
    multichannel file is downmixed (`mix`, the mean of its channels; a file whose channels cancel
    is skipped), one channel is taken (`left`, `right`: the first two), or each channel is an
    utterance (`each`, ids `<id>__ch<k>`). With `language_from_folders`, the first folder of each
    file's path names its language (`_folder_languages`)."""
    if channels not in CHANNEL_CHOICES:
        raise DatasetError(f"--channels {channels}: expected one of {', '.join(CHANNEL_CHOICES)}")
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DatasetError(f"{printable(str(root))}: input folder does not exist or is not a directory")
    candidates, skipped = listing(root, recursive)
    facts_of: dict[Path, AudioFacts] = {}
    for p in candidates:
        try:
            facts_of[p] = check_audio_file(p)
        except AudioInputError as exc:
            # One damaged or foreign file does not stop a folder: it is left out, and the console
            # and run.json list it with its reason, so nothing changes what is benchmarked unsaid.
            skipped.append((printable(p.relative_to(root).as_posix()),
                            str(exc).removeprefix(f"{printable(str(p))}: ")))
    if not facts_of:
        raise _nothing_to_use(root, sorted(skipped))
    meta = _input_metadata(root, list(facts_of))
    if language_from_folders:
        _folder_languages(root, meta)
    evalset = _input_set(root, facts_of, meta, channels, skipped, f"input:{root.name}", f"input {root}")
    if not evalset.utterances:
        raise _nothing_to_use(root, list(evalset.skipped))
    return evalset


def load_input_file(path: Path, channels: str = "mix") -> EvalSet:
    """One audio file as a set of one utterance (`run --input FILE`), its id the file's name without
    its suffix. A file alone declares no language, speaker or transcript (`--language` gives it a
    language; a folder with a manifest.json gives all three); what a folder would skip is an error."""
    if channels not in CHANNEL_CHOICES:
        raise DatasetError(f"--channels {channels}: expected one of {', '.join(CHANNEL_CHOICES)}")
    file = Path(path).expanduser().resolve()
    try:
        facts = check_audio_file(file)
    except AudioInputError as exc:
        raise DatasetError(str(exc)) from None
    evalset = _input_set(file.parent, {file: facts}, {file: {}}, channels, [], f"input:{file.name}", f"input {file}")
    if not evalset.utterances:
        raise DatasetError(f"{printable(str(file))}: {evalset.skipped[0][1]}")
    return evalset


def _input_set(root: Path, facts_of: dict[Path, AudioFacts], meta: dict[Path, dict[str, Any]], channels: str,
               skipped: list[tuple[str, str]], name: str, source: str) -> EvalSet:
    """The utterances of the audio files in `facts_of` (paths under `root`, with their metadata), and
    what is `skipped`; the caller refuses a set left with no utterance."""
    utts: list[Utterance] = []
    seen: dict[str, Path] = {}
    for p, facts in facts_of.items():
        m = meta[p]
        shown = printable(p.relative_to(root).as_posix())
        if facts.channels > 2 and channels in ("left", "right"):
            raise DatasetError(f"{printable(str(p))}: {facts.channels} channels; --channels {channels} names one of "
                               "two: use --channels mix or each")
        if channels == "mix" and (why := cancelled_downmix(facts)):
            skipped.append((shown, why))
            continue
        base_id = m.get("id") or p.relative_to(root).with_suffix("").as_posix().replace("/", "__")
        views = [(base_id + suffix, channel) for suffix, channel in _channel_views(facts, channels)]
        if reason := next((r for utt_id, _ in views if (r := unsafe_id_reason(utt_id))), ""):
            if m.get("id"):  # the manifest's own statement is wrong: that is the manifest's error
                raise DatasetError(f"{printable(str(root / 'manifest.json'))} (entry for {shown}): utterance id "
                                   f"{reason}; give it a safe 'id'")
            skipped.append((shown, f"utterance id {reason}; rename the file or give it an 'id' in manifest.json"))
            continue
        lossless_mono = facts.lossless_pcm and facts.channels == 1
        note = mislabelled(p, facts)
        source_format = "" if lossless_mono and note is None else facts.described() + (f"; {note}" if note else "")
        digest = sha256_file(p)
        for utt_id, channel in views:
            if utt_id in seen:
                raise DatasetError(f"{printable(str(p))}: id {utt_id!r} already used by {printable(str(seen[utt_id]))}")
            seen[utt_id] = p
            utts.append(
                Utterance(
                    id=utt_id,
                    path=p.resolve(),
                    language=m.get("language", ""),
                    transcript=m.get("transcript"),
                    critical=m.get("critical", ()),
                    sample_rate=facts.sample_rate,
                    num_samples=facts.num_samples,
                    sha256=digest,
                    speaker=m.get("speaker", ""),
                    license=m.get("license", ""),
                    source_format=source_format,
                    channel=channel,
                    reader=facts.reader,
                )
            )
    skipped.sort()
    # Identity of an input set = which audio bytes, under which ids, with which transcripts.
    # The channel a multichannel file gives is part of it (left and right are different audio).
    listing = [{"id": u.id, "sha256": u.sha256, "transcript": u.transcript, **({"channel": u.channel} if u.channel else {})}
               for u in utts]
    canonical = json.dumps(listing, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return EvalSet(name, tuple(utts), hashlib.sha256(canonical).hexdigest(), source, tuple(skipped))
