"""The evidence tenantgate ships for its built-in profile names.

Each entry is a signal (:mod:`classifier.evidence.signals`) and what it weighs for one profile.
The scale: 30 decides alone (an accelerator request, ``resource:accelerator``); 8-13 says what
a pod is (a Job owner, a cluster-service label; a training operator's kinds weigh 13, above a
run-to-completion restart policy); 4-6 is a strong sign (a database image, a port only a store
listens on, a server-only environment variable, kube-system, an add-on's name); 1-3 is a hint
that needs company (a web port, a name word, a probe path). Negative weights say what a pod is
not: a store's operator, exporter, client or UI is not the store, a pod whose variables point
at a store is its client, a program that only waits serves nothing, and a pod that declares no
port and probes none is no API. A profile wins with the highest sum when it reaches the
threshold (``evidence.threshold``, 4). Every name is general knowledge of the software it
names; a config adjusts or extends these under ``evidence.weights``.

Names are written as space-separated words, several to a line.
"""

from __future__ import annotations

from collections.abc import Mapping


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _each(kind: str, names: str, weight: int) -> dict[str, int]:
    return {f"{kind}:{name}": weight for name in _names(names)}


def _each_kind(kinds: str, names: str, weight: int) -> dict[str, int]:
    return {k: v for kind in _names(kinds) for k, v in _each(kind, names, weight).items()}


STORE_IMAGES = """
    postgres postgresql postgis timescaledb timescaledb-ha mysql mariadb percona percona-server
    percona-xtradb-cluster mongo mongodb redis valkey keydb memcached cassandra scylla
    elasticsearch opensearch minio etcd cockroach cockroachdb clickhouse clickhouse-server
    couchdb couchbase influxdb neo4j arangodb rethinkdb hazelcast solr meilisearch typesense
    qdrant weaviate milvus dgraph yugabyte tidb tikv mssql oracle-xe oracle-free documentdb
    documentdb-local galera vitess pgbouncer spilo dragonfly garnet kvrocks ferretdb surrealdb
    questdb victoria-metrics aerospike ignite geode riak seaweedfs rqlite db database mysqld
    mysql-router cloud-sql-proxy nfs-server nfs-backupstore blobstore postgresql-16 dynamodb
    hdfs namenode datanode hbase hive hive-metastore metastore presto prestodb trino druid pinot
    doris starrocks
"""
# Ports only a store listens on (PostgreSQL, MySQL, MongoDB, Redis, Cassandra, CockroachDB,
# Neo4j, memcached, SQL Server, Oracle, RethinkDB, CouchDB, ArangoDB, NFS): they say store
# alone.
STORE_PORTS = """
    5432 3306 27017 27018 6379 9042 26257 7687 11211 1433 1521 28015 5984 8529 26379 5433 2049
"""
# Ports stores use that other software uses too (Elasticsearch, InfluxDB, etcd, Hazelcast,
# ClickHouse, MinIO, DocumentDB, PgBouncer, MySQL Router, Couchbase, Milvus, Qdrant, Neo4j's
# HTTP port).
STORE_SHARED_PORTS = """
    9200 9300 8086 2379 2380 5701 8123 9000 10260 6432 6446 8091 19530 6333 7474
"""
STORE_ENV_PREFIXES = """
    MYSQL POSTGRES POSTGRESQL PGDATA MONGO MONGODB MARIADB REDIS CASSANDRA ELASTIC MINIO ETCD
    COUCHDB NEO4J INFLUXDB CLICKHOUSE PGBOUNCER PATRONI SPILO PG
"""
# Variables only the server reads (clients read *_HOST, *_URL, *_PASSWORD...).
STORE_SERVER_ENV = """
    MYSQL_ROOT_PASSWORD MYSQL_ALLOW_EMPTY_PASSWORD MYSQL_RANDOM_ROOT_PASSWORD
    MARIADB_ROOT_PASSWORD POSTGRES_PASSWORD POSTGRES_DB POSTGRES_INITDB_ARGS PGDATA
    MONGO_INITDB_ROOT_USERNAME MONGO_INITDB_ROOT_PASSWORD MONGO_INITDB_DATABASE ETCD_DATA_DIR
    ETCD_INITIAL_CLUSTER MINIO_ROOT_USER MINIO_ACCESS_KEY CASSANDRA_SEEDS CASSANDRA_CLUSTER_NAME
    NEO4J_AUTH ALLOW_EMPTY_PASSWORD DISCOVERY_TYPE ES_JAVA_OPTS PATRONI_SCOPE SPILO_CONFIGURATION
    DISCOVERY.TYPE DISCOVERY.SEED_HOSTS CLUSTER.INITIAL_MASTER_NODES CLICKHOUSE_DB
    CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT
"""
# Variables that point a client at a store: the pod connects to one, it is not one.
STORE_CLIENT_ENV = """
    POSTGRES_HOST POSTGRES_SERVER POSTGRES_URL POSTGRES_URI POSTGRES_PORT PGHOST MYSQL_HOST
    MYSQL_SERVER MYSQL_URL MYSQL_PORT MONGO_HOST MONGO_URL MONGO_URI MONGODB_HOST MONGODB_URI
    MONGODB_URL REDIS_HOST REDIS_URL REDIS_ADDR REDIS_PORT DATABASE_URL DATABASE_HOST DB_HOST
    DB_URL SPRING_DATASOURCE_URL
"""
STORE_NAMES = "db database storage cache datastore sql pg"
# Stores known by name: an app or workload named after one is one.
STORE_PRODUCTS = """
    postgres postgresql mysql mariadb mongo mongodb redis valkey memcached cassandra
    elasticsearch opensearch minio etcd cockroachdb clickhouse couchdb influxdb neo4j documentdb
    dynamodb nfs-server
"""
STORE_KINDS = """
    postgresql PostgresCluster PerconaPGCluster PerconaServerMongoDB PerconaXtraDBCluster
    MongoDBCommunity MongoDB RedisFailover RedisCluster RedisReplication Redis
    CassandraDatacenter CockroachDB Elasticsearch OpenSearchCluster EtcdCluster MariaDB
    InnoDBCluster MySQLCluster ClickHouseInstallation Valkey DragonflyDb ScyllaCluster
"""
BROKER_IMAGES = """
    kafka cp-kafka cp-server zookeeper cp-zookeeper pulsar pulsar-all bookkeeper nats
    nats-streaming nats-server rabbitmq redpanda activemq activemq-artemis artemis emqx mosquitto
    eclipse-mosquitto vernemq nsq nsqd cp-kafka-connect cp-schema-registry cp-ksqldb-server
    cp-kafka-rest kafka-connect connect schema-registry ksqldb-server debezium flink
    kafka-streams mirrormaker mirror-maker kafka-bridge zeebe benthos redpanda-connect storm
    nimbus samza heron apicurio-registry apicurio-registry-kafkasql karapace
"""
BROKER_PORTS = """
    9092 9093 9094 29092 2181 2888 3888 4222 6222 5672 5671 1883 8883 61616 6650 8083 9644 15672
    6123 6122 6124 4369 25672
"""
BROKER_ENV_PREFIXES = "KAFKA CONNECT FLINK ZOOKEEPER ZOO PULSAR BOOKIE RABBITMQ NATS KSQL REDPANDA"
# Variables only a broker, a connector worker or a stream processor reads.
BROKER_SERVER_ENV = """
    KAFKA_ADVERTISED_LISTENERS KAFKA_LISTENERS KAFKA_BROKER_ID KAFKA_NODE_ID
    KAFKA_ZOOKEEPER_CONNECT KAFKA_PROCESS_ROLES KAFKA_CONTROLLER_QUORUM_VOTERS
    KAFKA_ADVERTISED_HOST_NAME KAFKA_PORT CONNECT_GROUP_ID CONNECT_CONFIG_STORAGE_TOPIC
    CONNECT_OFFSET_STORAGE_TOPIC CONNECT_STATUS_STORAGE_TOPIC CONNECT_BOOTSTRAP_SERVERS
    CONNECT_REST_PORT FLINK_PROPERTIES JOB_MANAGER_RPC_ADDRESS ZOO_MY_ID ZOO_SERVERS ZOOKEEPER_ID
    ZOOKEEPER_CLIENT_PORT RABBITMQ_DEFAULT_USER RABBITMQ_ERLANG_COOKIE KSQL_BOOTSTRAP_SERVERS
    SCHEMA_REGISTRY_HOST_NAME PULSAR_MEM BOOKIE_MEM CONFIG_STORAGE_TOPIC OFFSET_STORAGE_TOPIC
    STATUS_STORAGE_TOPIC SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS SCHEMA_REGISTRY_LISTENERS
    KAFKA_REST_BOOTSTRAP_SERVERS
"""
BROKER_NAMES = """
    kafka zookeeper broker pulsar bookie nats rabbitmq queue connect stream streaming flink
    jobmanager taskmanager kafka-connect schema-registry ksql redpanda mq
"""
SYSTEM_NAMESPACES = """
    kube-system monitoring logging observability cert-manager kube-flannel calico-system
    tigera-operator metallb-system longhorn-system rook-ceph istio-system linkerd gpu-operator
    node-feature-discovery kubernetes-dashboard argocd flux-system cilium kube-public openebs
    external-dns local-path-storage gatekeeper-system kyverno keda velero vault tailscale
    intel-device-plugins kube-amd-gpu nvidia-device-plugin cluster-autoscaler jaeger litmus
"""
# Words of names and images that cluster machinery carries.
SYSTEM_WORDS = """
    controller operator manager controller-manager webhook cni device-plugin plugin provisioner
    attacher resizer snapshotter node-driver-registrar livenessprobe scheduler kubelet reloader
    admission kube-vip agent daemon driver registrar proxy dns injector labeller collector
    exporter validator installer recommender updater application-controller repo-server
    notifications applicationset dex amdgpu cleaner nanny toolbox tools csi cni scraper
"""
# Cluster add-ons known by name: such a name on its own says what the pod is.
ADDON_NAMES = """
    coredns kube-dns kube-proxy metrics-server kube-state-metrics node-exporter cainjector
    cert-manager flannel calico cilium hubble weave multus metallb longhorn external-dns
    cluster-autoscaler descheduler node-feature-discovery nfd argocd argo-cd keda kueue velero
    vault-k8s linkerd istio istiod kiali prometheus alertmanager grafana fluentd fluent-bit
    filebeat promtail loki jaeger zipkin tempo otel-collector opentelemetry-collector vector
    syslog-ng cadvisor tailscale rook ceph gpu-operator k8s-device-plugin kured
    kyverno gatekeeper chaos-exporter litmus drain-cleaner kube-rbac-proxy dcgm contour
    thanos targetallocator target-allocator
"""
MONITORING_KINDS = """
    Prometheus PrometheusAgent Alertmanager ThanosRuler VMAgent VMAlert VMAlertmanager VMAuth
    VMSingle VMCluster VLogs
"""
# Settings only the CNCF Distribution registry (registry:2) reads.
REGISTRY_SERVER_ENV = """
    REGISTRY_HTTP_ADDR REGISTRY_HTTP_SECRET REGISTRY_PROXY_REMOTEURL REGISTRY_STORAGE
    REGISTRY_STORAGE_DELETE_ENABLED REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY
"""
# Training hyperparameters as trainers' flags name them (PyTorch, TensorFlow and Hugging Face
# examples and scripts, XGBoost's own parameter names).
TRAINING_FLAGS = """
    --epochs --num-epochs --num_epochs --num-train-epochs --num_train_epochs --learning-rate
    --learning_rate --lr --momentum --weight-decay --weight_decay --warmup-steps --warmup_steps
    --gradient-accumulation-steps --gradient_accumulation_steps --per-device-train-batch-size
    --per_device_train_batch_size --train-steps --train_steps --max-depth --max_depth
    --n-estimators --n_estimators
"""
SYSTEM_FLAGS = """
    --leader-elect --leader-election --kubeconfig --csi-address --kubelet-registration-path
    --metrics-bind-address --health-probe-bind-address --enable-leader-election
    --leader-election-namespace --cluster-resource-namespace --kube-subnet-mgr --webhook-port
    --cert-dir --kubelet-insecure-tls --endpoint --nodeid --drivername --node-name
    --leader-elect-resource-namespace
"""
HOST_PATHS = """
    /var/lib/kubelet /dev /sys /proc /lib/modules /etc/cni /opt/cni /var/run /run /var/log
    /var/lib/docker /var/lib/containerd /etc/kubernetes
"""
WEB_SERVER_IMAGES = """
    nginx nginx-unprivileged httpd caddy openresty lighttpd apache php-apache wordpress drupal
    joomla ghost frontend front-end web webapp site www storefront
    store-front portal dashboard console nextjs static kibana envoy ingress-nginx nginx-ingress
    kubernetes-ingress traefik haproxy haproxy-ingress
"""
WEB_UI_IMAGES = """
    gradio streamlit tensorboard zeppelin jupyter notebook jupyterlab superset metabase
    open-webui gradio-app ui adminer phpmyadmin pgadmin pgadmin4 webui
"""
# Stores' and brokers' web consoles: named after the store, they are its UI, not the store.
STORE_UIS = "redis-commander redisinsight mongo-express kafdrop akhq kafka-ui pulsar-manager"
# Java application servers: a web application runs in them.
APP_SERVERS = "tomcat jetty wildfly jboss"
SERVING_IMAGES = """
    api service svc server backend gateway tritonserver tensorflow-serving serving vllm-openai
    text-generation-inference torchserve torchserve-kfs sklearnserver xgbserver huggingfaceserver
    lgbserver pmmlserver mlserver seldon-core bentoml ollama podinfo httpbin echoserver hello-app
    helloworld selenium sglang lmdeploy localai text-embeddings-inference model_server ovms
    llamacpp llama-cpp llama.cpp keycloak hydra authelia authentik zitadel bind9 powerdns
"""
# Flags of model servers (vLLM, TGI, SGLang, llama.cpp, Triton, TensorFlow Serving, OpenVINO
# Model Server, TorchServe).
SERVING_FLAGS = """
    --model --model-id --model-path --served-model-name --tensor-parallel-size --max-model-len
    --n-gpu-layers --model-repository --model_base_path --model_name --model_config_file
    --rest_api_port --model-store --models
"""
SERVICE_NAMES = """
    api service svc backend server gateway grpc rest carts orders payment shipping user
    catalogue catalog cart checkout product inventory auth order currency recommendation ad
    email quote accounting fraud echo hello helloworld httpbin podinfo emoji voting hub details
    ratings reviews predictor inference model serving triton vllm transformer explainer appserver
"""
# Parts of a name that say a pod works with a store or a broker without being one.
NOT_THE_STORE = (("operator", -12), ("controller", -6), ("exporter", -6), ("client", -6),
                 ("cli", -4), ("ui", -4), ("admin", -3), ("dashboard", -4),
                 ("backup", -3))  # fmt: skip
# Client tools shipped in the stores' and brokers' own images: a pod that runs one uses the
# store or broker, it is not one.
STORE_CLIENT_COMMANDS = """
    psql pg_dump pg_dumpall pg_restore pg_basebackup mysql mysqldump mongosh mongo mongodump
    mongorestore redis-cli cqlsh clickhouse-client etcdctl mc
"""
BROKER_CLIENT_COMMANDS = """
    kafka-producer-perf-test kafka-consumer-perf-test kafka-console-producer
    kafka-console-consumer kafka-topics kafka-configs kafka-acls kafka-producer-perf-test.sh
    kafka-consumer-perf-test.sh kafka-console-producer.sh kafka-console-consumer.sh
    kafka-topics.sh kafka-configs.sh kafka-acls.sh rabbitmqadmin nats
"""
# Programs that only wait: the pod serves nothing of its own.
WAITING = "sleep tail pause"
# Names of pods that do work without serving it.
WORKERS = "worker bot loadgenerator load-test locust"


def _not_the_store() -> dict[str, int]:
    return {f"{kind}:{word}": w for word, w in NOT_THE_STORE for kind in ("image", "name")}


BUILTIN_WEIGHTS: Mapping[str, Mapping[str, int]] = {
    "ml-training": {
        # Any extended resource whose name says accelerator: nvidia.com/gpu, amd.com/gpu,
        # gpu.intel.com/*, google.com/tpu, habana.ai/gaudi, aws.amazon.com/neuroncore, MIG
        # slices, huawei.com/Ascend910, cambricon.com/mlu (classifier.evidence.signals).
        "resource:accelerator": 30,
        # A device claimed through dynamic resource allocation, whatever its name: DRA's
        # drivers are accelerators' (GPU, Neuron, TPU) more than anything else.
        "claim:device": 6,
        # A share of a GPU asked for by annotation (the KAI and Run:ai schedulers' GPU sharing).
        "annotation:gpu-fraction": 30,
        # A training operator's own kinds: they outweigh the restart policy a run-to-completion
        # pod of theirs (a launcher, a submitter) also carries.
        **_each("owner", "PyTorchJob TFJob TfJob MPIJob XGBoostJob PaddleJob JAXJob MXNetJob", 13),
        **_each("owner", "TrainJob RayJob RayCluster RayService", 13),
        **_each("label", "training.kubeflow.org/job-name training.kubeflow.org/replica-type", 8),
        **_each("label", "trainer.kubeflow.org/trainjob-ancestor-step ray.io/node-type", 8),
        **_each("node", "cloud.google.com/gke-tpu-accelerator cloud.google.com/gke-accelerator", 6),
        **_each("node", "nvidia.com/gpu.present nvidia.com/gpu.product amd.com/gpu.present", 6),
        **_each("image", "pytorch tensorflow torch jax horovod deepspeed megatron nemo cuda", 2),
        **_each("command", "torchrun deepspeed accelerate horovodrun", 3),
        # A model's training hyperparameters given as flags: the run fits a model, whatever
        # runs it (a Job, a JobSet, a tuning trial).
        **_each("flag", TRAINING_FLAGS, 8),
        # The rendezvous variables of torch.distributed and TensorFlow's cluster spec.
        **_each("env", "MASTER_ADDR WORLD_SIZE TF_CONFIG", 3),
        # A JobSet runs a group of Jobs as one unit, made for distributed training. Its pods
        # are owned by its child Jobs and carry the JobSet's name label (the JobSet
        # controller's pkg/controller/jobset_controller.go), which is the evidence; it
        # also outweighs the child Job's own job-name label, which a JobSet's pod always has.
        "owner:JobSet": 4,
        "label:jobset.sigs.k8s.io/jobset-name": 6,
        # A GPU runtime class without a GPU request is a runtime, not a workload: no weight.
        "runtime:nvidia": 0,
    },
    "batch": {
        **_each("owner", "Job CronJob Workflow CronWorkflow SparkApplication", 9),
        **_each("owner", "ScheduledSparkApplication TaskRun PipelineRun JobSet", 9),
        **_each("label", "spark-role workflows.argoproj.io/workflow tekton.dev/taskrun", 8),
        **_each("label", "volcano.sh/job-name kubernetes_executor", 8),
        "label:batch.kubernetes.io/job-name": 2,
        "restart:never": 12,
        "restart:onfailure": 12,
        **_each("image", "spark spark-py spark-operator", 5),
        # Hadoop YARN's daemons: they schedule and run batch computations.
        **_each_kind("image name", "resourcemanager nodemanager historyserver", 5),
        "command:spark-submit": 5,
        # Dask's clusters and jobs (the Dask Kubernetes operator's kinds, its images and
        # daemons): parallel computations that end.
        **_each("owner", "DaskJob DaskCluster DaskWorkerGroup", 9),
        "image:dask": 5,
        **_each("command", "dask-scheduler dask-worker", 5),
        # Image builders: BuildKit's daemon and client, kaniko's executor and warmer.
        **_each("image", "buildkit kaniko", 5),
        **_each("image-org", "kaniko-project", 5),
        **_each("command", "buildkitd buildctl buildctl-daemonless.sh", 5),
        # CI runners run the jobs of a CI system: GitHub Actions runners and their controller's
        # kinds (actions-runner-controller).
        "image:actions-runner": 5,
        **_each("owner", "Runner RunnerSet RunnerDeployment EphemeralRunner EphemeralRunnerSet", 9),
        **_each("name", "job cron batch migrate migration", 1),
    },
    "system": {
        **_each("namespace", SYSTEM_NAMESPACES, 6),
        "owner:DaemonSet": 5,
        # The monitoring operators' own kinds (the Prometheus operator's, VictoriaMetrics').
        **_each("owner", MONITORING_KINDS, 8),
        "label:kubernetes.io/cluster-service": 8,
        "label:addonmanager.kubernetes.io/mode": 8,
        **_each("flag", SYSTEM_FLAGS, 4),
        **_each("hostpath", HOST_PATHS, 3),
        "host:network": 3,
        "host:pid": 3,
        "host:privileged": 2,
        "priority:system-node-critical": 8,
        "priority:system-cluster-critical": 8,
        # The annotation that marked cluster add-ons critical before priority classes did.
        "annotation:scheduler.alpha.kubernetes.io/critical-pod": 8,
        "toleration:node-role.kubernetes.io/control-plane": 2,
        "toleration:node-role.kubernetes.io/master": 2,
        "toleration:criticaladdonsonly": 3,
        "toleration:*": 2,
        **_each_kind("name image", SYSTEM_WORDS, 2),
        **_each_kind("name image", ADDON_NAMES, 4),
        # Only the API server calls an admission webhook: it extends the cluster itself.
        **_each_kind("name image", "admission webhook", 4),
        **_each("image-org", ADDON_NAMES, 3),
        **_each("image-role", "operator controller manager exporter webhook agent plugin", 4),
        **_each("image-role", "driver provisioner injector installer labeller", 4),
        **_each("image", "syslog rsyslog", 4),
        **_each("account", "controller operator manager csi node plugin provisioner cni", 2),
        **_each("account", "agent webhook speaker", 2),
        "volume:csi": 1,
        # The Prometheus family's own health paths (Prometheus, Alertmanager, Thanos).
        **_each("probe", "/-/healthy /-/ready", 2),
        **_each("env", "NODE_NAME KUBE_NODE_NAME CSI_ENDPOINT POD_NAMESPACE WATCH_NAMESPACE", 2),
        **_each("env", "OPERATOR_NAME OPERATOR_NAMESPACE", 2),
        **_each("port", "9100 10250 9153 53 8472 10254 9443 9402", 2),
        # Envoy's configuration API: only a mesh or ingress control plane serves it.
        "port-name:xds": 7,
    },
    "database": {
        **_each("image", STORE_IMAGES, 6),
        **_each("port", STORE_PORTS, 4),
        **_each("port", STORE_SHARED_PORTS, 3),
        **_each("env", STORE_ENV_PREFIXES, 1),
        **_each("env", STORE_SERVER_ENV, 3),
        **_each("env", STORE_CLIENT_ENV, -4),
        **_each("name", STORE_NAMES, 2),
        **_each("name", STORE_PRODUCTS, 4),
        "name:store": 1,
        # A connection pooler in front of a store (PgBouncer, Pgpool, CloudNativePG's Pooler)
        # is the store's front door.
        "name:pooler": 4,
        "owner:Pooler": 10,
        **_each("image", "pgpool pgpool-ii pgcat odyssey proxysql", 6),
        **_each("name", "pgbouncer pgpool pgcat odyssey proxysql", 4),
        # The container image registry's own settings: it stores images. (Its clients name
        # the registry in other variables, REGISTRY_URL or REGISTRY_USERNAME.)
        **_each("env", REGISTRY_SERVER_ENV, 4),
        **_each("port-name", "postgres postgresql mysql mongo mongodb redis cql db", 2),
        **_each("port-name", "tcp-postgresql tcp-mysql tcp-redis", 2),
        # Stores' operators' own kinds (CloudNativePG's is called Cluster, too general to weigh).
        **_each("owner", STORE_KINDS, 10),
        "volume:claim-template": 4,
        "volume:claim": 1,
        **_each("command", "postgres mysqld mongod redis-server etcd memcached minio", 2),
        # etcd's own cluster flags (its clients name --etcd-servers instead).
        **_each("flag", "--initial-cluster --listen-peer-urls --initial-advertise-peer-urls", 3),
        **_not_the_store(),
        **_each("command", STORE_CLIENT_COMMANDS, -12),
        **_each("command", WAITING, -6),
    },
    "streaming": {
        **_each("image", BROKER_IMAGES, 6),
        "image:strimzi": 2,
        **_each("owner", "FlinkDeployment FlinkSessionJob KafkaConnect KafkaMirrorMaker2", 10),
        # Brokers' operators' own kinds (Strimzi, the RabbitMQ and NATS operators).
        **_each("owner", "Kafka KafkaNodePool RabbitmqCluster NatsCluster", 10),
        **_each("port", BROKER_PORTS, 2),
        **_each("env", BROKER_ENV_PREFIXES, 1),
        **_each("env", BROKER_SERVER_ENV, 3),
        # Redpanda's and NATS's own server flags.
        **_each("flag", "--kafka-addr --advertise-kafka-addr --jetstream", 3),
        **_each("name", BROKER_NAMES, 2),
        **_each("port-name", "kafka amqp mqtt peer leader-election nats broker", 1),
        **_each("command", "kafka-server-start.sh connect-distributed.sh nats-server", 3),
        **_each("command", "rabbitmq-server zkserver.sh flink", 3),
        # The Flink image's own entry points, given as its arguments.
        **_each("command", "jobmanager taskmanager standalone-job", 3),
        **_not_the_store(),
        **_each_kind("name image image-role", "producer consumer generator", -8),
        **_each("command", BROKER_CLIENT_COMMANDS, -12),
        **_each("command", WAITING, -6),
    },
    "web-frontend": {
        **_each("image", WEB_SERVER_IMAGES, 3),
        **_each("image", WEB_UI_IMAGES, 4),
        **_each_kind("name image", STORE_UIS, 12),
        **_each("image-role", "ui frontend front-end web dashboard console portal", 4),
        "image-role:admin": 4,
        # Static files for browsers: images, scripts, style sheets.
        **_each("image-role", "assets static", 3),
        # Application servers: as telling as a store's name, whatever driver the image adds.
        **_each("image", APP_SERVERS, 6),
        # Jenkins's controller: the CI server people browse (its agents have images of their
        # own, jenkins/inbound-agent).
        "image:jenkins": 4,
        **_each("name", APP_SERVERS, 3),
        **_each("name", "frontend front-end storefront store-front", 5),
        # A mesh's ingress gateway is the edge proxy, whatever mesh it belongs to.
        **_each_kind("name image", "ingressgateway ingress-gateway", 8),
        **_each("name", "web ui webapp website www webui spa", 3),
        **_each("name", "front site portal console vote result nginx httpd wordpress php", 2),
        **_each("name", "dashboard kibana grafana admin page productpage guestbook chatbot", 2),
        **_each("name", "chat gradio tensorboard zeppelin notebook assets", 2),
        # Browser application frameworks: a pod named after one serves its bundle.
        **_each_kind("name image", "react angular vue svelte", 4),
        "port:any": 1,
        "port:80": 2,
        "port:443": 2,
        "port:8080": 1,
        "port:3000": 1,
        "port:4200": 2,
        "port:8079": 1,
        "port-name:http": 1,
        "port-name:https": 1,
        # The node's own web ports: an edge proxy or ingress controller binds them.
        "hostport:80": 3,
        "hostport:443": 3,
        "port-name:web": 2,
        "probe:/": 2,
        **_each("probe", "/index.html /index.htm /favicon.ico /ui", 2),
        # A probe that fetches a page (signals: any path ending .html or .htm).
        "probe:*.html": 4,
        **_each("env", "NODE PUBLIC NGINX PHP WORDPRESS GF", 1),
        # Only a browser bundle reads these (REACT_APP_*, VUE_APP_*, VITE_*, NEXT_PUBLIC_*).
        **_each("env", "NEXT REACT VUE VITE", 4),
        **_each("command", "nginx httpd caddy apache2-foreground lighttpd", 2),
        **_each("name", WORKERS, -6),
        **_each("command", WAITING, -3),
    },
    "api": {
        "port:any": 2,
        "port:none": -1,
        **_each_kind("name image", SERVICE_NAMES, 2),
        # Named for what it serves or does with requests (an image called http-app says less):
        # HTTP, routing, answering searches.
        **_each("name", "http router search searcher", 2),
        **_each("image", SERVING_IMAGES, 3),  # after SERVICE_NAMES: these weigh 3
        **_each(
            "port-name", "grpc rpc http-api api grpc-web h2c http2 rest http-metrics metrics", 2
        ),
        **_each("port", "8000 8080 8081 8443 5000 3000 9000 50051 8500 8501 8085 7070 8888", 2),
        **_each("port", "9090 80 8001 8002 5001 5002 3001 3002 3550 8090 9080 9555 8200 4317", 1),
        **_each("probe", "/health /healthz /ready /readyz /livez /ping /status /metrics grpc", 1),
        **_each("probe", "/actuator/health /actuator/health/liveness /api/health /v1/health", 1),
        **_each("probe", "/actuator/health/readiness /v2/health/ready /v2/health/live", 1),
        # Quarkus, ASP.NET and common handlers' health paths.
        **_each("probe", "/q/health /q/health/live /q/health/ready /health/live /health/ready", 1),
        **_each("probe", "/healthcheck /health/liveness /health/readiness /api/healthz", 1),
        **_each("env", "SPRING GRPC JAVA PORT DATABASE DB OTEL SERVICE API GIN FLASK DJANGO", 1),
        **_each("env", "QUARKUS ASPNETCORE DOTNET RAILS", 1),
        # Dapr's sidecar calls the application on this port (service invocation, pub/sub
        # deliveries): the application serves requests.
        "annotation:dapr.io/app-port": 2,
        "label:serving.knative.dev/service": 8,
        "label:serving.kserve.io/inferenceservice": 4,
        **_each("owner", "InferenceService ServingRuntime ClusterServingRuntime InferenceGraph", 4),
        "owner:LLMInferenceService": 4,
        # Seldon Core's graph of model servers, transformers and routers (its executor serves
        # each over REST or gRPC, whatever ports the manifest leaves out).
        "owner:SeldonDeployment": 4,
        "label:seldon-deployment-id": 4,
        **_each("command", "vllm text-generation-launcher tritonserver tensorflow_model_server", 1),
        **_each("command", "torchserve gunicorn uvicorn java node python dotnet npm", 1),
        **_each("flag", SERVING_FLAGS, 2),
        **_each("name", WORKERS, -6),
        **_each("command", WAITING, -3),
    },
}
