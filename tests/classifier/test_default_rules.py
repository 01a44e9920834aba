"""The default rules (examples/tenantgate.yaml): each rule's signals, and what must NOT match.

Each case is a pod as a controller creates it, with the rule and profile the defaults give.
Negative cases are the confusions a single signal would make: a web-server image without a
port, a Kafka client, an exporter named after a database, a Deployment mounting a model
volume, a DaemonSet that runs a store. The real-manifest corpus (test_fixtures.py) measures
the same rules against a person's labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from classifier.plan import Classifier
from classifier.types import JSONObject
from tests.classifier import test_fixtures

ROOT = Path(__file__).resolve().parents[2]


def defaults() -> Classifier:
    return test_fixtures.classifier()


def pod(
    *images: str,
    ports: list[int] | None = None,
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    **spec: Any,
) -> JSONObject:
    containers: list[JSONObject] = []
    for index, image in enumerate(images or ("busybox",)):
        container: JSONObject = {"name": f"c{index}", "image": image}
        if index == 0 and ports:
            container["ports"] = [{"containerPort": p} for p in ports]
        if index == 0 and requests:
            container["resources"] = {"requests": requests}
        containers.append(container)
    meta: JSONObject = {"name": "p", "labels": labels or {}}
    if owner is not None:
        kind, name = owner
        meta["ownerReferences"] = [{"apiVersion": "x/v1", "kind": kind, "name": name, "uid": "u"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": containers, **spec},
    }


STATEFUL: dict[str, Any] = {
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-store-0"}}]
}

# (case, pod, namespace, rule, profile); rule None: no rule matched.
CASES: list[tuple[str, JSONObject, str, str | None, str]] = [
    # system
    (
        "node agent DaemonSet",
        pod("fluentd-elasticsearch", owner=("DaemonSet", "f")),
        "logs",
        "system",
        "system",
    ),
    (
        "a store on every node is not an add-on",
        pod("apachepulsar/pulsar-all", ports=[3181], owner=("DaemonSet", "bookie")),
        "default",
        "streaming",
        "streaming",
    ),
    (
        "monitoring namespace",
        pod("grafana/grafana", ports=[3000]),
        "monitoring",
        "system",
        "system",
    ),
    (
        "kube-prometheus part-of label anywhere",
        pod("x", ports=[8080], labels={"app.kubernetes.io/part-of": "kube-prometheus"}),
        "ops",
        "system",
        "system",
    ),
    (
        "a namespace that only starts like one",
        pod("grafana/grafana", ports=[3000]),
        "monitoring-team",
        "api",
        "api",
    ),
    # ml-training
    (
        "GPU beats a web image",
        pod("nginx", ports=[80], requests={"nvidia.com/gpu": "1"}),
        "default",
        "ml-training",
        "ml-training",
    ),
    (
        "CPU-only training framework",
        pod("pytorch", owner=("PyTorchJob", "j")),
        "default",
        "ml-training",
        "ml-training",
    ),
    # batch
    (
        "an nginx daemoned by a workflow step is a step",
        pod("nginx", labels={"workflows.argoproj.io/workflow": "wf"}, restartPolicy="Never"),
        "default",
        "batch",
        "batch",
    ),
    ("a Tekton TaskRun's pod", pod("golang", owner=("TaskRun", "r")), "default", "batch", "batch"),
    (
        "a Spark standalone worker",
        pod("registry.k8s.io/spark", ports=[8081]),
        "default",
        "batch",
        "batch",
    ),
    ("never restarted", pod("busybox", restartPolicy="Never"), "default", "batch", "batch"),
    # web-server
    (
        "web server with a port",
        pod("nginx:1.27", ports=[8443]),
        "default",
        "web-server",
        "web-frontend",
    ),
    (
        "web server image without a port is not a frontend",
        pod("nginx:1.27"),
        "default",
        None,
        "general",
    ),
    (
        "an app server image naming a database driver",
        pod("arungupta/wildfly-mysql-javaee7", ports=[8080]),
        "default",
        "web-server",
        "web-frontend",
    ),
    (
        "an image named after an organisation is not a web server",
        pod("apachepulsar/pulsar-all", ports=[6650]),
        "default",
        "streaming",
        "streaming",
    ),
    # database
    (
        "a repackaged MySQL",
        pod("bitnami/mysql:8.4", ports=[3306]),
        "default",
        "database",
        "database",
    ),
    (
        "SQL Server",
        pod("mcr.microsoft.com/mssql/server:2022-latest", ports=[1433]),
        "default",
        "database",
        "database",
    ),
    (
        "Oracle Database",
        pod("container-registry.oracle.com/database/enterprise:21.3.0.0"),
        "default",
        "database",
        "database",
    ),
    (
        "Oracle XE repackaged",
        pod("gvenzl/oracle-xe:21-slim", ports=[1521]),
        "default",
        "database",
        "database",
    ),
    (
        "a search engine",
        pod("quay.io/pires/docker-elasticsearch-kubernetes:5.6.2", ports=[9200]),
        "default",
        "database",
        "database",
    ),
    (
        "an object store by its app label",
        pod("quay.io/x/s3-server", ports=[9000], labels={"app": "minio"}),
        "default",
        "database",
        "database",
    ),
    (
        "an exporter named after its database is not one",
        pod("prom/mysqld-exporter", ports=[9104]),
        "default",
        "api",
        "api",
    ),
    (
        "an operator named after its database is not one",
        pod("percona/percona-server-mongodb-operator"),
        "default",
        None,
        "general",
    ),
    # streaming
    (
        "a Kafka broker",
        pod("solsson/kafka:2.4.0", ports=[9092]),
        "default",
        "streaming",
        "streaming",
    ),
    ("a Kafka client is not a broker", pod("solsson/kafkacat"), "default", None, "general"),
    # stateful-store
    (
        "a StatefulSet claiming a volume per replica",
        pod("example.com/ledger-store", ports=[7000], owner=("StatefulSet", "store"), **STATEFUL),
        "default",
        "stateful-store",
        "database",
    ),
    (
        "a StatefulSet without claims",
        pod("example.com/ledger-store", ports=[7000], owner=("StatefulSet", "store")),
        "default",
        "api",
        "api",
    ),
    (
        "a Deployment mounting a model volume is not a store",
        pod("tensorflow/serving", ports=[8500], owner=("ReplicaSet", "tf"), **STATEFUL),
        "default",
        "api",
        "api",
    ),
    (
        "a broker StatefulSet with claims stays a broker",
        pod("rabbitmq", owner=("StatefulSet", "store"), **STATEFUL),
        "default",
        "streaming",
        "streaming",
    ),
    # knative-service
    (
        "a Knative revision's pod on 8080",
        pod("example.com/hello", ports=[8080], labels={"serving.knative.dev/service": "hello"}),
        "default",
        "knative-service",
        "api",
    ),
    # web-frontend
    (
        "port 8080 elsewhere is web",
        pod("example.com/hello", ports=[8080]),
        "default",
        "web-frontend",
        "web-frontend",
    ),
    (
        "a declared frontend role",
        pod(
            "example.com/shop",
            ports=[3000],
            labels={"app.kubernetes.io/component": "storefront-frontend"},
        ),
        "default",
        "web-frontend",
        "web-frontend",
    ),
    (
        "a frontend tier without a port",
        pod("example.com/shop", labels={"tier": "frontend"}),
        "default",
        "web-frontend",
        "web-frontend",
    ),
    # api
    ("any other port", pod("example.com/orders", ports=[9000]), "default", "api", "api"),
    ("a worker with no port", pod("example.com/worker"), "default", None, "general"),
]


@pytest.mark.parametrize(
    ("subject", "namespace", "rule", "profile"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_default_rules(subject: JSONObject, namespace: str, rule: str | None, profile: str) -> None:
    found = defaults().classify(subject, namespace=namespace)
    assert (found.rule, found.profile) == (rule, profile), found.reason


def test_every_default_rule_has_a_case_and_a_why_comment() -> None:
    names = [rule.name for rule in defaults().config.rules]
    assert {c[3] for c in CASES} - {None} == set(names)
    text = (ROOT / "examples" / "tenantgate.yaml").read_text()
    lines = text.splitlines()
    for name in names:
        at = lines.index(f"  - name: {name}")
        assert lines[at - 1].startswith("  # "), f"rule {name} has no comment saying why"


def test_default_rules_lint_clean() -> None:
    assert defaults().lint() == []
