"""Knative Service: the pod of its first Revision, as the serving controllers create it.

The Service's ``spec.template`` becomes Revision ``<service>-00001``, run by Deployment
``<revision>-deployment`` (pkg/reconciler/revision/resources/deploy.go, knative/serving):
the pod is owned by that Deployment's ReplicaSet and labelled ``serving.knative.dev/service``,
``configuration``, ``revision`` and ``app: <revision>``. The user container keeps its name
(``user-container`` when unnamed) and its port, or gets ``user-port`` 8080 when it declares
none; the ``queue-proxy`` sidecar (requests ``cpu: 25m``, its default in config-deployment)
listens on 8012 for traffic and on 8022, 9090 and 9091 for admin and metrics. A probe of the
serving container that names no port probes the user port (the revision webhook's probe
defaults).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podnames import template_hash
from classifier.podview import clone
from classifier.types import JSONObject
from classifier.workloads.pods import make_pod, object_name, reference, string_map

QUEUE_IMAGE = "gcr.io/knative-releases/knative.dev/serving/cmd/queue:latest"
_QUEUE_PORTS = (
    {"name": "http-queueadm", "containerPort": 8022, "protocol": "TCP"},
    {"name": "http-autometric", "containerPort": 9090, "protocol": "TCP"},
    {"name": "http-usermetric", "containerPort": 9091, "protocol": "TCP"},
    {"name": "queue-port", "containerPort": 8012, "protocol": "TCP"},
)


def service_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    template = podview.obj(podview.spec(document).get("template"))
    if not isinstance(podview.spec(template).get("containers"), list):
        return
    service = object_name(document)
    meta = podview.metadata(template)
    revision = podview.string(meta.get("name")) or f"{service}-00001"
    spec: JSONObject = clone(dict(podview.spec(template)))
    containers = [c for c in spec["containers"] if isinstance(c, dict)]
    serving = next((c for c in containers if c.get("ports")), containers[0] if containers else None)
    for container in containers:
        container.setdefault("name", "user-container")
    if serving is not None and not serving.get("ports"):
        serving["ports"] = [{"name": "user-port", "containerPort": 8080, "protocol": "TCP"}]
    if serving is not None:
        _default_probe_ports(serving)
    containers.append(
        {
            "name": "queue-proxy",
            "image": QUEUE_IMAGE,
            "ports": clone(list(_QUEUE_PORTS)),
            "resources": {"requests": {"cpu": "25m"}},
        }
    )
    spec["containers"] = containers
    pod_hash = template_hash(template)
    labels = {
        **string_map(meta.get("labels")),
        "serving.knative.dev/service": service,
        "serving.knative.dev/configuration": service,
        "serving.knative.dev/configurationGeneration": "1",
        "serving.knative.dev/revision": revision,
        "app": revision,
        "pod-template-hash": pod_hash,
    }
    yield (
        "spec.template",
        make_pod(
            name=f"{revision}-deployment-{pod_hash}-{template_hash(template, salt='pod')[:5]}",
            labels=labels,
            annotations=string_map(meta.get("annotations")),
            owners=[reference("apps/v1", "ReplicaSet", f"{revision}-deployment-{pod_hash}")],
            spec=spec,
        ),
    )


def _default_probe_ports(container: JSONObject) -> None:
    port = next(iter(podview.objects(container.get("ports"))), {}).get("containerPort", 8080)
    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if not isinstance(probe, dict):
            continue
        for handler in ("httpGet", "tcpSocket", "grpc"):
            action = probe.get(handler)
            if isinstance(action, dict) and "port" not in action:
                action["port"] = port
