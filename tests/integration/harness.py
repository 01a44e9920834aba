"""Running tenantgate for real against the real control plane, for the integration tests.

:class:`Tenantgate` runs the real server (``WebhookServer`` with real TLS, both ports bound to
0) around a real :class:`~admission.runtime.Runtime`, on its own event loop in a thread.
:func:`wait_webhooks_active` waits until kube-apiserver calls the webhooks the cluster
registered (``testcluster.Cluster.serve``); :func:`create_namespace` gives a test its
namespace in the shared cluster; :func:`installed_crds` installs CustomResourceDefinitions
for one test (tests/fixtures/crds). :class:`RejectingWebhook` is a later admission step that
denies what a test tells it to. :func:`create_or_deny` creates a pod the way the concurrent
tests count outcomes; :data:`PODS_QUOTA_CONFIG` and :func:`one_tenant_config` are the configs
several test modules share.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
import uvicorn
import yaml
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import certs
from admission.runtime import Runtime, Timings, build_runtime
from admission.server import Endpoints, WebhookServer
from admission.settings import Settings
from testcluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
WEBHOOKS = ROOT / "deploy" / "webhooks"
WAIT = 60.0
T = TypeVar("T")


def eventually(
    check: Callable[[], bool],
    what: str,
    *,
    timeout: float = WAIT,
    describe: Callable[[], str] | None = None,
) -> None:
    """Wait until ``check()`` holds: the watch and the sweep are asynchronous. On a timeout,
    ``describe()`` says what was seen instead, so that a failure shows where it stalled."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            seen = f"; seen instead:\n{describe()}" if describe is not None else ""
            raise AssertionError(f"timed out waiting for {what}{seen}")
        time.sleep(0.02)


def api_client(kubeconfig: Path) -> Any:
    factory: Any = config.new_client_from_config
    return factory(config_file=str(kubeconfig))


def http_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _abort_lingering_transports() -> None:
    """Abort the TLS connections still waiting for the peer's close_notify.

    kube-apiserver keeps its webhook connections alive; when tenantgate stops first,
    the TLS shutdown waits for a peer that is not reading, and ending the event loop then
    leaks the socket (a ResourceWarning at some later garbage collection). A real process
    exits instead; here the loop's transports are aborted before it closes.
    """
    loop = asyncio.get_running_loop()
    transports = getattr(loop, "_transports", None)  # CPython's selector loop keeps them here
    for transport in list(transports.values()) if transports is not None else []:
        transport.abort()


class Tenantgate:
    """``tenantgate serve`` in this process: the real server, runtime and TLS, in a thread."""

    def __init__(
        self,
        settings: Settings,
        *,
        timings: Timings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.timings = timings
        self.clock = clock
        self.runtime: Runtime | None = None
        self.endpoints: Endpoints | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: WebhookServer | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def start(self) -> Tenantgate:
        started = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            runtime = build_runtime(self.settings, timings=self.timings, clock=self.clock)
            self.runtime = runtime
            server = WebhookServer(
                self.settings,
                app=runtime.app,
                metrics_app=runtime.metrics_app,
                readiness=runtime.readiness,
                on_certificate=runtime.certificate_loaded,
            )
            self._server = server

            def on_started(endpoints: Endpoints) -> None:
                self.endpoints = endpoints
                started.set()

            await runtime.startup()
            try:
                await server.serve(on_started=on_started)
            finally:
                await runtime.shutdown()
                _abort_lingering_transports()

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:
                self._failure = exc
                started.set()

        self._thread = threading.Thread(target=run, name="tenantgate-under-test", daemon=True)
        self._thread.start()
        started.wait(WAIT)
        if self._failure is not None or self.endpoints is None:
            raise RuntimeError(f"tenantgate did not start: {self._failure!r}")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.request_stop()
        if self._thread is not None:
            self._thread.join(WAIT)
            if self._thread.is_alive():
                raise RuntimeError("tenantgate did not stop")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        if self.endpoints is None:
            raise RuntimeError("not started")
        return self.endpoints.port

    @property
    def metrics_url(self) -> str:
        if self.endpoints is None:
            raise RuntimeError("not started")
        return f"http://127.0.0.1:{self.endpoints.metrics_port}"

    @property
    def state(self) -> Runtime:
        if self.runtime is None:
            raise RuntimeError("not started")
        return self.runtime

    def call(self, action: Callable[[], T]) -> T:
        """Run ``action`` on tenantgate's event loop (where every ledger change happens)."""

        async def run() -> T:
            return action()

        return self.run(run())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            raise RuntimeError("not started")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(WAIT)

    def status(self) -> dict[str, Any]:
        code, document = http_json(f"{self.metrics_url}/status")
        assert code == 200
        assert isinstance(document, dict)
        return document

    def used(self, tenant: str) -> dict[str, dict[str, str]]:
        used: dict[str, dict[str, str]] = self.status()["tenants"][tenant]["used"]
        return used

    def wait_ready(self) -> None:
        def ready() -> bool:
            code, _ = http_json(f"{self.metrics_url}/readyz")
            return code == 200

        eventually(ready, "tenantgate to be ready")

    def __enter__(self) -> Tenantgate:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Periodic work pushed out of a test's way: no reload, sweep or recount happens by itself.
STILL = Timings(
    config_poll_seconds=3600,
    sweep_seconds=3600,
    recount_seconds=3600,
    watch_timeout_seconds=60,
)


@contextmanager
def offline_tenantgate(config: Path, cert_dir: Path) -> Iterator[Tenantgate]:
    """``tenantgate serve --offline`` on ``config`` (127.0.0.1, free ports), once ready."""
    settings = Settings(
        config=config,
        cert_dir=cert_dir,
        host="127.0.0.1",
        port=0,
        metrics_host="127.0.0.1",
        metrics_port=0,
        offline=True,
        shutdown_grace_seconds=1,
    )
    with Tenantgate(settings, timings=STILL) as running:
        running.wait_ready()
        yield running


def _reviews_seen(metrics_urls: list[str]) -> set[str]:
    """The endpoints (mutate, validate) that answered a dry-run review, on any replica."""
    seen: set[str] = set()
    for url in metrics_urls:
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
                text = response.read().decode()
        except OSError:
            continue
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (
                    sample.name == "tenantgate_admission_reviews_total"
                    and sample.labels.get("dry_run") == "true"
                    and sample.value > 0
                ):
                    seen.add(sample.labels["endpoint"])
    return seen


def wait_webhooks_active(kubeconfig: Path, metrics_urls: list[str]) -> None:
    """Wait until kube-apiserver calls the just registered webhooks.

    It learns of webhook configurations through a watch, so a configuration is in force a
    moment after it is created. A dry-run pod in kube-public (no tenant) probes it until both
    webhooks have answered one; nothing is stored or booked.
    """
    api = api_client(kubeconfig)
    core: Any = client.CoreV1Api(api)
    probe = {
        "metadata": {"name": "webhook-probe"},
        "spec": {"containers": [{"name": "probe", "image": "registry.example.com/probe:1"}]},
    }
    try:

        def both_called() -> bool:
            core.create_namespaced_pod("kube-public", probe, dry_run="All")
            return _reviews_seen(metrics_urls) >= {"mutate", "validate"}

        eventually(both_called, "the API server to call the registered webhooks")
    finally:
        api.close()


def wait_mutate_skipped(core: Any, namespace: str) -> None:
    """After the mutating webhook configuration is deleted, wait until kube-apiserver stops
    calling it (it learns of the deletion through a watch): a dry-run pod comes back untouched
    by tenantgate."""

    def untouched() -> bool:
        probe = {
            "metadata": {"name": "mutate-probe"},
            "spec": {"containers": [{"name": "probe", "image": "registry.example.com/probe:1"}]},
        }
        try:
            stored = core.create_namespaced_pod(namespace, probe, dry_run="All")
        except client.ApiException:
            return False
        annotations = stored.metadata.annotations or {}
        return not any(key.startswith("tenantgate.io/") for key in annotations)

    eventually(untouched, "kube-apiserver to stop calling the deleted mutating webhook")


def create_namespace(core: Any, body: dict[str, Any]) -> Any:
    """Create the namespace of ``body``, or give the existing one exactly its labels.

    The control plane serves the whole run, and deleting a namespace takes seconds, so a test
    namespace stays between tests, emptied; a test that creates it gets it as it asks.
    """
    name = body["metadata"]["name"]
    labels = dict(body["metadata"].get("labels") or {})
    try:
        return core.create_namespace(body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    existing = core.read_namespace(name)
    current = dict(existing.metadata.labels or {})
    patch = {key: None for key in current if key not in labels and "kubernetes.io/" not in key}
    patch.update(labels)
    return core.patch_namespace(name, {"metadata": {"labels": patch}})


@dataclass
class HTTPSApp:
    """An app served over TLS on 127.0.0.1 (port 0) in its own thread: another webhook."""

    server: uvicorn.Server
    thread: threading.Thread
    port: int

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(WAIT)


def serve_https(app: Starlette, paths: certs.MaterialPaths, *, what: str) -> HTTPSApp:
    """Serve ``app`` with the serving certificate of ``paths``; returns once it listens."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            ssl_certfile=str(paths.tls_cert),
            ssl_keyfile=str(paths.tls_key),
            timeout_graceful_shutdown=1,
        )
    )

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            _abort_lingering_transports()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    eventually(lambda: server.started, what)
    return HTTPSApp(server, thread, sock.getsockname()[1])


class RejectingWebhook:
    """A validating webhook (HTTPS, port 0) besides tenantgate's: denies the creation, or the
    resize, of pods labelled ``reject: "yes"``."""

    def __init__(self, cert_dir: Path) -> None:
        self._paths = certs.MaterialPaths(cert_dir)
        self.denied = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    async def _review(self, request: Request) -> Response:
        review = orjson.loads(await request.body())
        req = review["request"]
        labels = ((req.get("object") or {}).get("metadata") or {}).get("labels") or {}
        checked = req.get("operation") == "CREATE" or req.get("subResource") == "resize"
        allowed = not checked or labels.get("reject") != "yes"
        answer: dict[str, Any] = {"uid": req["uid"], "allowed": allowed}
        if not allowed:
            self.denied += 1
            answer["status"] = {"code": 403, "reason": "Forbidden", "message": "rejected later"}
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        return Response(orjson.dumps(body), media_type="application/json")

    def start(self, kubeconfig: Path) -> RejectingWebhook:
        served = serve_https(
            Starlette(routes=[Route("/reject", self._review, methods=["POST"])]),
            self._paths,
            what="the rejecting webhook",
        )
        self._server, self._thread, self.port = served.server, served.thread, served.port
        api = api_client(kubeconfig)
        registration: Any = client.AdmissionregistrationV1Api(api)
        bundle = base64.b64encode(self._paths.ca_cert.read_bytes()).decode("ascii")
        registration.create_validating_webhook_configuration(
            {
                "metadata": {"name": "zz-later-step"},
                "webhooks": [
                    {
                        "name": "reject.later.example.com",
                        "admissionReviewVersions": ["v1"],
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{self.port}/reject",
                            "caBundle": bundle,
                        },
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["pods", "pods/resize"],
                            }
                        ],
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "timeoutSeconds": 5,
                    }
                ],
            }
        )
        api.close()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(WAIT)


CRDS = ROOT / "tests" / "fixtures" / "crds"


@contextmanager
def installed_crds(kubeconfig: Path, *files: str) -> Iterator[None]:
    """The CRDs in ``files`` (under tests/fixtures/crds) installed and established, then
    deleted (the test cluster's reset leaves CRDs alone)."""
    extensions: Any = client.ApiextensionsV1Api(api_client(kubeconfig))
    documents = [yaml.safe_load((CRDS / name).read_text()) for name in files]
    names = {str(document["metadata"]["name"]) for document in documents}
    for document in documents:
        extensions.create_custom_resource_definition(document, _preload_content=False)

    def established() -> bool:
        for name in names:
            crd = extensions.read_custom_resource_definition(name)
            conditions = crd.status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    try:
        eventually(established, f"{', '.join(sorted(names))} to be established")
        yield
    finally:
        for name in names:
            extensions.delete_custom_resource_definition(name, _preload_content=False)

        def gone() -> bool:
            listed = {c.metadata.name for c in extensions.list_custom_resource_definition().items}
            return not listed & names

        eventually(gone, f"{', '.join(sorted(names))} to be deleted")


def pod(
    name: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {"app": name})},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/app:1",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ]
        },
    }


# Answers that tell a client to try again: a conflict, throttling, the API server or a webhook
# unavailable for a moment.
RETRYABLE = frozenset({409, 429, 500, 503, 504})


def create_or_deny(core: Any, body: dict[str, Any]) -> str:
    """Create the pod ``body`` (its metadata names its namespace): ``created`` or ``denied``
    (over quota), retrying answers that say to retry."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    for attempt in range(60):
        try:
            core.create_namespaced_pod(namespace, body, _request_timeout=30)
        except client.ApiException as exc:
            answer = json.loads(exc.body) if exc.body else {}
            reason, message = answer.get("reason", ""), answer.get("message", "")
            if exc.status == 409 and reason == "AlreadyExists":
                return "created"  # an earlier attempt went through and its answer was lost
            if exc.status == 403 and "exceeded tenant quota" in message:
                return "denied"
            if exc.status in RETRYABLE:
                time.sleep(random.uniform(0.01, 0.05) * min(attempt + 1, 10))
                continue
            raise AssertionError(f"{name}: unexpected answer {exc.status}: {message}") from exc
        except Exception:  # a connection reset: the outcome is unknown, ask again
            time.sleep(0.05)
            continue
        return "created"
    raise AssertionError(f"{namespace}/{name}: still told to retry after 60 attempts")


# The head of the integration tests' configs (a ``str.format`` template: braces doubled): the
# two tier classes and one profile.
CONFIG_HEAD = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {{value: 10, preemptionPolicy: Never}}
  tenant-guaranteed: {{value: 1000}}
profiles: {{general: {{}}}}
"""

# The replica tests' config templates (``test_ha.ha_cluster`` formats them with ``ttl``,
# ``guaranteed``, ``ceiling`` and ``backend``) up to tenant team-a's quota: a test adds the
# quota's lines (six spaces).
REPLICA_CONFIG_HEAD = (
    CONFIG_HEAD
    + """\
reservationTTLSeconds: {ttl}
ledger: {{backend: {backend}}}
tenants:
  team-a:
    namespaces: [team-a]
    quota:
"""
)
# Tenant team-a guaranteed ``guaranteed`` pods. A test appends lines of its own to team-a's
# quota (six spaces) or to team-a (four).
PODS_QUOTA_CONFIG = REPLICA_CONFIG_HEAD + '      guaranteed: {{pods: "{guaranteed}"}}\n'


def one_tenant_config(tenant: str, *, cpu: str) -> str:
    """A config of one tenant, ``tenant`` (the namespace of that name), guaranteed ``cpu``;
    no reservation expires during a test."""
    template = (
        CONFIG_HEAD
        + """\
reservationTTLSeconds: 3600
tenants:
  {tenant}:
    namespaces: [{tenant}]
    quota: {{guaranteed: {{cpu: "{cpu}"}}}}
"""
    )
    return template.format(tenant=tenant, cpu=cpu)


def write_config(directory: Path, text: str) -> Path:
    """``text`` as ``directory``/tenantgate.yaml: what the ``config_file`` fixture returns."""
    path = directory / "tenantgate.yaml"
    path.write_text(text)
    return path


@contextmanager
def installed_cluster(workdir: Path) -> Iterator[tuple[Cluster, Path]]:
    """The real control plane with tenantgate installed, outside pytest (``python -m``, the
    benchmarks): what the session fixture ``kube_cluster`` builds. Yields the cluster and the
    serving certificate's directory (the installed caBundle trusts it)."""
    with Cluster(workdir) as cluster:
        cert_dir = workdir / "tenantgate-certs"
        certs.init(cert_dir, service="tenantgate", namespace="tenantgate-system")
        cluster.install(ca_bundle=certs.MaterialPaths(cert_dir).ca_cert.read_bytes())
        yield cluster, cert_dir
