"""The baseline server: a no-op admission webhook on tenantgate's own uvicorn + TLS stack.

It parses each AdmissionReview with orjson and answers ``allowed: true`` for its uid, as a
policy engine's cheapest possible path would. It is served by
:class:`admission.server.WebhookServer`, like ``tenantgate serve``: same socket setup, uvicorn
configuration and TLS context, so the difference between the two is tenantgate's own work.

``python -m bench.baseline`` serves it with settings from ``TENANTGATE_*`` (cert dir, ports).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from admission.app import read_body
from admission.logs import configure_logging
from admission.server import WebhookServer
from admission.settings import Settings

logger = logging.getLogger(__name__)

_HEADERS = [(b"content-type", b"application/json")]


def answer(body: bytes) -> tuple[int, bytes]:
    """(HTTP status, response body) for one request body."""
    try:
        review = orjson.loads(body)
        request = review["request"]
        uid = request["uid"]
        api_version = review["apiVersion"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return 400, b"not an AdmissionReview"
    response: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }
    return 200, orjson.dumps(response)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every POST with ``allowed: true``; anything else is 404 (health checks: 200)."""
    if scope["type"] != "http":
        return
    if scope["method"] == "POST":
        status, payload = answer(await read_body(receive))
    elif scope["path"] in ("/healthz", "/readyz"):
        status, payload = 200, b"ok"
    else:
        status, payload = 404, b"not found"
    headers = [*_HEADERS, (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def main() -> int:
    settings = Settings()
    configure_logging(settings.log_format, settings.log_level)
    server = WebhookServer(settings, app=app, metrics_app=app)
    asyncio.run(server.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
