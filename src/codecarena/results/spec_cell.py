"""A codec configuration in a Rich table cell or header (`Spec`): wrapped only between its parts
(`results.formatting.spec_parts`), never inside a `key=value` (issue 38). The terminal's tables
(console.py) and a comparison's text (compare_text.py) both use it."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from codecarena.results.formatting import spec_parts


def spec_lines(spec: str, width: int) -> list[str]:
    """The configuration in lines of at most `width` cells, broken only between its parts (a part wider
    than `width` alone on its line: whoever renders it folds it, the last resort)."""
    lines = [""]
    for part in spec_parts(spec):
        if lines[-1] and cell_len(lines[-1] + part) > width:
            lines.append("")
        lines[-1] += part
    return lines


class Spec:
    """A codec configuration in a Rich table cell or header: as narrow as its widest part, as wide as
    the whole, and wrapped only between its parts (`spec_lines`)."""

    def __init__(self, spec: str, style: str = "") -> None:
        self.spec = spec
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((cell_len(part) for part in spec_parts(self.spec)), default=0)
        return Measurement(min(widest, options.max_width), min(cell_len(self.spec), options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text("\n".join(spec_lines(self.spec, options.max_width)), style=self.style,
                   justify=options.justify or "left", overflow="fold")
