"""A payload's streams as the ledger reads them: a code stream of at most TOKEN_MAX_BITS bits is
tokens of `codebooks` codebooks (every leading axis of its shape; its last axis is frames), anything
wider and every packet stream is bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from codecarena.payload import CodeStream, PacketStream, Payload, pack_codes

#: Codes of at most this many bits are tokens of a codebook; wider ones are coded as bytes.
TOKEN_MAX_BITS = 16


@dataclass(frozen=True)
class Layout:
    """A stream as the ledger reads it: tokens of `codebooks` codebooks, or bytes."""
    name: str
    kind: str  # "codes" or "packets"
    bit_width: int | None
    codebooks: int | None  # code streams: product of the shape's leading axes

    @property
    def tokens(self) -> bool:
        return self.kind == "codes" and self.bit_width is not None and self.bit_width <= TOKEN_MAX_BITS

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "bit_width": self.bit_width, "codebooks": self.codebooks,
                "unit": "token" if self.tokens else "byte"}


def layout_of(payload: Payload) -> tuple[Layout, ...]:
    out = []
    for stream in payload.streams:
        if isinstance(stream, CodeStream):
            out.append(Layout(stream.name, "codes", stream.bit_width, math.prod(stream.shape[:-1])))
        else:
            out.append(Layout(stream.name, "packets", None, None))
    return tuple(out)


def codebook_rows(stream: CodeStream) -> np.ndarray:
    """A token stream as (codebooks, frames)."""
    return np.asarray(stream.values, dtype=np.int64).reshape(math.prod(stream.shape[:-1]), stream.shape[-1])


def stream_bytes(stream: CodeStream | PacketStream) -> np.ndarray:
    """What a stream that is not tokens is coded as: its packets' bytes, or its codes' packed bits."""
    if isinstance(stream, PacketStream):
        data = b"".join(stream.packets)
    else:
        data = pack_codes(stream.values, stream.bit_width)
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)
