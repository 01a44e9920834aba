"""The ``Warning`` response headers, recorded as the real server's warning recorder does.

``staging/src/k8s.io/apiserver/pkg/endpoints/filters/warning.go`` (``recorder.AddWarning``):
texts are deduplicated; once their total length would pass 4096 characters (runes, not
bytes), every warning is cut to 256 characters and replayed, and later ones are added only
while the total is still below the limit. ``apimachinery/pkg/util/net/http.go``
(``NewWarningHeader``) refuses a text with a control character (a newline, a tab), so such a
warning is dropped.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

TRUNCATE_AT_TOTAL_RUNES = 4 * 1024
TRUNCATE_ITEM_RUNES = 256


def _header(text: str) -> str | None:
    """``NewWarningHeader(299, "-", text)``, or None when the text is refused."""
    if any(unicodedata.category(c) == "Cc" for c in text):
        return None
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def warning_headers(texts: Iterable[str]) -> list[str]:
    """The ``Warning`` header values for ``texts`` added in order to one response."""
    recorded: set[str] = set()
    ordered: list[str] = []
    headers: list[str] = []
    written = 0
    truncating = False
    for text in texts:
        if not text:
            continue
        if written >= TRUNCATE_AT_TOTAL_RUNES and truncating:
            break  # nothing more fits; the real recorder returns early for every later text
        if text in recorded:
            continue
        recorded.add(text)
        ordered.append(text)
        length = len(text)
        if truncating and length > TRUNCATE_ITEM_RUNES:
            text, length = text[:TRUNCATE_ITEM_RUNES], TRUNCATE_ITEM_RUNES
        header = _header(text)
        if header is None:
            continue
        if written + length <= TRUNCATE_AT_TOTAL_RUNES or truncating:
            written += length
            headers.append(header)
            continue
        # Over the limit: from now on every warning is truncated; replay those recorded so far.
        truncating = True
        written = 0
        headers = []
        for earlier in ordered:
            cut = earlier[:TRUNCATE_ITEM_RUNES]
            replayed = _header(cut)
            if replayed is not None:
                written += len(cut)
                headers.append(replayed)
    return headers
