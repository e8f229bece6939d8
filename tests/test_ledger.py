"""The bitrate ledger (#32): the lossless coder, claims with their sources, token statistics over a run,
token stability, and the audit of summary.json's ledger against the payload files."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from codecarena.payload import CodeStream, PacketStream, Payload
from codecarena.registry.catalog import parse_declaration
from codecarena.registry.claims import parse_claims
from codecarena.registry.entries import RegistryError, load_entry
from codecarena.results import claimed, coder, ledger, stability_record, token_layout

from conftest import SHORT_CLIPS, codecarena, need_mirror


def payload(*streams: CodeStream | PacketStream, codec: str = "toy:1") -> Payload:
    return Payload(codec=codec, family="toy", config={"config": "1"}, variant="", checkpoint={}, sample_rate=16000,
                   num_samples=16000, channels=1, codec_sample_rate=16000, streams=streams, side_info={})


def tokens(values: np.ndarray, bits: int, name: str = "codes") -> CodeStream:
    values = np.asarray(values, dtype=np.uint64)
    return CodeStream(name, bits, values.shape, values.reshape(-1))


# --- the coder ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alphabet,count", [(1, 40), (2, 500), (256, 3000), (1024, 5000), (65536, 2000)])
def test_the_coder_gives_every_sequence_back(alphabet: int, count: int) -> None:
    rng = np.random.default_rng(alphabet)
    # Skewed, with runs and repeats: the escape, the uniform step and carries all get exercised.
    symbols = np.minimum(rng.geometric(8 / alphabet if alphabet > 8 else 0.5, count) - 1, alphabet - 1)
    data = coder.encode(symbols, alphabet)
    assert np.array_equal(coder.decode(data, count, alphabet), symbols)


def test_a_sequence_fed_in_parts_is_coded_as_one() -> None:
    symbols = np.random.default_rng(1).integers(0, 300, 4000)
    encoder = coder.Encoder(300)
    for part in np.array_split(symbols, 7):
        encoder.feed(part)
    assert encoder.finish() == coder.encode(symbols, 300)


def test_the_coder_refuses_symbols_outside_its_alphabet() -> None:
    with pytest.raises(coder.CoderError, match="must lie in 0..15"):
        coder.encode(np.array([3, 16]), 16)


# --- token statistics ---------------------------------------------------------------------------


def test_one_repeated_token_has_entropy_zero_and_costs_next_to_nothing() -> None:
    streams = ledger.Accumulator()
    for _ in range(4):  # four utterances of 2 codebooks x 500 frames, every token 7
        streams.add(payload(tokens(np.full((2, 500), 7), 10)), "utt")
    result = streams.result(seconds=4.0)
    assert len(result["codebooks"]) == 2
    for book in result["codebooks"]:
        assert book["entropy_bits"] == 0.0 and book["perplexity"] == 1.0
        assert book["used"] == 1 and book["utilisation"] == 1 / 1024
        assert book["tokens"] == 2000 and book["token_rate"] == 500.0
        # The first token costs its 10 bits, the rest log2(n) bits in all, plus the coder's flush.
        assert book["coded_bits_per_token"] * 2000 <= 10 + math.log2(2000) + 8 * 10
    assert result["entropy_bps"] == 0.0
    assert result["achievable_bps"] < 0.06 * 2 * 500  # under 0.06 bit a token at 2 x 500 tokens a second


def test_a_uniform_stream_over_k_entries_has_entropy_log2_k() -> None:
    streams = ledger.Accumulator()
    streams.add(payload(tokens(np.tile(np.arange(2048), (3, 4)), 11)), "utt")
    result = streams.result(seconds=2.0)
    for book in result["codebooks"]:
        assert book["entropy_bits"] == pytest.approx(11.0, abs=1e-12)
        assert book["perplexity"] == pytest.approx(2048.0)
        assert book["utilisation"] == 1.0 and book["size"] == 2048
        # An adaptive coder pays for learning a flat distribution, but not much over the run.
        assert 11.0 <= book["coded_bits_per_token"] < 11.6
    assert result["entropy_bps"] == pytest.approx(3 * 8192 * 11 / 2.0)


def test_packets_and_wide_codes_are_coded_as_bytes() -> None:
    streams = ledger.Accumulator()
    streams.add(payload(PacketStream("p", (b"\x00" * 100, b"\x00\x01" * 50)), tokens(np.arange(5), 28, "frames")),
                "utt")
    result = streams.result(seconds=1.0)
    assert result["codebooks"] == [] and result["token_rate"] is None
    packets, frames = result["streams"]
    assert (packets["unit"], packets["symbols"], packets["frames"]) == ("byte", 200, None)
    assert (frames["unit"], frames["symbols"], frames["frames"]) == ("byte", math.ceil(5 * 28 / 8), 5)


def test_payloads_of_one_configuration_must_hold_the_same_streams() -> None:
    streams = ledger.Accumulator()
    streams.add(payload(tokens(np.zeros((8, 10)), 11)), "a")
    with pytest.raises(ValueError, match="b: its payload's streams"):
        streams.add(payload(tokens(np.zeros((4, 10)), 11)), "b")


def test_identical_tokens_give_idempotence_one_on_the_first_codebook() -> None:
    codes = np.random.default_rng(2).integers(0, 1024, (4, 300))
    first = payload(tokens(codes, 10))
    layout = token_layout.layout_of(first)
    agreement = stability_record.compare_tokens(first, payload(tokens(codes.copy(), 10)), layout, {})
    assert agreement[(0, 0)] == (300, 300)
    # Shifted by two frames, and two codebooks changed in their last 100 frames.
    later = np.concatenate([np.zeros((4, 2), dtype=np.int64), codes], axis=1)
    later[2:, 102:] = (later[2:, 102:] + 1) % 1024
    agreement = stability_record.compare_tokens(first, payload(tokens(later, 10)), layout, {(i, b): 2 for i, b in agreement})
    assert agreement[(0, 0)] == (300, 300) and agreement[(0, 3)] == (300, 100)


# --- claims -------------------------------------------------------------------------------------


def row(codec: str, family: str, registry: str, **options: object) -> SimpleNamespace:
    return SimpleNamespace(family=family, registry=registry, config={"config": codec.split(":")[1], **options})


CLAIM = '''
[[claims]]
configs = ["8"]
bps = 1100
source = "paper"
reference = "somewhere"
'''


def test_claims_parse_strictly_with_their_sources() -> None:
    (claim,) = parse_claims([{"configs": ["8"], "bps": 1100, "source": "paper", "reference": "x",
                              "options": {"n": 8}}], "f.toml: claims", ("8",), ("n",))
    assert claim.covers({"config": "8", "n": 8}) and not claim.covers({"config": "8", "n": 4})
    bad = [({"configs": ["9"]}, "names '9', which is not a config"),
           ({"source": "rumour"}, "source must be one of paper"),
           ({"reference": " "}, "reference must say where"),
           ({"bps": 0}, "bps must be a positive number"),
           ({"options": {"m": 1}}, "names 'm', which is not an option"),
           ({"extra": 1}, "unknown key 'extra'"),
           ({"tolerance": 2}, "tolerance must be a relative difference")]
    for change, message in bad:
        item = {"configs": ["8"], "bps": 1100, "source": "paper", "reference": "x", **change}
        with pytest.raises(RegistryError, match=message):
            parse_claims([item], "f.toml: claims", ("8",), ("n",))
    two = [{"configs": ["8"], "bps": 1, "source": "name", "reference": "x"},
           {"configs": ["8", "16"], "bps": 2, "source": "name", "reference": "y", "options": {"n": 2}}]
    with pytest.raises(RegistryError, match=r"claims\[1\]: could cover a configuration claims\[0\] covers"):
        parse_claims(two, "f.toml: claims", ("8", "16"), ("n",))


def test_a_user_declaration_may_claim_its_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    text = 'api_version = 1\nname = "toy"\ndescription = "d"\nconfigs = ["8"]\ndefault_config = "8"\n' + CLAIM
    family = parse_declaration(text, "toy/codec.toml", "toy")
    (claim,) = family.claims
    assert (claim.bps, claim.source, claim.reference) == (1100.0, "paper", "somewhere")
    monkeypatch.setitem(ledger.FAMILIES, "toy", family)
    assert claimed.claim_for(row("toy:8", "toy", "user-toy")) == claim  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match="toy/codec.toml: claims\\[0\\]: configs names '9'"):
        parse_declaration(text.replace('configs = ["8"]\nbps', 'configs = ["9"]\nbps'), "toy/codec.toml", "toy")


def test_every_family_kind_has_a_home_for_its_claim() -> None:
    mimi = claimed.claim_for(row("mimi:32", "mimi", "mimi"))  # type: ignore[arg-type]
    assert mimi is not None and (mimi.bps, mimi.source) == (1100.0, "paper") and "arXiv:2410.00037" in mimi.reference
    dac = claimed.claim_for(row("dac:24khz", "dac", "dac", n_quantizers=32, threads=1))  # type: ignore[arg-type]
    assert dac is not None and (dac.bps, dac.source) == (8000.0, "name")
    # A rate knob away from the claimed configuration: no claim covers it.
    assert claimed.claim_for(row("dac:24khz", "dac", "dac", n_quantizers=4, threads=1)) is None  # type: ignore[arg-type]
    gsm = claimed.claim_for(row("gsm:13k", "gsm", "gsm"))  # type: ignore[arg-type]
    assert gsm is not None and (gsm.bps, gsm.source) == (13000.0, "declaration")
    opus = claimed.claim_for(row("opus:7500", "opus", "opus", vbr="on"))  # type: ignore[arg-type]
    assert opus is not None and (opus.bps, opus.source) == (7500.0, "name")
    assert claimed.claim_for(row("fish_dac:44khz", "fish_dac", "fish_s2_codec", n_quantizers=9)) is None  # type: ignore[arg-type]


def test_a_claim_is_flagged_beyond_its_tolerance() -> None:
    (claim,) = load_entry("mimi").claims
    assert claimed.claim_check(claim, 1105.0)["flag"] == "ok"  # type: ignore[index]
    over = claimed.claim_check(claim, 4420.0)
    assert over is not None and over["flag"] == "over" and over["difference"] == pytest.approx(3.0181818)
    assert claimed.claim_check(claim, 1000.0)["flag"] == "under"  # type: ignore[index]


# --- a run: the ledger in summary.json, stability, the audit ------------------------------------


@pytest.fixture(scope="module")
def pcm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pcm:16 and opus:12k on one short clip, with the stability of pcm measured."""
    folder = tmp_path_factory.mktemp("in")
    shutil.copy(need_mirror() / SHORT_CLIPS[0], folder / SHORT_CLIPS[0])
    out = tmp_path_factory.mktemp("ledger") / "run"
    codecarena("run", "--input", folder, "--codec", "pcm", "--codec", "opus:12k", "--metrics", "none", "--out", out,
               check=True)
    codecarena("ledger", out, "--stability", check=True)
    return out


def ledger_of(run: Path) -> dict:  # type: ignore[type-arg]
    return {e["codec"]: e for e in json.loads((run / "summary.json").read_text())["ledger"]["codecs"]}


@pytest.mark.slow
def test_the_ledger_of_a_run_and_the_stability_of_a_deterministic_codec(pcm_run: Path) -> None:
    pcm, opus = ledger_of(pcm_run)["pcm:16"], ledger_of(pcm_run)["opus:12k"]
    assert pcm["claim"]["bps"] == 256000 and pcm["claim_check"]["flag"] == "ok"
    assert pcm["achievable_bps"] < pcm["representation_bps"] == 256000
    assert pcm["entropy_bps"] < pcm["achievable_bps"]
    # Re-encoding identical audio (PCM decodes to its input) through a deterministic codec.
    assert pcm["stability"]["idempotence_first"] == 1.0 and pcm["stability"]["shift_stability_first"] == 1.0
    assert pcm["stability"]["utterances"] == {"reencode": 1, "shift": 1}
    assert opus["claim"]["source"] == "name" and opus["container_bps"] > 0 and opus["stability"] is None
    assert codecarena("audit", pcm_run).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("edit", ["value", "stability payload"])
def test_audit_fails_when_an_edited_ledger_no_longer_matches_the_payloads(pcm_run: Path, tmp_path: Path,
                                                                         edit: str) -> None:
    copy = tmp_path / "run"
    shutil.copytree(pcm_run, copy)
    if edit == "value":
        summary = json.loads((copy / "summary.json").read_text())
        summary["ledger"]["codecs"][0]["achievable_bps"] = 99_000.0
        (copy / "summary.json").write_text(json.dumps(summary))
        expected = "summary.ledger.codecs[0].achievable_bps: summary.json says 99000.0, the payload files give"
    else:
        # Another encode's payload (the shifted input's) in place of the re-encode.
        (reencode,) = (copy / "stability").rglob("*.reencode.ccap")
        shutil.copy(next((copy / "stability").rglob("*.shift.ccap")), reencode)
        expected = "summary.ledger.codecs[0].stability.utterances.reencode: summary.json says 1, the payload files give 0"
    result = codecarena("audit", copy)
    assert result.returncode == 1 and expected in result.stdout, result.stdout


@pytest.mark.slow
def test_the_ledger_command_updates_an_older_summary_and_refuses_what_it_cannot_do(pcm_run: Path,
                                                                                  tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(pcm_run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    stored = summary.pop("ledger")
    (copy / "summary.json").write_text(json.dumps(summary))  # as a run made before the ledger wrote it
    assert codecarena("audit", copy).returncode == 0
    assert codecarena("ledger", copy, "--update").returncode == 0
    assert json.loads((copy / "summary.json").read_text())["ledger"] == stored
    refused = codecarena("ledger", copy, "--codec", "pcm:16")
    assert refused.returncode == 2 and "--codec chooses what --stability measures" in refused.stderr
    refused = codecarena("ledger", copy, "--stability", "--codec", "mimi:8")
    assert refused.returncode == 2 and "--codec mimi:8: not a codec configuration of this run" in refused.stderr
    kept = codecarena("ledger", copy, "--stability")
    assert kept.returncode == 0 and "pcm:16 en_ljspeech_LJ002-0020: kept" in kept.stdout
    # A payload gone: the configuration's ledger says why it has no measurement; nothing crashes.
    next((copy / "payloads").glob("opus*/*.ccap")).unlink()
    shown = codecarena("ledger", copy)
    assert shown.returncode == 0 and "opus:12k: no ledger measurement:" in shown.stdout
    assert "no such file" in shown.stdout
