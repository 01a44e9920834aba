"""SparkApplication: the driver pod and an executor pod, with the resources Spark gives them.

The operator turns the SparkApplication into spark-submit settings
(``driverConfOption`` / ``executorConfOption`` in
internal/controller/sparkapplication/submission.go, kubeflow/spark-operator):
``cores`` -> ``spark.{driver,executor}.cores``, ``coreRequest`` ->
``spark.kubernetes.{driver,executor}.request.cores``, ``coreLimit`` ->
``spark.kubernetes.{driver,executor}.limit.cores``, ``memory`` -> ``spark.*.memory``,
``memoryOverhead`` -> ``spark.*.memoryOverhead``, ``memoryOverheadFactor`` ->
``spark.kubernetes.memoryOverheadFactor``; its pod template (``template``) seeds the pod, and
its webhook adds ``gpu`` as a container limit (``addGPU``) and the owner reference.

Spark then builds each pod (``BasicDriverFeatureStep`` / ``BasicExecutorFeatureStep``,
apache/spark resource-managers/kubernetes): cpu request = request cores, else cores (default
1); cpu limit = limit cores when set; memory request = limit = memory (default 1g) + overhead,
in MiB, where overhead = ``memoryOverhead`` or max(factor x memory, 384 MiB), and the factor
defaults to 0.1 for JVM applications (Java, Scala) and 0.4 for Python and R (the operator's
own quota estimate, ``getMemoryRequests`` in internal/webhook/resourcequota.go, uses the same
0.1 / 0.4 / 384 MiB constants from pkg/common/spark.go). Labels: ``spark-role`` (driver /
executor), ``spark-app-selector``, the operator's ``sparkoperator.k8s.io/app-name`` and
``launched-by-spark-operator``, plus the application's and the role's own labels. The driver
exposes its RPC, block manager and UI ports. Executors are owned by the driver pod and
(not as controller) by the SparkApplication.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podnames import template_hash
from classifier.podview import clone
from classifier.types import JSONObject
from classifier.workloads.pods import make_pod, object_name, reference, string_map

API_VERSION = "sparkoperator.k8s.io/v1beta2"
_JVM_TYPES = frozenset({"Java", "Scala"})
_JVM_FACTOR = 0.1
_NON_JVM_FACTOR = 0.4
_MIN_OVERHEAD_MIB = 384
_DEFAULT_MEMORY_MIB = 1024  # spark.{driver,executor}.memory default "1g"
_CONTAINER = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}
# Driver ports (spark.driver.port, spark.driver.blockManager.port, spark.ui.port defaults).
_DRIVER_PORTS = (
    {"name": "driver-rpc-port", "containerPort": 7078, "protocol": "TCP"},
    {"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"},
    {"name": "spark-ui", "containerPort": 4040, "protocol": "TCP"},
)
# JavaUtils.byteStringAs: an integer and an optional unit; a bare number is in MiB here.
_MEMORY_RE = re.compile(r"^([0-9]+)([a-z]*)$")
_MIB_PER_UNIT: Mapping[str, float] = {
    "b": 1 / (1 << 20),
    "k": 1 / 1024,
    "kb": 1 / 1024,
    "": 1,
    "m": 1,
    "mb": 1,
    "g": 1024,
    "gb": 1024,
    "t": 1 << 20,
    "tb": 1 << 20,
    "p": 1 << 30,
    "pb": 1 << 30,
}


class SparkMemoryError(ValueError):
    """A memory setting Spark would refuse."""


def memory_mib(text: str) -> int:
    """A Spark memory string (``512m``, ``2g``, ``1024``) in whole MiB, as Spark reads it."""
    found = _MEMORY_RE.match(text.strip().lower())
    if found is None or found.group(2) not in _MIB_PER_UNIT:
        raise SparkMemoryError(f"{text!r} is not a Spark memory size (e.g. 512m, 2g)")
    return int(int(found.group(1)) * _MIB_PER_UNIT[found.group(2)])


def spark_application_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    name = object_name(document)
    labels = string_map(podview.metadata(document).get("labels"))
    yield from _application_pods(podview.spec(document), "spec", app=name, app_labels=labels)


def scheduled_spark_application_pods(
    document: Mapping[str, Any],
) -> Iterator[tuple[str, JSONObject]]:
    # Each run is a SparkApplication named NAME-<unix nanoseconds>, labelled with its schedule.
    name = object_name(document)
    labels = {
        **string_map(podview.metadata(document).get("labels")),
        "sparkoperator.k8s.io/scheduled-app-name": name,
    }
    spec = podview.obj(podview.spec(document).get("template"))
    yield from _application_pods(
        spec, "spec.template", app=f"{name}-1740057600000000000", app_labels=labels
    )


def _application_pods(
    spec: Mapping[str, Any], path: str, *, app: str, app_labels: Mapping[str, str]
) -> Iterator[tuple[str, JSONObject]]:
    suffix = template_hash(spec, length=16)
    driver_name = f"{app}-driver"
    common = {
        **{k: v for k, v in app_labels.items() if not k.startswith("kueue.x-k8s.io/")},
        "sparkoperator.k8s.io/app-name": app,
        "sparkoperator.k8s.io/launched-by-spark-operator": "true",
        "spark-app-selector": f"spark-{suffix}",
    }
    for role in ("driver", "executor"):
        role_spec = podview.obj(spec.get(role))
        pod_spec = _pod_spec(spec, role_spec, role=role)
        labels = {
            **common,
            **string_map(role_spec.get("labels")),
            "spark-role": role,
        }
        if role == "driver":
            name = driver_name
            owners = [reference(API_VERSION, "SparkApplication", app)]
        else:
            name = f"{app}-{suffix[:8]}-exec-1"
            labels["spark-exec-id"] = "1"
            owners = [
                reference("v1", "Pod", driver_name),
                reference(API_VERSION, "SparkApplication", app, controller=False),
            ]
        template_labels = string_map(
            podview.metadata(podview.obj(role_spec.get("template"))).get("labels")
        )
        yield (
            f"{path}.{role}",
            make_pod(
                name=name,
                labels={**template_labels, **labels},
                annotations={
                    **string_map(
                        podview.metadata(podview.obj(role_spec.get("template"))).get("annotations")
                    ),
                    **string_map(role_spec.get("annotations")),
                },
                owners=owners,
                spec=pod_spec,
            ),
        )


def _pod_spec(app: Mapping[str, Any], role_spec: Mapping[str, Any], *, role: str) -> JSONObject:
    template = podview.obj(role_spec.get("template"))
    spec: JSONObject = clone(dict(podview.spec(template)))
    containers: list[Any] = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    wanted = _CONTAINER[role]
    main = next((c for c in containers if c.get("name") == wanted), None)
    if main is None:
        main = containers[0] if containers else {"name": wanted}
        if not containers:
            containers.append(main)
    spec["containers"] = containers
    image = podview.string(role_spec.get("image")) or podview.string(app.get("image"))
    if image:
        main["image"] = image
    main["resources"] = _resources(app, role_spec, existing=podview.obj(main.get("resources")))
    ports = list(podview.objects(main.get("ports")))
    if role == "driver":
        ports.extend(clone(list(_DRIVER_PORTS)))
    for port in podview.objects(role_spec.get("ports")):
        ports.append({"name": port.get("name"), "containerPort": port.get("containerPort")})
    if ports:
        main["ports"] = ports
    if isinstance(role_spec.get("securityContext"), dict):
        main["securityContext"] = clone(role_spec["securityContext"])
    spec["restartPolicy"] = "Never"
    node_selector = {
        **string_map(app.get("nodeSelector")),
        **string_map(spec.get("nodeSelector")),
        **string_map(role_spec.get("nodeSelector")),
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    for field, source in (
        ("tolerations", "tolerations"),
        ("affinity", "affinity"),
        ("schedulerName", "schedulerName"),
        ("priorityClassName", "priorityClassName"),
        ("hostNetwork", "hostNetwork"),
        ("securityContext", "podSecurityContext"),
        ("serviceAccountName", "serviceAccount"),
    ):
        value = role_spec.get(source)
        if value is not None:
            spec[field] = clone(value)
    return spec


def _resources(
    app: Mapping[str, Any], role_spec: Mapping[str, Any], *, existing: Mapping[str, Any]
) -> JSONObject:
    requests: JSONObject = dict(podview.obj(existing.get("requests")))
    limits: JSONObject = dict(podview.obj(existing.get("limits")))
    cores = role_spec.get("cores")
    request = podview.string(role_spec.get("coreRequest"))
    requests["cpu"] = request or (str(cores) if isinstance(cores, int | float) else "1")
    limit = podview.string(role_spec.get("coreLimit"))
    if limit:
        limits["cpu"] = limit
    try:
        memory = f"{_memory_with_overhead(app, role_spec)}Mi"
    except SparkMemoryError as error:
        # Spark would refuse to submit; left unparseable, the pod's request reports it.
        memory = str(error)
    requests["memory"] = limits["memory"] = memory
    gpu = podview.obj(role_spec.get("gpu"))
    gpu_name = podview.string(gpu.get("name"))
    if gpu_name and isinstance(gpu.get("quantity"), int):
        limits[gpu_name] = str(gpu["quantity"])
    return {"requests": requests, "limits": limits}


def _memory_with_overhead(app: Mapping[str, Any], role_spec: Mapping[str, Any]) -> int:
    memory_text = podview.string(role_spec.get("memory"))
    memory = memory_mib(memory_text) if memory_text else _DEFAULT_MEMORY_MIB
    overhead_text = podview.string(role_spec.get("memoryOverhead"))
    if overhead_text:
        return memory + memory_mib(overhead_text)
    factor_text = podview.string(app.get("memoryOverheadFactor"))
    if factor_text:
        try:
            factor = float(factor_text)
        except ValueError:
            raise SparkMemoryError(
                f"memoryOverheadFactor {factor_text!r} is not a number"
            ) from None
    else:
        factor = _JVM_FACTOR if app.get("type") in _JVM_TYPES else _NON_JVM_FACTOR
    return memory + max(int(factor * memory), _MIN_OVERHEAD_MIB)
