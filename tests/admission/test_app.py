"""Tests for admission.app: the webhook app end to end over ASGI, with tiny inline admitters."""

from __future__ import annotations

import asyncio
import base64
import copy
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from admission.app import create_app, create_metrics_app
from admission.health import Readiness
from admission.metrics import Metrics
from admission.settings import Settings
from tenants.ledger import LedgerUnavailable
from tenants.recent import RecentDecisions
from tenants.verdicts import AdmissionInput, Admitter, Verdict

FIXTURES = Path(__file__).parent.parent / "fixtures" / "reviews"
ALL_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.json"))
CREATE = "v1-create-pod.json"
NOW = 1_741_950_000.5


def fixture(name: str) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads((FIXTURES / name).read_bytes())
    return document


# --- tiny admitters ---------------------------------------------------------------------------


@dataclass
class Recording:
    """Answers ``verdict`` on both endpoints and remembers what it was asked."""

    verdict: Verdict = field(default_factory=Verdict.allow)
    calls: list[tuple[str, AdmissionInput, float]] = field(default_factory=list)

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        self.calls.append(("mutate", request, now))
        return self.verdict

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        self.calls.append(("validate", request, now))
        return self.verdict


class Labelling:
    """Mutates like the classifier will: a deep copy with labels, annotations, tolerations."""

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        assert request.object is not None
        pod = copy.deepcopy(request.object)
        pod["metadata"].setdefault("labels", {})["tenantgate.io/profile"] = "web-frontend"
        pod["metadata"].setdefault("annotations", {})["tenantgate.io/reservation"] = "r-42"
        pod["spec"]["schedulerName"] = "tenantgate"
        pod["spec"]["priorityClassName"] = "team-a-burst"
        pod["spec"]["priority"] = 1000
        pod["spec"].setdefault("tolerations", []).insert(
            0, {"key": "pool", "operator": "Equal", "value": "web", "effect": "NoSchedule"}
        )
        return Verdict(allowed=True, patched=pod, warnings=("admitted on burst capacity",))

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return await self.mutate(request, now=now)


class Copying:
    """Returns an unchanged deep copy: a re-invocation with nothing left to do."""

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return Verdict.allow(patched=copy.deepcopy(request.object))

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return await self.mutate(request, now=now)


class Raising:
    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        raise KeyError("tenants")

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        raise KeyError("tenants")


class Unavailable:
    """An admitter whose ledger store cannot reach its backend."""

    message = "tenant team-a: cannot check the quota ledger: the API server is unreachable; retry"

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        raise LedgerUnavailable(self.message)

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        raise LedgerUnavailable(self.message)


@dataclass
class LoopChecking:
    """Records whether it was called on the event loop's thread (not in a thread pool)."""

    on_loop: list[bool] = field(default_factory=list)

    def _check(self) -> Verdict:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.on_loop.append(False)
        else:
            self.on_loop.append(True)
        return Verdict.allow()

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return self._check()

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return self._check()


# --- harness ----------------------------------------------------------------------------------


@dataclass
class Webhook:
    admitter: Admitter
    max_body_bytes: int = 4 * 1024 * 1024
    metrics: Metrics = field(default_factory=Metrics)
    readiness: Readiness = field(default_factory=Readiness)

    def __post_init__(self) -> None:
        self.app = create_app(
            Settings(max_body_bytes=self.max_body_bytes),
            admitter=self.admitter,
            readiness=self.readiness,
            metrics=self.metrics,
            clock=lambda: NOW,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | AsyncIterator[bytes] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        return call(self.app, method, path, content=content, headers=headers)

    def review(self, path: str, document: Any) -> httpx.Response:
        return self.request(
            "POST",
            path,
            content=orjson.dumps(document),
            headers={"content-type": "application/json"},
        )

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def call(
    app: Starlette,
    method: str,
    path: str,
    *,
    content: bytes | AsyncIterator[bytes] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://webhook") as client:
            return await client.request(method, path, content=content, headers=headers)

    return asyncio.run(go())


def response_of(http: httpx.Response) -> dict[str, Any]:
    assert http.status_code == 200, http.text
    assert http.headers["content-type"] == "application/json"
    document: dict[str, Any] = http.json()
    assert document["kind"] == "AdmissionReview"
    response: dict[str, Any] = document["response"]
    return response


# --- answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_answers_in_the_request_version_with_the_same_uid(name: str, endpoint: str) -> None:
    document = fixture(name)

    http = Webhook(Recording()).review(endpoint, document)

    assert http.status_code == 200
    answer = http.json()
    assert answer["apiVersion"] == document["apiVersion"]
    assert answer["response"] == {"uid": document["request"]["uid"], "allowed": True}


def test_v1beta1_is_answered_in_v1beta1() -> None:
    http = Webhook(Recording()).review("/mutate", fixture("v1beta1-create-pod.json"))

    assert http.json()["apiVersion"] == "admission.k8s.io/v1beta1"
    assert http.json()["response"]["uid"] == "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"


def test_mutation_comes_back_as_a_base64_json_patch() -> None:
    document = fixture(CREATE)
    original = copy.deepcopy(document["request"]["object"])
    admitter = Labelling()
    expected = asyncio.run(
        admitter.mutate(
            AdmissionInput(uid="x", operation="CREATE", namespace="", name="", object=original),
            now=NOW,
        )
    ).patched

    response = response_of(Webhook(admitter).review("/mutate", document))

    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    operations = orjson.loads(base64.b64decode(response["patch"], validate=True))
    assert jsonpatch.apply_patch(original, operations) == expected
    assert response["warnings"] == ["admitted on burst capacity"]


@pytest.mark.parametrize("name", ["v1-create-pod.json", "v1-update-pod.json"])
def test_unchanged_object_gives_no_patch(name: str) -> None:
    response = response_of(Webhook(Copying()).review("/mutate", fixture(name)))

    assert response == {"uid": fixture(name)["request"]["uid"], "allowed": True}


def test_validate_never_sends_a_patch() -> None:
    # The API server refuses any patch from a validating webhook.
    response = response_of(Webhook(Labelling()).review("/validate", fixture(CREATE)))

    assert response["allowed"] is True
    assert "patch" not in response
    assert "patchType" not in response


def test_denial_carries_status_and_no_patch() -> None:
    pod = fixture(CREATE)["request"]["object"]
    verdict = Verdict(
        allowed=False,
        code=403,
        reason="Forbidden",
        message="exceeded tenant quota: team-a, requested: cpu=2, used: cpu=14/15 (burst ceiling)",
        patched={**pod, "spec": {}},
        warnings=("tenant team-a is over its guarantee",),
    )

    response = response_of(Webhook(Recording(verdict)).review("/mutate", fixture(CREATE)))

    assert response == {
        "uid": "6f4c1e2a-3b5d-4f7e-9a0b-1c2d3e4f5a6b",
        "allowed": False,
        "status": {
            "code": 403,
            "reason": "Forbidden",
            "message": "exceeded tenant quota: team-a, requested: cpu=2, "
            "used: cpu=14/15 (burst ceiling)",
        },
        "warnings": ["tenant team-a is over its guarantee"],
    }


def test_audit_annotations_are_passed_on() -> None:
    verdict = Verdict(allowed=True, audit_annotations={"tier": "guaranteed", "tenant": "team-a"})

    response = response_of(Webhook(Recording(verdict)).review("/validate", fixture(CREATE)))

    assert response["auditAnnotations"] == {"tier": "guaranteed", "tenant": "team-a"}


def test_admitter_gets_the_request_and_the_clock() -> None:
    admitter = Recording()
    webhook = Webhook(admitter)

    webhook.review("/mutate", fixture("v1-create-pod-dryrun.json"))
    webhook.review("/validate", fixture("v1-update-pod.json"))

    (mutate, request, now), (validate, update, later) = admitter.calls
    assert (mutate, validate) == ("mutate", "validate")
    assert now == later == NOW
    assert request.dry_run is True
    assert (request.uid, request.namespace, request.name) == (
        "3e9d7c5b-1a2f-4e8d-b6c4-9a7f5e3d1c2b", "ml", "trainer",
    )  # fmt: skip
    # /mutate gets the part of a pod that classifying and planning it read or write.
    sent = fixture("v1-create-pod-dryrun.json")["request"]["object"]
    del sent["metadata"]["managedFields"]
    assert request.object is not None
    assert request.object["metadata"] == sent["metadata"]
    planned = (
        "restartPolicy",
        "schedulerName",
        "serviceAccountName",
        "tolerations",
        "priority",
        "preemptionPolicy",
        "volumes",
    )
    assert request.object["spec"] == {
        "containers": [
            {k: c[k] for k in ("name", "image", "resources")} for c in sent["spec"]["containers"]
        ],
        **{k: sent["spec"][k] for k in planned},
    }
    assert update.operation == "UPDATE"
    # /validate gets the part of a pod that validating it reads.
    old = fixture("v1-update-pod.json")["request"]["oldObject"]
    del old["metadata"]["managedFields"]
    assert update.old_object is not None
    assert update.old_object["metadata"] == old["metadata"]
    assert update.old_object["spec"] == {
        "containers": [
            {"name": c["name"], "resources": c["resources"]} for c in old["spec"]["containers"]
        ],
        **{k: old["spec"][k] for k in ("priority", "priorityClassName") if k in old["spec"]},
    }
    assert "status" not in update.old_object


def test_admitter_runs_on_the_event_loop_not_in_a_thread_pool() -> None:
    # The in-memory ledger checks and books in one step that must not interleave.
    admitter = LoopChecking()
    webhook = Webhook(admitter)

    webhook.review("/mutate", fixture(CREATE))
    webhook.review("/validate", fixture(CREATE))

    assert admitter.on_loop == [True, True]


def test_json_content_type_with_parameters_is_accepted() -> None:
    http = Webhook(Recording()).request(
        "POST",
        "/mutate",
        content=orjson.dumps(fixture(CREATE)),
        headers={"content-type": "Application/JSON; charset=utf-8"},
    )

    assert http.status_code == 200


# --- bad requests -----------------------------------------------------------------------------


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("content", "headers", "status", "message"),
    [
        pytest.param(
            b'{"apiVersion": "admission.k8s.io/v1", "kind": ',
            JSON,
            400,
            "malformed JSON: unexpected end of data: line 1 column 47 (char 46)",
            id="malformed JSON",
        ),
        pytest.param(
            orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            JSON,
            400,
            "AdmissionReview has no request",
            id="missing request",
        ),
        pytest.param(
            orjson.dumps({**fixture(CREATE), "kind": "ConversionReview"}),
            JSON,
            400,
            'kind must be AdmissionReview, got "ConversionReview"',
            id="wrong kind",
        ),
        pytest.param(
            orjson.dumps({**fixture(CREATE), "apiVersion": "admission.k8s.io/v2"}),
            JSON,
            400,
            "apiVersion must be admission.k8s.io/v1 or admission.k8s.io/v1beta1, "
            'got "admission.k8s.io/v2"',
            id="wrong apiVersion",
        ),
        pytest.param(
            orjson.dumps({**fixture(CREATE), "request": {"uid": "u"}}),
            JSON,
            400,
            "invalid AdmissionReview: request.kind: Field required (and 1 more)",
            id="incomplete request",
        ),
        pytest.param(
            orjson.dumps(fixture(CREATE)),
            {"content-type": "text/plain"},
            400,
            'Content-Type must be application/json, got "text/plain"',
            id="non-JSON content type",
        ),
        pytest.param(
            orjson.dumps(fixture(CREATE)),
            {"content-type": "application/yaml"},
            400,
            'Content-Type must be application/json, got "application/yaml"',
            id="YAML content type",
        ),
        pytest.param(
            orjson.dumps(fixture(CREATE)),
            {},
            400,
            "Content-Type must be application/json, got nothing",
            id="no content type",
        ),
        pytest.param(
            b"x" * 16385,
            JSON,
            413,
            "request body exceeds the limit of 16384 bytes",
            id="body over the limit",
        ),
    ],
)
def test_bad_request_is_an_http_error_with_a_one_line_reason(
    content: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    admitter = Recording()
    webhook = Webhook(admitter, max_body_bytes=16384)

    http = webhook.request("POST", "/mutate", content=content, headers=headers)

    assert http.status_code == status
    assert http.text == message
    assert http.headers["content-type"] == "text/plain; charset=utf-8"
    assert admitter.calls == []


def test_streamed_body_over_the_limit_is_refused_before_it_is_all_read() -> None:
    pulled = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(64):
            pulled += 1
            yield b" " * 1024

    admitter = Recording()
    http = Webhook(admitter, max_body_bytes=4096).request(
        "POST", "/validate", content=chunks(), headers=JSON
    )

    assert http.status_code == 413
    assert http.text == "request body exceeds the limit of 4096 bytes"
    assert pulled < 64
    assert admitter.calls == []


def test_admitter_failure_is_a_500_with_a_logged_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    webhook = Webhook(Raising())

    http = webhook.review("/validate", fixture(CREATE))

    assert http.status_code == 500
    assert http.text == (
        "internal error reviewing request 6f4c1e2a-3b5d-4f7e-9a0b-1c2d3e4f5a6b: KeyError "
        "(see the webhook logs)"
    )
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.exc_info is not None
    assert record.exc_info[0] is KeyError
    # The server keeps serving.
    assert Webhook(Recording()).review("/validate", fixture(CREATE)).status_code == 200


def test_patching_a_request_without_object_is_a_500() -> None:
    http = Webhook(Recording(Verdict.allow(patched={"a": 1}))).review(
        "/mutate", fixture("v1-delete-pod.json")
    )

    assert http.status_code == 500
    assert http.text.startswith("internal error reviewing request e2c4a6b8-")


def test_unserializable_patched_object_is_a_500() -> None:
    http = Webhook(Recording(Verdict.allow(patched={"spec": {1, 2}}))).review(
        "/mutate", fixture(CREATE)
    )

    assert http.status_code == 500
    assert "PatchError" in http.text


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_review_endpoints_only_take_post(path: str) -> None:
    assert Webhook(Recording()).request("GET", path).status_code == 405


def test_an_unavailable_ledger_fails_the_call_with_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The API server then applies the webhook's failurePolicy (the mutating one: Ignore).
    webhook = Webhook(Unavailable())

    http = webhook.review("/mutate", fixture(CREATE))

    assert http.status_code == 503
    assert http.text == Unavailable.message
    assert [r.levelno for r in caplog.records if r.name == "admission.app"] == [logging.WARNING]


# --- metrics, health, logs --------------------------------------------------------------------


def test_reviews_and_errors_show_on_metrics() -> None:
    webhook = Webhook(Recording(), max_body_bytes=8192)
    webhook.review("/mutate", fixture(CREATE))
    webhook.review("/validate", fixture("v1-create-pod-dryrun.json"))
    webhook.request("POST", "/mutate", content=b"{", headers=JSON)
    webhook.request("POST", "/validate", content=b"{}", headers={"content-type": "text/plain"})
    webhook.request("POST", "/validate", content=b" " * 9000, headers=JSON)
    Webhook(Raising(), metrics=webhook.metrics).review("/mutate", fixture(CREATE))

    http = webhook.request("GET", "/metrics")

    assert http.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(http.text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted(labels.items()))))

    reviews = "tenantgate_admission_reviews_total"
    assert value(reviews, endpoint="mutate", operation="CREATE", allowed="true", dry_run="false")
    assert value(reviews, endpoint="validate", operation="CREATE", allowed="true", dry_run="true")
    errors = "tenantgate_http_errors_total"
    assert value(errors, endpoint="mutate", code="400", reason="malformed_json") == 1
    assert value(errors, endpoint="validate", code="400", reason="content_type") == 1
    assert value(errors, endpoint="validate", code="413", reason="body_too_large") == 1
    assert value(errors, endpoint="mutate", code="500", reason="internal_error") == 1
    duration = "tenantgate_admission_review_duration_seconds_count"
    assert value(duration, endpoint="mutate") == 3  # 200, 400, 500; the 413 never got there
    assert value("tenantgate_admission_reviews_in_flight", endpoint="mutate") == 0


def test_webhook_app_serves_health() -> None:
    webhook = Webhook(Recording())

    assert webhook.request("GET", "/healthz").status_code == 200
    assert webhook.request("GET", "/readyz").status_code == 503

    webhook.readiness.mark_ok("config")
    webhook.readiness.mark_ok("certs")

    assert webhook.request("GET", "/readyz").json()["ready"] is True


def test_each_review_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="admission.app")
    webhook = Webhook(Labelling())

    webhook.review("/mutate", fixture(CREATE))

    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    message = record.getMessage()
    assert message.startswith(
        "mutate uid=6f4c1e2a-3b5d-4f7e-9a0b-1c2d3e4f5a6b CREATE pods team-a/web-7d4b9c8f5- "
        "allowed=true patched=true dry_run=false duration_ms="
    )
    assert record.__dict__["uid"] == "6f4c1e2a-3b5d-4f7e-9a0b-1c2d3e4f5a6b"
    assert record.__dict__["object_name"] == "web-7d4b9c8f5-"


def test_denials_log_at_info_with_the_message(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="admission.app")
    webhook = Webhook(Recording(Verdict.deny("over quota")))

    webhook.review("/validate", fixture("v1beta1-create-pod.json"))

    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert "team-b/toolbox allowed=false code=403 message='over quota'" in record.getMessage()


def test_bad_requests_log_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    Webhook(Recording()).request("POST", "/mutate", content=b"[", headers=JSON)

    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("mutate: 400 from client 127.0.0.1: malformed JSON")


def test_metrics_app_serves_metrics_and_health_only() -> None:
    readiness, metrics = Readiness(), Metrics()

    async def status(request: Request) -> Response:
        return PlainTextResponse("status")

    app = create_metrics_app(
        readiness=readiness, metrics=metrics, extra_routes=[Route("/status", status)]
    )

    assert call(app, "GET", "/metrics").status_code == 200
    assert "tenantgate_admission_reviews_in_flight" in call(app, "GET", "/metrics").text
    assert call(app, "GET", "/healthz").json() == {"alive": True}
    assert call(app, "GET", "/readyz").status_code == 503
    assert call(app, "GET", "/status").text == "status"
    assert call(app, "POST", "/mutate", content=b"{}", headers=JSON).status_code == 404


class Walking:
    """Walks the object recursively, as any code would that copies or compares it."""

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return Verdict.allow(patched=copy.deepcopy(request.object))

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return await self.mutate(request, now=now)


def deep_review(depth: int) -> bytes:
    document = fixture(CREATE)
    document["request"]["object"]["metadata"]["labels"] = "PLACEHOLDER"  # both views build it
    deep = b'{"a":' * depth + b"1" + b"}" * depth
    return orjson.dumps(document).replace(b'"PLACEHOLDER"', deep)


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_a_body_too_deep_for_the_admitter_is_a_400_not_a_500(path: str) -> None:
    """Nesting the decoders take (under ~1,000 levels) can still exhaust the stack of code
    walking the object: that is the body's fault, answered 400 and counted."""
    webhook = Webhook(Walking())

    http = webhook.request("POST", path, content=deep_review(900), headers=JSON)

    assert http.status_code == 400
    assert http.text == "malformed JSON: nested too deeply"
    endpoint = path.strip("/")
    errors = "tenantgate_http_errors_total"
    assert webhook.metric(errors, endpoint=endpoint, code="400", reason="too_deep") == 1


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_invalid_utf8_in_a_label_is_a_counted_400(path: str) -> None:
    webhook = Webhook(Recording())
    raw = orjson.dumps(fixture(CREATE)).replace(b'"app":"', b'"app":"\xff', 1)

    http = webhook.request("POST", path, content=raw, headers=JSON)

    assert http.status_code == 400
    assert http.text.startswith("malformed JSON: ")
    endpoint = path.strip("/")
    errors = "tenantgate_http_errors_total"
    assert webhook.metric(errors, endpoint=endpoint, code="400", reason="malformed_json") == 1


def test_any_other_exception_out_of_the_decoder_is_a_counted_400(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever a future decoder bug raises is about the body: 400, never a 500."""

    def broken(body: bytes, *, objects: str = "whole") -> None:
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr("admission.app.decode_review", broken)
    webhook = Webhook(Recording())

    http = webhook.review("/validate", fixture(CREATE))

    assert http.status_code == 400
    assert http.text == "malformed AdmissionReview: OverflowError"
    errors = "tenantgate_http_errors_total"
    assert webhook.metric(errors, endpoint="validate", code="400", reason="undecodable") == 1


def test_pod_denials_are_remembered_with_their_message_but_not_dry_runs() -> None:
    recent = RecentDecisions()
    denial = Verdict.deny("exceeded tenant quota: team-a, requested: cpu=8", cause="over_quota")
    app = create_app(
        Settings(),
        admitter=Recording(denial),
        readiness=Readiness(),
        metrics=Metrics(tenant_of=lambda namespace: "team-a" if namespace == "team-a" else None),
        clock=lambda: NOW,
        recent=recent,
    )
    allowed = create_app(
        Settings(),
        admitter=Recording(),
        readiness=Readiness(),
        metrics=Metrics(),
        clock=lambda: NOW,
        recent=recent,
    )

    for target, name in ((app, CREATE), (app, "v1-create-pod-dryrun.json"), (allowed, CREATE)):
        call(target, "POST", "/mutate", content=orjson.dumps(fixture(name)), headers=JSON)

    assert recent.to_json()["denials"] == [
        {
            "at": NOW,
            "tenant": "team-a",
            "pod": "team-a/web-7d4b9c8f5-",
            "operation": "CREATE",
            "endpoint": "mutate",
            "reason": "over_quota",
            "message": "exceeded tenant quota: team-a, requested: cpu=8",
        }
    ]
