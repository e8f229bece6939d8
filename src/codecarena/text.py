"""Text from outside the program (file names, a codec's error messages, a tool's output) made safe
to print: one line, nothing a terminal would act on; and the one way to make a console that prints it
as written (`make_console`).

Every console codecarena prints through comes from `make_console`, which turns Rich markup off: the
text printed is full of values from files and the command line (a manifest's language, a codec
spec, a URL, a path, a reason from a row) that Rich would otherwise read as tags, and swallow
(`[bold]`) or crash on (`[/x]`). Colour is given as `style=` or with a `rich.text.Text`, never as
markup. Rich is imported only when a console is made: the parser imports this module, and must not
wait for Rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def printable(text: str) -> str:
    """`text` with every character that is not printable (newlines, escapes, undecodable bytes of a
    file name) written as Python escapes it, so a name keeps a one-line message one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)


def make_console(**options: Any) -> Console:
    """A console that prints every string as written (no markup, no highlighting)."""
    from rich.console import Console

    return Console(markup=False, highlight=False, **options)
