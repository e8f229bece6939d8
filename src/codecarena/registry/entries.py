"""Registry entries: one TOML file per codec system, parsed strictly: a built-in family's in its unit
(`codecs/<name>/registry.toml`), every other census system's in `registry/families/<id>.toml`.

The schema (v1) is documented in `docs/registry.md`. This module checks structure, types and the
format of every value (unknown keys are rejected; a `commit` is 40 hex digits, a `release` is an exact
version, a `sha256` is 64 hex digits). Whether an entry's pins are complete *for its status* is the
auditor's call (`registry_rules.py`: commit_prefix, release_note and `partial = true` are parsed here
but refused there unless the status is `unpinned`), so that an entry built in code is judged by the
same rules.

Long because it is the strict parser of the registry entry format (schema v1, docs/registry.md):
every table and key is checked where it is read.
"""

from __future__ import annotations

import functools

import os
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from codecarena.registry.catalog import BUILTIN, FAMILIES  # data only: imports no codec dependency
from codecarena.registry.claims import Claim, parse_claims
from codecarena.registry.strict import RegistryError, Table

SCHEMA_VERSION = 1

ROLES = ("communication_anchor", "deployment_teacher", "frontier_teacher", "low_bit_teacher")
KINDS = ("codec", "control")
LADDER = ("registered", "installed", "probed", "smoked", "scored", "streaming_verified")
SIDE_STATES = ("platform_deferred", "gated", "deferred")
STATUSES = LADDER + SIDE_STATES + ("unpinned",)
# Statuses whose `status_reason` is required.
NEEDS_REASON = SIDE_STATES + ("unpinned",)
ENVIRONMENTS = ("main", "isolated")
SIDES = ("encoder", "decoder", "both")

HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")
# An exact release: digits and dots (at least one dot), optionally a pre/post/dev suffix.
# Ranges (">=1.0"), wildcards ("1.*"), "latest" and branch names do not match.
EXACT_RELEASE = re.compile(r"v?\d+(?:\.\d+)+(?:[-.]?(?:a|b|rc|post|dev)\d*)?")
EXACT_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._-]+\])?==" + EXACT_RELEASE.pattern
                       + r"(?:\+[A-Za-z0-9.]+)?")
PYTHON_VERSION = re.compile(r"\d+\.\d+")
# A Debian package at an exact version, as apt spells it: name=[epoch:]upstream[-revision].
DEBIAN_PIN = re.compile(r"([a-z0-9][a-z0-9+.-]+)=((?:\d+:)?\d[A-Za-z0-9.+~]*(?:-[A-Za-z0-9.+~]+)?)")


@dataclass(frozen=True)
class CheckpointFile:
    name: str
    url: str
    bytes: int  # 0: the size was never published; the sha256 alone is the file's identity
    sha256: str
    side: str  # "encoder", "decoder" or "both": what a sender or a receiver must ship
    configs: tuple[str, ...] = ()  # the codec configurations that load this file; () = every one
    # The commit the URL's revision or release tag stands for, when it is not the checkpoint's.
    revision: str = ""
    tag: str = ""  # a release tag in the URL (/releases/download/<tag>/); `revision` is its commit


@dataclass(frozen=True)
class Checkpoint:
    revision: str
    license: str
    gated: bool
    mirror_dir: str
    files: tuple[CheckpointFile, ...]

    def identity(self, registry_id: str) -> dict[str, str]:
        """What a payload records so that a decoder can refuse other weights."""
        return {"registry": registry_id, "revision": self.revision,
                **{f.name: f.sha256 for f in self.files}}

    def for_config(self, config: str) -> Checkpoint:
        """The files one codec configuration loads (DAC's three sample rates are three files)."""
        return Checkpoint(self.revision, self.license, self.gated, self.mirror_dir,
                          tuple(f for f in self.files if not f.configs or config in f.configs))

    @property
    def non_commercial(self) -> bool:
        return "NC" in self.license.replace("-", " ").upper().split()


@dataclass(frozen=True)
class PartialCheckpoint:
    """A checkpoint known only in part (a hash prefix, no URL, ...): allowed only while `unpinned`."""
    known: str
    gated: bool = False
    license: str = ""


@dataclass(frozen=True)
class Runtime:
    python: str
    environment: str  # "main" or "isolated"
    lock: str = ""  # a .txt file beside the entry's TOML (a unit's "lock.txt"); required when isolated
    packages: tuple[str, ...] = ()  # exact "name==version" pins
    # Named, documented repairs `env create` applies after installing the lock (runtime/venvs.py).
    post_install: tuple[str, ...] = ()
    # Lock pins installed without their declared dependencies: a package whose metadata asks for far
    # more than the code codecarena imports from it (fish-speech declares gradio, wandb, ...).
    no_deps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    id: str
    display_name: str
    codec_family: str
    roles: tuple[str, ...]
    status: str
    license: str
    source_repository: str
    source_commit: str  # "" when the source is pinned by release or known only in part
    checkpoint: Checkpoint | None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind: str = "codec"
    status_reason: str = ""
    # Why no catalog adapter runs this entry here, and what would (required while codec_family is "").
    adapter_blocker: str = ""
    notes: str = ""
    source_release: str = ""
    source_commit_prefix: str = ""
    source_release_note: str = ""
    source_bundled_by: str = ""
    # Debian packages (name=version) whose files a command-line family runs: its binaries and the
    # libraries holding the codec; each must be installed at exactly this version.
    source_debian_packages: tuple[str, ...] = ()
    has_source: bool = True
    partial_checkpoint: PartialCheckpoint | None = None
    rate_knobs: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False)
    runtime: Runtime = Runtime("3.11", "main")
    quoted_figures: str = ""
    # Claimed bitrates with their sources (`[[claims]]`, registry/claims.py): what the ledger checks.
    claims: tuple[Claim, ...] = field(default=(), compare=False)


def debian_versions(entry: Entry) -> dict[str, str]:
    """Package -> the exact Debian version the entry pins."""
    return dict(DEBIAN_PIN.fullmatch(pin).groups() for pin in entry.source_debian_packages)  # type: ignore[union-attr,misc]


def _checkpoint(data: Any, where: str) -> Checkpoint | PartialCheckpoint:
    table = Table(data, where)
    if table.get("partial", bool, False):
        partial = PartialCheckpoint(table.get("known", str), table.get("gated", bool, False),
                                    table.get("license", str, ""))
        if not partial.known.strip():
            raise table.fail("known", "must say what is known")
        table.done()
        return partial
    files = []
    items = table.get("files", list)
    if not items:
        raise table.fail("files", "must list at least one file")
    for i, item in enumerate(items):
        file = Table(item, f"{where}.files[{i}]")
        sha = file.get("sha256", str)
        if not HEX64.fullmatch(sha):
            raise file.fail("sha256", "must be 64 lower-case hex digits")
        side = file.get("side", str)
        if side not in SIDES:
            raise file.fail("side", "must be encoder, decoder or both")
        size = file.get("bytes", int, 0)
        if file.has("bytes") and size <= 0:
            raise file.fail("bytes", "must be positive (leave it out when the size was never published)")
        revision = file.get("revision", str, "")
        if revision and not HEX40.fullmatch(revision):
            raise file.fail("revision", "must be a full 40-hex commit")
        tag = file.get("tag", str, "")
        if tag and not revision:
            raise file.fail("tag", "needs the revision (the commit the tag stands for)")
        files.append(CheckpointFile(file.get("name", str), file.get("url", str), size, sha, side,
                                    file.strings("configs", []), revision, tag))
        file.done()
    revision = table.get("revision", str)
    if not HEX40.fullmatch(revision):
        raise table.fail("revision", "must be a full 40-hex commit")
    checkpoint = Checkpoint(revision, table.get("license", str), table.get("gated", bool),
                            table.get("mirror_dir", str), tuple(files))
    table.done()
    return checkpoint


def _source(data: Any, where: str) -> dict[str, Any]:
    table = Table(data, where)
    out: dict[str, Any] = {key: table.get(key, str, "") for key in
                           ("repository", "commit", "release", "commit_prefix", "release_note", "bundled_by")}
    table.get("repository", str)
    out["debian_packages"] = table.strings("debian_packages", ())
    table.done()
    for pin in out["debian_packages"]:
        if not DEBIAN_PIN.fullmatch(pin):
            raise table.fail("debian_packages", f"entry {pin!r} is not an exact name=version Debian pin")
    names = [DEBIAN_PIN.fullmatch(pin).group(1) for pin in out["debian_packages"]]  # type: ignore[union-attr]
    if len(set(names)) != len(names):
        raise table.fail("debian_packages", "pins a package twice")
    if out["commit"] and not HEX40.fullmatch(out["commit"]):
        raise table.fail("commit", "must be a full 40-hex commit (use commit_prefix for a prefix)")
    if out["release"] and not EXACT_RELEASE.fullmatch(out["release"]):
        raise table.fail("release", "must be an exact version such as 1.6.1 (use release_note otherwise)")
    if out["commit_prefix"] and not re.fullmatch(r"[0-9a-f]{4,39}", out["commit_prefix"]):
        raise table.fail("commit_prefix", "must be 4 to 39 lower-case hex digits")
    if out["bundled_by"] and not EXACT_PIN.fullmatch(out["bundled_by"]):
        raise table.fail("bundled_by", "must be an exact name==version pin")
    pins = [k for k in ("commit", "release") if out[k]]
    partial = [k for k in ("commit_prefix", "release_note") if out[k]]
    if len(pins) + (1 if partial else 0) != 1:
        raise table.fail("commit", "exactly one of commit, release or commit_prefix/release_note is required")
    return out


# Kept here (not imported from runtime/venvs.py) so that parsing a registry needs no runtime code.
POST_INSTALL_FIXES = ("strip_torchaudio_extensions",)


def _runtime(data: Any, where: str) -> Runtime:
    table = Table(data, where)
    runtime = Runtime(table.get("python", str), table.get("environment", str), table.get("lock", str, ""),
                      table.strings("packages", []), table.strings("post_install", []), table.strings("no_deps", []))
    table.done()
    for fix in runtime.post_install:
        if fix not in POST_INSTALL_FIXES:
            raise table.fail("post_install", f"unknown fix {fix!r} (known: {', '.join(POST_INSTALL_FIXES)})")
    if runtime.post_install and runtime.environment != "isolated":
        raise table.fail("post_install", "is only for isolated runtimes")
    if not PYTHON_VERSION.fullmatch(runtime.python):
        raise table.fail("python", "must be a version such as 3.11")
    if runtime.environment not in ENVIRONMENTS:
        raise table.fail("environment", f"must be one of {', '.join(ENVIRONMENTS)}")
    if runtime.environment == "isolated" and not runtime.lock:
        raise table.fail("lock", "is required when environment is isolated")
    if runtime.environment == "main" and runtime.lock:
        raise table.fail("lock", "is only for isolated runtimes (main is locked by the project)")
    if runtime.lock and not (runtime.lock.endswith(".txt") and "/" not in runtime.lock and "\\" not in runtime.lock
                             and not runtime.lock.startswith(".")):
        raise table.fail("lock", "must be the name of a .txt file beside the entry's TOML")
    for pin in runtime.packages:
        if not EXACT_PIN.fullmatch(pin):
            raise table.fail("packages", f"entry {pin!r} is not an exact name==version pin")
    for pin in runtime.no_deps:
        if pin not in runtime.packages:
            raise table.fail("no_deps", f"entry {pin!r} is not one of the runtime's packages")
    return runtime


def _rate_knobs(data: Any, where: str) -> dict[str, tuple[Any, ...]]:
    table = Table(data, where)
    knobs = {}
    for key in list(table.data):
        values = table.get(key, list)
        if not values or any(not isinstance(v, (int, float, str)) or isinstance(v, bool) for v in values):
            raise table.fail(key, "must be a non-empty list of numbers or strings")
        knobs[key] = tuple(values)
    return knobs


def parse_entry(text: str, where: str) -> Entry:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{where}: not valid TOML ({exc})") from None
    top = Table(data, where)
    version = data.get("schema_version")
    top.seen.add("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise RegistryError(f"{where}: schema_version {version!r}, expected {SCHEMA_VERSION}")
    registry_id = top.get("id", str)
    if not re.fullmatch(r"[a-z0-9][a-z0-9_]*", registry_id):
        raise top.fail("id", "must be lower-case letters, digits and underscores")
    kind = top.get("kind", str, "codec")
    if kind not in KINDS:
        raise top.fail("kind", f"must be one of {', '.join(KINDS)}")
    status = top.get("status", str)
    if status not in STATUSES:
        raise top.fail("status", f"{status!r} is not one of {', '.join(STATUSES)}")
    reason = top.get("status_reason", str, "")
    if status in NEEDS_REASON and not reason.strip():
        raise top.fail("status_reason", f"is required when status is {status!r}")
    roles = top.strings("roles")
    for role in roles:
        if role not in ROLES:
            raise top.fail("roles", f"{role!r} is not one of {', '.join(ROLES)}")
    if len(set(roles)) != len(roles):
        raise top.fail("roles", "lists a role twice")
    if kind == "codec" and not roles:
        raise top.fail("roles", "may be empty only when kind is 'control'")
    if kind == "control" and roles:
        raise top.fail("roles", "must be empty for a control")
    family = top.get("codec_family", str)
    if family and family not in FAMILIES:
        raise top.fail("codec_family", f"{family!r} is not a catalog family ({', '.join(FAMILIES)}) or \"\"")
    blocker = top.get("adapter_blocker", str, "")
    if not family and not blocker.strip():
        raise top.fail("adapter_blocker", "is required when codec_family is \"\" (say what keeps an adapter from running it)")
    if family and blocker:
        raise top.fail("adapter_blocker", f"is only for entries without an adapter; codec_family is {family!r}")
    if top.has("source") or kind == "codec":
        source = _source(top.get("source", dict), f"{where}.source")
    else:
        source = {**dict.fromkeys(("repository", "commit", "release", "commit_prefix", "release_note",
                                   "bundled_by"), ""), "debian_packages": ()}
    checkpoint: Checkpoint | None = None
    partial: PartialCheckpoint | None = None
    if top.has("checkpoint"):
        parsed = _checkpoint(top.get("checkpoint", dict), f"{where}.checkpoint")
        checkpoint, partial = (None, parsed) if isinstance(parsed, PartialCheckpoint) else (parsed, None)
    knobs = _rate_knobs(top.get("rate_knobs", dict, {}), f"{where}.rate_knobs")
    declared = FAMILIES.get(family)
    claims = parse_claims(top.get("claims", list, []), f"{where}.claims",
                          declared.configs if declared and not declared.config_is_bitrate else None,
                          tuple(o.name for o in declared.options) if declared else None)
    runtime = _runtime(top.get("runtime", dict), f"{where}.runtime")
    hardware = Table(top.get("reference_hardware", dict), f"{where}.reference_hardware")
    quoted = hardware.get("quoted_figures", str)
    hardware.done()
    entry = Entry(
        id=registry_id, display_name=top.get("display_name", str), codec_family=family, roles=roles,
        status=status, license=top.get("license", str), source_repository=source["repository"],
        source_commit=source["commit"], checkpoint=checkpoint, raw=data, kind=kind, status_reason=reason,
        adapter_blocker=blocker, notes=top.get("notes", str, ""), source_release=source["release"],
        source_commit_prefix=source["commit_prefix"], source_release_note=source["release_note"],
        source_bundled_by=source["bundled_by"], source_debian_packages=source["debian_packages"],
        has_source=top.has("source"), partial_checkpoint=partial,
        rate_knobs=knobs, runtime=runtime, quoted_figures=quoted, claims=claims,
    )
    top.done()
    return entry


REGISTRY_ENV = "CODECARENA_REGISTRY"


def _locations() -> dict[str, tuple[Any, str, str]]:
    """Registry id -> (the folder holding its TOML, the TOML's file name, its name as errors show it). The census
    systems without an adapter, then each built-in unit's entry, then `$CODECARENA_REGISTRY/families/`:
    a lab's fork of the pins (or a test's), whose entries replace the package's of the same id."""
    found: dict[str, tuple[Any, str, str]] = {}
    census = resources.files("codecarena.registry") / "families"
    for resource in census.iterdir():
        if resource.name.endswith(".toml"):
            found[resource.name[: -len(".toml")]] = (census, resource.name, f"registry/families/{resource.name}")
    units = resources.files("codecarena.codecs")
    for name in BUILTIN:
        text = (units / name / "registry.toml").read_text(encoding="utf-8")
        registry_id = _declared_id(text, f"codecs/{name}/registry.toml")
        if registry_id in found:
            raise RegistryError(f"codecs/{name}/registry.toml: id {registry_id!r} is also {found[registry_id][2]}")
        found[registry_id] = (units / name, "registry.toml", f"codecs/{name}/registry.toml")
    override = os.environ.get(REGISTRY_ENV)
    if override:
        fork = Path(override) / "families"
        for path in fork.glob("*.toml") if fork.is_dir() else ():
            found[path.stem] = (fork, path.name, str(path))
    return found


def _declared_id(text: str, where: str) -> str:
    try:
        value = tomllib.loads(text).get("id")
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(f"{where}: not valid TOML ({exc})") from None
    if not isinstance(value, str):
        raise RegistryError(f"{where}: missing key 'id'")
    return value


def entry_file(registry_id: str) -> Any:
    """The TOML file an entry is read from (a fork's when `$CODECARENA_REGISTRY` replaces it)."""
    location = _locations().get(registry_id)
    if location is None:
        raise RegistryError(f"no registry entry {registry_id!r}")
    folder, name, _ = location
    return folder / name


def lock_file(entry: "Entry") -> Any:
    """The locked requirements of an isolated runtime: `runtime.lock`, beside the entry's TOML."""
    folder, _, _ = _locations()[entry.id]
    return folder / entry.runtime.lock


def load_entry(registry_id: str) -> Entry:
    return _load(registry_id, _locations())


def _load(registry_id: str, locations: dict[str, tuple[Any, str, str]]) -> Entry:
    if registry_id not in locations:
        raise RegistryError(f"no registry entry {registry_id!r}")
    folder, name, where = locations[registry_id]
    entry = _parsed((folder / name).read_text(encoding="utf-8"), where)
    if entry.id != registry_id:
        raise RegistryError(f"{where}: id {entry.id!r} differs from the file name")
    return entry


@functools.lru_cache(maxsize=1024)
def _parsed(text: str, where: str) -> Entry:
    """parse_entry, once per text in a process: a command that asks for one family's entry reads every
    entry (459 files), and `codecs` asks for each family's; the key is the text itself, so an edited
    file is parsed again."""
    return parse_entry(text, where)


def load_all() -> tuple[Entry, ...]:
    """Every entry, sorted by id."""
    # The locations once: finding them reads every unit's TOML, and a worker looks its pins up here.
    locations = _locations()
    return tuple(sorted((_load(registry_id, locations) for registry_id in locations), key=lambda e: e.id))


def entry_for_family(codec_family: str) -> Entry:
    """The one entry whose `codec_family` is this catalog family."""
    if not codec_family:
        raise RegistryError("entry_for_family: a catalog family name is required")
    found = [e for e in load_all() if e.codec_family == codec_family]
    if len(found) != 1:
        ids = ", ".join(e.id for e in found) or "none"
        raise RegistryError(f"codec family {codec_family!r}: expected one registry entry, found {ids}")
    return found[0]
