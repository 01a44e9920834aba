"""The embedded default (examples/tenantgate.yaml) judges by weighed evidence, with no rules.

Each case is a pod as a controller creates it, with the profile a person gives it. Negative
cases are the confusions one loud signal would make: a Kafka client, an exporter or an
operator named after a database, a Deployment mounting a model volume, a DaemonSet that runs
a store, an API on port 80, a sidecar next to the main container, a GPU runtime class without
a GPU. The real-manifest corpus (test_fixtures.py) measures the same evidence against a
person's labels.
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
    env: list[JSONObject] | None = None,
    args: list[str] | None = None,
    command: list[str] | None = None,
    readinessProbe: JSONObject | None = None,
    container: str | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> JSONObject:
    """A pod of ``images``; the first container (named ``container``, else c0) gets the rest."""
    containers: list[JSONObject] = []
    for index, image in enumerate(images or ("busybox",)):
        item: JSONObject = {"name": (index == 0 and container) or f"c{index}", "image": image}
        if index == 0 and ports:
            item["ports"] = [{"containerPort": p} for p in ports]
        if index == 0 and requests:
            item["resources"] = {"requests": requests}
        if index == 0:
            for key, value in (
                ("env", env),
                ("command", command),
                ("args", args),
                ("readinessProbe", readinessProbe),
            ):
                if value:
                    item[key] = value
        containers.append(item)
    meta: JSONObject = {"name": "p", "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    if owner is not None:
        kind, name = owner
        meta["ownerReferences"] = [{"apiVersion": "x/v1", "kind": kind, "name": name, "uid": "u"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": containers, **spec},
    }


def named_ports(subject: JSONObject, *names: str) -> JSONObject:
    """``subject`` with its first container's ports named, in order."""
    for port, name in zip(subject["spec"]["containers"][0]["ports"], names, strict=True):
        port["name"] = name
    return subject


def with_host_ports(subject: JSONObject, *host_ports: int) -> JSONObject:
    """``subject`` with its first container's ports bound on the node, in order."""
    for port, host in zip(subject["spec"]["containers"][0]["ports"], host_ports, strict=True):
        port["hostPort"] = host
    return subject


STATEFUL: dict[str, Any] = {
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-store-0"}}]
}

# (case, pod, namespace, profile)
CASES: list[tuple[str, JSONObject, str, str]] = [
    # system
    (
        "node agent DaemonSet",
        pod("fluentd-elasticsearch", owner=("DaemonSet", "f")),
        "logs",
        "system",
    ),
    (
        "a store on every node is not an add-on",
        pod("apachepulsar/pulsar-all", ports=[3181], owner=("DaemonSet", "bookie")),
        "default",
        "streaming",
    ),
    (
        "monitoring namespace",
        pod("grafana/grafana", ports=[3000]),
        "monitoring",
        "system",
    ),
    (
        "kube-prometheus part-of label anywhere",
        pod("x", ports=[8080], labels={"app.kubernetes.io/part-of": "kube-prometheus"}),
        "ops",
        "system",
    ),
    (
        "a namespace that only starts like one: Grafana is an add-on by its name alone",
        pod("grafana/grafana", ports=[3000]),
        "monitoring-team",
        "system",
    ),
    # ml-training
    (
        "GPU beats a web image",
        pod("nginx", ports=[80], requests={"nvidia.com/gpu": "1"}),
        "default",
        "ml-training",
    ),
    (
        "CPU-only training framework",
        pod("pytorch", owner=("PyTorchJob", "j")),
        "default",
        "ml-training",
    ),
    # batch
    (
        "an nginx daemoned by a workflow step is a step",
        pod("nginx", labels={"workflows.argoproj.io/workflow": "wf"}, restartPolicy="Never"),
        "default",
        "batch",
    ),
    (
        "a Tekton TaskRun's pod",
        pod("golang", owner=("TaskRun", "r")),
        "default",
        "batch",
    ),
    (
        "a Spark standalone worker",
        pod("registry.k8s.io/spark", ports=[8081]),
        "default",
        "batch",
    ),
    (
        "never restarted",
        pod("busybox", restartPolicy="Never"),
        "default",
        "batch",
    ),
    # web-server
    (
        "web server with a port",
        pod("nginx:1.27", ports=[8443]),
        "default",
        "web-frontend",
    ),
    (
        "web server image without a port is not a frontend",
        pod("nginx:1.27"),
        "default",
        "general",
    ),
    (
        "an app server image naming a database driver",
        pod("arungupta/wildfly-mysql-javaee7", ports=[8080]),
        "default",
        "web-frontend",
    ),
    (
        "an image named after an organisation is not a web server",
        pod("apachepulsar/pulsar-all", ports=[6650]),
        "default",
        "streaming",
    ),
    # database
    (
        "a repackaged MySQL",
        pod("bitnami/mysql:8.4", ports=[3306]),
        "default",
        "database",
    ),
    (
        "SQL Server",
        pod("mcr.microsoft.com/mssql/server:2022-latest", ports=[1433]),
        "default",
        "database",
    ),
    (
        "Oracle Database",
        pod("container-registry.oracle.com/database/enterprise:21.3.0.0"),
        "default",
        "database",
    ),
    (
        "Oracle XE repackaged",
        pod("gvenzl/oracle-xe:21-slim", ports=[1521]),
        "default",
        "database",
    ),
    (
        "a search engine",
        pod("quay.io/pires/docker-elasticsearch-kubernetes:5.6.2", ports=[9200]),
        "default",
        "database",
    ),
    (
        "an object store by its app label",
        pod("quay.io/x/s3-server", ports=[9000], labels={"app": "minio"}),
        "default",
        "database",
    ),
    (
        "an exporter named after its database is not one: it is monitoring machinery",
        pod("prom/mysqld-exporter", ports=[9104]),
        "default",
        "system",
    ),
    (
        "an operator named after its database is not one: it is cluster machinery",
        pod("percona/percona-server-mongodb-operator"),
        "default",
        "system",
    ),
    # streaming
    (
        "a Kafka broker",
        pod("solsson/kafka:2.4.0", ports=[9092]),
        "default",
        "streaming",
    ),
    (
        "a Kafka client is not a broker",
        pod("solsson/kafkacat"),
        "default",
        "general",
    ),
    # stateful-store
    (
        "a StatefulSet claiming a volume per replica",
        pod("example.com/ledger-store", ports=[7000], owner=("StatefulSet", "store"), **STATEFUL),
        "default",
        "database",
    ),
    (
        "a StatefulSet without claims is not a store; a bare port is too little to say more",
        pod("example.com/ledger-store", ports=[7000], owner=("StatefulSet", "store")),
        "default",
        "general",
    ),
    (
        "a Deployment mounting a model volume is not a store",
        pod("tensorflow/serving", ports=[8500], owner=("ReplicaSet", "tf"), **STATEFUL),
        "default",
        "api",
    ),
    (
        "a broker StatefulSet with claims stays a broker",
        pod("rabbitmq", owner=("StatefulSet", "store"), **STATEFUL),
        "default",
        "streaming",
    ),
    # knative-service
    (
        "a Knative revision's pod on 8080",
        pod("example.com/hello", ports=[8080], labels={"serving.knative.dev/service": "hello"}),
        "default",
        "api",
    ),
    # web-frontend
    (
        "port 8080 alone is not a web frontend: a hello service is an api",
        pod("example.com/hello", ports=[8080]),
        "default",
        "api",
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
    ),
    (
        "a frontend tier without a port",
        pod("example.com/shop", labels={"tier": "frontend"}),
        "default",
        "web-frontend",
    ),
    # api
    (
        "any other port",
        pod("example.com/orders", ports=[9000]),
        "default",
        "api",
    ),
    (
        "a worker with no port",
        pod("example.com/worker"),
        "default",
        "general",
    ),
    # the patterns one rule per signal missed
    (
        "a store whose image says nothing, known by its port and its environment",
        pod(
            "registry.example.com/team/catalogue-db:1.2",
            ports=[3306],
            env=[{"name": "MYSQL_ROOT_PASSWORD", "value": "x"}],
        ),
        "shop",
        "database",
    ),
    (
        "a Kafka Connect worker from a private registry",
        pod(
            "registry.example.com/data/cdc-worker:3",
            ports=[8083],
            env=[
                {"name": "CONNECT_BOOTSTRAP_SERVERS", "value": "kafka:9092"},
                {"name": "CONNECT_GROUP_ID", "value": "cdc"},
            ],
        ),
        "data",
        "streaming",
    ),
    (
        "an API on port 80 is not a web frontend",
        pod("registry.example.com/shop/orders-api:7", ports=[80]),
        "shop",
        "api",
    ),
    (
        "a UI is known by its name and its probe, not its port",
        pod(
            "registry.example.com/shop/store-ui:7",
            ports=[9000],
            readinessProbe={"httpGet": {"path": "/", "port": 9000}},
        ),
        "shop",
        "web-frontend",
    ),
    (
        "a mesh proxy and a log shipper next to the main container change nothing",
        pod(
            "postgres:16",
            "docker.io/istio/proxyv2:1.22",
            "fluent/fluent-bit:3",
            ports=[5432],
        ),
        "shop",
        "database",
    ),
    (
        "a controller by its flags",
        pod("registry.example.com/platform/widgets:1", args=["--leader-elect", "--kubeconfig=/k"]),
        "platform",
        "system",
    ),
    (
        "a CSI node plugin by its kubelet host paths",
        pod(
            "registry.example.com/storage/disk-driver:2",
            owner=("DaemonSet", "disk-driver"),
            volumes=[
                {"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet"}},
                {"name": "dev", "hostPath": {"path": "/dev"}},
            ],
        ),
        "storage",
        "system",
    ),
    (
        "a GPU runtime class without a GPU request is not ML",
        pod("registry.example.com/shop/orders-api:7", ports=[8080], runtimeClassName="nvidia"),
        "shop",
        "api",
    ),
    (
        "an AMD GPU",
        pod("rocm/pytorch", requests={"amd.com/gpu": "1"}),
        "ml",
        "ml-training",
    ),
    (
        "an Intel GPU in a Job",
        pod(
            "intel/opencl",
            requests={"gpu.intel.com/i915": "1"},
            owner=("Job", "j"),
            restartPolicy="Never",
        ),
        "ml",
        "ml-training",
    ),
    (
        "a TPU",
        pod("python:3.12", requests={"google.com/tpu": "4"}),
        "ml",
        "ml-training",
    ),
    (
        "an accelerator no weight names, known by its resource's name",
        pod(
            "registry.example.com/ml/train:1",
            requests={"huawei.com/Ascend910": "8"},
            owner=("Job", "t"),
            restartPolicy="Never",
        ),
        "ml",
        "ml-training",
    ),
    (
        "a MIG slice of a GPU",
        pod("registry.example.com/ml/notebook:1", requests={"nvidia.com/mig-2g.20gb": "1"}),
        "ml",
        "ml-training",
    ),
    (
        "an extended resource that is no accelerator weighs nothing",
        pod("registry.example.com/net/router:1", requests={"intel.com/sriov_netdevice": "1"}),
        "net",
        "general",
    ),
    # the patterns held-out manifests showed the weights generalise badly on
    (
        "a store known by its port alone",
        pod("registry.example.com/team/ledger:2", ports=[5432]),
        "shop",
        "database",
    ),
    (
        "a client of a store is not one: its variables point at the store",
        pod(
            "registry.example.com/shop/orders:1",
            ports=[8080],
            env=[
                {"name": "POSTGRES_HOST", "value": "db"},
                {"name": "POSTGRES_PASSWORD", "value": "p"},
                {"name": "POSTGRES_DB", "value": "orders"},
            ],
            readinessProbe={"httpGet": {"path": "/healthz", "port": 8080}},
        ),
        "shop",
        "api",
    ),
    (
        "a topic consumer that declares no port serves nothing",
        pod(
            "registry.example.com/shop/orders-sync:1",
            env=[
                {"name": "KAFKA_ADDR", "value": "kafka:9092"},
                {"name": "DB_CONNECTION_STRING", "value": "Host=db"},
                {"name": "OTEL_SERVICE_NAME", "value": "orders-sync"},
            ],
        ),
        "shop",
        "general",
    ),
    (
        "a service that declares no port but probes one still serves",
        pod(
            "registry.example.com/bank/balances:1",
            labels={"tier": "backend"},
            env=[{"name": "PORT", "value": "8080"}],
            readinessProbe={"httpGet": {"path": "/ready", "port": 8080}},
        ),
        "bank",
        "api",
    ),
    (
        "a change-data-capture worker from a private registry, known by its topics",
        pod(
            "registry.example.com/data/cdc:5",
            env=[
                {"name": "BOOTSTRAP_SERVERS", "value": "kafka:9092"},
                {"name": "CONFIG_STORAGE_TOPIC", "value": "cdc-configs"},
                {"name": "OFFSET_STORAGE_TOPIC", "value": "cdc-offsets"},
            ],
        ),
        "data",
        "streaming",
    ),
    (
        "a UI known by its bundler's variables",
        pod(
            "registry.example.com/shop/checkout:1",
            ports=[3000],
            env=[{"name": "REACT_APP_API_URL", "value": "/api"}],
        ),
        "shop",
        "web-frontend",
    ),
    (
        "an admin UI known by its image's role, whatever its probe",
        pod(
            "ghcr.io/example/shop/store-admin:2",
            ports=[8081],
            readinessProbe={"httpGet": {"path": "/health", "port": 8081}},
        ),
        "shop",
        "web-frontend",
    ),
    (
        "a Java application server known by its container's name",
        pod("registry.example.com/x/shop:1", ports=[8080], labels={"app": "tomcat"}),
        "shop",
        "web-frontend",
    ),
    (
        "a model server on CPU known by its flags",
        pod(
            "registry.example.com/ml/embedder:1",
            ports=[8000],
            args=["--model", "bge-small", "--max-model-len", "512"],
        ),
        "ml",
        "api",
    ),
    (
        "a static file server on 8080 known by the page its probe fetches",
        pod(
            "registry.example.com/shop/media:3",
            ports=[8080],
            labels={"app.kubernetes.io/component": "service"},
            readinessProbe={"httpGet": {"path": "/health.html", "port": 8080}},
        ),
        "shop",
        "web-frontend",
    ),
    (
        "a file server known by the NFS port, not by its generic image",
        pod(
            "registry.example.com/infra/share-server:1", ports=[2049], labels={"app": "nfs-server"}
        ),
        "storage",
        "database",
    ),
    (
        "a table store run as a Deployment on an API's port",
        pod("amazon/dynamodb-local:1", ports=[8000], owner=("ReplicaSet", "carts-db-5d8f")),
        "shop",
        "database",
    ),
    (
        "an ingress control plane known by the configuration API it serves Envoy",
        named_ports(
            pod(
                "registry.example.com/edge/edge-config:1",
                ports=[8001, 8000],
                readinessProbe={"tcpSocket": {"port": 8001}},
            ),
            "xds",
            "metrics",
        ),
        "edge",
        "system",
    ),
    (
        "an edge proxy on the node's web ports, named after its proxy container",
        with_host_ports(
            pod(
                "docker.io/envoyproxy/envoy:v1",
                "registry.example.com/edge/drain-helper:1",
                ports=[8080, 8443],
                owner=("DaemonSet", "envoy"),
                labels={"app": "envoy"},
            ),
            80,
            443,
        ),
        "edge",
        "web-frontend",
    ),
    (
        "a mesh proxy beside an application stays a sidecar",
        pod(
            "registry.example.com/shop/orders:1",
            "docker.io/envoyproxy/envoy:v1",
            ports=[8080],
            owner=("ReplicaSet", "orders-7c9f"),
            labels={"app": "orders"},
            readinessProbe={"httpGet": {"path": "/healthz", "port": 8080}},
        ),
        "shop",
        "api",
    ),
    (
        "distributed training in a JobSet, its launcher run from a bash -xc script",
        pod(
            "registry.example.com/ml/mnist:1",
            owner=("JobSet", "train"),
            env=[{"name": "MASTER_ADDR", "value": "train-workers-0-0.train"}],
            args=["bash", "-xc", "torchrun --nnodes=4 train.py"],
        ),
        "ml",
        "ml-training",
    ),
    (
        "distributed training as the JobSet controller creates it: a child Job's pod that "
        "carries the JobSet's name label",
        pod(
            "registry.example.com/ml/mnist:1",
            owner=("Job", "train-workers-0"),
            labels={
                "jobset.sigs.k8s.io/jobset-name": "train",
                "batch.kubernetes.io/job-name": "train-workers-0",
            },
            env=[{"name": "MASTER_ADDR", "value": "train-workers-0-0.train"}],
            args=["bash", "-xc", "torchrun --nnodes=4 train.py"],
        ),
        "ml",
        "ml-training",
    ),
    (
        "a JobSet's Job that does not train is batch",
        pod("busybox", owner=("JobSet", "pipeline"), args=["sleep", "30"]),
        "default",
        "batch",
    ),
    (
        "a stream processor's worker from a private registry, known by its entry point",
        pod("registry.example.com/data/enrich:7", ports=[6122], args=["taskmanager"]),
        "data",
        "streaming",
    ),
    (
        "a search store with a generic image, known by its settings in the environment",
        pod(
            "registry.example.com/platform/search:8",
            ports=[9200],
            env=[
                {"name": "discovery.type", "value": "single-node"},
                {"name": "cluster.name", "value": "logs"},
            ],
        ),
        "logs",
        "database",
    ),
    (
        "a key-value store with a generic image, known by its cluster flags",
        pod(
            "registry.example.com/platform/kv:3",
            ports=[2379],
            args=[
                "--initial-cluster=kv-0=http://kv-0:2380",
                "--listen-peer-urls=http://0.0.0.0:2380",
            ],
        ),
        "platform",
        "database",
    ),
    (
        "a storage plugin's word in a sleeping pod's name is not a plugin",
        pod("busybox", labels={"app": "my-csi-app"}, args=["sleep", "3600"]),
        "default",
        "general",
    ),
    (
        "a placeholder named after a database whose shell only sleeps in a loop is no database",
        pod(
            "busybox",
            labels={"app.kubernetes.io/name": "postgresql-ha"},
            args=["/bin/sh", "-c", "while true; do sleep 3600; done"],
        ),
        "default",
        "general",
    ),
    (
        "a browser application known by its framework's name, from a private registry",
        pod("registry.example.com/shop/orders-react-form:2", ports=[8080]),
        "shop",
        "web-frontend",
    ),
    (
        "a stream processor's worker known by its image",
        pod("registry.example.com/analytics/storm-worker:1", ports=[6700]),
        "analytics",
        "streaming",
    ),
    (
        "a Kafka producer is a client of the broker, not a broker",
        pod(
            "quay.io/strimzi-examples/java-kafka-producer:latest",
            env=[{"name": "BOOTSTRAP_SERVERS", "value": "my-cluster-kafka-bootstrap:9092"}],
            labels={"app": "java-kafka-producer"},
        ),
        "kafka",
        "general",
    ),
    (
        "the broker's own image running its performance-test client is no broker",
        pod(
            "confluentinc/cp-kafka:7.6.0",
            owner=("StatefulSet", "perf"),
            args=["/bin/sh", "-c", "kafka-producer-perf-test --topic t --num-records 100000"],
        ),
        "kafka",
        "general",
    ),
    (
        "a store's own image running its client shell is no store",
        pod("postgres:16", args=["psql", "-h", "db", "-c", "select 1"], labels={"app": "pg"}),
        "default",
        "general",
    ),
    (
        "a mesh's ingress gateway is the edge proxy, whatever mesh it belongs to",
        pod(
            "gcr.io/istio-release/proxyv2:1.22.0",
            ports=[15021, 8080, 8443],
            owner=("ReplicaSet", "asm-ingressgateway-7b9c"),
            labels={"app": "asm-ingressgateway", "istio": "ingressgateway"},
        ),
        "gateways",
        "web-frontend",
    ),
    (
        "a broker's pods as its operator's custom resource describes them",
        pod("busybox", owner=("RabbitmqCluster", "rabbit")),
        "default",
        "streaming",
    ),
    (
        "a store's pods as its operator's custom resource describes them",
        pod("registry.example.com/platform/base:1", owner=("PerconaServerMongoDB", "cluster1")),
        "default",
        "database",
    ),
    (
        "an HDFS name node, known by its image",
        pod("bde2020/hadoop-namenode:2.0.0-hadoop3.1.2-java8", ports=[9870]),
        "data",
        "database",
    ),
    (
        "an add-on's second namespace is named after the add-on",
        pod(
            "cr.l5d.io/linkerd/tap:stable-2.14",
            owner=("ReplicaSet", "tap-5d7f"),
            labels={"linkerd.io/extension": "viz"},
        ),
        "linkerd-viz",
        "system",
    ),
    (
        "a device claimed through dynamic resource allocation, named after an accelerator",
        pod(
            "nginx:alpine",
            labels={"app": "my-app"},
            resourceClaims=[{"name": "neurons", "resourceClaimTemplateName": "neuron-devices"}],
        ),
        "default",
        "ml-training",
    ),
    (
        "a device claimed through dynamic resource allocation, whatever its name",
        pod(
            "public.ecr.aws/ubuntu/ubuntu:22.04",
            labels={"app": "vllm"},
            resourceClaims=[{"name": "one-node", "resourceClaimTemplateName": "us-2-node"}],
        ),
        "default",
        "ml-training",
    ),
    (
        "a connection pooler in front of a store is the store's front door",
        pod(
            "registry.example.com/platform/connection-pool:1",
            ports=[5432],
            owner=("ReplicaSet", "acid-minimal-cluster-pooler-6f7d"),
            labels={"application": "db-connection-pooler"},
            env=[{"name": "PGHOST", "value": "acid-minimal-cluster"}],
        ),
        "default",
        "database",
    ),
    (
        "the pods of CloudNativePG's Pooler",
        pod("registry.example.com/platform/bouncer:1", owner=("Pooler", "front")),
        "default",
        "database",
    ),
    (
        "the pods of a KServe LLMInferenceService on CPU",
        pod("docker.io/vllm/vllm-openai-cpu:v0.9", owner=("LLMInferenceService", "opt-125m")),
        "default",
        "api",
    ),
    (
        "an add-on's own UI in the add-on's namespace, its image published by the add-on",
        pod(
            "cr.l5d.io/linkerd/web:stable-2.14",
            ports=[8084],
            owner=("ReplicaSet", "web-6d4f"),
            labels={"component": "web"},
        ),
        "linkerd-viz",
        "system",
    ),
    (
        "an application Dapr calls on its app port, from an image that says nothing",
        pod(
            "registry.example.com/team/adder:2",
            ports=[6000],
            annotations={"dapr.io/enabled": "true", "dapr.io/app-port": "6000"},
        ),
        "default",
        "api",
    ),
    (
        "a legacy add-on marked critical by annotation",
        pod(
            "registry.example.com/platform/agent:1",
            annotations={"scheduler.alpha.kubernetes.io/critical-pod": ""},
        ),
        "default",
        "system",
    ),
    (
        "a Job training a model, known by its hyperparameters",
        pod(
            "registry.example.com/research/trainer:3",
            owner=("Job", "trial-7"),
            args=["--epochs=10", "--learning-rate=0.01", "--momentum=0.9"],
            restartPolicy="Never",
        ),
        "default",
        "ml-training",
    ),
    (
        "a Job with one tuning-like flag is still a batch run",
        pod(
            "registry.example.com/data/export:3",
            owner=("Job", "export-7"),
            args=["--max-depth=3"],
            restartPolicy="Never",
        ),
        "default",
        "batch",
    ),
    (
        "a connection pooler known by its container's name",
        pod("registry.example.com/platform/pooler-image:1", ports=[6432], container="pgbouncer"),
        "default",
        "database",
    ),
    (
        "a container registry, known by its settings",
        pod(
            "registry.example.com/mirror/cache:2",
            ports=[5000],
            env=[{"name": "REGISTRY_PROXY_REMOTEURL", "value": "https://registry-1.docker.io"}],
        ),
        "default",
        "database",
    ),
    (
        "a Job that pushes to a registry is no registry",
        pod(
            "registry.example.com/ci/builder:1",
            owner=("Job", "build-7"),
            env=[{"name": "REGISTRY_URL", "value": "registry.example.com"}],
            restartPolicy="Never",
        ),
        "default",
        "batch",
    ),
    (
        "a Seldon Core graph's transformer, which its executor serves",
        pod("registry.example.com/ml/input-transformer:0.3", owner=("SeldonDeployment", "fraud")),
        "default",
        "api",
    ),
    (
        "a Seldon Core model server as the operator labels its pods",
        pod(
            "registry.example.com/ml/scorer:1",
            owner=("ReplicaSet", "fraud-default-0-scorer-7c9d"),
            labels={"seldon-deployment-id": "fraud"},
        ),
        "default",
        "api",
    ),
    (
        "a client image kept alive by a loop its args give to bash -c",
        pod(
            "nvcr.io/nvidia/tritonserver:24.08-py3-sdk",
            container="triton",
            command=["/bin/bash", "-c", "--"],
            args=["while true; do sleep 30; done;"],
        ),
        "default",
        "general",
    ),
    (
        "a web server's image running a storage smoke test that logs the time",
        pod(
            "nginx:1.27",
            container="web",
            command=["/bin/bash", "-c"],
            args=["set -euo pipefail; while true; do echo $(date) >> /mnt/disk/out; sleep 1; done"],
        ),
        "default",
        "general",
    ),
    (
        "a service on a common application port, and nothing else, is an API",
        pod("registry.example.com/travel/flights:1", ports=[8080]),
        "default",
        "api",
    ),
    (
        "a store's web console is its UI, not the store",
        pod("ghcr.io/joeferner/redis-commander:latest", ports=[8081]),
        "default",
        "web-frontend",
    ),
    (
        "the workers of a Dask job",
        pod("ghcr.io/dask/dask:2024.8.0", owner=("DaskJob", "etl")),
        "default",
        "batch",
    ),
    (
        "BuildKit's daemon builds images",
        pod("moby/buildkit:v0.15.1-rootless", ports=[1234]),
        "default",
        "batch",
    ),
    (
        "a GitHub Actions runner runs CI jobs",
        pod("summerwind/actions-runner:latest", owner=("RunnerSet", "ci")),
        "default",
        "batch",
    ),
    (
        "Jenkins's controller is the CI server people browse",
        pod("jenkins/jenkins:2.452-lts", ports=[8080, 50000]),
        "default",
        "web-frontend",
    ),
    (
        "an application's server, named so",
        pod("registry.example.com/yelb/yelb-appserver:0.5", ports=[4567]),
        "default",
        "api",
    ),
    (
        "a web UI, named so in one word",
        pod("registry.example.com/shop/teastore-webui:1.4", ports=[8080]),
        "default",
        "web-frontend",
    ),
    (
        "a share of a GPU asked for by the GPU-sharing scheduler's annotation",
        pod("registry.example.com/ml/notebook-kernel:3", annotations={"gpu-fraction": "0.5"}),
        "default",
        "ml-training",
    ),
    (
        "a monitoring operator's Alertmanager",
        pod("registry.example.com/mirror/am:v0.27.0", owner=("VMAlertmanager", "main")),
        "default",
        "system",
    ),
    (
        "Thanos, whatever store its labels name",
        pod(
            "quay.io/thanos/thanos:v0.36.1",
            ports=[10901, 10902],
            labels={"app.kubernetes.io/component": "database-write-hashring"},
        ),
        "default",
        "system",
    ),
    (
        "the OpenTelemetry operator's target allocator",
        pod(
            "ghcr.io/open-telemetry/opentelemetry-operator/target-allocator:0.110.0",
            ports=[8080],
            container="targetallocator",
        ),
        "default",
        "system",
    ),
    (
        "an identity server, known by its image",
        pod("quay.io/keycloak/keycloak:22.0.1", ports=[8080], args=["start-dev"]),
        "auth",
        "api",
    ),
]


@pytest.mark.parametrize(
    ("subject", "namespace", "profile"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_default_evidence(subject: JSONObject, namespace: str, profile: str) -> None:
    found = defaults().classify(subject, namespace=namespace)
    assert found.profile == profile, found.reason
    assert found.source == ("default" if profile == "general" else "evidence"), found.reason


def test_the_default_writes_no_rules_and_lints_clean() -> None:
    assert defaults().config.rules == []
    assert defaults().lint() == []
