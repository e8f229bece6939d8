"""Counts in messages read singular for one (issue 38, 16: "off by 1 samples"): the helper, and messages
of each kind that state a count built from a number (more in test_inputs, test_hardening, test_scale,
test_rescore, test_verdict and test_service_hardening, which assert their own messages)."""

from __future__ import annotations

import numpy as np
import pytest

from codecarena.plural import counted, verb


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert [counted(n, "sample") for n in (0, 1, 2, -1)] == ["0 samples", "1 sample", "2 samples", "-1 sample"]
    assert counted(1, "extra header") == "1 extra header" and counted(3, "index", "indices") == "3 indices"
    assert (verb(1, "is", "are"), verb(2, "is", "are")) == ("is", "are")


def test_a_bitstream_of_one_byte_is_one_byte() -> None:
    from codecarena.framing import FramingError, parse

    with pytest.raises(FramingError, match=r"^1 byte is not a whole number of 33-byte GSM frames$"):
        parse("gsm_toast", b"\xd0")
    with pytest.raises(FramingError, match=r"^1 byte is shorter than the 18-byte LC3 file header$"):
        parse("lc3_file", b"\x1c")


def test_a_payload_of_one_byte_is_one_byte() -> None:
    from codecarena.payload import decode_payload
    from codecarena.payload.fields import PayloadError

    with pytest.raises(PayloadError, match=r"^too short: 1 byte, the fixed prefix alone is \d+$"):
        decode_payload(b"C")


def test_one_non_finite_sample_is_one_sample() -> None:
    from codecarena.alignment import as_signal

    signal = np.zeros(100)
    signal[3] = np.nan
    with pytest.raises(ValueError, match=r"^decoded has 1 non-finite sample \(NaN or inf\)$"):
        as_signal(signal, "decoded")


def test_a_decode_one_sample_longer_than_its_tolerance_is_off_by_one_sample() -> None:
    """The worker's length check (issue 38, 16: it said "off by 1 samples")."""
    from types import SimpleNamespace

    from codecarena.plugin import Decoded
    from codecarena.worker import _decode

    payload = SimpleNamespace(family="pcm", sample_rate=16000, num_samples=160)
    adapter = SimpleNamespace(decode=lambda _: Decoded(np.zeros(161), 16000), length_tolerance=lambda _: 0)
    with pytest.raises(ValueError, match=r"^in.ccap: decoded length was off by 1 sample from the declared 160 "):
        _decode(SimpleNamespace(input="in.ccap", arena_rate=16000), payload, adapter, {"compute_s": 0.0}, [])
    adapter = SimpleNamespace(decode=lambda _: Decoded(np.array([0.0, np.inf] + [0.0] * 158), 16000),
                              length_tolerance=lambda _: 0)
    with pytest.raises(ValueError, match=r"^decoder produced 1 non-finite sample$"):
        _decode(SimpleNamespace(input="in.ccap", arena_rate=16000), payload, adapter, {"compute_s": 0.0}, [])


def test_one_skipped_input_and_one_converted_utterance_read_singular(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The run's opening notes on its input (issue 38, 16: "1 files or folders ... are skipped")."""
    import soundfile as sf

    from codecarena.commands.run_view import input_notes
    from codecarena.input_sets import load_input_dir

    sf.write(tmp_path / "a.wav", np.zeros(8000), 8000, subtype="PCM_16")
    sf.write(tmp_path / "b.wav", np.zeros(16000), 16000, subtype="PCM_16")
    (tmp_path / "broken.wav").write_bytes(b"RIFF")
    notes = [line.plain for line in input_notes(load_input_dir(tmp_path))]
    assert notes[0].startswith("1 file or folder of the input is skipped, each with why"), notes
    assert any(line.startswith("1 of 2 utterances is converted before coding") for line in notes), notes


def test_one_utterance_without_a_recorded_speaker_reads_singular() -> None:
    """`compare --by speaker`'s note (issue 38, 16: "1 utterance(s)"; test_compare has "1 pair dropped")."""
    from types import SimpleNamespace

    from codecarena.results.compare_stats import speaker_units

    run = SimpleNamespace(rows=[SimpleNamespace(utterance="u1", speaker="s1")])
    mapping, notes = speaker_units(run, [("u1", "0" * 64), ("u2", "1" * 64)])  # type: ignore[arg-type]
    assert mapping == {"u1": "speaker:s1", "u2": "utterance:u2"}
    assert notes[1] == "1 utterance without a recorded speaker, each treated as its own speaker: u2"
