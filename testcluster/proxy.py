"""A fault-injecting HTTPS proxy in front of the real kube-apiserver.

Tests point tenantgate at the proxy instead of the API server and arm faults from Python: error
answers, latency, conflict storms on updates, dropped watches and a compaction. Everything else
is passed through unchanged, streamed (watches included), so the server tenantgate talks to is
the real one. Clients authenticate with bearer tokens (the TLS session ends here, so a client
certificate would not reach the API server).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from testcluster.pki import KeyPair

logger = logging.getLogger(__name__)

_REASONS = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: injected fault"),
    404: ("NotFound", "the server could not find the requested resource"),
    409: ("Conflict", "Operation cannot be fulfilled: injected conflict"),
    410: ("Expired", "injected fault: the resource version is too old"),
    422: ("Invalid", "injected fault: the object is invalid"),
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
    ),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, "
        "but may still be processing the request",
    ),
}
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


@dataclass(frozen=True)
class RequestInfo:
    """A Kubernetes API request as faults match it (``k8s.io/apiserver/pkg/endpoints/request``'s
    RequestInfo, in short)."""

    path: str
    verb: str
    group: str
    plural: str
    name: str
    resource_version: str
    continue_token: str
    subresource: str = ""

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def request_info(method: str, path: str, query: str) -> RequestInfo | None:
    """Parse a resource request; None for anything else (``/version``, discovery...)."""
    parts = [part for part in path.split("/") if part]
    params = {key: values[-1] for key, values in parse_qs(query).items()}
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    plural, name = rest[0], rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        verb = ("watch" if params.get("watch") in ("1", "true") else "list") if not name else "get"
    else:
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }.get(method, method.lower())
    return RequestInfo(
        path,
        verb,
        group,
        plural,
        name,
        params.get("resourceVersion", ""),
        params.get("continue", ""),
        subresource,
    )


@dataclass(frozen=True)
class Match:
    verb: str | None = None
    resource: str | None = None
    path: str | None = None

    def matches(self, info: RequestInfo) -> bool:
        if self.verb is not None and self.verb != info.verb:
            return False
        if self.resource is not None and self.resource != info.resource:
            return False
        return self.path is None or info.path.startswith(self.path)

    def as_json(self) -> dict[str, str]:
        return {
            k: v
            for k, v in (("verb", self.verb), ("resource", self.resource), ("path", self.path))
            if v
        }


@dataclass
class _Latency:
    seconds: float
    match: Match
    remaining: int | None


@dataclass
class _Error:
    status: int
    reason: str
    message: str
    match: Match
    remaining: int


@dataclass
class _Cut:
    match: Match
    remaining: int


@dataclass
class _State:
    latencies: list[_Latency] = field(default_factory=list)
    errors: list[_Error] = field(default_factory=list)
    cuts: list[_Cut] = field(default_factory=list)
    conflicts: dict[str, int] = field(default_factory=dict)
    compacted: int = 0


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FaultProxy:
    """The proxy and the faults armed on it. Start it, point clients at :attr:`url`."""

    def __init__(self, upstream: str, *, ca: Path, serving: KeyPair) -> None:
        self.upstream = upstream.rstrip("/")
        self._ca = ca
        self._serving = serving
        self._lock = threading.Lock()
        self._state = _State()
        self._watches: set[httpx.Response] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None  # forwards: the caller's own credentials
        self._admin: httpx.AsyncClient | None = None  # the proxy's own reads
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.requests = 0
        # (user-agent's first word, verb, resource, subresource, HTTP status) -> count: what the
        # clients behind the proxy asked of the API server, and what it answered.
        self.seen: Counter[tuple[str, str, str, str, int]] = Counter()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # --- arming faults -----------------------------------------------------------------------

    def add_latency(
        self,
        seconds: float,
        *,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
        count: int | None = None,
    ) -> None:
        """Delay matching requests by ``seconds`` (the next ``count`` ones, or until cleared)."""
        if seconds < 0:
            raise ValueError("latency must not be negative")
        if count is not None and count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._state.latencies.append(_Latency(seconds, Match(verb, resource, path), count))

    def add_errors(
        self,
        status: int,
        *,
        count: int = 1,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``count`` matching requests with ``status`` and a Status body."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error code (400-599)")
        if count < 1:
            raise ValueError("count must be at least 1")
        default_reason, default_message = _REASONS.get(
            status, ("", f"injected fault: HTTP {status}")
        )
        with self._lock:
            self._state.errors.append(
                _Error(
                    status,
                    reason or default_reason,
                    message or default_message,
                    Match(verb, resource, path),
                    count,
                )
            )

    def cut_answers(
        self,
        *,
        count: int = 1,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
    ) -> None:
        """Pass the next ``count`` matching requests to the API server, then break the
        connection in the middle of its answer: the request took effect, the client cannot
        know it (a lost answer)."""
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._state.cuts.append(_Cut(Match(verb, resource, path), count))

    def _cut_for(self, info: RequestInfo) -> bool:
        with self._lock:
            for fault in self._state.cuts:
                if fault.match.matches(info):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._state.cuts.remove(fault)
                    return True
        return False

    def conflict_storm(self, resource: str, *, count: int) -> None:
        """The next ``count`` updates or patches of ``resource`` (``pods``,
        ``leases.coordination.k8s.io``) answer 409 Conflict, as if another writer won."""
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._state.conflicts[resource] = self._state.conflicts.get(resource, 0) + count

    def drop_watches(self) -> int:
        """End every open watch stream now; returns how many were open."""
        dropped: int = self._on_loop(self._close_watches())
        return dropped

    def compact_history(self) -> int:
        """As if etcd compacted at the current revision: every open watch ends, and watching or
        continuing a list from an older revision answers 410 Expired. Returns the revision."""
        revision: int = self._on_loop(self._current_revision())
        with self._lock:
            self._state.compacted = max(self._state.compacted, revision)
        self.drop_watches()
        return revision

    def clear(self) -> None:
        with self._lock:
            compacted = self._state.compacted
            self._state = _State(compacted=compacted)
        self.seen.clear()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "latencies": [
                    {"seconds": f.seconds, "remaining": f.remaining, **f.match.as_json()}
                    for f in self._state.latencies
                ],
                "errors": [
                    {
                        "status": f.status,
                        "reason": f.reason,
                        "message": f.message,
                        "remaining": f.remaining,
                        **f.match.as_json(),
                    }
                    for f in self._state.errors
                ],
                "conflicts": dict(self._state.conflicts),
                "openWatches": len(self._watches),
                "compactedResourceVersion": str(self._state.compacted),
            }

    # --- deciding ----------------------------------------------------------------------------

    def _latency_for(self, info: RequestInfo) -> float:
        total = 0.0
        with self._lock:
            for fault in list(self._state.latencies):
                if fault.match.matches(info):
                    total += fault.seconds
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self._state.latencies.remove(fault)
        return total

    def _error_for(self, info: RequestInfo) -> Response | None:
        with self._lock:
            for fault in self._state.errors:
                if fault.match.matches(info):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._state.errors.remove(fault)
                    headers = {"Retry-After": "1"} if fault.status == 429 else None
                    return _json(
                        fault.status,
                        status_body(fault.status, fault.reason, fault.message),
                        headers,
                    )
            if info.verb in ("update", "patch") and self._state.conflicts.get(info.resource, 0) > 0:
                self._state.conflicts[info.resource] -= 1
                if self._state.conflicts[info.resource] == 0:
                    del self._state.conflicts[info.resource]
                message = (
                    f"Operation cannot be fulfilled on {info.resource} "
                    f'"{info.name}": the object has been modified; '
                    "please apply your changes to the latest version and try again"
                )
                return _json(409, status_body(409, "Conflict", message))
            compacted = self._state.compacted
        return self._expired(info, compacted)

    def _expired(self, info: RequestInfo, compacted: int) -> Response | None:
        """410 for a continue token or watch from before the emulated compaction
        (``k8s.io/apiserver/pkg/storage/errors.go``: "too old resource version")."""
        if not compacted:
            return None
        if info.verb == "list" and info.continue_token:
            try:
                padded = info.continue_token + "=" * (-len(info.continue_token) % 4)
                token = json.loads(base64.urlsafe_b64decode(padded))
                revision = int(token.get("rv", 0))
            except (ValueError, TypeError):
                return None
            if revision < compacted:
                message = (
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter."
                )
                return _json(410, status_body(410, "Expired", message))
        if info.verb == "watch" and info.resource_version not in ("", "0"):
            try:
                revision = int(info.resource_version)
            except ValueError:
                return None
            if revision < compacted:
                message = f"too old resource version: {revision} ({compacted})"
                event = {"type": "ERROR", "object": status_body(410, "Expired", message)}
                return Response(json.dumps(event) + "\n", media_type="application/json")
        return None

    # --- serving -----------------------------------------------------------------------------

    async def _forward(self, request: Request) -> Response:
        self.requests += 1
        assert self._client is not None
        path = request.url.path
        query = request.url.query
        info = request_info(request.method, path, query)
        if info is not None:
            delay = self._latency_for(info)
            if delay:
                await asyncio.sleep(delay)
            injected = self._error_for(info)
            if injected is not None:
                return injected
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP]
        body = await request.body()
        upstream = self._client.build_request(
            request.method,
            f"{self.upstream}{path}" + (f"?{query}" if query else ""),
            headers=headers,
            content=body,
        )
        try:
            response = await self._client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            return _json(
                503, status_body(503, "ServiceUnavailable", f"proxy: upstream failed: {exc}")
            )
        if info is not None:
            agent = request.headers.get("user-agent", "").split("/", 1)[0]
            key = (agent, info.verb, info.resource, info.subresource, response.status_code)
            self.seen[key] += 1
        if info is not None and info.verb != "watch" and self._cut_for(info):
            body = await response.aread()
            await response.aclose()
            kept = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}

            async def broken() -> AsyncIterator[bytes]:
                yield body[: len(body) // 2]
                raise ConnectionAbortedError("fault proxy: answer cut")

            return StreamingResponse(broken(), status_code=response.status_code, headers=kept)
        watching = info is not None and info.verb == "watch"
        if watching:
            self._watches.add(response)
        out_headers = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}

        async def stream() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            except (httpx.HTTPError, RuntimeError):
                pass  # a dropped watch ends the stream cleanly, as a closed server connection does
            finally:
                self._watches.discard(response)
                await response.aclose()

        return StreamingResponse(stream(), status_code=response.status_code, headers=out_headers)

    async def _close_watches(self) -> int:
        open_now = list(self._watches)
        for response in open_now:
            self._watches.discard(response)
            await response.aclose()
        logger.info("dropped %d watch streams", len(open_now))
        return len(open_now)

    async def _current_revision(self) -> int:
        assert self._client is not None
        assert self._admin is not None
        response = await self._admin.get(
            f"{self.upstream}/api/v1/namespaces", params={"limit": "1"}
        )
        response.raise_for_status()
        return int(response.json()["metadata"]["resourceVersion"])

    def _on_loop(self, coroutine: Any) -> Any:
        if self._loop is None:
            raise RuntimeError("the proxy is not running")
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(30)

    def start(self, *, admin_cert: KeyPair) -> FaultProxy:
        """Serve on a free port of 127.0.0.1; ``admin_cert`` reads the current revision."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(512)
        self.port = sock.getsockname()[1]
        app = Starlette(
            routes=[
                Route(
                    "/{path:path}", self._forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]
                )
            ]
        )
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_config=None,
                access_log=False,
                ssl_certfile=str(self._serving.cert),
                ssl_keyfile=str(self._serving.key),
                timeout_graceful_shutdown=1,
                limit_concurrency=None,
            )
        )
        started = threading.Event()

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            trusting = ssl.create_default_context(cafile=str(self._ca))
            admin = ssl.create_default_context(cafile=str(self._ca))
            admin.load_cert_chain(str(admin_cert.cert), str(admin_cert.key))
            self._client = httpx.AsyncClient(
                verify=trusting,
                timeout=httpx.Timeout(None, connect=10.0),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
            self._admin = httpx.AsyncClient(verify=admin, timeout=30.0)
            started.set()
            try:
                await self._server.serve(sockets=[sock])  # type: ignore[union-attr]
            finally:
                await self._close_watches()
                await self._client.aclose()
                await self._admin.aclose()

        self._thread = threading.Thread(
            target=lambda: asyncio.run(serve()), name="fault-proxy", daemon=True
        )
        self._thread.start()
        started.wait(30)
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)


def _json(code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body), status_code=code, media_type="application/json", headers=headers
    )
