"""Channels: seeded packet loss, bursty loss and bit errors applied to a payload (docs/channel.md).

`spec` parses a channel, `models` draws what it loses or flips, `impair` writes the impaired payload and
its trace (and re-derives them for the audit), `receive` is the decoders' side: the losses they are
told of, and the arena's concealment for decoders without their own.
"""
