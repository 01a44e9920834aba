"""A whole test cluster: the real control plane, simulated nodes, tenantgate's installation
from ``deploy/`` and the addresses tenantgate is reached and reaches the API server by.

Tests start their own tenantgate processes against it: :meth:`Cluster.serve` points the
balancer (the webhooks' URL) at them and registers the webhook configurations;
:meth:`Cluster.reset` puts the cluster back between tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubernetes import client, config

from testcluster.balancer import Balancer
from testcluster.controlplane import ControlPlane
from testcluster.install import NAMESPACE, Installation
from testcluster.kubelet import NodeSpec, SimulatedKubelet
from testcluster.proxy import FaultProxy

DEFAULT_NODES = (
    NodeSpec("node-a", labels={"topology.kubernetes.io/zone": "zone-a"}),
    NodeSpec("node-b", labels={"topology.kubernetes.io/zone": "zone-b"}),
)
# What the control plane has before any test, and keeps: never reset.
SYSTEM_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", NAMESPACE}
)
WAIT = 120.0
# Namespaced kinds a test may leave behind, deleted between tests (group, version, plural).
LEFTOVERS = (
    ("apps", "v1", "deployments"),
    ("apps", "v1", "statefulsets"),
    ("apps", "v1", "daemonsets"),
    ("apps", "v1", "replicasets"),
    ("batch", "v1", "cronjobs"),
    ("batch", "v1", "jobs"),
    ("", "v1", "resourcequotas"),
    ("", "v1", "limitranges"),
    ("", "v1", "events"),
    ("events.k8s.io", "v1", "events"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("coordination.k8s.io", "v1", "leases"),
)


def _until(check: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Cluster:
    """Start with :meth:`start`; the admin's official client is :attr:`api`."""

    def __init__(
        self,
        workdir: Path,
        *,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        scheduler_profiles: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.workdir = workdir
        self.plane = ControlPlane(workdir, scheduler_profiles=scheduler_profiles)
        self.kubelet = SimulatedKubelet(self.plane.admin_kubeconfig, nodes)
        self.balancer = Balancer()
        self.proxy = FaultProxy(
            self.plane.url, ca=self.plane.pki.ca_cert, serving=self.plane.pki.serving("fault-proxy")
        )
        self.installation: Installation | None = None
        self.api: Any = None
        self._baseline_classes: set[str] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Cluster:
        self.plane.start()
        try:
            factory: Any = config.new_client_from_config
            self.api = factory(config_file=str(self.plane.admin_kubeconfig))
            self.kubelet.start()
            self.wait_nodes_schedulable()
            self.balancer.start()
            self.proxy.start(
                admin_cert=self.plane.pki.client("testcluster-proxy", ("system:masters",))
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.proxy.stop()
        self.balancer.stop()
        self.kubelet.stop()
        if self.api is not None:
            self.api.close()
        self.plane.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_nodes_schedulable(self) -> None:
        """Every node Ready and without the not-ready taint the admission plugin adds
        (the node-lifecycle controller removes it)."""
        core: Any = client.CoreV1Api(self.api)

        expected = set(self.kubelet.nodes)

        def ready() -> bool:
            nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
            schedulable = {
                n["metadata"]["name"]
                for n in nodes
                if not any(
                    t.get("key", "").startswith("node.kubernetes.io/")
                    for t in n["spec"].get("taints") or []
                )
            }
            return expected <= schedulable

        _until(ready, "the nodes to be schedulable")

    # --- tenantgate --------------------------------------------------------------------------

    def install(self, *, ca_bundle: bytes) -> Installation:
        """``kubectl apply -k`` of deploy/webhooks (with the HA component), webhooks put aside."""
        self.installation = Installation(
            self.plane, url=self.balancer.url, ca_bundle=ca_bundle
        ).apply()
        self.unregister_webhooks()
        scheduling: Any = client.SchedulingV1Api(self.api)
        self._baseline_classes = {
            item["metadata"]["name"]
            for item in json.loads(scheduling.list_priority_class(_preload_content=False).data)[
                "items"
            ]
        }
        return self.installation

    def tenantgate_kubeconfig(self, path: Path, *, through_proxy: bool = True) -> Path:
        """A kubeconfig with a token of the shipped ServiceAccount, through the fault proxy."""
        if self.installation is None:
            raise RuntimeError("install tenantgate first")
        token = self.installation.service_account_token()
        server = self.proxy.url if through_proxy else self.plane.url
        return self.plane.token_kubeconfig(
            path,
            token=token,
            user="system:serviceaccount:tenantgate-system:tenantgate",
            server=server,
        )

    def run_second_scheduler(self, configuration: dict[str, Any]) -> None:
        """The schedulers component's kube-scheduler, on ``configuration`` (what `tenantgate
        scheduler-config` prints), with a token of its shipped ServiceAccount."""
        if self.installation is None:
            raise RuntimeError("install tenantgate first")
        token = self.installation.service_account_token(name="tenantgate-scheduler")
        kubeconfig = self.plane.token_kubeconfig(
            self.workdir / "tenantgate-scheduler.kubeconfig",
            token=token,
            user="system:serviceaccount:tenantgate-system:tenantgate-scheduler",
        )
        self.plane.start_second_scheduler(
            "tenantgate-scheduler", configuration, kubeconfig=kubeconfig
        )

    def stop_second_scheduler(self) -> None:
        self.plane.stop_component("tenantgate-scheduler")

    def serve(self, ports: list[int]) -> None:
        """Send the webhooks' calls to tenantgate on ``ports`` and register the webhooks."""
        self.balancer.set_backends(ports)
        self.register_webhooks()

    def register_webhooks(self) -> None:
        if self.installation is None:
            raise RuntimeError("install tenantgate first")
        registration: Any = client.AdmissionregistrationV1Api(self.api)
        for document in self.installation.webhook_configurations():
            body = {
                **document,
                "metadata": {
                    k: v for k, v in document["metadata"].items() if k != "resourceVersion"
                },
            }
            create = (
                registration.create_mutating_webhook_configuration
                if document["kind"].startswith("Mutating")
                else registration.create_validating_webhook_configuration
            )
            try:
                create(body, _preload_content=False)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise

    def unregister_webhooks(self) -> None:
        registration: Any = client.AdmissionregistrationV1Api(self.api)
        for delete in (
            registration.delete_collection_mutating_webhook_configuration,
            registration.delete_collection_validating_webhook_configuration,
        ):
            delete(_preload_content=False)

    # --- between tests -----------------------------------------------------------------------

    def reset(self) -> None:
        """Back to the installed state: no webhooks, no backends, no faults, no test objects.

        Test namespaces stay (a namespace takes seconds to delete) but lose their content
        and their labels; pods go at once (grace 0).
        """
        self.unregister_webhooks()
        self.balancer.set_backends([])
        self.proxy.clear()
        core: Any = client.CoreV1Api(self.api)
        custom: Any = client.CustomObjectsApi(self.api)
        namespaces = json.loads(core.list_namespace(_preload_content=False).data)["items"]
        names = [
            n["metadata"]["name"]
            for n in namespaces
            if n["metadata"]["name"] not in SYSTEM_NAMESPACES
        ]
        self._empty_namespaces(set(names))
        for namespace in namespaces:
            name = namespace["metadata"]["name"]
            if (
                name in SYSTEM_NAMESPACES
                or namespace.get("status", {}).get("phase") == "Terminating"
            ):
                continue
            labels = namespace["metadata"].get("labels") or {}
            extra = {key: None for key in labels if key != "kubernetes.io/metadata.name"}
            annotations = {key: None for key in namespace["metadata"].get("annotations") or {}}
            if extra or annotations:
                core.patch_namespace(
                    name,
                    {"metadata": {"labels": extra, "annotations": annotations}},
                    _preload_content=False,
                )
        # tenantgate's own cluster state: its ledgers, leases and events.
        for plural in ("tenantledgers", "tenantcohortledgers"):
            custom.delete_collection_cluster_custom_object(
                "tenantgate.io", "v1alpha1", plural, _preload_content=False
            )
        for group, version, plural in (
            ("coordination.k8s.io", "v1", "leases"),
            ("", "v1", "events"),
        ):
            self._delete_collection(group, version, plural, NAMESPACE)
        scheduling: Any = client.SchedulingV1Api(self.api)
        for item in json.loads(scheduling.list_priority_class(_preload_content=False).data)[
            "items"
        ]:
            name = item["metadata"]["name"]
            if name not in self._baseline_classes and not name.startswith("system-"):
                scheduling.delete_priority_class(name, _preload_content=False)

        def no_pods() -> bool:
            pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)[
                "items"
            ]
            return not [p for p in pods if p["metadata"]["namespace"] not in SYSTEM_NAMESPACES]

        _until(no_pods, "the test's pods to be gone")

    def _delete_collection(self, group: str, version: str, plural: str, namespace: str) -> None:
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        method, url, headers, body, _ = self.api.param_serialize(
            "DELETE",
            f"{prefix}/namespaces/{namespace}/{plural}",
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"},
        )
        response = self.api.call_api(method, url, header_params=headers, body=body)
        if response.status >= 400 and response.status != 404:
            raise RuntimeError(f"DELETE {url}: {response.status} {response.read()!r}")

    def _listed(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        """The metadata of every object of a namespaced kind, in every namespace."""
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        method, url, headers, body, _ = self.api.param_serialize(
            "GET",
            f"{prefix}/{plural}",
            header_params={
                "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            },
        )
        response = self.api.call_api(method, url, header_params=headers, body=body)
        if response.status >= 400:
            raise RuntimeError(f"GET {url}: {response.status} {response.read()!r}")
        # An empty PartialObjectMetadataList says "items": null.
        items: list[dict[str, Any]] = json.loads(response.read())["items"] or []
        return [item["metadata"] for item in items]

    def _empty_namespaces(self, namespaces: set[str]) -> None:
        """Delete what tests leave behind in ``namespaces``.

        Each kind is listed once, across namespaces, and deleted where some is left: a delete
        per namespace and kind cost hundreds of calls a reset once a run had made a few dozen
        namespaces, almost all of them empty.
        """
        for group, version, plural in LEFTOVERS:
            holding = {m["namespace"] for m in self._listed(group, version, plural)}
            for namespace in sorted(holding & namespaces):
                self._delete_collection(group, version, plural, namespace)
        core: Any = client.CoreV1Api(self.api)
        pods = [m for m in self._listed("", "v1", "pods") if m["namespace"] in namespaces]
        for pod in pods:
            if pod.get("finalizers"):
                core.patch_namespaced_pod(
                    pod["name"],
                    pod["namespace"],
                    [{"op": "remove", "path": "/metadata/finalizers"}],
                    _preload_content=False,
                )
        for namespace in sorted({pod["namespace"] for pod in pods}):
            self._delete_collection("", "v1", "pods", namespace)
        for account in self._listed("", "v1", "serviceaccounts"):
            if account["namespace"] in namespaces and account["name"] != "default":
                core.delete_namespaced_service_account(
                    account["name"], account["namespace"], _preload_content=False
                )
