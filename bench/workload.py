"""The benchmark workload: AdmissionReviews as the API server sends them, from real manifests.

Every pod template of the project's real-world fixtures (``tests/fixtures/manifests``) becomes
the pod its controller would create (:func:`classifier.templates.pod_from_template`), decorated
the way production charts write pods (recommended labels, config checksums, a hardened security
context, downward-API and configuration env vars) up to a target size, then passed through the
API server's defaulting, field manager and admission plugins (:mod:`bench.apiserver`). Each
pod lands in a namespace of a tenant of a generated config and becomes a *pair*: the CREATE
review ``/mutate`` receives and the review ``/validate`` then receives (the mutated pod, named,
with a uid, after ``BeforeCreate``).

The bodies are serialized once, with *slots* for what differs per request (request uids, the
pod's uid and generated name, and the reservation id ``/mutate`` derives from its request uid):
a load generator fills them by concatenation, so every request is unique, as on a real cluster,
without building JSON per request. Everything is deterministic for a given seed.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import random
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
import yaml

from admission.patch import apply_json_patch, make_json_patch
from admission.reviews import decode_review
from bench import apiserver
from bench.configgen import GeneratedPolicy
from bench.stack import settle
from classifier import podview
from classifier.podgroups import GroupClaimError, GroupRule, claim_group
from classifier.templates import find_pod_templates, pod_from_template
from classifier.types import JSONObject
from tenants.config import RESERVATION_ANNOTATION, TENANT_LABEL, TIER_LABEL
from tenants.decisions import PolicyAdmitter, reservation_id_for
from tenants.ledger import MemoryLedger
from tenants.verdicts import Verdict

logger = logging.getLogger(__name__)

REPO: Final = Path(__file__).resolve().parent.parent
FIXTURES: Final = REPO / "tests" / "fixtures" / "manifests"

SLOT_UID: Final = "uid"
SLOT_RID: Final = "rid"
SLOT_POD_UID: Final = "pod-uid"
SLOT_SUFFIX: Final = "suffix"
# Stored pods only (the ledger rebuild spreads them over every tenant):
SLOT_RV: Final = "rv"  # metadata.resourceVersion
SLOT_NS: Final = "ns"  # metadata.namespace
SLOT_TENANT: Final = "tenant"  # the tenantgate.io/tenant label
SLOTS: Final = (SLOT_UID, SLOT_RID, SLOT_POD_UID, SLOT_SUFFIX, SLOT_RV, SLOT_NS, SLOT_TENANT)

MIN_BYTES: Final = 5 * 1024
MAX_BYTES: Final = 15 * 1024
# Target sizes of the mutate reviews: uniform around 10 KB, the size the core target names.
TARGET_BYTES: Final = (6 * 1024, 14 * 1024)

MANAGED_AT: Final = "2025-03-14T09:26:53Z"
CREATED_AT: Final = "2025-03-14T09:26:54Z"
STARTED_AT: Final = "2025-03-14T09:26:58Z"
NOW: Final = 1_741_944_414.0  # CREATED_AT as Unix time: the clock the in-process checks use

_CONTROLLER_KINDS: Final = frozenset(
    {"ReplicaSet", "ReplicationController", "Job", "StatefulSet", "DaemonSet"}
)


class WorkloadError(RuntimeError):
    """The workload cannot be built (a fixture pod is refused by the generated config)."""


def _sentinel(slot: str) -> str:
    return f"@@bench-{slot}@@"


# --------------------------------------------------------------------------- templates


@dataclass(frozen=True, slots=True)
class Template:
    """A serialized JSON document with named slots; ``parts`` has one more item than ``slots``."""

    parts: tuple[bytes, ...]
    slots: tuple[str, ...]

    @classmethod
    def from_document(cls, document: Any) -> Template:
        """Serialize ``document`` and cut it at every slot sentinel it contains."""
        text = orjson.dumps(document)
        parts: list[bytes] = []
        slots: list[str] = []
        position = 0
        while True:
            found = [
                (index, slot)
                for slot in SLOTS
                if (index := text.find(_sentinel(slot).encode(), position)) >= 0
            ]
            if not found:
                break
            index, slot = min(found)
            parts.append(text[position:index])
            slots.append(slot)
            position = index + len(_sentinel(slot))
        parts.append(text[position:])
        return cls(tuple(parts), tuple(slots))

    def render(self, values: Mapping[str, str]) -> bytes:
        """The document with every slot filled; ``KeyError`` names a missing value.

        Values go in verbatim: ids, names and numbers, which need no JSON escaping.
        """
        pieces = [self.parts[0]]
        for slot, part in zip(self.slots, self.parts[1:], strict=True):
            pieces.append(values[slot].encode())
            pieces.append(part)
        return b"".join(pieces)

    @property
    def size(self) -> int:
        """Bytes without the slot values (a uid adds 36, a reservation id 22, a suffix 5)."""
        return sum(len(part) for part in self.parts)


@dataclass(frozen=True, slots=True)
class PairIds:
    """What differs between two creations of the same pod: uids, name suffix, reservation."""

    mutate_uid: str
    validate_uid: str
    pod_uid: str
    suffix: str

    @property
    def reservation_id(self) -> str:
        # The id /mutate derives from its request uid, with the product's own function.
        return reservation_id_for(self.mutate_uid)

    def mutate_values(self) -> dict[str, str]:
        return {SLOT_UID: self.mutate_uid}

    def validate_values(self) -> dict[str, str]:
        return {
            SLOT_UID: self.validate_uid,
            SLOT_RID: self.reservation_id,
            SLOT_POD_UID: self.pod_uid,
            SLOT_SUFFIX: self.suffix,
        }

    def stored_values(
        self, resource_version: int, *, namespace: str, tenant: str
    ) -> dict[str, str]:
        return {
            SLOT_RID: self.reservation_id,
            SLOT_POD_UID: self.pod_uid,
            SLOT_SUFFIX: self.suffix,
            SLOT_RV: str(resource_version),
            SLOT_NS: namespace,
            SLOT_TENANT: tenant,
        }


def _uuid(run: int, kind: int, index: int) -> str:
    return str(uuid.UUID(int=(run % (1 << 32)) << 96 | kind << 64 | index, version=4))


def name_suffix(index: int) -> str:
    """Five characters of the API server's name alphabet, unique for 27**5 indexes."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    chars = []
    for _ in range(5):
        index, digit = divmod(index, len(alphabet))
        chars.append(alphabet[digit])
    return "".join(chars)


def pair_ids(run: int, index: int) -> PairIds:
    """Deterministic, unique ids of pair ``index`` of run ``run`` (runs never share ids)."""
    return PairIds(
        mutate_uid=_uuid(run, 1, index),
        validate_uid=_uuid(run, 2, index),
        pod_uid=_uuid(run, 3, index),
        suffix=name_suffix(index),
    )


# --------------------------------------------------------------------------- fixture pods


@dataclass(frozen=True, slots=True)
class SourcePod:
    """A pod a controller would create from one fixture template (namespace not yet set)."""

    key: str
    pod: JSONObject
    manager: str


def _manager(kind: str) -> str:
    if kind == "Pod":
        return "kubectl-client-side-apply"
    if kind in _CONTROLLER_KINDS or kind in ("Deployment", "CronJob"):
        return "kube-controller-manager"
    return f"{kind.lower()}-controller"


def _documents(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return [orjson.loads(text)]
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return list(yaml.load_all(text, Loader=loader))


def policy_sources(generated: GeneratedPolicy) -> list[SourcePod]:
    """:func:`load_sources` keeping the priority classes the policy's tenants may use."""
    return load_sources(
        priority_classes=frozenset(
            name for tenant in generated.policy.tenants.values() for name in tenant.allowed_classes
        )
    )


def load_sources(
    directory: Path = FIXTURES, *, priority_classes: frozenset[str] = frozenset()
) -> list[SourcePod]:
    """Every pod template of every manifest in ``directory``, as the pod it makes.

    A priority class not in ``priority_classes`` is removed: the fixtures' add-ons ask for
    ``system-*`` classes, which tenantgate rightly refuses to tenant pods (no escalation).
    """
    sources: list[SourcePod] = []
    for path in sorted(directory.iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json") or path.name == "expected.yaml":
            continue
        for document in _documents(path):
            for found in find_pod_templates(document):
                pod = pod_from_template(found, namespace="default")
                spec = pod.get("spec")
                if isinstance(spec, dict) and spec.get("priorityClassName") not in (
                    None,
                    *priority_classes,
                ):
                    del spec["priorityClassName"]
                owner = next(iter(podview.owner_references(pod)), None)
                sources.append(
                    SourcePod(
                        key=f"{path.name}:{found.key}",
                        pod=pod,
                        manager=_manager(str(owner.get("kind")) if owner else "Pod"),
                    )
                )
    if not sources:
        raise WorkloadError(f"no pod templates found in {directory}")
    return sources


# --------------------------------------------------------------------------- decoration

_FEATURES: Final = (
    "checkout", "recommendations", "search", "ratings", "wishlist", "payments", "inventory",
    "shipping", "currency", "ads", "email", "loyalty", "audit", "export", "import", "billing",
    "tracing", "caching", "ratelimit", "circuitbreaker", "retries", "compression", "metrics",
    "profiling", "sampling", "graphql", "websockets", "batching", "prefetch", "i18n",
)  # fmt: skip
_SERVICES: Final = (
    "auth", "catalog", "cart", "orders", "users", "pricing", "notifications", "gateway",
    "sessions", "storage", "events", "reports", "scheduler", "config", "registry", "billing",
)  # fmt: skip


def _checksum(rng: random.Random) -> str:
    return hashlib.sha256(rng.randbytes(16)).hexdigest()


def _app_name(pod: Mapping[str, Any]) -> str:
    labels = podview.labels(pod)
    for key in ("app.kubernetes.io/name", "app", "k8s-app", "name"):
        if labels.get(key):
            return labels[key]
    return podview.name(pod).rstrip("-") or "app"


def _decorations(pod: JSONObject, rng: random.Random) -> Iterator[None]:
    """Apply production-chart additions one group at a time (a generator: one per step)."""
    meta = podview.ensure_object(pod, "metadata")
    spec = podview.ensure_object(pod, "spec")
    app = _app_name(pod)
    containers = [c for c in spec.get("containers", []) if isinstance(c, dict)]
    labels = podview.ensure_object(meta, "labels")
    labels.setdefault("app.kubernetes.io/instance", f"{app}-{rng.choice(('prod', 'main', 'v2'))}")
    labels.setdefault("app.kubernetes.io/managed-by", "Helm")
    labels.setdefault("app.kubernetes.io/version", f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.0")
    chart_version = f"{rng.randint(0, 12)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
    labels.setdefault("helm.sh/chart", f"{app}-{chart_version}")
    yield
    annotations = podview.ensure_object(meta, "annotations")
    annotations["checksum/config"] = _checksum(rng)
    annotations["checksum/secret"] = _checksum(rng)
    if containers:
        annotations["kubectl.kubernetes.io/default-container"] = str(containers[0].get("name"))
    annotations["prometheus.io/scrape"] = "true"
    annotations["prometheus.io/port"] = str(rng.choice((8080, 9090, 9102, 9100)))
    yield
    pod_security = podview.ensure_object(spec, "securityContext")
    pod_security.setdefault("runAsNonRoot", True)
    pod_security.setdefault("fsGroup", 65532)
    pod_security.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    for container in containers:
        security = podview.ensure_object(container, "securityContext")
        security.setdefault("allowPrivilegeEscalation", False)
        security.setdefault("readOnlyRootFilesystem", True)
        security.setdefault("capabilities", {"drop": ["ALL"]})
    yield
    for container in containers:
        env = container.setdefault("env", [])
        if not isinstance(env, list):
            continue
        for name, path in (
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
            ("NODE_NAME", "spec.nodeName"),
            ("POD_IP", "status.podIP"),
        ):
            env.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    yield


def _config_env(rng: random.Random, app: str, index: int) -> JSONObject:
    """The ``index``-th configuration env var of a chart (plain, from a Secret or ConfigMap)."""
    kind = index % 7
    if kind == 0:
        feature = _FEATURES[(index // 7) % len(_FEATURES)]
        return {
            "name": f"FEATURE_{feature.upper()}_ENABLED",
            "value": rng.choice(("true", "false")),
        }
    if kind == 1:
        service = _SERVICES[(index // 7) % len(_SERVICES)]
        host = f"{service}.{service}-system.svc.cluster.local"
        return {
            "name": f"{service.upper()}_SERVICE_URL",
            "value": f"http://{host}:8080/api/v{rng.randint(1, 3)}",
        }
    if kind == 2:
        return {
            "name": f"{app.upper().replace('-', '_')}_SECRET_{index}",
            "valueFrom": {"secretKeyRef": {"name": f"{app}-secrets", "key": f"secret-{index}"}},
        }
    if kind == 3:
        return {
            "name": f"CONFIG_{index}",
            "valueFrom": {"configMapKeyRef": {"name": f"{app}-config", "key": f"setting-{index}"}},
        }
    if kind == 4:
        return {
            "name": f"OTEL_RESOURCE_ATTRIBUTES_{index}",
            "value": f"service.name={app},service.namespace=shop,deployment.environment=production",
        }
    if kind == 5:
        return {"name": f"TIMEOUT_{index}_MS", "value": str(rng.choice((250, 500, 1000, 5000)))}
    return {"name": f"LOG_LEVEL_{index}", "value": rng.choice(("info", "warn", "debug"))}


def _review(pod: JSONObject, *, namespace: str, uid: str, username: str) -> JSONObject:
    name = podview.string(podview.metadata(pod).get("name"))
    request: JSONObject = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
    }
    if name:
        request["name"] = name
    request |= {
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {
            "username": username,
            "uid": str(uuid.UUID(bytes=hashlib.md5(username.encode()).digest(), version=4)),
            "groups": ["system:serviceaccounts", "system:authenticated"],
        },
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def _username(manager: str) -> str:
    if manager == "kube-controller-manager":
        return "system:serviceaccount:kube-system:replicaset-controller"
    if manager == "kubectl-client-side-apply":
        return "developer@example.com"
    return f"system:serviceaccount:operators:{manager}"


def _admitted(
    pod: JSONObject, source: SourcePod, classes: Mapping[str, tuple[int, str]], seed: int
) -> JSONObject:
    # A fixed generator per call: the same pod always gets the same kube-api-access suffix.
    return apiserver.admitted_pod(
        pod, manager=source.manager, time=MANAGED_AT, classes=classes, rng=random.Random(seed)
    )


def decorated_pod(
    source: SourcePod,
    *,
    namespace: str,
    target: int,
    rng: random.Random,
    classes: Mapping[str, tuple[int, str]],
) -> tuple[JSONObject, JSONObject]:
    """The controller's pod (decorated) and the admitted pod whose review is about ``target``.

    Decorations stop as soon as the mutate review reaches ``target`` bytes; a pod already
    larger keeps its own size.
    """
    pod = copy.deepcopy(source.pod)
    meta = podview.ensure_object(pod, "metadata")
    meta["namespace"] = namespace
    suffix_seed = rng.getrandbits(32)
    username = _username(source.manager)

    def size(candidate: JSONObject) -> tuple[int, JSONObject]:
        admitted = _admitted(candidate, source, classes, suffix_seed)
        review = _review(
            admitted, namespace=namespace, uid=str(uuid.UUID(int=0)), username=username
        )
        return len(orjson.dumps(review)), admitted

    current, admitted = size(pod)
    steps = _decorations(pod, rng)
    while current < target and next(steps, StopIteration) is not StopIteration:
        current, admitted = size(pod)
    containers = [c for c in podview.spec(pod).get("containers", []) if isinstance(c, dict)]
    app = _app_name(pod)
    index = 0
    while current < target and containers:
        gap = target - current
        # Each env var costs its own JSON plus its managedFields entry (about as much again).
        while gap > 0:
            env = _config_env(rng, app, index)
            container = containers[index % len(containers)]
            container.setdefault("env", []).append(env)
            gap -= 2 * len(orjson.dumps(env)) + 40
            index += 1
        current, admitted = size(pod)
    return pod, admitted


# --------------------------------------------------------------------------- pairs


@dataclass(frozen=True, slots=True)
class PairTemplate:
    """One pod's two reviews and the pod as stored afterwards, all with slots."""

    index: int
    source: str
    tenant: str
    namespace: str
    profile: str
    tier: str
    mutate: Template
    validate: Template
    stored: Template

    def bodies(self, ids: PairIds) -> tuple[bytes, bytes]:
        """The mutate and validate request bodies for one creation of this pod."""
        return self.mutate.render(ids.mutate_values()), self.validate.render(ids.validate_values())

    def stored_pod(
        self,
        ids: PairIds,
        *,
        resource_version: int,
        namespace: str | None = None,
        tenant: str | None = None,
    ) -> bytes:
        """The pod as stored and running (JSON), by default in this pair's own namespace."""
        return self.stored.render(
            ids.stored_values(
                resource_version,
                namespace=namespace or self.namespace,
                tenant=tenant or self.tenant,
            )
        )


@dataclass(frozen=True, slots=True)
class Workload:
    pairs: tuple[PairTemplate, ...]
    seed: int

    def __len__(self) -> int:
        return len(self.pairs)

    def sizes(self, endpoint: str) -> list[int]:
        """Request body sizes (bytes) of ``mutate``, ``validate`` or ``stored`` documents."""
        ids = pair_ids(0, 0)
        extra = {
            "mutate": len(ids.mutate_uid),
            "validate": len(ids.validate_uid)
            + len(ids.reservation_id)
            + len(ids.pod_uid)
            + len(ids.suffix),
            "stored": len(ids.reservation_id) + len(ids.pod_uid) + len(ids.suffix) + 6,
        }[endpoint]
        if endpoint == "stored":
            return [
                pair.stored.size + extra + len(pair.namespace) + len(pair.tenant)
                for pair in self.pairs
            ]
        return [getattr(pair, endpoint).size + extra for pair in self.pairs]

    def histogram(self, attribute: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pair in self.pairs:
            value = str(getattr(pair, attribute))
            counts[value] = counts.get(value, 0) + 1
        return dict(sorted(counts.items()))


def _running_status(pod: Mapping[str, Any], rng: random.Random) -> JSONObject:
    """The status of a running pod, as the kubelet reports it."""
    host = f"10.0.{rng.randint(0, 63)}.{rng.randint(2, 254)}"
    pod_ip = f"10.244.{rng.randint(0, 255)}.{rng.randint(2, 254)}"
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": STARTED_AT}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ] + [
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": CREATED_AT,
        }
    ]
    statuses = []
    for container in podview.containers(pod):
        image = str(container.get("image", ""))
        statuses.append(
            {
                "name": container.get("name"),
                "state": {"running": {"startedAt": STARTED_AT}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": image,
                "imageID": f"{image.split(':')[0]}@sha256:{_checksum(rng)}",
                "containerID": f"containerd://{_checksum(rng)}",
                "started": True,
            }
        )
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host,
        "hostIPs": [{"ip": host}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": CREATED_AT,
        "containerStatuses": statuses,
        "qosClass": apiserver.qos_class(pod),
    }


def build_pair(
    index: int,
    *,
    source: SourcePod,
    tenant: str,
    namespace: str,
    target: int,
    rng: random.Random,
    admitter: PolicyAdmitter,
    classes: Mapping[str, tuple[int, str]],
) -> PairTemplate:
    """Build one pair, running the product's own /mutate on it to get the mutated pod."""
    _, admitted = decorated_pod(
        source, namespace=namespace, target=target, rng=rng, classes=classes
    )
    username = _username(source.manager)
    mutate_doc = _review(admitted, namespace=namespace, uid=_sentinel(SLOT_UID), username=username)

    # What the API server does with /mutate's answer: apply the patch to the object it sent.
    probe_uid = _uuid(0xB0B, 0, index)
    request = decode_review(
        orjson.dumps(_review(admitted, namespace=namespace, uid=probe_uid, username=username))
    ).request
    verdict = settle(admitter.mutate(request, now=NOW))
    if not isinstance(verdict, Verdict):
        raise WorkloadError(f"/mutate returned {type(verdict).__name__}, not a Verdict")
    if not verdict.allowed:
        raise WorkloadError(f"{source.key} in {namespace}: /mutate refused it: {verdict.message}")
    patched = (
        apply_json_patch(admitted, make_json_patch(admitted, verdict.patched))
        if verdict.patched is not None
        else copy.deepcopy(admitted)
    )
    generate_name = podview.string(podview.metadata(patched).get("generateName"))
    name = (
        podview.string(podview.metadata(patched).get("name"))
        or f"{generate_name or 'pod-'}{_sentinel(SLOT_SUFFIX)}"
    )
    stored = apiserver.stored_pod(
        patched, name=name, uid=_sentinel(SLOT_POD_UID), created=CREATED_AT
    )
    meta = stored["metadata"]
    annotations = dict(podview.obj(meta.get("annotations")))
    if RESERVATION_ANNOTATION in annotations:
        annotations[RESERVATION_ANNOTATION] = _sentinel(SLOT_RID)
    meta["annotations"] = annotations
    validate_doc = _review(stored, namespace=namespace, uid=_sentinel(SLOT_UID), username=username)
    validate_doc["request"]["name"] = name

    running: JSONObject = copy.deepcopy(stored)
    running_meta = running["metadata"]
    running_meta["resourceVersion"] = _sentinel(SLOT_RV)
    running_meta["namespace"] = _sentinel(SLOT_NS)
    if TENANT_LABEL in running_meta.get("labels", {}):
        running_meta["labels"][TENANT_LABEL] = _sentinel(SLOT_TENANT)
    running["spec"]["nodeName"] = f"node-{rng.randint(1, 400):03d}"
    running["status"] = _running_status(running, rng)
    stored_template = Template.from_document(running)

    audit = verdict.audit_annotations
    return PairTemplate(
        index=index,
        source=source.key,
        tenant=tenant,
        namespace=namespace,
        profile=audit.get("profile", "?"),
        tier=audit.get("tier", podview.labels(patched).get(TIER_LABEL, "?")),
        mutate=Template.from_document(mutate_doc),
        validate=Template.from_document(validate_doc),
        stored=stored_template,
    )


def priority_class_table(generated: GeneratedPolicy) -> dict[str, tuple[int, str]]:
    """The cluster's PriorityClasses (the config's and the built-in ones): value, policy."""
    table = {
        "system-cluster-critical": (2_000_000_000, "PreemptLowerPriority"),
        "system-node-critical": (2_000_001_000, "PreemptLowerPriority"),
    }
    for name, spec in generated.policy.priority_classes.items():
        table[name] = (spec.value, spec.preemptionPolicy)
    return table


def _in_group(pod: Mapping[str, Any], rules: Sequence[GroupRule]) -> bool:
    try:
        return claim_group(pod, rules) is not None
    except GroupClaimError:
        return True


def build_workload(
    generated: GeneratedPolicy,
    *,
    pairs: int,
    seed: int,
    sources: Sequence[SourcePod] | None = None,
    target_bytes: tuple[int, int] = TARGET_BYTES,
) -> Workload:
    """``pairs`` pairs over the fixtures' pods and the generated config's namespaces."""
    if pairs < 1:
        raise ValueError("a workload needs at least one pair")
    rng = random.Random(seed)
    classes = priority_class_table(generated)
    allowed = frozenset(
        name for tenant in generated.policy.tenants.values() for name in tenant.allowed_classes
    )
    pool = list(sources) if sources is not None else load_sources(priority_classes=allowed)
    # A pod group's member waits behind the gate until its whole group exists: its admission
    # is the groups phase's measure (bench/groups.py), not a pair of this workload.
    rule_sets = {
        id(t.classifier): t.classifier.group_rules for t in generated.policy.tenants.values()
    }
    pool = [s for s in pool if not any(_in_group(s.pod, rules) for rules in rule_sets.values())]
    if not pool:
        raise WorkloadError("every fixture pod belongs to a pod group")
    rng.shuffle(pool)
    namespaces = generated.namespaces()
    admitter = PolicyAdmitter(generated.policy, MemoryLedger())
    built = []
    for index in range(pairs):
        tenant, namespace = namespaces[rng.randrange(len(namespaces))]
        built.append(
            build_pair(
                index,
                source=pool[index % len(pool)],
                tenant=tenant,
                namespace=namespace,
                target=rng.randint(*target_bytes),
                rng=random.Random(rng.getrandbits(64)),
                admitter=admitter,
                classes=classes,
            )
        )
    return Workload(tuple(built), seed)
