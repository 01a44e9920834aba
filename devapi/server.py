"""``DevAPIServer``: the test API server as a Python object, in a background thread or in front.

with DevAPIServer(webhooks_dir="deploy/webhooks", webhook_ca=ca_pem,
                  webhook_services={"tenantgate.tenantgate-system": "127.0.0.1:8443"}) as api:
    api.write_kubeconfig(tmp_path / "kubeconfig")
    api.faults.add_errors(503, verb="list", count=2)
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType

import uvicorn

from certs.files import certificates_pem, private_key_pem
from certs.issuing import LOCAL_IPS, issue_ca, issue_serving
from devapi import kubeconfig
from devapi.admission import AdmissionChain, UserInfo
from devapi.app import DEFAULT_USER, AppConfig, create_app
from devapi.caller import WebhookCaller
from devapi.errors import APIError
from devapi.events import EVENT_STRATEGIES, EVENT_TYPES
from devapi.faults import Faults
from devapi.kubelet import parse_allocatable
from devapi.manifests import ManifestError, read_documents
from devapi.registry import Registry
from devapi.resources import ResourceCatalog
from devapi.store import DEFAULT_HISTORY_SIZE, Store
from devapi.strategies import SYSTEM_PRIORITY_CLASSES
from devapi.types import JSONObject
from devapi.workloads.controllers import WorkloadControllers, WorkloadSettings
from devapi.workloads.kinds import WORKLOAD_STRATEGIES, WORKLOAD_TYPES

logger = logging.getLogger(__name__)

DEFAULT_BOOKMARK_INTERVAL = 5.0
DEFAULT_WATCH_TIMEOUT = 1800.0  # the real server's --min-request-timeout
STARTUP_TIMEOUT = 30.0
SHUTDOWN_TIMEOUT = 10.0
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class DevAPIServerError(RuntimeError):
    """The server could not be set up or started."""


class DevAPIServer:
    """A Kubernetes test API server with the real admission chain. Bind port 0 for tests."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        webhooks_dir: Path | str | None = None,
        manifests: Sequence[Path | str] = (),
        webhook_ca: Path | str | bytes | None = None,
        webhook_services: Mapping[str, str] | None = None,
        history_size: int = DEFAULT_HISTORY_SIZE,
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        kubelet: bool = True,
        node_allocatable: Mapping[str, str] | None = None,
        tls: bool = False,
        tls_cert_file: Path | str | None = None,
        tls_key_file: Path | str | None = None,
        user: UserInfo = DEFAULT_USER,
        workloads: WorkloadSettings | None = None,
    ) -> None:
        if bookmark_interval <= 0 or watch_timeout <= 0:
            raise ValueError("bookmark_interval and watch_timeout must be positive")
        if (tls_cert_file is None) != (tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        self._host = host
        self._requested_port = port
        self._tls_files = (
            (Path(tls_cert_file), Path(tls_key_file))
            if tls_cert_file is not None and tls_key_file is not None
            else None
        )
        self._self_signed = tls and self._tls_files is None
        self._bookmark_interval = bookmark_interval
        self._watch_timeout = watch_timeout
        self._user = user
        self.store = Store(history_size=history_size)
        self.catalog = ResourceCatalog()
        for rt in (*EVENT_TYPES, *WORKLOAD_TYPES):
            self.catalog.add(rt)
        self.faults = Faults(self.store)
        self._caller = WebhookCaller(
            services=dict(webhook_services or {}), ca_override=_read_ca(webhook_ca)
        )
        self.registry = Registry(
            store=self.store,
            catalog=self.catalog,
            chain_factory=self._chain,
            conflict_check=lambda rt: self.faults.take_conflict(rt.group, rt.plural),
            kubelet=kubelet,
            node_allocatable=parse_allocatable(node_allocatable)
            if node_allocatable is not None
            else None,
            strategies={**EVENT_STRATEGIES, **WORKLOAD_STRATEGIES},
        )
        self.workloads = WorkloadControllers(self.registry, workloads or WorkloadSettings())
        self.registry.background.append(self.workloads.run)
        self._bootstrap_defaults()
        sources = [Path(webhooks_dir)] if webhooks_dir is not None else []
        self.load_manifests([*sources, *(Path(m) for m in manifests)])
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self.ca_pem: bytes | None = None
        self._certificate: tuple[str, str] | None = None

    def _chain(self, registry: Registry) -> AdmissionChain:
        return AdmissionChain(
            webhooks=registry.webhooks,
            namespace_labels=registry.namespace_labels,
            equivalents=registry.equivalents,
            caller=self._caller,
            in_tree=registry.pod_plugins().mutating(),
            in_tree_validators=registry.pod_plugins().validating(),
        )

    def _bootstrap_defaults(self) -> None:
        for name in SYSTEM_NAMESPACES:
            self.registry.bootstrap(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        for name, value in SYSTEM_PRIORITY_CLASSES.items():
            self.registry.bootstrap(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                    "description": "Used for system critical pods that must not be moved "
                    "from their current node.",
                }
            )

    def load_manifests(self, paths: Sequence[Path]) -> list[JSONObject]:
        """Store every served object found under ``paths`` (without admission, like a
        cluster's bootstrap); other kinds (Services, ...) are skipped, and so are workloads
        (Deployments, Jobs, ...): the webhook's own Deployment in its manifests runs outside
        this server, and workloads are applied with kubectl."""
        stored: list[JSONObject] = []
        for file, doc in read_documents(paths):
            api_version = str(doc.get("apiVersion"))
            group, _, version = api_version.rpartition("/")
            rt = self.catalog.by_kind(group, version, str(doc.get("kind")))
            if rt is None or rt in WORKLOAD_TYPES:
                logger.debug("%s: skipping %s %s (not loaded)", file, api_version, doc.get("kind"))
                continue
            try:
                stored.append(self.registry.bootstrap(doc))
            except APIError as err:
                raise ManifestError(f"{file}: {err.message}") from err
            logger.info(
                "%s: loaded %s %s", file, doc.get("kind"), (doc.get("metadata") or {}).get("name")
            )
        return stored

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._socket is None:
            raise DevAPIServerError("the server is not bound yet; call start()")
        port: int = self._socket.getsockname()[1]
        return port

    @property
    def url(self) -> str:
        scheme = "https" if self._tls_enabled else "http"
        host = self._host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.port}"

    @property
    def _tls_enabled(self) -> bool:
        return self._self_signed or self._tls_files is not None

    def prepare(self) -> None:
        """Bind the port and set up TLS material (start() and run() do it; call it first to
        know the URL and CA, e.g. for a kubeconfig, before serving)."""
        if self._socket is not None:
            return
        if self._tls_files is not None:
            self._certificate = (str(self._tls_files[0]), str(self._tls_files[1]))
            self.ca_pem = self._tls_files[0].read_bytes()
        elif self._self_signed:
            self._certificate = self._issue_certificate()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on such sockets, and without it
        # every small response waits out the client's delayed ACK (~40 ms).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self._host, self._requested_port))
        except OSError as err:
            sock.close()
            raise DevAPIServerError(
                f"cannot listen on {self._host}:{self._requested_port}: {err}"
            ) from err
        sock.listen(128)
        sock.setblocking(False)
        self._socket = sock

    def _uvicorn(self) -> uvicorn.Server:
        self.prepare()
        certfile, keyfile = self._certificate if self._certificate is not None else (None, None)
        app = create_app(
            registry=self.registry,
            catalog=self.catalog,
            faults=self.faults,
            config=AppConfig(
                server_address=f"{self._host}:{self.port}",
                bookmark_interval=self._bookmark_interval,
                watch_timeout=self._watch_timeout,
                user=self._user,
            ),
            on_shutdown=self._caller.aclose,
        )
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            timeout_graceful_shutdown=int(SHUTDOWN_TIMEOUT / 2),
        )
        return uvicorn.Server(config)

    def _issue_certificate(self) -> tuple[str, str]:
        now = datetime.now(UTC)
        ca = issue_ca(now=now, valid_for=timedelta(days=7))
        addresses = list(LOCAL_IPS)
        try:
            extra = ipaddress.ip_address(self._host)
            if extra not in addresses and not extra.is_unspecified:
                addresses.append(extra)
        except ValueError:
            pass
        names = (
            ("localhost",)
            if self._host in ("127.0.0.1", "::1", "0.0.0.0", "::", "localhost")
            else ("localhost", self._host)
        )
        serving = issue_serving(
            ca, dns_names=names, ip_addresses=addresses, now=now, valid_for=timedelta(days=7)
        )
        self._tempdir = tempfile.TemporaryDirectory(prefix="tenantgate-devapi-")
        directory = Path(self._tempdir.name)
        (directory / "tls.crt").write_bytes(certificates_pem([serving.certificate]))
        (directory / "tls.key").write_bytes(private_key_pem(serving.key))
        self.ca_pem = certificates_pem([ca.certificate])
        return str(directory / "tls.crt"), str(directory / "tls.key")

    def start(self) -> DevAPIServer:
        """Serve in a background thread; returns once the server accepts requests."""
        if self._thread is not None:
            raise DevAPIServerError("the server is already started")
        self._server = self._uvicorn()
        server, sock = self._server, self._socket
        if sock is None:  # pragma: no cover - _uvicorn() binds
            raise DevAPIServerError("no socket")

        def serve() -> None:
            try:
                asyncio.run(server.serve(sockets=[sock]))
            except BaseException as err:  # reported to the caller of start()/stop()
                self._failure = err

        self._thread = threading.Thread(target=serve, name="tenantgate-devapi", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise DevAPIServerError(f"the test API server did not start: {self._failure!r}")
            time.sleep(0.01)
        logger.info("tenantgate test API server serving %s", self.url)
        return self

    def run(self) -> None:
        """Serve in the calling (main) thread until SIGINT or SIGTERM, then return."""
        self._server = self._uvicorn()
        if self._socket is None:  # pragma: no cover - _uvicorn() binds
            raise DevAPIServerError("no socket")
        # uvicorn re-raises the signal that stopped it once it has shut down, to the handler
        # that was installed before; this one turns that into a normal return.
        received: list[int] = []
        previous = {
            sig: signal.signal(sig, lambda signum, frame: received.append(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            asyncio.run(self._server.serve(sockets=[self._socket]))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._cleanup()
        if received:
            logger.info("stopped by signal %d", received[0])

    def stop(self) -> None:
        """Close every watch, stop serving and release the port."""
        self.store.close_watches()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(SHUTDOWN_TIMEOUT)
            if self._thread.is_alive() and self._server is not None:
                self._server.force_exit = True
                self._thread.join(SHUTDOWN_TIMEOUT)
            self._thread = None
        self._cleanup()

    def _cleanup(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._certificate = None
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> DevAPIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- clients -----------------------------------------------------------------------------

    def kubeconfig(self, *, namespace: str = "default") -> str:
        return kubeconfig.render(self.url, ca_pem=self.ca_pem, namespace=namespace)

    def write_kubeconfig(self, path: Path | str, *, namespace: str = "default") -> Path:
        return kubeconfig.write(Path(path), self.kubeconfig(namespace=namespace))


def _read_ca(value: Path | str | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    path = Path(value)
    try:
        return path.read_bytes()
    except OSError as err:
        raise DevAPIServerError(f"cannot read the webhook CA {path}: {err}") from err
