"""Test support: TLS material, small in-test HTTPS webhooks, and Kubernetes clients."""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from kubernetes import client, config, watch
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from certs.files import certificates_pem, private_key_pem
from certs.issuing import LOCAL_IPS, Issued, issue_ca, issue_serving

Handler = Callable[[dict[str, Any]], dict[str, Any]]
# The generated client types every request body as a pydantic model and every response field as
# Optional. These tests send plain JSON bodies, as most callers do, and read fields the server
# always sets; the API handles are therefore used untyped.
Api = Any
_WARNING = re.compile(r'299 - "((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class TLSMaterial:
    """A CA and a serving certificate it signed, written to ``directory``."""

    ca: Issued
    ca_pem: bytes
    cert_file: Path
    key_file: Path

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode("ascii")


def make_tls(directory: Path, *, dns_names: tuple[str, ...] = ("localhost",)) -> TLSMaterial:
    now = datetime.now(UTC)
    ca = issue_ca(now=now, valid_for=timedelta(days=1))
    serving = issue_serving(
        ca, dns_names=dns_names, ip_addresses=LOCAL_IPS, now=now, valid_for=timedelta(days=1)
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_file = directory / "tls.crt"
    key_file = directory / "tls.key"
    cert_file.write_bytes(certificates_pem([serving.certificate]))
    key_file.write_bytes(private_key_pem(serving.key))
    return TLSMaterial(ca, certificates_pem([ca.certificate]), cert_file, key_file)


def allow(**fields: Any) -> Handler:
    """A handler answering ``allowed: true`` plus ``fields``."""
    return lambda review: {"allowed": True, **fields}


def json_patch(*operations: dict[str, Any]) -> dict[str, Any]:
    """Response fields carrying a base64 JSONPatch."""
    return {
        "patchType": "JSONPatch",
        "patch": base64.b64encode(orjson.dumps(list(operations))).decode("ascii"),
    }


class WebhookServer:
    """An HTTPS webhook on port 0: each path answers AdmissionReviews with a handler and
    records every review it received."""

    def __init__(self, tls: TLSMaterial) -> None:
        self._tls = tls
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self.reviews: dict[str, list[dict[str, Any]]] = {}
        self.release = threading.Event()  # handlers may block on it (to outlast a timeout)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    def route(self, path: str, handler: Handler) -> str:
        with self._lock:
            self._handlers[path] = handler
            self.reviews.setdefault(path, [])
        return self.url(path)

    def received(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.reviews.get(path, []))

    def requests(self, path: str) -> list[dict[str, Any]]:
        return [review["request"] for review in self.received(path)]

    @property
    def port(self) -> int:
        if self._socket is None:
            raise RuntimeError("not started")
        port: int = self._socket.getsockname()[1]
        return port

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    async def _endpoint(self, request: Request) -> Response:
        review = orjson.loads(await request.body())
        path = request.url.path
        with self._lock:
            handler = self._handlers.get(path)
            self.reviews.setdefault(path, []).append(review)
        if handler is None:
            return Response(b"no such webhook", status_code=404)
        answer = await asyncio.to_thread(handler, review)
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], **answer},
        }
        # Connection: close, so that no idle TLS connection from the API server outlives this
        # test server (closing one waits for the peer's close_notify, which an idle pool never
        # sends).
        return Response(
            orjson.dumps(body), media_type="application/json", headers={"Connection": "close"}
        )

    def start(self) -> WebhookServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self._socket = sock
        app = Starlette(routes=[Route("/{path:path}", self._endpoint, methods=["POST"])])
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_config=None,
                access_log=False,
                ssl_certfile=str(self._tls.cert_file),
                ssl_keyfile=str(self._tls.key_file),
                timeout_graceful_shutdown=1,
            )
        )
        self._server = server
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True
        )
        self._thread.start()
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError("webhook server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        if self._socket is not None:
            self._socket.close()


_WATCH: Any = watch.Watch
_NEW_CLIENT: Any = config.new_client_from_config


def api(kind: type[Any], api_client: Api) -> Api:
    """An API group handle (``client.CoreV1Api``...) on ``api_client``, used untyped."""
    return kind(api_client)


def watch_events(list_call: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Events of a watch made by the client's own ``Watch`` helper (which resumes after a
    dropped connection and raises on 410)."""
    events: Iterator[dict[str, Any]] = _WATCH().stream(list_call, *args, **kwargs)
    return events


def new_client(kubeconfig: Path) -> Api:
    api_client: Api = _NEW_CLIENT(config_file=str(kubeconfig))
    return api_client


def warnings_of(headers: Any) -> list[str]:
    """The texts of ``Warning: 299 - "..."`` headers (urllib3 joins repeated headers)."""
    if headers is None:
        return []
    value = headers.get("Warning") or headers.get("warning") or ""
    return [m.replace('\\"', '"').replace("\\\\", "\\") for m in _WARNING.findall(value)]


def pod(
    name: str = "", *, generate_name: str = "", labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if name:
        metadata["name"] = name
    if generate_name:
        metadata["generateName"] = generate_name
    if labels:
        metadata["labels"] = labels
    body_spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "registry.example/app:1.0"}]
    }
    body_spec.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body_spec}


def status_of(err: client.ApiException) -> dict[str, Any]:
    body = err.body
    parsed: dict[str, Any] = orjson.loads(body if body is not None else b"{}")
    return parsed


def crd(
    *,
    group: str = "example.com",
    kind: str = "Widget",
    plural: str = "widgets",
    scope: str = "Namespaced",
    versions: tuple[str, ...] = ("v1",),
    status: bool = True,
) -> dict[str, Any]:
    """A CustomResourceDefinition body; the first version is the storage version."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "shortNames": ["wd"],
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": index == 0,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    **({"subresources": {"status": {}}} if status else {}),
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
                    ],
                }
                for index, version in enumerate(versions)
            ],
        },
    }


def create_crd(api_client: Api, **options: Any) -> dict[str, Any]:
    body = crd(**options)
    api(client.ApiextensionsV1Api, api_client).create_custom_resource_definition(body)
    return body


PLACEHOLDER_BUNDLE = (
    "dGVuYW50Z2F0ZTogcmVwbGFjZSB3aXRoIHRoZSBvdXRwdXQgb2YgdGVuYW50Z2F0ZSBjZXJ0cyBjYS1idW5kbGU="
)
POD_RULE = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["pods"],
}


def hook(
    name: str,
    url: str,
    tls: TLSMaterial,
    *,
    rules: list[dict[str, Any]] | None = None,
    mutating: bool = False,
    **fields: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": url, "caBundle": tls.ca_bundle},
        "rules": rules if rules is not None else [POD_RULE],
        "sideEffects": "None",
        "failurePolicy": "Fail",
    }
    if mutating:
        body.setdefault("reinvocationPolicy", "Never")
    body.update(fields)
    return body


def register(api_client: Api, name: str, *hooks: dict[str, Any], mutating: bool) -> None:
    registration: Api = client.AdmissionregistrationV1Api(api_client)
    body = {"metadata": {"name": name}, "webhooks": list(hooks)}
    if mutating:
        registration.create_mutating_webhook_configuration(body)
    else:
        registration.create_validating_webhook_configuration(body)
