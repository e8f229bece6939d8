"""Small HTML pieces every section of the report uses."""

from __future__ import annotations

import base64
import html
from typing import Any

from codecarena.results.formatting import spec_parts, weights_label


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def num_td(value: float | None, text: str, extra: str = "", cls: str = "") -> str:
    """A table cell showing `text` that sorts by the full-precision `value`."""
    v = "" if value is None else repr(float(value))
    c = f' class="{cls}"' if cls else ""
    return f'<td data-v="{v}"{c}>{esc(text)}{extra}</td>'


def spec_html(codec: str) -> str:
    """A codec configuration that a narrow cell may wrap only before its `@` or after a `,` (`<wbr>`
    there; report.css keeps `.spec` from breaking anywhere else), never inside a `key=value`."""
    return '<span class="spec">' + "<wbr>".join(esc(part) for part in spec_parts(codec)) + "</span>"


def weights_pill(weights: str, user_codec: str = "", runtime: str = "") -> str:
    kind = "user-codec" if user_codec else weights
    return f'<span class="pill {esc(kind)}">{esc(weights_label(weights, user_codec, runtime))}</span>'


def kv(pairs: list[tuple[str, Any]]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def code(value: Any) -> str:
    return f"<code>{esc(value)}</code>"


def short_sha(value: Any) -> str:
    """A sha256 cut to 12 hex digits, whole on hover; any other value as it is."""
    text = str(value)
    return f'<span class="mono" title="{esc(text)}">{esc(text[:12])}</span>' if len(text) == 64 else esc(text)
