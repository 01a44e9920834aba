"""The evidence tenantgate ships for its built-in profile names, with the threshold.

Each entry is a signal (:mod:`classifier.evidence.signals`) and what it weighs for one
profile. The scale: 8-10 says what a pod is on its own (a GPU request, a Job owner,
kube-system); 4-6 is a strong sign (a database image, a well-known data port, a server-only
environment variable); 1-3 is a hint that needs company (a web port, a name word). A profile
wins with the highest sum when it reaches the threshold (``evidence.threshold``, 4). Every
name is general knowledge of the software it names; a config adjusts or extends these under
``evidence.weights``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def _each(prefix: str, names: Iterable[object], weight: int) -> dict[str, int]:
    return {f"{prefix}:{name}": weight for name in names}


# The tables below are data, packed several names to a line.
# fmt: off
_STORE_IMAGES = (
    "postgres", "postgresql", "postgis", "timescaledb", "timescaledb-ha", "mysql", "mariadb",
    "percona", "percona-server", "percona-xtradb-cluster", "mongo", "mongodb", "redis", "valkey",
    "keydb", "memcached", "cassandra", "scylla", "elasticsearch", "opensearch", "minio", "etcd",
    "cockroach", "cockroachdb", "clickhouse", "clickhouse-server", "couchdb", "couchbase",
    "influxdb", "neo4j", "arangodb", "rethinkdb", "hazelcast", "solr", "meilisearch", "typesense",
    "qdrant", "weaviate", "milvus", "dgraph", "yugabyte", "tidb", "tikv", "mssql", "oracle-xe",
    "oracle-free", "documentdb", "documentdb-local", "galera", "vitess", "pgbouncer", "zalando",
    "spilo", "spilo-15", "spilo-16", "spilo-17", "dragonfly", "garnet", "kvrocks", "ferretdb",
    "surrealdb", "questdb", "victoria-metrics", "aerospike", "ignite", "geode", "riak",
    "seaweedfs", "ceph", "rqlite", "db", "database", "catalogue-db", "user-db", "mysqld",
)
_STORE_PORTS = (
    5432, 3306, 27017, 27018, 6379, 9042, 26257, 9200, 8086, 5984, 8529, 7687, 11211, 2379, 1433,
    1521, 28015, 5701, 8123, 9000, 4000, 10260, 7000, 6432, 26379,
)
_STORE_ENV_PREFIXES = (
    "MYSQL", "POSTGRES", "POSTGRESQL", "PGDATA", "MONGO", "MONGODB", "MARIADB", "REDIS",
    "CASSANDRA", "ELASTIC", "MINIO", "ETCD", "COUCHDB", "NEO4J", "INFLUXDB", "CLICKHOUSE",
    "PGBOUNCER", "PATRONI", "SPILO", "PG",
)
# Variables only the server reads (clients read *_HOST, *_URL...): these say "I am the store".
_STORE_SERVER_ENV = (
    "MYSQL_ROOT_PASSWORD", "MYSQL_ALLOW_EMPTY_PASSWORD", "MYSQL_RANDOM_ROOT_PASSWORD",
    "MARIADB_ROOT_PASSWORD", "POSTGRES_PASSWORD", "POSTGRES_DB", "POSTGRES_INITDB_ARGS", "PGDATA",
    "MONGO_INITDB_ROOT_USERNAME", "MONGO_INITDB_ROOT_PASSWORD", "MONGO_INITDB_DATABASE",
    "ETCD_DATA_DIR", "ETCD_INITIAL_CLUSTER", "MINIO_ROOT_USER", "MINIO_ACCESS_KEY",
    "CASSANDRA_SEEDS", "CASSANDRA_CLUSTER_NAME", "NEO4J_AUTH", "ALLOW_EMPTY_PASSWORD",
    "REDIS_PASSWORD", "DISCOVERY_TYPE", "ES_JAVA_OPTS", "CLUSTER_NAME", "PATRONI_SCOPE",
    "SPILO_CONFIGURATION",
)
_BROKER_IMAGES = (
    "kafka", "cp-kafka", "cp-server", "zookeeper", "cp-zookeeper", "pulsar", "pulsar-all",
    "bookkeeper", "nats", "nats-streaming", "nats-server", "rabbitmq", "redpanda", "activemq",
    "activemq-artemis", "artemis", "emqx", "mosquitto", "eclipse-mosquitto", "vernemq", "nsq",
    "nsqd", "cp-kafka-connect", "cp-schema-registry", "cp-ksqldb-server", "cp-kafka-rest",
    "kafka-connect", "connect", "schema-registry", "ksqldb-server", "debezium", "strimzi",
    "flink", "kafka-streams", "streams", "connector", "connectors", "mirrormaker", "mirror-maker",
    "kafka-bridge", "zeebe", "benthos", "redpanda-connect",
)
_BROKER_PORTS = (
    9092, 9093, 2181, 2888, 3888, 4222, 6222, 5672, 5671, 1883, 8883, 61616, 6650, 8083, 9644,
    15672, 8081, 6123, 6124,
)
_BROKER_ENV = (
    "KAFKA", "CONNECT", "FLINK", "ZOOKEEPER", "ZOO", "PULSAR", "BOOKIE", "RABBITMQ", "NATS",
    "KSQL", "SCHEMA", "JOB", "TASK", "BOOTSTRAP", "REDPANDA", "ARTEMIS", "ACTIVEMQ",
)
_SYSTEM_NAMESPACES = (
    "kube-system", "monitoring", "logging", "observability", "cert-manager", "ingress-nginx",
    "kube-flannel", "calico-system", "tigera-operator", "metallb-system", "longhorn-system",
    "rook-ceph", "istio-system", "linkerd", "gpu-operator", "node-feature-discovery",
    "kubernetes-dashboard", "argocd", "flux-system", "cilium", "kube-public", "openebs",
    "external-dns", "local-path-storage", "kube-node-lease", "gatekeeper-system", "kyverno",
    "keda", "velero", "vault", "tailscale", "intel-device-plugins", "kube-amd-gpu",
    "nvidia-device-plugin", "cluster-autoscaler", "jaeger", "monitoring-system",
)
_SYSTEM_WORDS = (
    "controller", "operator", "manager", "controller-manager", "webhook", "csi", "cni",
    "device-plugin", "plugin", "provisioner", "attacher", "resizer", "snapshotter",
    "node-driver-registrar", "livenessprobe", "kube-proxy", "coredns", "kube-dns",
    "metrics-server", "kube-state-metrics", "node-exporter", "cainjector", "flannel", "calico",
    "cilium", "weave", "multus", "metallb", "speaker", "longhorn", "external-dns",
    "cluster-autoscaler", "autoscaler", "descheduler", "node-feature-discovery", "nfd",
    "scheduler", "kubelet", "reloader", "admission", "dashboard", "kube-vip", "kured", "agent",
    "daemon", "driver", "registrar", "proxy", "dns", "ingress-controller", "gatekeeper",
    "kyverno", "prometheus", "alertmanager", "grafana", "fluentd", "fluent-bit", "promtail",
    "loki", "jaeger", "tempo", "otel-collector", "collector", "heapster", "dcgm", "exporter",
    "validator", "gpu-feature-discovery", "kubernetes-ingress", "ingress-nginx", "traefik", "vpa",
    "recommender", "updater", "keda", "velero", "vault", "argocd", "argo-cd",
    "application-controller", "repo-server", "notifications", "applicationset", "dex",
    "tailscale", "intel", "amdgpu", "rocm",
)

BUILTIN_WEIGHTS: Mapping[str, Mapping[str, int]] = {
    "ml-training": {
        **_each(
            "resource",
            (
    "nvidia.com/gpu", "amd.com/gpu", "google.com/tpu", "alpha.kubernetes.io/nvidia-gpu",
    "gpu.intel.com/i915", "gpu.intel.com/xe", "habana.ai/gaudi", "habana.ai/gaudi2",
    "aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "aws.amazon.com/neurondevice",
    "nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb",
    "nvidia.com/mig-1g.10gb", "nvidia.com/mig-7g.40gb", "nvidia.com/mig-7g.80gb",
),
            12,
        ),
        **_each(
            "owner",
            (
    "PyTorchJob", "TFJob", "TfJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "MXNetJob",
    "TrainJob", "RayJob", "RayCluster", "RayService",
),
            12,
        ),
        **_each(
            "label",
            (
                "training.kubeflow.org/job-name",
                "training.kubeflow.org/replica-type",
                "trainer.kubeflow.org/trainjob-ancestor-step",
                "ray.io/node-type",
                "ray.io/cluster",
            ),
            8,
        ),
        **_each(
            "node",
            (
    "cloud.google.com/gke-tpu-accelerator", "cloud.google.com/gke-tpu-topology",
    "cloud.google.com/gke-accelerator", "nvidia.com/gpu.present", "nvidia.com/gpu.product",
    "amd.com/gpu.present",
),
            6,
        ),
        **_each(
            "image",
            (
    "pytorch", "tensorflow", "torch", "jax", "horovod", "deepspeed", "megatron", "nemo", "cuda",
    "rocm-pytorch", "trainer", "training",
),
            2,
        ),
        **_each("command", ("torchrun", "deepspeed", "accelerate", "horovodrun"), 3),
        # A GPU runtime class without a GPU request: a runtime, not a workload. No weight.
        "runtime:nvidia": 0,
    },
    "batch": {
        **_each(
            "owner",
            (
    "Job", "CronJob", "Workflow", "CronWorkflow", "SparkApplication", "ScheduledSparkApplication",
    "TaskRun", "PipelineRun",
),
            9,
        ),
        **_each(
            "label",
            (
    "spark-role", "workflows.argoproj.io/workflow", "tekton.dev/taskRun", "volcano.sh/job-name",
    "kubernetes_executor", "batch.kubernetes.io/job-name",
),
            8,
        ),
        "restart:never": 6,
        "restart:onfailure": 6,
        **_each("image", ("spark", "spark-py", "spark-operator"), 5),
        **_each("command", ("spark-submit",), 5),
        **_each("name", ("job", "cron", "batch", "migrate", "migration", "backup"), 1),
    },
    "system": {
        **_each("namespace", _SYSTEM_NAMESPACES, 7),
        "owner:DaemonSet": 5,
        "label:kubernetes.io/cluster-service": 8,
        "label:addonmanager.kubernetes.io/mode": 8,
        **_each(
            "flag",
            (
    "--leader-elect", "--leader-election", "--kubeconfig", "--csi-address",
    "--kubelet-registration-path", "--metrics-bind-address", "--health-probe-bind-address",
    "--enable-leader-election", "--leader-election-namespace", "--cluster-resource-namespace",
    "--kube-subnet-mgr", "--webhook-port", "--cert-dir", "--kubelet-insecure-tls", "--endpoint",
    "--nodeid", "--drivername", "--node-name", "--leader-elect-resource-namespace",
),
            4,
        ),
        **_each(
            "hostpath",
            (
    "/var/lib/kubelet", "/dev", "/sys", "/proc", "/lib/modules", "/etc/cni", "/opt/cni",
    "/var/run", "/run", "/var/log", "/var/lib/docker", "/var/lib/containerd", "/etc/kubernetes",
),
            3,
        ),
        "host:network": 3,
        "host:pid": 3,
        "host:privileged": 2,
        "priority:system-node-critical": 8,
        "priority:system-cluster-critical": 8,
        "toleration:node-role.kubernetes.io/control-plane": 2,
        "toleration:node-role.kubernetes.io/master": 2,
        "toleration:criticaladdonsonly": 3,
        "toleration:*": 2,
        **_each("name", _SYSTEM_WORDS, 2),
        **_each("image", _SYSTEM_WORDS, 2),
        **_each(
            "account",
            (
    "controller", "operator", "manager", "csi", "node", "plugin", "provisioner", "cni", "agent",
    "webhook", "speaker",
),
            2,
        ),
        "label:app.kubernetes.io/part-of": 0,
        "volume:csi": 1,
        **_each(
            "env",
            (
    "NODE_NAME", "KUBE_NODE_NAME", "CSI_ENDPOINT", "POD_NAMESPACE", "WATCH_NAMESPACE",
    "OPERATOR_NAME", "OPERATOR_NAMESPACE",
),
            2,
        ),
        **_each("port", (9100, 10250, 9153, 53, 8472, 10254, 9443, 9402), 2),
    },
    "database": {
        **_each("image", _STORE_IMAGES, 6),
        **_each("port", _STORE_PORTS, 3),
        **_each("env", _STORE_ENV_PREFIXES, 1),
        **_each("env", _STORE_SERVER_ENV, 3),
        **_each(
            "name",
            (
    "db", "database", "store", "storage", "cache", "postgres", "postgresql", "mysql", "mariadb",
    "mongo", "mongodb", "redis", "valkey", "memcached", "cassandra", "elasticsearch",
    "opensearch", "minio", "etcd", "cockroachdb", "clickhouse", "couchdb", "influxdb", "neo4j",
    "data", "datastore", "documentdb", "sql", "catalogue-db", "carts-db", "orders-db", "user-db",
    "session-db", "pg",
),
            2,
        ),
        **_each(
            "port-name",
            (
    "postgres", "postgresql", "mysql", "mongo", "mongodb", "redis", "cql", "db", "tcp-postgresql",
    "tcp-mysql", "tcp-redis",
),
            2,
        ),
        "volume:claim-template": 4,
        "volume:claim": 1,
        **_each(
            "command",
            (
    "postgres", "mysqld", "mongod", "redis-server", "etcd", "docker-entrypoint.sh", "memcached",
    "minio",
),
            2,
        ),
    },
    "streaming": {
        **_each("image", _BROKER_IMAGES, 6),
        **_each("port", _BROKER_PORTS, 2),
        **_each("env", _BROKER_ENV, 2),
        **_each(
            "name",
            (
    "kafka", "zookeeper", "broker", "pulsar", "bookie", "nats", "rabbitmq", "queue", "connect",
    "connector", "stream", "streams", "streaming", "flink", "jobmanager", "taskmanager",
    "kafka-connect", "schema-registry", "ksql", "redpanda", "mq", "event", "events", "consumer",
    "producer", "pipeline",
),
            2,
        ),
        **_each(
            "port-name",
            ("kafka", "amqp", "mqtt", "client", "peer", "leader-election", "nats", "broker", "rpc"),
            1,
        ),
        **_each(
            "command",
            (
    "kafka-server-start.sh", "connect-distributed.sh", "nats-server", "rabbitmq-server",
    "zkserver.sh", "flink",
),
            3,
        ),
    },
    "web-frontend": {
        **_each(
            "image",
            (
    "nginx", "nginx-unprivileged", "httpd", "caddy", "openresty", "lighttpd", "apache",
    "php-apache", "wordpress", "drupal", "joomla", "ghost", "tomcat", "jetty", "wildfly",
    "frontend", "front-end", "web", "ui", "webapp", "site", "www", "storefront", "store-front",
    "portal", "dashboard", "console", "nextjs", "static", "grafana", "kibana",
),
            3,
        ),
        **_each(
            "name",
            (
    "frontend", "front-end", "front", "web", "ui", "www", "site", "webapp", "portal",
    "storefront", "store-front", "console", "website", "client", "vote", "result", "nginx",
    "httpd", "wordpress", "php", "dashboard", "kibana", "grafana",
),
            2,
        ),
        "port:80": 2,
        "port:443": 2,
        "port:8080": 1,
        "port:3000": 1,
        "port:4200": 2,
        "port:8079": 1,
        "port-name:http": 1,
        "port-name:https": 1,
        "port-name:web": 2,
        "probe:/": 2,
        "probe:/index.html": 2,
        **_each(
            "env",
            ("NEXT", "REACT", "VUE", "VITE", "NODE", "PUBLIC", "NGINX", "PHP", "WORDPRESS", "GF"),
            1,
        ),
    },
    "api": {
        **_each(
            "name",
            (
    "api", "service", "svc", "backend", "server", "gateway", "grpc", "rest", "app", "worker",
    "carts", "orders", "payment", "shipping", "user", "catalogue", "catalog", "cart", "checkout",
    "product", "inventory", "auth", "order", "currency", "recommendation", "ad", "email", "quote",
    "accounting", "fraud", "echo", "hello", "helloworld", "whoami", "httpbin", "podinfo", "emoji",
    "voting", "details", "ratings", "reviews", "productpage", "predictor", "inference", "model",
    "serving", "triton", "vllm", "transformer", "explainer",
),
            2,
        ),
        **_each(
            "port-name",
            (
    "grpc", "http-api", "api", "grpc-web", "h2c", "http2", "rest", "http-metrics", "metrics",
),
            2,
        ),
        **_each(
            "port",
            (
    8000, 8080, 8081, 8443, 5000, 3000, 9000, 50051, 8500, 8501, 8085, 7070, 8888, 9090, 80, 8001,
    8002, 5001, 5002, 3001, 3002, 3550, 7000, 8090, 9080, 9555, 8200, 4317,
),
            1,
        ),
        **_each(
            "probe",
            (
    "/health", "/healthz", "/ready", "/readyz", "/livez", "/ping", "/status", "/actuator/health",
    "/actuator/health/liveness", "/actuator/health/readiness", "/api/health", "/v1/health",
    "/v2/health/ready", "/v2/health/live", "/metrics", "grpc",
),
            2,
        ),
        **_each(
            "env",
            (
    "SPRING", "GRPC", "JAVA", "PORT", "DATABASE", "DB", "OTEL", "SERVICE", "API", "GIN", "FLASK",
    "DJANGO", "QUARKUS", "ASPNETCORE", "DOTNET", "RAILS", "GOOGLE", "PROJECT",
),
            1,
        ),
        "label:serving.knative.dev/service": 8,
        "label:serving.kserve.io/inferenceservice": 8,
        "owner:Service": 0,
        **_each(
            "image",
            (
    "api", "service", "svc", "server", "backend", "gateway", "tritonserver", "tensorflow-serving",
    "serving", "vllm-openai", "text-generation-inference", "torchserve", "sklearnserver",
    "xgbserver", "huggingfaceserver", "lgbserver", "pmmlserver", "mlserver", "seldon-core",
    "bentoml", "ollama", "podinfo", "httpbin", "whoami", "echoserver", "hello-app", "helloworld",
),
            3,
        ),
        **_each(
            "command",
            (
    "vllm", "text-generation-launcher", "tritonserver", "tensorflow_model_server", "torchserve",
    "gunicorn", "uvicorn", "java", "node", "python", "dotnet", "npm",
),
            1,
        ),
    },
}
# fmt: on
