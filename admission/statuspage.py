"""The status page: a read-only page for people, at ``GET /`` on the metrics port.

The page (``admission/web/``: one HTML file, a stylesheet, a script and an icon, shipped as
package data) reads ``GET /status`` and ``GET /queue`` from the same origin and draws them:
tenants' usage bars, the selected tenant's queue, cohorts when ``/status`` has them, the
recent denials and releases, this replica's role, certificate, config and readiness. It has
no write action and needs nothing from outside the process: every response carries a
Content-Security-Policy that allows scripts, styles, images and requests from this origin
only, no inline code, no framing and no form.

The files are read once, when the routes are built, so serving them does no disk I/O.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS: Final = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    # Always revalidated: a page from an older tenantgate must not outlive an upgrade.
    "cache-control": "no-cache",
}
PAGE: Final = "index.html"
ASSETS: Final = {
    "statuspage.js": "text/javascript; charset=utf-8",
    "statuspage.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


def _read(name: str) -> bytes:
    return (resources.files("admission") / "web" / name).read_bytes()


def _response(body: bytes, media_type: str) -> Response:
    return Response(body, media_type=media_type, headers=_HEADERS)


def statuspage_routes() -> list[BaseRoute]:
    """``GET /`` (the page) and ``GET /ui/NAME`` (its script, stylesheet and icon)."""
    page = _read(PAGE)
    assets = {name: (_read(name), media_type) for name, media_type in ASSETS.items()}

    async def index(request: Request) -> Response:
        return _response(page, "text/html; charset=utf-8")

    async def asset(request: Request) -> Response:
        found = assets.get(request.path_params["name"])
        if found is None:
            return Response("not found", status_code=404, media_type="text/plain")
        body, media_type = found
        return _response(body, media_type)

    return [
        Route("/", index, methods=["GET"], name="statuspage"),
        Route("/ui/{name}", asset, methods=["GET"], name="statuspage-asset"),
    ]


__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "statuspage_routes"]
