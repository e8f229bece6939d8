"""The arena's concealment for decoders that have none (G.722 and G.726 through FFmpeg): ITU-T G.711
Appendix I (09/1999), "A high quality low-complexity algorithm for packet loss concealment with
G.711", applied to the decoded signal, 10 ms at a time, as its reference C++ (class LowcFE) does:

- every received 10 ms frame goes into a 48.75 ms history and comes out 3.75 ms later (the delay
  gives room to smooth the start of a loss);
- at the first lost frame, the pitch is found by normalised cross-correlation of the last 20 ms with
  the history (a coarse search on every second lag between 40 and 120 samples, then a fine one), and
  the last pitch period is repeated, its last quarter overlap-added with the quarter before it;
- at 10 and 20 ms into a loss a further pitch period is taken into the repeated buffer (overlap-added
  with what was playing), and from 10 ms on the output falls by 20% each 10 ms, linearly; from 60 ms
  on it is silence;
- the first received frame after a loss is overlap-added with the concealment's continuation over a
  quarter pitch period plus 4 ms for each further 10 ms lost (at most 10 ms).

Appendix I is written for 8 kHz; at 16 kHz (G.722) every length is doubled, which is the arena's
choice, not a standard's (G.722's own Appendices III and IV are not implemented). The reference
delays its output by 3.75 ms; here the output is shifted back by those samples, so that with nothing
lost the signal comes out unchanged, sample for sample.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np

ATTENUATION = 0.2  # per 10 ms frame, from the second lost frame on
SILENT_AFTER = 6  # lost frames: from the seventh (60 ms) on, silence


class _Concealer:
    """LowcFE at `scale` times 8 kHz, in floating point as the reference computes it."""

    def __init__(self, scale: int) -> None:
        self.pitch_min, self.pitch_max = 40 * scale, 120 * scale
        self.overlap_max = self.pitch_max // 4
        self.history_len = 3 * self.pitch_max + self.overlap_max
        self.corr_len, self.decimation = 160 * scale, 2 * scale
        self.frame, self.overlap_step = 80 * scale, 32 * scale
        self.history = np.zeros(self.history_len, dtype=np.int16)
        self.pitchbuf = np.zeros(self.history_len)
        self.lastq = np.zeros(self.overlap_max)
        self.erased = self.pitch = self.poverlap = self.poffset = self.pitchblen = 0

    def good(self, frame: np.ndarray) -> np.ndarray:
        frame = frame.copy()
        if self.erased:
            olen = min(self.poverlap + (self.erased - 1) * self.overlap_step, self.frame)
            tail = self._speech(olen)
            gain = max(1.0 - (self.erased - 1) * ATTENUATION, 0.0)
            incr = 1.0 / olen
            lw, rw = (1.0 - incr) * gain, incr
            for i in range(olen):
                frame[i] = _short(lw * tail[i] + rw * frame[i])
                lw -= incr * gain
                rw += incr
            self.erased = 0
        return self._save(frame)

    def lost(self) -> np.ndarray:
        if self.erased == 0:
            self.pitchbuf = self.history.astype(np.float64)
            self.pitch = self._find_pitch()
            self.poverlap = self.pitch >> 2
            end = self.history_len
            self.lastq[:self.poverlap] = self.pitchbuf[end - self.poverlap:end]
            self.poffset, self.pitchblen = 0, self.pitch
            self._blend_start()
            self.history[end - self.poverlap:] = np.trunc(self.pitchbuf[end - self.poverlap:end]).astype(np.int16)
            out = self._speech(self.frame)
        elif self.erased in (1, 2):
            saved = self.poffset
            tmp = self._speech(self.poverlap)
            self.poffset = saved
            while self.poffset > self.pitch:
                self.poffset -= self.pitch
            self.pitchblen += self.pitch
            self._blend_start()
            out = self._speech(self.frame)
            incr = 1.0 / self.poverlap
            lw, rw = 1.0 - incr, incr
            for i in range(self.poverlap):
                out[i] = _short(lw * tmp[i] + rw * out[i])
                lw -= incr
                rw += incr
            out = self._scale(out)
        elif self.erased >= SILENT_AFTER:
            out = np.zeros(self.frame, dtype=np.int16)
        else:
            out = self._scale(self._speech(self.frame))
        self.erased += 1
        return self._save(out)

    def _blend_start(self) -> None:
        # The pitch buffer's first quarter period blends into the last one, so that the repeat is smooth.
        start, end, n = self.history_len - self.pitchblen, self.history_len, self.poverlap
        incr = 1.0 / n
        lw, rw = 1.0 - incr, incr
        left, right = self.lastq[:n].copy(), self.pitchbuf[start - n:start].copy()
        for i in range(n):
            self.pitchbuf[end - n + i] = min(max(lw * left[i] + rw * right[i], -32768.0), 32767.0)
            lw -= incr
            rw += incr

    def _speech(self, count: int) -> np.ndarray:
        start = self.history_len - self.pitchblen
        out = np.zeros(count, dtype=np.int16)
        done = 0
        while done < count:
            cnt = min(self.pitchblen - self.poffset, count - done)
            out[done:done + cnt] = np.trunc(self.pitchbuf[start + self.poffset:start + self.poffset + cnt])
            self.poffset += cnt
            if self.poffset == self.pitchblen:
                self.poffset = 0
            done += cnt
        return out

    def _scale(self, out: np.ndarray) -> np.ndarray:
        gain = 1.0 - (self.erased - 1) * ATTENUATION
        step = ATTENUATION / self.frame
        scaled = np.zeros_like(out)
        for i in range(self.frame):
            scaled[i] = int(out[i] * gain)
            gain -= step
        return scaled

    def _save(self, frame: np.ndarray) -> np.ndarray:
        self.history = np.concatenate([self.history[self.frame:], frame])
        start = self.history_len - self.frame - self.overlap_max
        return self.history[start:start + self.frame].copy()

    def _find_pitch(self) -> int:
        buf, end = self.pitchbuf, self.history_len
        corr_buf = self.corr_len + self.pitch_max
        diff = self.pitch_max - self.pitch_min
        left = buf[end - self.corr_len:end]

        def score(offset: int, step: int) -> float:
            right = buf[end - corr_buf + offset:end - corr_buf + offset + self.corr_len]
            energy = float(np.dot(right[::step], right[::step]))
            return float(np.dot(right[::step], left[::step])) / math.sqrt(max(energy, 250.0))

        best, match = score(0, self.decimation), 0
        for j in range(self.decimation, diff + 1, self.decimation):
            corr = score(j, self.decimation)
            if corr >= best:
                best, match = corr, j
        low, high = max(match - (self.decimation - 1), 0), min(match + (self.decimation - 1), diff)
        best, fine = score(low, 1), low
        for j in range(low + 1, high + 1):
            corr = score(j, 1)
            if corr > best:
                best, fine = corr, j
        return self.pitch_max - fine


def _short(value: float) -> int:
    return int(min(max(value, -32768.0), 32767.0))


def conceal(samples: np.ndarray, rate: int, lost: Collection[int]) -> tuple[np.ndarray, dict[str, Any]]:
    """The int16 signal with each lost 10 ms frame (index into the signal's 10 ms frames) concealed as
    G.711 Appendix I does, and the facts of what was done."""
    if rate % 8000:
        raise ValueError(f"G.711 Appendix I runs at 8 kHz or a multiple; this signal is at {rate} Hz")
    plc = _Concealer(rate // 8000)
    frame = plc.frame
    count = math.ceil(len(samples) / frame)
    padded = np.zeros((count + 1) * frame, dtype=np.int16)
    padded[:len(samples)] = samples
    out = []
    for index in range(count + 1):  # one frame more, to flush the reference's 3.75 ms delay
        out.append(plc.lost() if index in lost else plc.good(padded[index * frame:(index + 1) * frame]))
    joined = np.concatenate(out)[plc.overlap_max:plc.overlap_max + len(samples)]
    silent = sum(1 for index in lost if index < count and _run_position(lost, index) >= SILENT_AFTER)
    return joined, {"lost_frames": len([i for i in lost if i < count]), "silent_frames": silent,
                    "frame_ms": 10, "pitch_search_hz": [8000 * (rate // 8000) // plc.pitch_max,
                                                       8000 * (rate // 8000) // plc.pitch_min]}


def _run_position(lost: Collection[int], index: int) -> int:
    """How many lost frames come right before `index`."""
    back = 0
    while index - back - 1 in lost:
        back += 1
    return back
