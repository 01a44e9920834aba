"""The status page's files: served from the package, with a strict Content-Security-Policy.

What the page shows is tested in a real browser (tests/integration/test_status_page.py).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

import admission
from admission.statuspage import ASSETS, CONTENT_SECURITY_POLICY, statuspage_routes

WEB = Path(admission.__file__).resolve().parent / "web"


def get(path: str) -> httpx.Response:
    app = Starlette(routes=statuspage_routes())

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://metrics") as client:
            return await client.get(path)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("path", "media_type"),
    [("/", "text/html; charset=utf-8")] + [(f"/ui/{name}", kind) for name, kind in ASSETS.items()],
)
def test_each_file_is_served_with_the_security_headers(path: str, media_type: str) -> None:
    response = get(path)

    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    name = "index.html" if path == "/" else path.removeprefix("/ui/")
    assert response.content == (WEB / name).read_bytes()


def test_only_the_packaged_files_are_served() -> None:
    assert get("/ui/secrets.txt").status_code == 404
    assert get("/ui/..%2F__init__.py").status_code == 404


def test_the_policy_allows_nothing_from_elsewhere_and_no_inline_code() -> None:
    directives = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["default-src"] == "'none'"
    for directive in ("script-src", "style-src", "img-src", "connect-src"):
        assert directives[directive] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_the_page_has_no_inline_script_or_style_and_the_script_never_parses_html() -> None:
    page = (WEB / "index.html").read_text()
    script = (WEB / "statuspage.js").read_text()

    assert re.findall(r"<script[^>]*>", page) == ['<script src="/ui/statuspage.js" defer>']
    assert "<style" not in page
    assert " style=" not in page
    assert not re.search(r"\bon[a-z]+=", page)  # no inline event handlers
    # Data reaches the page through textContent only.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    # Nothing is fetched but the two read-only documents.
    assert set(re.findall(r"`(/[a-z]+)\?", script)) == {"/status", "/queue"}
    assert "method:" not in script
