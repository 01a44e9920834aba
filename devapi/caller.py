"""Calling admission webhooks over HTTPS, as the real API server's webhook client does.

The server certificate is verified against the webhook's ``caBundle`` (or an operator-given CA
that overrides it, for configurations shipped with a placeholder). A ``service`` reference is
reached through an address the operator maps it to, while TLS still verifies the service's DNS
name (``<name>.<namespace>.svc``). Connections are pooled per CA and reused.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from devapi.types import JSONObject
from devapi.webhooks import Webhook

logger = logging.getLogger(__name__)

ADMISSION_V1 = "admission.k8s.io/v1"
# webhook/request/admissionreview.go (CreateAdmissionObjects): the versions the server speaks.
REVIEW_VERSIONS = ("v1", "v1beta1")
_MAX_ERROR_BODY = 256


class CallError(Exception):
    """The webhook could not be called or answered nonsense (``failurePolicy`` decides)."""


@dataclass(frozen=True)
class Target:
    """Where a webhook is: the URL the API server would use, and the address to dial."""

    url: str  # as the API server names it, e.g. https://svc.ns.svc:443/mutate?timeout=5s
    connect_url: str  # what is actually dialled
    server_name: str  # the TLS name to verify
    host_header: str


def new_request_uid() -> str:
    return str(uuid.uuid4())


def review_version(webhook: Webhook) -> str:
    """The first version of the webhook's ``admissionReviewVersions`` the server speaks."""
    for version in webhook.admission_review_versions:
        if version in REVIEW_VERSIONS:
            return version
    raise CallError(
        "could not create admission objects: webhook does not accept known AdmissionReview "
        "versions (v1, v1beta1)"
    )


class WebhookCaller:
    """Posts AdmissionReviews and returns their ``response``; one pooled client per CA."""

    def __init__(self, *, services: Mapping[str, str], ca_override: bytes | None = None) -> None:
        self._services = dict(services)
        self._ca_override = ca_override
        self._clients: dict[bytes, httpx.AsyncClient] = {}

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def target(self, webhook: Webhook) -> Target:
        timeout = f"timeout={webhook.timeout_seconds}s"
        if webhook.url is not None:
            parts = urlsplit(webhook.url)
            url = f"{webhook.url}?{timeout}"
            return Target(url, url, parts.hostname or "", parts.netloc)
        service = webhook.service
        if service is None:  # pragma: no cover - validated: exactly one of url or service
            raise CallError("webhook has neither url nor service")
        dns = f"{service.name}.{service.namespace}.svc"
        url = f"https://{dns}:{service.port}{service.path}?{timeout}"
        address = self._services.get(f"{service.name}.{service.namespace}:{service.port}")
        if address is None:
            address = self._services.get(f"{service.name}.{service.namespace}")
        if address is None:
            raise CallError(
                f'failed to call webhook: Post "{url}": service "{service.namespace}/'
                f'{service.name}" has no address in the test API server; map it with '
                f"--webhook-service {service.name}.{service.namespace}=HOST:PORT"
            )
        return Target(
            url, f"https://{address}{service.path}?{timeout}", dns, f"{dns}:{service.port}"
        )

    def _client(self, webhook: Webhook) -> httpx.AsyncClient:
        bundle = self._ca_override if self._ca_override is not None else webhook.ca_bundle
        client = self._clients.get(bundle)
        if client is None:
            try:
                context = (
                    ssl.create_default_context(cadata=bundle.decode("utf-8", "replace"))
                    if bundle
                    else ssl.create_default_context()
                )
            except (ssl.SSLError, ValueError) as err:
                raise CallError(
                    "could not get REST client: unable to load root certificates: unable to "
                    f"parse bytes as PEM block ({err})"
                ) from err
            client = httpx.AsyncClient(verify=context, trust_env=False)
            self._clients[bundle] = client
        return client

    async def call(self, webhook: Webhook, review: JSONObject) -> JSONObject:
        """The ``response`` of the webhook's AdmissionReview, checked as the real server does."""
        client = self._client(webhook)
        target = self.target(webhook)
        body = orjson.dumps(review)
        try:
            async with asyncio.timeout(webhook.timeout_seconds):
                reply = await client.post(
                    target.connect_url,
                    content=body,
                    timeout=webhook.timeout_seconds,
                    headers={
                        "Content-Type": "application/json",
                        "Accept": "application/json, */*",
                        "Host": target.host_header,
                    },
                    extensions={"sni_hostname": target.server_name},
                )
        except TimeoutError as err:
            raise CallError(
                f'failed to call webhook: Post "{target.url}": context deadline exceeded'
            ) from err
        except httpx.TimeoutException as err:
            raise CallError(
                f'failed to call webhook: Post "{target.url}": context deadline exceeded'
            ) from err
        except httpx.HTTPError as err:
            raise CallError(
                f'failed to call webhook: Post "{target.url}": {_transport_error(err, target)}'
            ) from err
        return _response(reply, review, webhook=webhook)


def _transport_error(err: httpx.HTTPError, target: Target) -> str:
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = cause.verify_message or str(cause)
            if "hostname" in reason or "IP address mismatch" in reason:
                return (
                    "tls: failed to verify certificate: x509: certificate is not valid for "
                    f"{target.server_name}"
                )
            return (
                "tls: failed to verify certificate: x509: certificate signed by unknown authority"
            )
        if isinstance(cause, ConnectionRefusedError):
            return f"dial tcp {urlsplit(target.connect_url).netloc}: connect: connection refused"
        cause = cause.__cause__ or cause.__context__
    text = str(err) or type(err).__name__
    if "refused" in text.lower():
        return f"dial tcp {urlsplit(target.connect_url).netloc}: connect: connection refused"
    return text


def _response(reply: httpx.Response, review: JSONObject, *, webhook: Webhook) -> JSONObject:
    if reply.status_code != 200:
        raise CallError(f"failed to call webhook: {_http_error(reply)}")
    try:
        answer: Any = orjson.loads(reply.content)
    except orjson.JSONDecodeError as err:
        raise CallError(f"failed to call webhook: invalid JSON in the response: {err}") from err
    if not isinstance(answer, dict):
        raise CallError("failed to call webhook: the response is not a JSON object")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise CallError("received invalid webhook response: webhook response was absent")
    if review.get("apiVersion") != ADMISSION_V1:
        # VerifyAdmissionResponse, v1beta1: uid, apiVersion and patchType were never checked
        # in v1beta1; a patch is taken as a JSONPatch.
        return _v1beta1_response(response, webhook=webhook)
    uid = review["request"]["uid"]
    if response.get("uid") != uid:
        raise CallError(
            f'received invalid webhook response: expected response.uid="{uid}", '
            f'got "{response.get("uid") or ""}"'
        )
    api_version, kind = answer.get("apiVersion") or "", answer.get("kind") or ""
    if (api_version, kind) != (ADMISSION_V1, "AdmissionReview"):
        group, _, version = str(api_version).rpartition("/")
        raise CallError(
            "received invalid webhook response: expected webhook response of "
            f"admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{version}, Kind={kind}"
        )
    patch, patch_type = response.get("patch"), response.get("patchType")
    if webhook.mutating:
        if patch and patch_type is None:
            raise CallError(
                "received invalid webhook response: webhook returned response.patch but not "
                "response.patchType"
            )
        if not patch and patch_type is not None:
            raise CallError(
                "received invalid webhook response: webhook returned response.patchType but "
                "not response.patch"
            )
    else:
        if patch:
            raise CallError(
                "received invalid webhook response: validating webhook may not return "
                "response.patch"
            )
        if patch_type is not None:
            raise CallError(
                "received invalid webhook response: validating webhook may not return "
                "response.patchType"
            )
    return response


def _v1beta1_response(response: JSONObject, *, webhook: Webhook) -> JSONObject:
    checked = dict(response)
    if webhook.mutating and checked.get("patch"):
        checked["patchType"] = "JSONPatch"
    else:
        checked.pop("patch", None)
        checked.pop("patchType", None)
    return checked


def _http_error(reply: httpx.Response) -> str:
    try:
        body: Any = orjson.loads(reply.content)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status" and body.get("message"):
        return str(body["message"])
    if reply.status_code == 404:
        return "the server could not find the requested resource"
    text = reply.text[:_MAX_ERROR_BODY].strip()
    if text:
        return f'an error on the server ("{text}") has prevented the request from succeeding'
    return (
        f"the server responded with the status code {reply.status_code} but did not return "
        "more information"
    )
