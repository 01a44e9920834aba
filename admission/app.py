"""The webhook's ASGI apps, each wired in one factory.

:func:`create_app` serves the admission endpoints (HTTPS) plus health and metrics;
:func:`create_metrics_app` serves health and metrics alone (the plain-HTTP port). The admission
handlers only decode, call the :class:`~tenants.verdicts.Admitter`, and encode. Two error
channels: a request that is not a well-formed AdmissionReview gets an HTTP 4xx with a one-line
plain-text reason; a policy decision is HTTP 200 with ``allowed`` and ``status``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from admission.bodylimit import BodyLimitMiddleware
from admission.health import Readiness, health_routes
from admission.metrics import ENDPOINTS, OTHER_DENIAL, Metrics, endpoint_label, metrics_route
from admission.patch import PatchError, encoded_json_patch
from admission.reviews import (
    NESTED_TOO_DEEPLY,
    ObjectView,
    Review,
    ReviewError,
    decode_review,
    encode_response,
    one_line,
)
from admission.settings import Settings
from classifier import podview
from tenants.ledger import LedgerUnavailable
from tenants.recent import RecentDecisions
from tenants.verdicts import Admitter, Verdict

logger = logging.getLogger(__name__)

Endpoint = Literal["mutate", "validate"]
JSON_MEDIA_TYPE: Final = "application/json"
_JSON_CONTENT_TYPE: Final = JSON_MEDIA_TYPE.encode()
_TEXT_CONTENT_TYPE: Final = b"text/plain; charset=utf-8"


def create_app(
    settings: Settings,
    *,
    admitter: Admitter,
    readiness: Readiness,
    metrics: Metrics,
    clock: Callable[[], float] = time.time,
    recent: RecentDecisions | None = None,
) -> Starlette:
    """The webhook app: ``POST /mutate``, ``POST /validate``, ``GET /healthz|/readyz|/metrics``.

    ``clock`` gives the ``now`` (Unix seconds) handed to the admitter. Request bodies over
    ``settings.max_body_bytes`` are refused with 413, and bodies not received within
    ``settings.body_timeout_seconds`` with 408, before any handler runs. Pod denials (dry runs
    excluded) go to ``recent``, for ``/status`` and the status page.
    """

    def count_refused(scope: Scope, status: int, reason: str) -> None:
        metrics.count_http_error(endpoint_label(scope.get("path", "")), code=status, reason=reason)

    mutate, validate = (
        ReviewHandler(endpoint, admitter=admitter, metrics=metrics, clock=clock, recent=recent)
        for endpoint in ENDPOINTS
    )
    routes: list[BaseRoute] = [
        # ReviewRoutes answers every POST to these; the routes give other methods their 405.
        Route("/mutate", mutate, methods=["POST"], name="mutate"),
        Route("/validate", validate, methods=["POST"], name="validate"),
        *health_routes(readiness),
        metrics_route(metrics),
    ]
    middleware = [
        Middleware(
            BodyLimitMiddleware,
            max_body_bytes=settings.max_body_bytes,
            body_timeout=settings.body_timeout_seconds,
            on_reject=count_refused,
        ),
        Middleware(ReviewRoutes, handlers={"/mutate": mutate, "/validate": validate}),
    ]
    return Starlette(routes=routes, middleware=middleware)


class ReviewRoutes:
    """Sends each ``POST /mutate`` and ``/validate`` straight to its handler.

    Reviews are nearly all of the traffic, and each one is a single buffered body in and a
    single JSON body out: routing them here, after the body limit, spares them Starlette's
    router and its request and response objects. Everything else (other methods, health,
    metrics) goes on to the Starlette app.
    """

    def __init__(self, app: ASGIApp, *, handlers: Mapping[str, ReviewHandler]) -> None:
        self.app = app
        self.handlers = dict(handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.handlers.get(scope["path"])
            if handler is not None:
                await handler(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_metrics_app(
    *, readiness: Readiness, metrics: Metrics, extra_routes: Sequence[BaseRoute] = ()
) -> Starlette:
    """The plain-HTTP app: ``GET /metrics``, ``/healthz``, ``/readyz`` and ``extra_routes``."""
    routes: list[BaseRoute] = [metrics_route(metrics), *health_routes(readiness), *extra_routes]
    return Starlette(routes=routes)


class ReviewHandler:
    """Answers the AdmissionReviews POSTed to one endpoint.

    The admitter must treat ``request.object`` as read-only and return mutations as a new object
    in ``Verdict.patched``: the patch is the difference between the two.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        admitter: Admitter,
        metrics: Metrics,
        clock: Callable[[], float],
        recent: RecentDecisions | None = None,
    ) -> None:
        self.endpoint: Endpoint = endpoint
        # Each endpoint builds only the part of a pod that its decision reads (or writes).
        self._objects: ObjectView = "mutation" if endpoint == "mutate" else "validation"
        self._admitter = admitter
        self._metrics = metrics
        self._clock = clock
        self._recent = recent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The endpoint, as an ASGI app."""
        body = await read_body(receive)
        content_type = _header(scope, b"content-type")
        status, payload, media_type = await self.answer(content_type, body, client=_client(scope))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", media_type),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    async def answer(
        self, content_type: str | None, body: bytes, *, client: str
    ) -> tuple[int, bytes, bytes]:
        """HTTP status, body and content type of the answer to one POSTed review."""
        started = time.perf_counter()
        with self._metrics.in_flight(self.endpoint):
            answered = await self._respond(content_type, body, client=client, started=started)
        self._metrics.observe_duration(self.endpoint, time.perf_counter() - started)
        return answered

    async def _respond(
        self, content_type: str | None, body: bytes, *, client: str, started: float
    ) -> tuple[int, bytes, bytes]:
        try:
            _require_json(content_type)
            review = decode_review(body, objects=self._objects)
        except ReviewError as exc:
            return self._refuse(client, exc.status_code, exc.reason, exc.category)
        except Exception as exc:
            # The decoders turn every malformed body into a ReviewError; anything else that
            # escapes them is still about the body, never worth a 500 and a closed connection.
            reason = f"malformed AdmissionReview: {type(exc).__name__}"
            return self._refuse(client, 400, reason, "undecodable")

        # The admitter runs on the event loop, never in a thread pool: its ledger store decides
        # how a check and its booking stay one step (the in-memory store never suspends between
        # them; the Kubernetes store awaits a compare-and-swap write).
        uid = review.request.uid
        try:
            verdict = await self._decide(review)
            patch = self._patch(review, verdict)
            payload = encode_response(
                api_version=review.api_version, uid=uid, verdict=verdict, patch=patch
            )
        except RecursionError:
            # Only a hostile object nests deep enough for the walk over it to run out of stack.
            return self._refuse(client, 400, NESTED_TOO_DEEPLY, "too_deep")
        except LedgerUnavailable as exc:
            # Only /mutate lets it through (/validate denies): failing the call lets the API
            # server apply the webhook's failurePolicy (Ignore: the pod goes on to /validate).
            logger.warning("%s: uid=%s: %s", self.endpoint, uid, exc.message)
            return self._refuse(client, 503, exc.message, "ledger_unavailable")
        except Exception as exc:
            logger.exception("%s: failed to review uid=%s", self.endpoint, uid)
            reason = (
                f"internal error reviewing request {uid}: {type(exc).__name__} "
                "(see the webhook logs)"
            )
            return self._refuse(client, 500, reason, "internal_error")

        self._metrics.observe_review(
            self.endpoint,
            operation=review.request.operation,
            allowed=verdict.allowed,
            dry_run=review.request.dry_run,
        )
        self._metrics.observe_decision(self.endpoint, review.request, verdict)
        if not verdict.allowed and self._recent is not None:
            self._remember_denial(review, verdict)
        self._log(review, verdict, patched=patch is not None, started=started)
        return 200, payload, _JSON_CONTENT_TYPE

    async def _decide(self, review: Review) -> Verdict:
        if self.endpoint == "mutate":
            return await self._admitter.mutate(review.request, now=self._clock())
        return await self._admitter.validate(review.request, now=self._clock())

    def _patch(self, review: Review, verdict: Verdict) -> str | None:
        """The base64 JSONPatch for ``verdict``, or ``None`` when nothing changes."""
        if not verdict.allowed or verdict.patched is None:
            return None
        if self.endpoint != "mutate":
            # The API server rejects any patch from a validating webhook.
            logger.debug("validate: ignoring patched object for uid=%s", review.request.uid)
            return None
        original = review.request.object
        if original is None:
            raise PatchError("the admitter patched a request that has no object")
        return encoded_json_patch(original, verdict.patched)

    def _refuse(
        self, client: str, status: int, reason: str, category: str
    ) -> tuple[int, bytes, bytes]:
        reason = one_line(reason)
        if status < 500:
            logger.warning("%s: %d from client %s: %s", self.endpoint, status, client, reason)
        self._metrics.count_http_error(self.endpoint, code=status, reason=category)
        return status, reason.encode(), _TEXT_CONTENT_TYPE

    def _remember_denial(self, review: Review, verdict: Verdict) -> None:
        # Denials only: allowed reviews, nearly all of the traffic, never get here.
        request = review.request
        if self._recent is None or request.dry_run or request.kind != "Pod" or request.group:
            return
        name = request.name or podview.name(request.object or request.old_object or {})
        self._recent.denied(
            at=self._clock(),
            tenant=self._metrics.tenant_of(request.namespace) or "",
            pod=f"{request.namespace}/{name}",
            operation=request.operation,
            endpoint=self.endpoint,
            cause=verdict.cause or OTHER_DENIAL,
            message=verdict.message,
        )

    def _log(self, review: Review, verdict: Verdict, *, patched: bool, started: float) -> None:
        request = review.request
        # Allowed reviews are the bulk of the traffic; denials are what an operator looks for.
        level = logging.DEBUG if verdict.allowed else logging.INFO
        if not logger.isEnabledFor(level):
            return
        name = request.name or podview.name(request.object or request.old_object or {})
        duration_ms = (time.perf_counter() - started) * 1000
        denial = "" if verdict.allowed else f" code={verdict.code} message={verdict.message!r}"
        logger.log(
            level,
            "%s uid=%s %s %s %s/%s allowed=%s%s patched=%s dry_run=%s duration_ms=%.2f",
            self.endpoint,
            request.uid,
            request.operation,
            review.resource or request.kind,
            request.namespace,
            name,
            str(verdict.allowed).lower(),
            denial,
            str(patched).lower(),
            str(request.dry_run).lower(),
            duration_ms,
            extra={
                "endpoint": self.endpoint,
                "uid": request.uid,
                "operation": request.operation,
                "namespace": request.namespace,
                "object_name": name,
                "allowed": verdict.allowed,
                "dry_run": request.dry_run,
                "duration_ms": round(duration_ms, 3),
            },
        )


async def read_body(receive: Receive) -> bytes:
    """A request's whole body from its ASGI ``receive`` (what arrived, on a disconnect)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # a disconnect: the answer will go nowhere
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _require_json(content_type: str | None) -> None:
    if content_type is not None and _media_type(content_type) == JSON_MEDIA_TYPE:
        return
    shown = f'"{one_line(content_type, limit=60)}"' if content_type is not None else "nothing"
    raise ReviewError(
        400, f"Content-Type must be {JSON_MEDIA_TYPE}, got {shown}", category="content_type"
    )


def _media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()
