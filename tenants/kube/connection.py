"""Where the cluster is and how to talk to it: in-cluster, a kubeconfig, or offline.

:func:`resolve_target` decides from the settings and the environment alone (no I/O), in this
order: ``--offline``; ``--kubeconfig FILE``; ``KUBECONFIG``; the in-cluster service account
(``KUBERNETES_SERVICE_HOST``); otherwise offline, because no cluster is configured. A server
never falls back to ``~/.kube/config`` on its own: a developer's laptop would otherwise quietly
sync against whatever cluster their shell last pointed at.

:class:`Connection` wraps one official ``kubernetes`` API client. Lists and watches are read
raw (``_preload_content=False``) and parsed with orjson: deserialising 100,000 pods into the
client's model classes would take minutes, and the controller needs a handful of fields.
A pod list page is decoded by :func:`decode_list` with msgspec against :data:`PodList`, a schema
of only the fields :func:`tenants.controller.pod_facts` reads: the rest of each ~12 KB pod
(half of it ``managedFields``) is skipped unbuilt, which makes parsing and freeing a page
several times cheaper. A page the schema does not fit is parsed whole with orjson instead.
Every failure leaves as a :class:`~tenants.kube.errors.KubeError`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypedDict

import msgspec
import orjson

from tenants.kube.errors import KubeConfigError, KubeError, KubeNotFound, from_status, wrap
from tenants.kube.ledgerstore import GROUP as LEDGER_GROUP
from tenants.kube.ledgerstore import PLURAL as LEDGER_PLURAL
from tenants.kube.ledgerstore import VERSION as LEDGER_VERSION
from tenants.kube.responses import drain

logger = logging.getLogger(__name__)

Resource = Literal["pods", "namespaces", "priorityclasses", "tenantledgers", "podgroups"]
# What ClusterSync watches; tenantledgers are watched by tenants.kube.ledgerwatch.
RESOURCES: Final[tuple[Resource, ...]] = ("namespaces", "priorityclasses", "pods")

Mode = Literal["kubeconfig", "in-cluster", "offline"]

# The projection of a stored pod that tenants.controller.pod_facts reads, and nothing else
# (tests/tenants/test_controller.py checks pod_facts gives the same facts on it). Leaves are
# Any so that they come through exactly as orjson would give them.
_PodLabels = TypedDict("_PodLabels", {"tenantgate.io/tier": Any}, total=False)
_PodAnnotations = TypedDict(
    "_PodAnnotations",
    {
        "tenantgate.io/reservation": Any,
        "tenantgate.io/group": Any,
        "tenantgate.io/group-size": Any,
    },
    total=False,
)


class _PodMetadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    labels: _PodLabels | None
    annotations: _PodAnnotations | None
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    creationTimestamp: Any


class _PodContainer(TypedDict, total=False):
    name: Any
    resources: Any
    restartPolicy: Any


class _PodSpec(TypedDict, total=False):
    containers: list[_PodContainer] | None
    initContainers: list[_PodContainer] | None
    resources: Any
    overhead: Any
    priorityClassName: Any
    priority: Any
    schedulingGates: Any


class _PodContainerStatus(TypedDict, total=False):
    name: Any
    resources: Any
    allocatedResources: Any


class _PodCondition(TypedDict, total=False):
    type: Any
    reason: Any
    status: Any
    lastTransitionTime: Any


class _PodStatus(TypedDict, total=False):
    phase: Any
    containerStatuses: list[_PodContainerStatus] | None
    initContainerStatuses: list[_PodContainerStatus] | None
    conditions: list[_PodCondition] | None


class PodItem(TypedDict, total=False):
    """A listed pod, reduced to what the ledger reads (plain dicts, as orjson gives them)."""

    metadata: _PodMetadata | None
    spec: _PodSpec | None
    status: _PodStatus | None


class PodList(TypedDict, total=False):
    """A PodList page: its list metadata whole, its items reduced to :class:`PodItem`."""

    metadata: dict[str, Any]
    items: list[PodItem]


_POD_LIST_DECODER: Final = msgspec.json.Decoder(PodList)


def decode_list(resource: Resource, body: bytes) -> Any:
    """A list response parsed: pods reduced to :class:`PodItem`, anything else whole.

    A pod page the schema does not fit (a field of an unexpected type, which the API server
    never sends) is parsed whole with orjson, so it reads exactly as it did before.
    """
    if resource == "pods":
        try:
            return _POD_LIST_DECODER.decode(body)
        except msgspec.MsgspecError:
            pass
    return orjson.loads(body)


CONNECT_TIMEOUT_SECONDS: Final = 10.0
LIST_READ_TIMEOUT_SECONDS: Final = 60.0
# A watch may be silent between bookmarks; allow that much past its own server-side timeout.
WATCH_READ_MARGIN_SECONDS: Final = 30.0
USER_AGENT: Final = "tenantgate"


@dataclass(frozen=True, slots=True)
class ClusterTarget:
    """Which cluster to talk to, and why (``source`` is for the log and ``/readyz``)."""

    mode: Mode
    source: str
    kubeconfig: str | None = None

    @property
    def offline(self) -> bool:
        return self.mode == "offline"


def resolve_target(
    *,
    kubeconfig: Path | None,
    offline: bool,
    environ: Mapping[str, str] | None = None,
) -> ClusterTarget:
    """Decide where the cluster is, without touching the network or the files."""
    env = os.environ if environ is None else environ
    if offline:
        return ClusterTarget("offline", "offline mode requested (--offline)")
    if kubeconfig is not None:
        return ClusterTarget("kubeconfig", f"kubeconfig {kubeconfig}", str(kubeconfig))
    from_env = env.get("KUBECONFIG", "").strip()
    if from_env:
        return ClusterTarget("kubeconfig", f"kubeconfig {from_env} (KUBECONFIG)", from_env)
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        return ClusterTarget("in-cluster", "in-cluster service account")
    return ClusterTarget("offline", "no cluster configured")


@dataclass(frozen=True, slots=True)
class _Calls:
    api: str  # attribute of Connection holding the API object
    method: str  # its list-or-watch method


_CALLS: Final[Mapping[Resource, _Calls]] = {
    "pods": _Calls("core", "list_pod_for_all_namespaces"),
    "namespaces": _Calls("core", "list_namespace"),
    "priorityclasses": _Calls("scheduling", "list_priority_class"),
    "tenantledgers": _Calls("ledgers", "list"),
    "podgroups": _Calls("podgroups", "list"),
}


class _TenantLedgers:
    """List and watch calls for the cluster-scoped TenantLedger objects (a custom resource)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)

    def list(self, **kwargs: Any) -> Any:
        return self._api.list_cluster_custom_object(
            LEDGER_GROUP, LEDGER_VERSION, LEDGER_PLURAL, **kwargs
        )


# The coscheduling PodGroup (kubernetes-sigs/scheduler-plugins apis/scheduling/v1alpha1).
PODGROUP_GROUP: Final = "scheduling.x-k8s.io"
PODGROUP_VERSION: Final = "v1alpha1"
PODGROUP_PLURAL: Final = "podgroups"


class _PodGroups:
    """List and watch calls for coscheduling PodGroups in every namespace (a custom resource
    of the scheduler-plugins project, watched only where its CRD is installed)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)

    def list(self, **kwargs: Any) -> Any:
        return self._api.list_cluster_custom_object(
            PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL, **kwargs
        )

    def served(self) -> bool:
        """Whether the API server serves PodGroups (their CRD is installed): discovery, which
        every authenticated user may read (the system:discovery ClusterRole)."""
        try:
            # _preload_content=False gives the raw response, which the stubs do not know.
            response: Any = self._api.get_api_resources(
                PODGROUP_GROUP,
                PODGROUP_VERSION,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT_SECONDS, LIST_READ_TIMEOUT_SECONDS),
            )
            resources = orjson.loads(drain(response))
        except Exception as exc:
            error = wrap(exc, action=f"discover {PODGROUP_GROUP}/{PODGROUP_VERSION}")
            if isinstance(error, KubeNotFound):
                return False
            raise error from exc
        listed = resources.get("resources") if isinstance(resources, dict) else None
        return any(
            isinstance(item, dict) and item.get("name") == PODGROUP_PLURAL for item in listed or []
        )


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list: its items, the list's resourceVersion and the continue token."""

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None


WHOAMI_TIMEOUT_SECONDS: Final = 10.0


class Connection:
    """One API client for one cluster; thread-safe (each call takes a pooled connection)."""

    def __init__(self, api_client: Any, *, target: ClusterTarget) -> None:
        from kubernetes import client

        self.target = target
        self._api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)
        self.ledgers = _TenantLedgers(api_client)
        self.podgroups = _PodGroups(api_client)

    @classmethod
    def open(cls, target: ClusterTarget, *, context: str | None = None) -> Connection:
        """Load the client configuration for ``target``; :class:`KubeConfigError` if unusable."""
        from kubernetes import client, config

        if target.offline:
            raise KubeConfigError(f"cannot connect: {target.source}", reason="Offline")
        configuration = client.Configuration()
        # The client's config loaders carry no annotations.
        load_incluster: Any = config.load_incluster_config
        load_kubeconfig: Any = config.load_kube_config
        try:
            if target.mode == "in-cluster":
                load_incluster(client_configuration=configuration)
            else:
                load_kubeconfig(
                    config_file=target.kubeconfig,
                    context=context,
                    client_configuration=configuration,
                    # A server never writes refreshed credentials back into the user's file.
                    persist_config=False,
                )
        except Exception as exc:
            raise wrap(exc, action=f"load {target.source}") from exc
        api_client = client.ApiClient(configuration)
        api_client.user_agent = USER_AGENT
        return cls(api_client, target=target)

    @property
    def api_client(self) -> Any:
        """The official client's ``ApiClient``, for the other API groups (ledger, leases)."""
        return self._api_client

    @property
    def host(self) -> str:
        host: str = self._api_client.configuration.host
        return host

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._api_client.close()

    def whoami(self) -> str:
        """The user name the API server authenticates these credentials as.

        A SelfSubjectReview (authentication.k8s.io/v1, GA in 1.28): every authenticated user
        may create one, so it needs no RBAC grant (``system:basic-user``). Raises
        :class:`KubeError` when the server cannot answer.
        """
        from kubernetes import client

        reviews: Any = client.AuthenticationV1Api(self._api_client)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            response = reviews.create_self_subject_review(
                body, _preload_content=False, _request_timeout=WHOAMI_TIMEOUT_SECONDS
            )
            document = orjson.loads(response.data)
        except Exception as exc:
            raise wrap(exc, action="ask the API server who tenantgate is") from exc
        user = ((document.get("status") or {}).get("userInfo") or {}).get("username")
        if not isinstance(user, str) or not user:
            raise KubeError("SelfSubjectReview: no user name in the answer", reason="BadResponse")
        return user

    def _method(self, resource: Resource) -> Any:
        calls = _CALLS[resource]
        return getattr(getattr(self, calls.api), calls.method)

    def list_page(
        self,
        resource: Resource,
        *,
        limit: int,
        continue_token: str | None = None,
        timeout: float = LIST_READ_TIMEOUT_SECONDS,
    ) -> ListPage:
        """One page of ``resource`` (all namespaces), read consistently from the API server."""
        action = f"list {resource}"
        kwargs: dict[str, Any] = {
            "limit": limit,
            "_preload_content": False,
            "_request_timeout": (CONNECT_TIMEOUT_SECONDS, timeout),
        }
        if continue_token:
            kwargs["_continue"] = continue_token
        try:
            response = self._method(resource)(**kwargs)
            body = drain(response)
            document = decode_list(resource, body)
        except KubeError:
            raise
        except Exception as exc:
            raise wrap(exc, action=action) from exc
        if not isinstance(document, dict):
            raise KubeError(f"{action}: the response is not a JSON object", reason="BadResponse")
        metadata = document.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        items = document.get("items")
        token = metadata.get("continue")
        version = metadata.get("resourceVersion")
        return ListPage(
            items=[item for item in items if isinstance(item, dict)]
            if isinstance(items, list)
            else [],
            resource_version=version if isinstance(version, str) else "",
            continue_token=token if isinstance(token, str) and token else None,
        )

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> WatchStream:
        """Open a watch of ``resource`` from ``resource_version``, with bookmarks."""
        action = f"watch {resource}"
        try:
            response = self._method(resource)(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                _request_timeout=(
                    CONNECT_TIMEOUT_SECONDS,
                    timeout_seconds + WATCH_READ_MARGIN_SECONDS,
                ),
            )
        except Exception as exc:
            raise wrap(exc, action=action) from exc
        return WatchStream(response, action=action)


class WatchStream:
    """The events of one open watch, as parsed JSON; :meth:`close` works from any thread.

    Iterating raises :class:`KubeError` when the connection fails, and for an ``ERROR`` event
    (a 410 ``Expired`` becomes :class:`~tenants.kube.errors.KubeGone`). The iteration simply
    ends when the server closes the watch (its ``timeoutSeconds`` elapsed).
    """

    def __init__(self, response: Any, *, action: str) -> None:
        self._response = response
        self._action = action
        self._lock = threading.Lock()
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in self._lines():
                if not line.strip():
                    continue
                event = orjson.loads(line)
                if not isinstance(event, dict):
                    continue
                if event.get("type") == "ERROR":
                    status = event.get("object")
                    raise from_status(
                        status if isinstance(status, dict) else {}, action=self._action
                    )
                yield event
        except KubeError:
            raise
        except Exception as exc:
            if self._closed:
                return  # closed on purpose from another thread: not a failure
            raise wrap(exc, action=self._action) from exc
        finally:
            self.close()

    def _lines(self) -> Iterator[bytes]:
        buffer = bytearray()
        for chunk in self._response.stream(amt=None, decode_content=True):
            buffer += chunk
            start = 0
            while True:
                end = buffer.find(b"\n", start)
                if end < 0:
                    break
                yield bytes(buffer[start:end])
                start = end + 1
            if start:
                del buffer[:start]
        if buffer.strip():
            yield bytes(buffer)

    def close(self) -> None:
        """Stop the watch; a thread blocked reading it returns promptly."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        response = self._response
        # shutdown() unblocks a reader in another thread; close() alone would not.
        with contextlib.suppress(Exception):
            response.shutdown()
        with contextlib.suppress(Exception):
            response.close()
        with contextlib.suppress(Exception):
            response.release_conn()


__all__ = [
    "RESOURCES",
    "ClusterTarget",
    "Connection",
    "ListPage",
    "Resource",
    "WatchStream",
    "resolve_target",
]
