"""The adapter of every command-line family: the encode and decode commands its declaration's
`[command]` table gives (docs/plugins.md, "Command-line codecs").

Each call runs in a private temporary folder: the worker's audio, resampled with soxr to the declared
rate, is written there as a PCM16 wav (or raw s16le), the encoder writes the bitstream file, and the
payload carries that file's bytes unchanged, as one packet. The decoder gets exactly those bytes back
in a file of its own. Commands are argv lists run without a shell, with a minimal environment, their
binary the file whose identity `load()` verified against its pins (registry/binaries.py). A command
that exits non-zero, or leaves its output missing or empty, fails its row with one line naming the
command and the tail of its stderr.

Every bit of the bitstream is representation (bits per second are its bytes x 8 over the duration);
the declared framing parser (framing.py) says how many of them are the container's, and the
row's facts report those as `framing_bits`, beside the codec's own `codec_bits`.
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from codecarena.codecs.command_channel import Tool, decode_impaired
from codecarena.framing import parse
from codecarena.plugin import Adapter, Decoded, Encoded, PacketStream, Payload, from_int16, to_int16
from codecarena.plugin.channel import received
from codecarena.plural import counted
from codecarena.registry.binaries import BinaryIdentity, verify_command
from codecarena.registry.catalog import FAMILIES
from codecarena.registry.entries import RegistryError, debian_versions, entry_for_family
from codecarena.specs import CodecSpec

#: How much of a failing command's stderr its row's reason keeps.
STDERR_TAIL = 300


class CommandError(RuntimeError):
    """A command that failed or wrote nothing usable (one line: the command and why)."""


def family_pins(family: str) -> dict[str, str]:
    """The Debian package versions a family's registry entry pins (none when it has no entry: then
    only sha256 pins can pass)."""
    try:
        return debian_versions(entry_for_family(family))
    except RegistryError:
        return {}


class CommandAdapter(Adapter):
    def __init__(self, spec: CodecSpec, weights: str = "real") -> None:
        super().__init__(spec, weights)
        command = FAMILIES[spec.family].command
        if command is None:
            raise ValueError(f"{spec.family} is not a command-line family")
        self.command = command
        self.input_rate = command.sample_rate
        self.identities: dict[str, BinaryIdentity] = {}

    def load(self) -> dict[str, Any]:
        self.identities = {i.name: i for i in verify_command(self.command, family_pins(self.spec.family))}
        nominal = self.command.config(self.spec.config).nominal_bps
        return {
            "parameters": 0,
            "parameter_bytes": 0,
            "bandwidth": self.command.bandwidth,
            "sample_rate": self.command.sample_rate,
            "framing": self.command.framing,
            "nominal_bps": nominal,
            # The commands of this configuration as they run, the temporary files left as placeholders.
            **{which: self.command.argv(which, self.spec.config, self.spec.options(), "{input}", "{output}")
               for which in ("encode", "decode")},
            "binaries": [i.record() for i in self.identities.values()],
        }

    def _binary_pins(self) -> dict[str, str]:
        return {name: identity.sha256 for name, identity in self.identities.items()}

    def encode(self, audio: np.ndarray) -> Encoded:
        with tempfile.TemporaryDirectory(prefix="codecarena-command-") as tmp:
            folder = Path(tmp)
            source = folder / f"input.{'wav' if self.command.audio == 'wav' else 'raw'}"
            _write_audio(source, to_int16(audio), self.input_rate, self.command.audio)
            bitstream = folder / f"bitstream{self.command.suffix}"
            self._run("encode", source, bitstream, folder)
            data = _output(bitstream, "encode", "bitstream")
        framing = parse(self.command.framing, data)
        facts: dict[str, Any] = {
            "bitstream_bytes": len(data), "framing": framing.name, "codec_bits": framing.codec_bits,
            "framing_bits": framing.framing_bits, "frames": framing.frames, "framing_details": framing.details,
            "bandwidth": self.command.bandwidth,
            "nominal_bps": self.command.config(self.spec.config).nominal_bps,
        }
        # The binaries' hashes travel with the bitstream: a decoder running other binaries refuses it.
        return Encoded(streams=(PacketStream("bitstream", (data,)),), side_info={"binaries": self._binary_pins()},
                       facts=facts)

    def decode(self, payload: Payload) -> Decoded:
        sent = payload.side_info.get("binaries")
        if sent != self._binary_pins():
            raise CommandError(f"payload was encoded by binaries {sent}, this decoder runs {self._binary_pins()}")
        if received(payload, len(payload.streams[-1].packets)) is not None:  # type: ignore[union-attr]
            tool = Tool(self.spec.family, self.command.framing, self.input_rate,
                        self.command.config(self.spec.config).nominal_bps, self.decode_file)
            samples, facts = decode_impaired(tool, payload)
            return Decoded(from_int16(samples), self.input_rate, facts)
        return Decoded(from_int16(self.decode_file(b"".join(payload.packet_stream("bitstream").packets))),
                       self.input_rate)

    def decode_file(self, data: bytes) -> np.ndarray:
        """The int16 samples the declared decode command makes of bitstream file `data`."""
        with tempfile.TemporaryDirectory(prefix="codecarena-command-") as tmp:
            folder = Path(tmp)
            bitstream = folder / f"bitstream{self.command.suffix}"
            bitstream.write_bytes(data)
            decoded = folder / f"decoded.{'wav' if self.command.audio == 'wav' else 'raw'}"
            self._run("decode", bitstream, decoded, folder)
            _output(decoded, "decode", "audio")
            return _read_audio(decoded, self.input_rate, self.command.audio)

    def length_tolerance(self, arena_rate: int) -> int:
        # The declared tolerance at the codec's rate, at the arena's; resampling there and back may
        # round the length by a sample or two.
        scaled = math.ceil(self.command.length_tolerance * arena_rate / self.input_rate)
        return scaled + (2 if self.input_rate != arena_rate else 0)

    def _run(self, which: str, source: Path, target: Path, folder: Path) -> None:
        program = self.command.program(which)
        argv = self.command.argv(which, self.spec.config, self.spec.options(), str(source), str(target))
        to_stdout = self.command.encode_stdout if which == "encode" else self.command.decode_stdout
        env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C", "HOME": str(folder), "TMPDIR": str(folder)}
        with open(target if to_stdout else folder / f"{which}.stdout", "xb") as out, \
                open(folder / f"{which}.stderr", "xb") as err:
            # The verified file runs (not whatever the declared path points at by now); argv[0] stays
            # the declared path, which tools such as untoast read.
            status = subprocess.run(argv, executable=self.identities[program.name].resolved, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, cwd=folder, env=env, check=False).returncode
        if status != 0:
            how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
            tail = " ".join((folder / f"{which}.stderr").read_bytes().decode("utf-8", "replace").split())
            tail = tail[-STDERR_TAIL:] if tail else "(no stderr)"
            shown = " ".join(argv).replace(f"{folder}{os.sep}", "")
            raise CommandError(f"{which} command {shown} {how}: {tail}")


def _output(path: Path, which: str, what: str) -> bytes:
    if not path.is_file():
        raise CommandError(f"{which} command exited 0 but wrote no {what} ({path.name} is missing)")
    data = path.read_bytes()
    if not data:
        raise CommandError(f"{which} command exited 0 but its {what} ({path.name}) is empty")
    return data


def _write_audio(path: Path, samples: np.ndarray, rate: int, audio: str) -> None:
    if audio == "wav":
        sf.write(path, samples, rate, subtype="PCM_16", format="WAV")
    else:
        path.write_bytes(samples.astype("<i2").tobytes())


def _read_audio(path: Path, rate: int, audio: str) -> np.ndarray:
    if audio == "s16le":
        data = path.read_bytes()
        if len(data) % 2:
            raise CommandError(f"decode command wrote {counted(len(data), 'byte')} of s16le audio, not whole samples")
        return np.frombuffer(data, dtype="<i2").astype(np.int16)
    try:
        samples, found = sf.read(path, dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise CommandError(f"decode command wrote audio that is not a readable wav ({exc})") from None
    if found != rate or samples.shape[1] != 1:
        raise CommandError(f"decode command wrote {samples.shape[1]} channels at {found} Hz, the declaration "
                           f"says mono at {rate} Hz")
    return samples[:, 0]


ADAPTER = CommandAdapter
