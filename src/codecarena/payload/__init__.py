"""On-disk payload container, format version 1.

An encoder writes one payload file per utterance and a fresh decoder process
gets nothing but that file, so the file must carry everything the decoder
needs, and a damaged or foreign file must be rejected with a message that says
what is wrong with it. The byte layout is specified in docs/payload-format.md;
change the two together.

The package: `fields` (limits, PayloadError, validators), `packing` (bit packing, packet lengths),
`model` (CodeStream, PacketStream, Payload), `container` (bytes and files).
"""

from codecarena.payload.container import decode_header, decode_payload, encode_payload, read_payload, write_payload
from codecarena.payload.fields import FORMAT_VERSION, JSON, MAGIC, PayloadError
from codecarena.payload.model import CodeStream, PacketStream, Payload, Stream
from codecarena.payload.packing import pack_codes, unpack_codes

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "JSON",
    "CodeStream",
    "PacketStream",
    "Payload",
    "PayloadError",
    "Stream",
    "decode_header",
    "decode_payload",
    "encode_payload",
    "pack_codes",
    "read_payload",
    "unpack_codes",
    "write_payload",
]
