"""Input reading (#28): cut and damaged compressed files, what libmpg123 prints, downmixes that cancel,
float samples beyond full scale, file names that are no ids or hold control characters, and
everything a folder holds that is left out, listed rather than dropped unsaid."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from codecarena.audio_input import AudioInputError, check_audio_file, read_audio
from codecarena.commands.run_view import input_notes
from codecarena.corpora import load_corpus
from codecarena.datasets import DatasetError
from codecarena.input_sets import load_input_dir

RATE = 16000


def _speech(n: int = 3 * RATE, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / RATE
    return 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.2 * rng.standard_normal(n))


def _cut(path: Path, keep: int) -> Path:
    path.write_bytes(path.read_bytes()[:keep])
    return path


def _pyav_mp3(path: Path, samples: np.ndarray) -> Path:
    """An MP3 as a VBR encoder without a length tag writes it (FFmpeg's libmp3lame, write_xing=0)."""
    import av

    with av.open(str(path), "w", format="mp3", options={"write_xing": "0"}) as out:
        stream = out.add_stream("libmp3lame", rate=RATE)
        stream.layout = "mono"
        stream.codec_context.qscale = 4
        stream.codec_context.flags |= 2  # AV_CODEC_FLAG_QSCALE: variable bit rate
        frame = av.AudioFrame.from_ndarray(samples[None, :].astype(np.float32), format="fltp", layout="mono")
        frame.sample_rate = RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return path


def _ffmpeg_frames(path: Path) -> int:
    """What FFmpeg decodes of a file, counted here without codecarena."""
    import av

    with av.open(str(path)) as container:
        return sum(frame.samples for frame in container.decode(audio=0))


# ------------------------------------------------------------------------------ cut and damaged files


def test_an_ogg_vorbis_cut_in_a_page_is_refused_as_truncated(tmp_path: Path) -> None:
    path = tmp_path / "cut.ogg"
    sf.write(path, _speech(), RATE, format="OGG", subtype="VORBIS")
    _cut(path, path.stat().st_size // 2)
    # The trap: libsndfile reads the whole pages present and says nothing.
    assert 0 < sf.info(str(path)).frames < 3 * RATE
    with pytest.raises(AudioInputError, match=r"cut\.ogg: truncated: the Ogg page at byte \d+ declares \d+ bytes but "
                                              r"only \d+ are present"):
        check_audio_file(path)


def test_an_ogg_vorbis_cut_at_a_page_boundary_is_refused_as_truncated(tmp_path: Path) -> None:
    path = tmp_path / "cut.ogg"
    sf.write(path, _speech(), RATE, format="OGG", subtype="VORBIS")
    data = path.read_bytes()
    _cut(path, data.rindex(b"OggS"))  # the last page, which carries the end-of-stream flag, is gone
    with pytest.raises(AudioInputError, match=r"cut\.ogg: truncated: its Ogg stream ends without its end-of-stream "
                                              r"page"):
        check_audio_file(path)
    sf.write(tmp_path / "whole.ogg", _speech(), RATE, format="OGG", subtype="VORBIS")
    assert check_audio_file(tmp_path / "whole.ogg").num_samples == 3 * RATE


def test_a_truncated_mp3_is_refused_as_truncated_not_as_nan(tmp_path: Path) -> None:
    path = tmp_path / "cut.mp3"
    sf.write(path, _speech(), RATE, format="MP3", subtype="MPEG_LAYER_III")
    _cut(path, path.stat().st_size // 2)
    assert sf.info(str(path)).frames == 3 * RATE  # its length tag still promises 3 s
    with pytest.raises(AudioInputError, match=rf"cut\.mp3: truncated: its header says {3 * RATE} frames, \d+ could be "
                                              r"decoded$"):
        check_audio_file(path)


def test_an_mp3_damaged_inside_is_refused_as_damaged_naming_what_libmpg123_skipped(tmp_path: Path) -> None:
    path = tmp_path / "hit.mp3"
    sf.write(path, _speech(), RATE, format="MP3", subtype="MPEG_LAYER_III")
    data = bytearray(path.read_bytes())
    data[3000:3200] = np.random.default_rng(1).integers(0, 256, 200, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(AudioInputError, match=r"hit\.mp3: damaged: its header says 48000 frames, \d+ could be decoded "
                                              r"\(libmpg123: 'Note: Illegal Audio-MPEG-Header.*'\); FFmpeg finds it "
                                              r"damaged too \('mp3float: [^']+'\); re-export the file$"):
        check_audio_file(path)


def _lame_mp3(path: Path, samples: np.ndarray) -> Path:
    """An MP3 as PyAV's LAME encoder writes it by default: constant bit rate, a Xing/Info tag stating its
    length and LAME's gapless header."""
    import av

    with av.open(str(path), "w", format="mp3") as out:
        stream = out.add_stream("libmp3lame", rate=RATE)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples[None, :].astype(np.float32), format="fltp", layout="mono")
        frame.sample_rate = RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return path


def _ffmpeg_decode(path: Path) -> tuple[np.ndarray, list[tuple[int, str, str]]]:
    """FFmpeg's samples of a mono file and what it logged at warning level or above, here without
    codecarena."""
    import av
    import av.logging

    av.logging.set_level(av.logging.WARNING)
    try:
        with av.logging.Capture() as logs, av.open(str(path)) as container:
            samples = np.concatenate([frame.to_ndarray()[0] for frame in container.decode(audio=0)])
    finally:
        av.logging.set_level(None)
    return samples.astype(np.float64), [log for log in logs if log[0] <= av.logging.WARNING]


def test_a_valid_mp3_libmpg123_complains_about_is_read_by_ffmpeg_and_says_so(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 38 (17): six seconds of noise through PyAV's LAME encoder, a file FFmpeg decodes without a
    warning, was refused as damaged because libmpg123 reported "part2_3_length too large" (libsndfile
    feeds it in pieces: a frame whose bit reservoir spans two reads draws it; read whole, it is silent)."""
    path = _lame_mp3(tmp_path / "noise.mp3", 0.3 * np.random.default_rng(1).standard_normal(6 * RATE))
    # The trap: what libsndfile's libmpg123 prints when the file is read in 65536-frame blocks.
    with sf.SoundFile(str(path)) as fh:
        while len(fh.read(1 << 16, dtype="float32")):
            pass
    assert "part2_3_length" in capfd.readouterr().err
    whole, warned = _ffmpeg_decode(path)
    assert warned == [] and len(whole) == 6 * RATE == sf.info(str(path)).frames

    facts = check_audio_file(path)
    assert (facts.reader, facts.num_samples, facts.sample_rate) == ("pyav", 6 * RATE, RATE)
    assert facts.described().startswith("mp3 mp3float (FFmpeg via PyAV: libmpg123 reported 1 error ('error: "
                                        "part2_3_length (")
    assert facts.described().endswith("as libsndfile read it, FFmpeg decodes it without a warning), 16000 Hz, "
                                      "1 channel")
    read = read_audio(path, facts.sample_rate, facts.num_samples, facts.reader)
    assert np.array_equal(read[:, 0], whole)  # the reference is FFmpeg's decode, as announced
    (utt,) = load_input_dir(tmp_path).utterances
    assert utt.reader == "pyav"
    from codecarena.references import reference_audio

    audio, _, steps = reference_audio(utt)
    assert np.array_equal(audio, whole) and steps == (f"decoded {facts.described()}",)


def test_an_mp3_both_decoders_find_damaged_is_refused_naming_both(tmp_path: Path) -> None:
    import av

    path = _lame_mp3(tmp_path / "noise.mp3", 0.3 * np.random.default_rng(1).standard_normal(6 * RATE))
    data = bytearray(path.read_bytes())
    with av.open(str(path)) as container:
        frames = [packet.pos for packet in container.demux(audio=0) if packet.size]
    for start in frames[40:44]:
        data[start + 4] = 0  # the first byte of the side information: where the frame's main data begins
    path.write_bytes(bytes(data))
    assert _ffmpeg_decode(path)[1]  # FFmpeg warns, and decodes on
    with pytest.raises(AudioInputError, match=r"noise\.mp3: damaged: libmpg123 reports \d+ errors? \('error: [^']+'\); "
                                              r"FFmpeg finds it damaged too \('mp3float: [^']+'\); re-export the "
                                              r"file$"):
        check_audio_file(path)


def test_an_mp3_without_a_length_tag_is_read_whole(tmp_path: Path) -> None:
    path = _pyav_mp3(tmp_path / "vbr.mp3", _speech(RATE))
    # The trap: libsndfile takes libmpg123's estimate of the length from the file size, and stops there.
    assert sf.info(str(path)).frames < RATE
    whole = _ffmpeg_frames(path)
    assert whole >= RATE
    facts = check_audio_file(path)
    assert facts.num_samples == whole
    assert read_audio(path, facts.sample_rate, facts.num_samples, facts.reader).shape == (whole, 1)


def test_libmpg123_prints_nothing_on_the_console(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "in" / "cut.mp3"
    cut.parent.mkdir()
    sf.write(cut, _speech(), RATE, format="MP3", subtype="MPEG_LAYER_III")
    _cut(cut, cut.stat().st_size // 2)
    sf.write(tmp_path / "in" / "good.mp3", _speech(), RATE, format="MP3", subtype="MPEG_LAYER_III")
    capfd.readouterr()
    s = load_input_dir(tmp_path / "in")
    assert capfd.readouterr().err == ""  # libmpg123's "Xing stream size off by more than 1%" is not shown
    assert [name for name, _ in s.skipped] == ["cut.mp3"]
    (good,) = s.utterances
    read_audio(good.path, good.sample_rate, good.num_samples, good.reader)
    assert capfd.readouterr().err == ""
    # What is printed after the decoding still reaches the console.
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_an_mp4_whose_index_is_cut_off_is_refused_in_one_line(tmp_path: Path) -> None:
    import av

    path = tmp_path / "phone.m4a"
    with av.open(str(path), "w", format="ipod") as out:  # the index (moov) is written last
        stream = out.add_stream("aac", rate=RATE)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(_speech()[None, :].astype(np.float32), format="fltp", layout="mono")
        frame.sample_rate = RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    _cut(path, path.read_bytes().rindex(b"stsd"))  # the stream's description is gone, the stream is not
    with pytest.raises(AudioInputError, match=r"phone\.m4a: unreadable audio \(FFmpeg reads it as mov,mp4.* with an "
                                              r"audio stream it has no decoder parameters for"):
        check_audio_file(path)


# ---------------------------------------------------------------------------------------- the samples


def test_a_downmix_that_cancels_is_skipped_naming_the_downmix(tmp_path: Path) -> None:
    left = _speech()
    sf.write(tmp_path / "inverted.wav", np.stack([left, -left], axis=1), RATE, subtype="FLOAT")
    near = -left + 0.003 * np.random.default_rng(2).standard_normal(left.size)
    sf.write(tmp_path / "nearly.wav", np.stack([left, near], axis=1), RATE, subtype="FLOAT")
    sf.write(tmp_path / "one_side.wav", np.stack([left, np.zeros_like(left)], axis=1), RATE, subtype="FLOAT")
    s = load_input_dir(tmp_path)
    # One silent channel halves the level: that is a downmix, not a cancellation.
    assert [u.id for u in s.utterances] == ["one_side"]
    assert s.skipped == (
        ("inverted.wav", "its downmix to mono (the mean of its 2 channels) is silent: the channels cancel (one is "
                         "inverted?); use --channels left, right or each"),
        ("nearly.wav", "its downmix to mono (the mean of its 2 channels) is 43 dB below its loudest channel: the "
                       "channels cancel (one is inverted?); use --channels left, right or each"),
    )
    assert [u.id for u in load_input_dir(tmp_path, "left").utterances] == ["inverted", "nearly", "one_side"]


def test_float_samples_beyond_full_scale_are_refused_with_their_count(tmp_path: Path) -> None:
    loud = _speech(RATE)
    loud[[10, 20, 30]] = [1.5, -1.25, 1.0001]
    sf.write(tmp_path / "loud.wav", loud, RATE, subtype="FLOAT")
    with pytest.raises(AudioInputError, match=r"loud\.wav: 3 samples are beyond full scale \(peak 1\.5, \+3\.5 dBFS\), "
                                              r"which codecs would clip: scale the file down and re-export it"):
        check_audio_file(tmp_path / "loud.wav")
    full = _speech(RATE)
    full[10], full[20] = 1.0, -1.0  # full scale itself is a sample codecs take
    sf.write(tmp_path / "full.wav", full, RATE, subtype="DOUBLE")
    assert check_audio_file(tmp_path / "full.wav").num_samples == RATE


# --------------------------------------------------------------------------------------- names, listing


def test_a_control_character_in_a_name_keeps_every_message_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "two\nlines.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio")
    with pytest.raises(AudioInputError) as refused:
        check_audio_file(folder / "two\nlines.wav")
    assert "\n" not in str(refused.value) and str(refused.value).startswith(f"{folder}/two\\nlines.wav: unreadable")
    with pytest.raises(DatasetError) as nothing:
        load_input_dir(folder)
    assert "\n" not in str(nothing.value) and "(1 skipped, e.g. two\\nlines.wav: unreadable audio" in str(nothing.value)
    sf.write(folder / "bell\a.wav", _speech(RATE), RATE)
    sf.write(folder / "good.wav", _speech(RATE), RATE)
    s = load_input_dir(folder)
    assert [u.id for u in s.utterances] == ["good"]
    assert [name for name, _ in s.skipped] == ["bell\\x07.wav", "two\\nlines.wav"]
    assert all("\n" not in reason and "\a" not in reason for _, reason in s.skipped)


def test_hidden_entries_links_to_nothing_and_to_folders_are_listed_as_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    for name in ("good.wav", ".hidden.wav", ".git/objects/x.wav", "sub/._good.wav", "elsewhere/linked.wav"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        sf.write(folder / name, _speech(RATE), RATE)
    (folder / "gone.wav").symlink_to(folder / "missing.wav")
    (folder / "other").symlink_to(tmp_path / "in" / "elsewhere")
    s = load_input_dir(folder)
    assert [u.id for u in s.utterances] == ["elsewhere__linked", "good"]
    hidden = "hidden (its name starts with '.'), not read: rename it without the dot to include it"
    assert s.skipped == (
        (".git/", f"a folder {hidden}"),
        (".hidden.wav", f"a file {hidden}"),
        ("gone.wav", f"a link to {str(folder / 'missing.wav')!r}, which does not exist: fix or remove the link"),
        ("other/", "a link to a folder, not followed: pass that folder as --input or copy its files here"),
        ("sub/._good.wav", f"a file {hidden}"),
    )


def test_a_corpus_lists_what_it_leaves_out(tmp_path: Path) -> None:
    root = tmp_path / "ls"
    (root / "84" / "121").mkdir(parents=True)
    sf.write(root / "84" / "121" / "84-121-0000.flac", _speech(RATE), RATE)
    sf.write(root / "84" / "121" / "._84-121-0000.flac", _speech(RATE), RATE)
    (root / "84" / "121" / "84-121-0001.flac").symlink_to(root / "nowhere.flac")
    (root / "84" / "121" / "84-121.trans.txt").write_text("84-121-0000 HELLO\n84-121-0001 WORLD\n")
    s = load_corpus(root, "librispeech")
    assert [u.id for u in s.utterances] == ["84-121-0000"]
    assert [name for name, _ in s.skipped] == ["84/121/._84-121-0000.flac", "84/121/84-121-0001.flac"]


def test_the_console_says_what_each_skipped_input_is_not_that_it_is_not_audio(tmp_path: Path) -> None:
    sf.write(tmp_path / "blip.wav", _speech(100), RATE)
    sf.write(tmp_path / "good.wav", _speech(RATE), RATE)
    notes = [str(line) for line in input_notes(load_input_dir(tmp_path))]
    assert "not audio" not in " ".join(notes)
    assert "1 file or folder of the input is skipped, each with why" in notes[0]
    assert "  blip.wav: 100 samples at 16000 Hz is shorter than the 0.1 s minimum" in notes[1]
