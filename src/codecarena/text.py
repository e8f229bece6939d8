"""Text from outside the program (file names, a codec's error messages, a tool's output) made safe
to print: one line, nothing a terminal would act on."""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with every character that is not printable (newlines, escapes, undecodable bytes of a
    file name) written as Python escapes it, so a name keeps a one-line message one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)
