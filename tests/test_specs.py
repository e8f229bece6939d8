"""Tests for codecarena.specs.parse_spec: normalisation, canonical names, resolved configs, slugs and
every rejection path. Expected values are written out by hand from the catalog's documented defaults."""

from __future__ import annotations

import re

import pytest

from codecarena.specs import CodecSpec, SpecError, parse_spec

# The Opus defaults as the catalog documents them (vbr on, complexity 10, 20 ms frames, voip, auto).
OPUS_DEFAULTS = {"application": "voip", "bandwidth": "auto", "complexity": 10, "fec": 0, "frame_ms": 20.0,
                 "vbr": "on"}


def _opus(**overrides: object) -> dict[str, object]:
    return {**OPUS_DEFAULTS, **overrides}


# spec text -> (family, config, canonical, resolved options)
ACCEPTED = [
    ("opus:6k", "opus", "6k", "opus:6k", _opus()),
    ("opus:12k", "opus", "12k", "opus:12k", _opus()),
    ("opus:6000", "opus", "6k", "opus:6k", _opus()),  # whole kbps are written with k
    ("opus:7500", "opus", "7500", "opus:7500", _opus()),  # not a whole kbps: stays in bps
    ("opus:6k,vbr=off", "opus", "6k", "opus:6k,vbr=off", _opus(vbr="off")),
    ("codec2:3200", "codec2", "3200", "codec2:3200", {}),
    ("codec2:700C", "codec2", "700C", "codec2:700C", {}),
    ("codec2:700c", "codec2", "700C", "codec2:700C", {}),  # config case follows the catalog
    ("pcm:16", "pcm", "16", "pcm:16", {}),
    ("pcm", "pcm", "16", "pcm:16", {}),  # family default config
    ("opus", "opus", "12k", "opus:12k", _opus()),
    ("codec2", "codec2", "3200", "codec2:3200", {}),
]


@pytest.mark.parametrize("text,family,config,canonical,resolved", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted_specs(text: str, family: str, config: str, canonical: str, resolved: dict) -> None:
    spec = parse_spec(text)
    assert isinstance(spec, CodecSpec)
    assert spec.family == family
    assert spec.config == config
    assert spec.canonical == canonical
    assert spec.options() == resolved
    assert spec.config_dict() == {"config": config, **resolved}
    # The canonical name is a fixed point.
    again = parse_spec(spec.canonical)
    assert again == spec
    assert again.canonical == canonical


def test_defaults_are_resolved_but_not_canonical() -> None:
    spec = parse_spec("opus:6k")
    assert spec.explicit == ()
    assert spec.resolved == (
        ("application", "voip"),
        ("bandwidth", "auto"),
        ("complexity", 10),
        ("fec", 0),
        ("frame_ms", 20.0),
        ("vbr", "on"),
    )
    assert spec.canonical == "opus:6k"


def test_explicit_options_are_typed_sorted_and_only_they_are_canonical() -> None:
    spec = parse_spec("opus:6k, vbr = off ,complexity=5,frame_ms=40")
    assert spec.explicit == (("complexity", 5), ("frame_ms", 40.0), ("vbr", "off"))
    assert isinstance(dict(spec.explicit)["complexity"], int)
    assert isinstance(dict(spec.explicit)["frame_ms"], float)
    assert spec.canonical == "opus:6k,complexity=5,frame_ms=40,vbr=off"
    assert spec.options() == _opus(complexity=5, frame_ms=40.0, vbr="off")


def test_float_option_canonical_form() -> None:
    assert parse_spec("opus:6k,frame_ms=20.0").canonical == "opus:6k,frame_ms=20"
    assert parse_spec("opus:6k,frame_ms=2.5").canonical == "opus:6k,frame_ms=2.5"


def test_option_order_does_not_change_the_spec() -> None:
    a = parse_spec("opus:12k,vbr=constrained,application=audio")
    b = parse_spec("opus:12000,application=audio,vbr=constrained")
    assert a == b
    assert a.canonical == b.canonical == "opus:12k,application=audio,vbr=constrained"


@pytest.mark.parametrize(
    "text,slug",
    [
        ("opus:6k", "opus_6k"),
        ("opus:6k,vbr=off", "opus_6k__vbr_off"),
        ("opus:12k,frame_ms=2.5", "opus_12k__frame_ms_2.5"),
        ("codec2:700c", "codec2_700C"),
        ("pcm", "pcm_16"),
    ],
)
def test_slug_values(text: str, slug: str) -> None:
    assert parse_spec(text).slug == slug


def test_slugs_are_filesystem_safe_and_distinct(tmp_path) -> None:
    texts = [
        "opus:6k", "opus:6000,vbr=off", "opus:7500", "opus:12k,frame_ms=2.5,vbr=constrained",
        "opus:12k,application=lowdelay,bandwidth=wb,complexity=0", "codec2:700C", "codec2:1200", "pcm",
    ]
    slugs = [parse_spec(t).slug for t in texts]
    for slug in slugs:
        assert re.fullmatch(r"[A-Za-z0-9._-]+", slug), slug
        assert slug not in (".", "..")
        assert "/" not in slug and "\\" not in slug and ":" not in slug and "," not in slug
        (tmp_path / slug).mkdir()  # really usable as a folder name
    assert len(set(slugs)) == len(slugs)


# spec text -> a fragment the message must contain (besides the spec itself)
REJECTED = [
    ("foo:1", "unknown codec family"),
    ("codec2:9999", "9999"),
    ("pcm:24", "24"),
    ("opus:6k,foo=1", "unknown option 'foo'"),
    ("codec2:3200,vbr=off", "unknown option 'vbr'"),
    ("opus:6k,complexity=high", "complexity"),
    ("opus:6k,complexity=5.0", "complexity"),
    ("opus:6k,frame_ms=abc", "frame_ms"),
    ("opus:6k,vbr=maybe", "maybe"),
    ("opus:6k,frame_ms=30", "frame_ms"),
    ("opus:6k,bandwidth=xb", "bandwidth"),
    ("opus:6k,complexity=11", "above 10"),
    ("opus:6k,complexity=-1", "below 0"),
    ("opus:6k,vbr=off,vbr=on", "twice"),
    ("opus:6k,vbr", "key=value"),
    ("opus:6k,=off", "key=value"),
    ("opus:6k,", "key=value"),
    ("opus:100", "bitrate"),
    ("opus:512001", "bitrate"),
    ("opus:6.0005k", "bitrate"),
    ("opus:fast", "bitrate"),
]


@pytest.mark.parametrize("text,fragment", REJECTED, ids=[r[0] for r in REJECTED])
def test_rejected_specs_name_the_spec(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    message = str(info.value)
    assert text in message
    assert fragment in message
    assert isinstance(info.value, ValueError)  # callers may catch ValueError


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_spec_is_rejected(text: str) -> None:
    with pytest.raises(SpecError, match="empty"):
        parse_spec(text)


def test_uppercase_bitrate_unit_is_accepted() -> None:
    assert parse_spec("OPUS:6K").canonical == "opus:6k"


def test_empty_config_after_colon_is_rejected() -> None:
    with pytest.raises(SpecError, match="empty config"):
        parse_spec("opus:")
