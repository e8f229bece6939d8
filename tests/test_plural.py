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
