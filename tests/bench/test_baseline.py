"""The no-op baseline webhook: parse the review, answer allowed for its uid."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import orjson

from bench.baseline import answer, app


def test_answer_echoes_uid_and_api_version() -> None:
    body = orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview",
            "request": {"uid": "u-7"},
        }
    )

    status, payload = answer(body)

    assert status == 200
    assert orjson.loads(payload) == {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-7", "allowed": True},
    }


def test_what_is_not_a_review_is_a_400() -> None:
    for body in (b"{not json", b"[]", b'{"request": {}}', b'{"request": 1, "apiVersion": "v"}'):
        assert answer(body)[0] == 400


def call(method: str, path: str, body: bytes = b"") -> tuple[int, bytes, dict[bytes, bytes]]:
    messages: list[MutableMapping[str, Any]] = []
    chunks = [
        {"type": "http.request", "body": body[:5], "more_body": True},
        {"type": "http.request", "body": body[5:], "more_body": False},
    ]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        messages.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(app(scope, receive, send))
    start, payload = messages
    return start["status"], payload["body"], dict(start["headers"])


def test_asgi_app_answers_posts_and_health_checks() -> None:
    review = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "request": {"uid": "abc"}})

    status, body, headers = call("POST", "/mutate", review)

    assert status == 200
    assert orjson.loads(body)["response"] == {"uid": "abc", "allowed": True}
    assert headers[b"content-length"] == str(len(body)).encode()
    assert call("GET", "/readyz")[0] == 200
    assert call("GET", "/elsewhere")[0] == 404
