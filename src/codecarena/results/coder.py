"""A lossless coder for the bitrate ledger: an adaptive order-0 arithmetic (range) coder.

What a codec's symbols (a codebook's tokens, a packet stream's bytes) losslessly cost when each
symbol is coded with probabilities learnt from the symbols before it and nothing else. Deterministic
to the bit on every machine (integers only), and a real coder: `encode` returns the bytes, `decode`
gives the symbols back, and the ledger's rate is `8 * len(encode(...))`.

The model (per sequence): before symbol t, each symbol v seen so far has frequency n_v (its count),
and an escape has frequency E = the number of distinct symbols seen (1 before the first; 0 once the
whole alphabet is seen), out of n + E (PPM's escape method C, Moffat 1990). A seen symbol is coded
with its own frequency; a new one as the escape followed by its rank among the alphabet's unseen
symbols, uniformly. The coder is a 64-bit range coder with carry propagation as LZMA's (Martin 1979;
Pavlov's LZMA SDK): its output is one leading zero byte plus the interval's bytes plus at most 8
bytes flushed at the end, and it loses under 2**-16 bit a symbol to the integer division.
docs/ledger.md states the formulas.
"""

from __future__ import annotations

import numpy as np

#: What the ledger records about the coder it ran; the version changes whenever a coded length could.
CODER = {"name": "codecarena adaptive arithmetic coder", "version": 1,
         "model": "order-0 adaptive counts, PPM escape method C, new symbols uniform over the unseen",
         "coder": "64-bit range coder with carry propagation (LZMA-style)"}

_BITS = 64
_MASK = (1 << _BITS) - 1
_TOP = 1 << (_BITS - 8)
_FLUSH = _BITS // 8 + 1
#: Totals stay far below the range (>= 2**56 after normalising), so the division loses under 2**-16 bit.
MAX_SYMBOLS = 1 << 40
#: The largest alphabet coded (16-bit tokens): the model's tables grow with it.
MAX_ALPHABET = 1 << 16


class CoderError(ValueError):
    """Symbols the coder cannot code (out of the alphabet, too many); one line."""


def _check(symbols: np.ndarray, alphabet: int) -> np.ndarray:
    if not 1 <= alphabet <= MAX_ALPHABET:
        raise CoderError(f"alphabet of {alphabet} symbols is outside 1..{MAX_ALPHABET}")
    values = np.asarray(symbols)
    if values.ndim != 1:
        raise CoderError(f"symbols must be one sequence, got shape {values.shape}")
    if values.size >= MAX_SYMBOLS:
        raise CoderError(f"{values.size} symbols are more than the coder's {MAX_SYMBOLS}")
    values = values.astype(np.int64)
    if values.size and (values.min() < 0 or values.max() >= alphabet):
        raise CoderError(f"symbols must lie in 0..{alphabet - 1}, found {int(values.min())}..{int(values.max())}")
    return values


def _earlier_smaller(values: np.ndarray, alphabet: int, counts: np.ndarray | None = None) -> np.ndarray:
    """For each position, how many values before it are smaller: those of an earlier part of the
    sequence (`counts`: occurrences per symbol) and the earlier ones of this part. A histogram carried
    over blocks of 256 positions, plus the comparisons inside each block; a block costs about
    alphabet + 256**2 operations, and no alphabet coded is larger than 256**2."""
    n = values.size
    out = np.zeros(n, dtype=np.int64)
    block = 256
    carried = np.zeros(alphabet + 1, dtype=np.int64)  # carried[v + 1]: occurrences of v before the block
    if counts is not None:
        carried[1:] = counts
    earlier = np.tri(block, k=-1, dtype=bool)
    for start in range(0, n, block):
        part = values[start:start + block]
        size = part.size
        below = np.cumsum(carried)  # below[v]: earlier values < v
        within = ((part[None, :] < part[:, None]) & earlier[:size, :size]).sum(axis=1)
        out[start:start + size] = below[part] + within
        carried += np.bincount(part + 1, minlength=alphabet + 1)
    return out


def _earlier_equal(values: np.ndarray) -> np.ndarray:
    """For each position, how many values before it in `values` are equal to it."""
    n = values.size
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if n else np.zeros(0, dtype=np.int64)
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    out = np.empty(n, dtype=np.int64)
    out[order] = rank
    return out


# Symbols are modelled this many at a time (memory stays bounded whatever the sequence's length), and
# converted to Python integers for the coding loop in slices of _SLICE.
_CHUNK = 1 << 20
_SLICE = 1 << 16


class Encoder:
    """One sequence, fed in parts (a codebook's tokens utterance by utterance); `finish` returns the
    coded bytes. Its model state is the counts per symbol, which symbols were seen, and how many."""

    def __init__(self, alphabet: int) -> None:
        if not 1 <= alphabet <= MAX_ALPHABET:
            raise CoderError(f"alphabet of {alphabet} symbols is outside 1..{MAX_ALPHABET}")
        self.alphabet = alphabet
        self.counts = np.zeros(alphabet, dtype=np.int64)
        self.symbols = 0
        self.distinct = 0
        self.out = bytearray()
        self.low, self.range, self.cache, self.pending = 0, _MASK, 0, 1

    def _shift_low(self) -> None:
        if self.low < 0xFF << (_BITS - 8) or self.low > _MASK:
            carry = self.low >> _BITS
            self.out.append((self.cache + carry) & 0xFF)
            self.out.extend(((0xFF + carry) & 0xFF,) * (self.pending - 1))
            self.pending = 0
            self.cache = (self.low >> (_BITS - 8)) & 0xFF
        self.pending += 1
        self.low = (self.low << 8) & _MASK

    def _code(self, start: int, size: int, total: int) -> None:
        step = self.range // total
        self.low += step * start
        self.range = step * size
        while self.range < _TOP:
            self.range <<= 8
            self._shift_low()

    def feed(self, symbols: np.ndarray) -> None:
        """Code the next symbols (integers in 0..alphabet-1) of the sequence."""
        values = _check(symbols, self.alphabet)
        if self.symbols + values.size >= MAX_SYMBOLS:
            raise CoderError(f"more than the coder's {MAX_SYMBOLS} symbols in one sequence")
        for first in range(0, values.size, _CHUNK):
            self._feed(values[first:first + _CHUNK])

    def _feed(self, values: np.ndarray) -> None:
        """The model of the docstring above, vectorised over a chunk, then the coding loop."""
        alphabet, n = self.alphabet, values.size
        seen = self.counts[values] + _earlier_equal(values)
        new = seen == 0
        distinct = self.distinct + np.cumsum(new) - new  # distinct symbols before each position
        escape = np.where(distinct == alphabet, 0, np.maximum(distinct, 1))
        total = self.symbols + np.arange(n, dtype=np.int64) + escape
        start = escape + _earlier_smaller(values, alphabet, self.counts)
        # A new symbol's rank among the unseen: its value less the distinct smaller values seen before it.
        firsts = values[new]
        rank = firsts - _earlier_smaller(firsts, alphabet, (self.counts > 0).astype(np.int64))
        unseen = alphabet - distinct[new]
        firsts_left = iter(zip(rank.tolist(), unseen.tolist()))
        for at in range(0, n, _SLICE):
            part = slice(at, at + _SLICE)
            for is_new, s, count, e, t in zip(new[part].tolist(), start[part].tolist(), seen[part].tolist(),
                                              escape[part].tolist(), total[part].tolist()):
                if is_new:
                    r, u = next(firsts_left)
                    if t > e:  # the escape costs nothing while it is the only possibility
                        self._code(0, e, t)
                    if u > 1:
                        self._code(r, 1, u)
                    continue
                # A seen symbol with its own count: the common step, inline.
                step = self.range // t
                self.low += step * s
                self.range = step * count
                while self.range < _TOP:
                    self.range <<= 8
                    self._shift_low()
        self.counts += np.bincount(values, minlength=alphabet)
        self.symbols += n
        self.distinct += int(new.sum())

    def finish(self) -> bytes:
        """The coded sequence: the interval's bytes, flushed."""
        for _ in range(_FLUSH):
            self._shift_low()
        return bytes(self.out)


def encode(symbols: np.ndarray, alphabet: int) -> bytes:
    """The symbols (integers in 0..alphabet-1), coded as one sequence."""
    encoder = Encoder(alphabet)
    encoder.feed(symbols)
    return encoder.finish()


class _Counts:
    """Cumulative frequencies over the alphabet (a Fenwick tree): the decoder's model, sequential and
    independent of the encoder's vectorised one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.tree = [0] * (size + 1)
        self.step = 1 << (size.bit_length() - 1)

    def add(self, index: int, amount: int) -> None:
        index += 1
        while index <= self.size:
            self.tree[index] += amount
            index += index & -index

    def below(self, index: int) -> int:
        """Sum of entries 0..index-1."""
        total = 0
        while index > 0:
            total += self.tree[index]
            index -= index & -index
        return total

    def find(self, target: int) -> int:
        """The index whose cumulative interval holds target (entries are >= 0, target < the sum)."""
        pos, step = 0, self.step
        while step:
            nxt = pos + step
            if nxt <= self.size and self.tree[nxt] <= target:
                pos = nxt
                target -= self.tree[nxt]
            step >>= 1
        return pos


def decode(data: bytes, count: int, alphabet: int) -> np.ndarray:
    """`count` symbols back from `encode`'s bytes."""
    if not 1 <= alphabet <= MAX_ALPHABET:
        raise CoderError(f"alphabet of {alphabet} symbols is outside 1..{MAX_ALPHABET}")
    source = iter(data)
    code, rng = 0, _MASK
    for _ in range(_FLUSH):
        code = (code << 8) | next(source, 0)
    code &= _MASK
    counts = _Counts(alphabet)  # occurrences of each symbol so far
    unseen = _Counts(alphabet)  # 1 for each symbol not yet seen
    for v in range(alphabet):
        unseen.add(v, 1)
    out = np.empty(count, dtype=np.int64)
    distinct = 0

    def take(total: int) -> tuple[int, int]:
        step = rng // total
        return min(code // step, total - 1), step

    def consume(step: int, start: int, size: int) -> None:
        nonlocal code, rng
        code -= step * start
        rng = step * size
        while rng < _TOP:
            code = ((code << 8) | next(source, 0)) & _MASK
            rng <<= 8

    for t in range(count):
        escape = 0 if distinct == alphabet else max(distinct, 1)
        total = t + escape
        value, step = take(total)
        if value >= escape:
            symbol = counts.find(value - escape)
            start = counts.below(symbol)
            consume(step, escape + start, counts.below(symbol + 1) - start)
        else:
            if total > escape:
                consume(step, 0, escape)
            left = alphabet - distinct
            rank = 0
            if left > 1:
                rank, step = take(left)
                consume(step, rank, 1)
            symbol = unseen.find(rank)
            unseen.add(symbol, -1)
            distinct += 1
        counts.add(symbol, 1)
        out[t] = symbol
    return out
