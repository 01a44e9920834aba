"""Rule conditions (table-driven), owner derivation, image paths and classification."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from classifier.config import ClassifierConfig, ConditionSpec
from classifier.facts import PodFacts, image_repository
from classifier.plan import Classifier, compile_classifier
from classifier.resources import PodResourceError, pod_requests
from classifier.rules import Classification, classify
from classifier.ruleset import INDEX_FROM, CompiledRule, RuleSet, compile_condition, compile_rules
from classifier.types import JSONObject


def pod(
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[tuple[str, str]] | None = None,
    images: list[str] | None = None,
    ports: list[dict[str, Any]] | None = None,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> JSONObject:
    meta: JSONObject = {"name": "p"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if owners:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": kind, "name": name, "uid": "u"} for kind, name in owners
        ]
    containers: list[JSONObject] = []
    for index, image in enumerate(images or ["busybox"]):
        container: JSONObject = {"name": f"c{index}", "image": image}
        if index == 0:
            if ports is not None:
                container["ports"] = ports
            resources: JSONObject = {}
            if requests is not None:
                resources["requests"] = requests
            if limits is not None:
                resources["limits"] = limits
            if resources:
                container["resources"] = resources
        containers.append(container)
    body: JSONObject = {"containers": containers, **(spec or {})}
    if init is not None:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def check(condition: dict[str, Any], subject: JSONObject, namespace: str = "default") -> str | None:
    problems: list[Any] = []
    compiled = compile_condition(
        ConditionSpec.model_validate(condition), path="match", problems=problems
    )
    assert problems == []
    return compiled.test(PodFacts(subject, namespace=namespace))


# --------------------------------------------------------------------------- image paths


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("postgres", "library/postgres"),
        ("postgres:16", "library/postgres"),
        ("docker.io/library/postgres:16@sha256:abcd", "library/postgres"),
        ("index.docker.io/postgres", "library/postgres"),
        ("bitnami/postgresql:15.4.0-debian-11-r0", "bitnami/postgresql"),
        ("ghcr.io/org/team/app:v1", "org/team/app"),
        ("registry.local:5000/app:1.0", "app"),
        ("registry.local:5000/app", "app"),
        ("localhost/app:dev", "app"),
        ("quay.io/prometheus/node-exporter:v1.6.1", "prometheus/node-exporter"),
        ("k8s.gcr.io/ingress-nginx/controller:v0.41.2@sha256:1f4f", "ingress-nginx/controller"),
        ("solsson/kafkacat@sha256:7a59", "solsson/kafkacat"),
        ("Nginx:Latest", "library/nginx"),
    ],
)
def test_image_repository(image: str, repository: str) -> None:
    assert image_repository(image) == repository


# --------------------------------------------------------------------------- conditions

CASES: list[tuple[str, dict[str, Any], JSONObject, str, str | None]] = [
    # label and annotation
    (
        "label exact",
        {"label": {"key": "app", "value": "db"}},
        pod(labels={"app": "db"}),
        "default",
        "label app=db",
    ),
    (
        "label exact miss",
        {"label": {"key": "app", "value": "db"}},
        pod(labels={"app": "web"}),
        "default",
        None,
    ),
    (
        "label values",
        {"label": {"key": "app", "values": ["a", "db"]}},
        pod(labels={"app": "db"}),
        "default",
        "label app=db",
    ),
    (
        "label glob",
        {"label": {"key": "app", "glob": ["redis*", "pg*"]}},
        pod(labels={"app": "pg-main"}),
        "default",
        "label app=pg-main",
    ),
    (
        "label glob miss",
        {"label": {"key": "app", "glob": "redis*"}},
        pod(labels={"app": "myredis"}),
        "default",
        None,
    ),
    (
        "label exists",
        {"label": {"key": "app", "exists": True}},
        pod(labels={"app": ""}),
        "default",
        "label app is set",
    ),
    ("label exists miss", {"label": {"key": "app", "exists": True}}, pod(), "default", None),
    (
        "label absent",
        {"label": {"key": "app", "absent": True}},
        pod(labels={"x": "y"}),
        "default",
        "label app is absent",
    ),
    (
        "label absent miss",
        {"label": {"key": "app", "absent": True}},
        pod(labels={"app": "y"}),
        "default",
        None,
    ),
    (
        "label key glob",
        {"label": {"key": "training.kubeflow.org/*", "exists": True}},
        pod(labels={"training.kubeflow.org/job-name": "j"}),
        "default",
        "label training.kubeflow.org/job-name is set",
    ),
    (
        "label key glob absent",
        {"label": {"key": "ray.io/*", "absent": True}},
        pod(labels={"app": "x"}),
        "default",
        "label ray.io/* is absent",
    ),
    (
        "key glob ignores tenantgate keys",
        {"label": {"key": "*", "exists": True}},
        pod(labels={"tenantgate.io/tier": "burst"}),
        "default",
        None,
    ),
    (
        "annotation",
        {"annotation": {"key": "team", "value": "ml"}},
        pod(annotations={"team": "ml"}, labels={"team": "web"}),
        "default",
        "annotation team=ml",
    ),
    (
        "annotation is not a label",
        {"annotation": {"key": "team", "exists": True}},
        pod(labels={"team": "ml"}),
        "default",
        None,
    ),
    (
        "malformed labels",
        {"label": {"key": "app", "exists": True}},
        {"metadata": {"labels": ["app"]}},
        "default",
        None,
    ),
    # namespace
    (
        "namespace exact",
        {"namespace": "kube-system"},
        pod(),
        "kube-system",
        "namespace kube-system",
    ),
    ("namespace list", {"namespace": ["a", "b"]}, pod(), "b", "namespace b"),
    ("namespace glob", {"namespace": "team-*"}, pod(), "team-a", "namespace team-a"),
    ("namespace miss", {"namespace": ["team-*", "ml"]}, pod(), "default", None),
    # owners
    (
        "owner direct",
        {"ownerKind": "StatefulSet"},
        pod(owners=[("StatefulSet", "db")]),
        "default",
        "owner StatefulSet db",
    ),
    (
        "owner Deployment via ReplicaSet",
        {"ownerKind": "Deployment"},
        pod(owners=[("ReplicaSet", "web-5d4f")], labels={"pod-template-hash": "5d4f"}),
        "default",
        "owner Deployment web (via ReplicaSet web-5d4f)",
    ),
    (
        "bare ReplicaSet is no Deployment",
        {"ownerKind": "Deployment"},
        pod(owners=[("ReplicaSet", "web")]),
        "default",
        None,
    ),
    (
        "ReplicaSet of a Deployment is a ReplicaSet",
        {"ownerKind": "ReplicaSet"},
        pod(owners=[("ReplicaSet", "web-5d4f")], labels={"pod-template-hash": "5d4f"}),
        "default",
        "owner ReplicaSet web-5d4f",
    ),
    (
        "CronJob via Job name",
        {"ownerKind": "CronJob"},
        pod(owners=[("Job", "hello-29000000")]),
        "default",
        "owner CronJob hello (via Job hello-29000000)",
    ),
    (
        "CronJob via seconds suffix",
        {"ownerKind": "CronJob"},
        pod(owners=[("Job", "backup-1700000000")]),
        "default",
        "owner CronJob backup (via Job backup-1700000000)",
    ),
    (
        "plain Job is no CronJob",
        {"ownerKind": "CronJob"},
        pod(owners=[("Job", "pi")]),
        "default",
        None,
    ),
    (
        "Job of a CronJob is a Job",
        {"ownerKind": "Job"},
        pod(owners=[("Job", "hello-29000000")]),
        "default",
        "owner Job hello-29000000",
    ),
    (
        "custom kind",
        {"ownerKind": ["PyTorchJob", "RayCluster"]},
        pod(owners=[("RayCluster", "rc")]),
        "default",
        "owner RayCluster rc",
    ),
    (
        "owner kind glob",
        {"ownerKind": "*Job"},
        pod(owners=[("MPIJob", "pi")]),
        "default",
        "owner MPIJob pi",
    ),
    ("no owner", {"ownerKind": "Job"}, pod(), "default", None),
    # images
    (
        "image bare name",
        {"image": "postgres"},
        pod(images=["docker.io/library/postgres:16@sha256:abc"]),
        "default",
        'image docker.io/library/postgres:16@sha256:abc matches "postgres"',
    ),
    (
        "image */name",
        {"image": "*/postgres"},
        pod(images=["postgres:16"]),
        "default",
        'image postgres:16 matches "*/postgres"',
    ),
    (
        "image org/*",
        {"image": "bitnami/*"},
        pod(images=["registry.example.com/mirror/bitnami/postgresql:15"]),
        "default",
        'image registry.example.com/mirror/bitnami/postgresql:15 matches "bitnami/*"',
    ),
    ("image org/* miss", {"image": "bitnami/*"}, pod(images=["postgres"]), "default", None),
    (
        "image glob suffix",
        {"image": "*zookeeper"},
        pod(images=["registry.k8s.io/kubernetes-zookeeper:1.0"]),
        "default",
        'image registry.k8s.io/kubernetes-zookeeper:1.0 matches "*zookeeper"',
    ),
    (
        "image name is not a prefix",
        {"image": "kafka"},
        pod(images=["solsson/kafkacat@sha256:7a"]),
        "default",
        None,
    ),
    (
        "image second container",
        {"image": ["redis", "memcached"]},
        pod(images=["app", "memcached:1.6"]),
        "default",
        'image memcached:1.6 matches "memcached"',
    ),
    (
        "image case folded",
        {"image": "NGINX"},
        pod(images=["nginx"]),
        "default",
        'image nginx matches "NGINX"',
    ),
    (
        "init container image ignored",
        {"image": "postgres"},
        pod(init=[{"name": "i", "image": "postgres"}]),
        "default",
        None,
    ),
    # ports
    (
        "port number",
        {"port": [80, 443]},
        pod(ports=[{"containerPort": 443, "name": "https"}]),
        "default",
        "container c0 exposes port 443 (https)",
    ),
    (
        "port name glob",
        {"port": "http*"},
        pod(ports=[{"containerPort": 9898, "name": "http-metrics"}]),
        "default",
        'container c0 exposes port 9898 named "http-metrics"',
    ),
    (
        "any port",
        {"port": "*"},
        pod(ports=[{"containerPort": 7070}]),
        "default",
        "container c0 exposes port 7070",
    ),
    ("no ports", {"port": "*"}, pod(), "default", None),
    ("port miss", {"port": 80}, pod(ports=[{"containerPort": 8080}]), "default", None),
    # resources on the effective request
    (
        "gpu > 0",
        {"resource": "nvidia.com/gpu > 0"},
        pod(limits={"nvidia.com/gpu": 1}),
        "default",
        "requests nvidia.com/gpu=1 > 0",
    ),
    ("gpu absent", {"resource": "nvidia.com/gpu > 0"}, pod(requests={"cpu": "1"}), "default", None),
    (
        "memory >= 8Gi",
        {"resource": "memory >= 8Gi"},
        pod(requests={"memory": "8192Mi"}),
        "default",
        "requests memory=8Gi >= 8Gi",
    ),
    (
        "memory >= 8Gi miss",
        {"resource": "memory >= 8Gi"},
        pod(requests={"memory": "8G"}),
        "default",
        None,
    ),
    (
        "cpu from init container max",
        {"resource": "cpu >= 2"},
        pod(
            requests={"cpu": "500m"},
            init=[{"name": "i", "image": "x", "resources": {"requests": {"cpu": "2"}}}],
        ),
        "default",
        "requests cpu=2 >= 2",
    ),
    (
        "resource glob",
        {"resource": "gpu.intel.com/* > 0"},
        pod(limits={"gpu.intel.com/i915": 2}),
        "default",
        "requests gpu.intel.com/i915=2 > 0",
    ),
    (
        "resource glob prefix",
        {"resource": "aws.amazon.com/neuron* > 0"},
        pod(limits={"aws.amazon.com/neuroncore": 2}),
        "default",
        "requests aws.amazon.com/neuroncore=2 > 0",
    ),
    (
        "absent resource is zero",
        {"resource": "nvidia.com/gpu < 1"},
        pod(),
        "default",
        "requests nvidia.com/gpu=0 < 1",
    ),
    (
        "absent glob is zero",
        {"resource": "habana.ai/* == 0"},
        pod(),
        "default",
        "requests habana.ai/*=0 == 0",
    ),
    ("!=", {"resource": "cpu != 1"}, pod(requests={"cpu": "1000m"}), "default", None),
    (
        "<=",
        {"resource": ["cpu <= 100m"]},
        pod(requests={"cpu": "0.1"}),
        "default",
        "requests cpu=100m <= 100m",
    ),
    ("pods count", {"resource": "pods == 1"}, pod(), "default", "requests pods=1 == 1"),
    # pod-level switches
    (
        "restartPolicy default Always",
        {"restartPolicy": "Always"},
        pod(),
        "default",
        "restartPolicy Always",
    ),
    (
        "restartPolicy list",
        {"restartPolicy": ["OnFailure", "Never"]},
        pod(spec={"restartPolicy": "Never"}),
        "default",
        "restartPolicy Never",
    ),
    ("restartPolicy miss", {"restartPolicy": ["OnFailure", "Never"]}, pod(), "default", None),
    (
        "hostNetwork true",
        {"hostNetwork": True},
        pod(spec={"hostNetwork": True}),
        "default",
        "hostNetwork true",
    ),
    ("hostNetwork false by default", {"hostNetwork": False}, pod(), "default", "hostNetwork false"),
    ("hostNetwork true miss", {"hostNetwork": True}, pod(), "default", None),
    (
        "privileged init container",
        {"privileged": True},
        pod(init=[{"name": "setup", "image": "x", "securityContext": {"privileged": True}}]),
        "default",
        'container "setup" is privileged',
    ),
    ("not privileged", {"privileged": False}, pod(), "default", "no container is privileged"),
    (
        "privileged miss",
        {"privileged": False},
        pod(spec={"containers": [{"name": "c", "securityContext": {"privileged": True}}]}),
        "default",
        None,
    ),
    # composition
    (
        "all",
        {"all": [{"namespace": "ml"}, {"port": 80}]},
        pod(ports=[{"containerPort": 80}]),
        "ml",
        "namespace ml and container c0 exposes port 80",
    ),
    (
        "all miss",
        {"all": [{"namespace": "ml"}, {"port": 80}]},
        pod(ports=[{"containerPort": 80}]),
        "dev",
        None,
    ),
    ("empty all", {"all": []}, pod(), "default", "every pod"),
    (
        "any first match",
        {"any": [{"port": 80}, {"namespace": "ml"}, {"hostNetwork": False}]},
        pod(),
        "ml",
        "namespace ml",
    ),
    ("empty any", {"any": []}, pod(), "default", None),
    ("not", {"not": {"ownerKind": "Job"}}, pod(), "default", 'not (owner kind is "Job")'),
    ("not miss", {"not": {"ownerKind": "Job"}}, pod(owners=[("Job", "pi")]), "default", None),
    (
        "several keys are all",
        {"namespace": "ml", "label": {"key": "app", "exists": True}},
        pod(labels={"app": "x"}),
        "ml",
        "label app is set and namespace ml",
    ),
    (
        "several keys miss",
        {"namespace": "ml", "label": {"key": "app", "exists": True}},
        pod(),
        "ml",
        None,
    ),
]


@pytest.mark.parametrize(
    ("condition", "subject", "namespace", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_condition(
    condition: dict[str, Any], subject: JSONObject, namespace: str, expected: str | None
) -> None:
    assert check(condition, subject, namespace) == expected


def test_request_is_computed_only_when_a_resource_rule_runs() -> None:
    broken = pod(requests={"memory": "12XY"}, ports=[{"containerPort": 80}])
    assert check({"port": 80}, broken) is not None
    with pytest.raises(
        PodResourceError, match=r"spec\.containers\[0\]\.resources\.requests\.memory"
    ):
        check({"resource": "memory > 1Gi"}, broken)


def test_owner_facts() -> None:
    facts = PodFacts(
        pod(
            owners=[("ReplicaSet", "web-abc"), ("Job", "x-29000001")],
            labels={"pod-template-hash": "abc"},
        ),
        namespace="default",
    )
    assert [(o.kind, o.name, o.via) for o in facts.owners] == [
        ("ReplicaSet", "web-abc", ""),
        ("Deployment", "web", "ReplicaSet web-abc"),
        ("Job", "x-29000001", ""),
        ("CronJob", "x", "Job x-29000001"),
    ]


# --------------------------------------------------------------------------- classification


def classifier() -> Classifier:
    return compile_classifier(
        ClassifierConfig.model_validate(
            {
                "profiles": {"general": {}, "gpu": {}, "batch": {}, "web": {}, "system": {}},
                "rules": [
                    {"name": "system", "profile": "system", "match": {"namespace": "kube-system"}},
                    {"name": "gpu", "profile": "gpu", "match": {"resource": "nvidia.com/gpu > 0"}},
                    {"name": "batch", "profile": "batch", "match": {"ownerKind": "Job"}},
                    {"name": "web", "profile": "web", "match": {"port": [80, 443]}},
                ],
            }
        )
    )


def test_first_match_wins_and_says_why() -> None:
    subject = pod(limits={"nvidia.com/gpu": 1}, owners=[("Job", "train")])
    result = classifier().classify(subject, namespace="ml")
    assert (result.profile, result.source, result.rule) == ("gpu", "rule", "gpu")
    assert result.reason == 'rule "gpu": requests nvidia.com/gpu=1 > 0'
    assert result.classified_by == "rule/gpu"
    assert result.problem is None
    assert result.skipped == ()


def test_the_request_a_rule_computed_comes_with_the_classification() -> None:
    gpu = classifier().classify(pod(limits={"nvidia.com/gpu": 1}), namespace="ml")
    untested = classifier().classify(pod(), namespace="kube-system")  # no resource rule ran

    assert gpu.requests == pod_requests(pod(limits={"nvidia.com/gpu": 1}))
    assert untested.requests is None


def test_default_when_nothing_matches() -> None:
    result = classifier().classify(pod(), namespace="dev")
    assert (result.profile, result.source, result.rule, result.reason) == (
        "general",
        "default",
        None,
        "no rule matched; no evidence",
    )
    assert result.classified_by == "default"


def test_opt_in_label_selects_a_profile() -> None:
    subject = pod(labels={"tenantgate.io/profile": "batch"}, ports=[{"containerPort": 80}])
    result = classifier().classify(subject, namespace="dev")
    assert (result.profile, result.source, result.rule) == ("batch", "opt-in", None)
    assert result.reason == "opt-in label tenantgate.io/profile=batch"
    assert result.classified_by == "opt-in"


def test_opt_in_to_an_unknown_profile_is_reported_and_rules_still_apply() -> None:
    subject = pod(labels={"tenantgate.io/profile": "huge"}, ports=[{"containerPort": 80}])
    result = classifier().classify(subject, namespace="dev")
    assert result.profile == "web"
    assert result.problem == (
        'label tenantgate.io/profile asks for unknown profile "huge" '
        "(known: batch, general, gpu, system, web)"
    )


def test_opt_in_to_a_disallowed_profile_is_reported() -> None:
    subject = pod(labels={"tenantgate.io/profile": "system"})
    result = classifier().classify(subject, namespace="dev", allowed_profiles=frozenset({"web"}))
    assert result.profile == "general"
    assert result.problem == (
        'label tenantgate.io/profile asks for profile "system", which is not allowed here '
        "(allowed: general, web)"
    )


def test_empty_opt_in_label_is_ignored() -> None:
    result = classifier().classify(pod(labels={"tenantgate.io/profile": ""}), namespace="dev")
    assert (result.profile, result.problem) == ("general", None)


def test_disallowed_rules_are_skipped_in_order() -> None:
    subject = pod(
        limits={"nvidia.com/gpu": 1}, owners=[("Job", "train")], ports=[{"containerPort": 80}]
    )
    result = classifier().classify(subject, namespace="ml", allowed_profiles=frozenset({"web"}))
    assert (result.profile, result.rule) == ("web", "web")
    assert result.skipped == (
        'rule "gpu" matched but profile "gpu" is not allowed',
        'rule "batch" matched but profile "batch" is not allowed',
    )


def test_default_profile_is_always_allowed() -> None:
    result = classifier().classify(
        pod(labels={"tenantgate.io/profile": "general"}),
        namespace="x",
        allowed_profiles=frozenset(),
    )
    assert (result.profile, result.source, result.problem) == ("general", "opt-in", None)


def test_malformed_pod_does_not_crash() -> None:
    weird: JSONObject = {
        "metadata": {"labels": None, "ownerReferences": [None, {"kind": 3}]},
        "spec": {"containers": [None, {"image": 5, "ports": [{"containerPort": "80"}]}]},
    }
    result = classifier().classify(weird, namespace="dev")
    assert result.profile == "general"


# --------------------------------------------------------------------------- rule index

KEYS = ["app", "tier", "x.io/a", "x.io/b", "tenantgate.io/x", "pod-template-hash"]
KEY_PATTERNS = [*KEYS[:4], "x.io/*", "*", "ti?r", "[at]*"]
VALUES = ["a", "b", "web", "a-1", "5d4f"]
VALUE_GLOBS = ["a*", "*", "w?b", "[ab]", "a-*"]
NAMESPACE_NAMES = ["default", "team-a", "team-b", "kube-system"]
KINDS = ["Deployment", "ReplicaSet", "Job", "CronJob", "DaemonSet"]
IMAGES = [
    "nginx",
    "nginx:1.25",
    "docker.io/library/postgres:16",
    "ghcr.io/org/app:v1",
    "registry.example.com/team/app",
    "localhost:5000/app",
    "APP",
]
IMAGE_PATTERNS = [
    "nginx",
    "library/nginx",
    "org/*",
    "*/app",
    "post*",
    "ghcr.io/org/app",
    "team/app",
    "*",
    "APP",
    "registry.example.com/team/*",
    "[np]*",
]
RESOURCES = ["cpu", "memory", "nvidia.com/gpu", "example.com/fpga"]
RESOURCE_TESTS = [
    "cpu > 1",
    "nvidia.com/gpu > 0",
    "memory < 1Gi",
    "example.com/* > 0",
    "cpu == 0",
    "memory >= 0",
    "pods > 0",
    "*.com/gpu > 0",
    "cpu != 1",
]
RULE_PROFILES = ["general", "a", "b"]


def _some(items: list[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(items), min_size=1, max_size=3, unique=True)


def _key_match() -> st.SearchStrategy[dict[str, Any]]:
    tests = st.one_of(
        st.sampled_from(VALUES).map(lambda v: {"value": v}),
        _some(VALUES).map(lambda v: {"values": v}),
        _some(VALUE_GLOBS).map(lambda v: {"glob": v}),
        _some(["a", "EB", "-1", "5d"]).map(lambda v: {"contains": v}),
        st.just({"exists": True}),
        st.just({"absent": True}),
    )
    return st.builds(lambda key, test: {"key": key, **test}, st.sampled_from(KEY_PATTERNS), tests)


LEAVES: st.SearchStrategy[tuple[str, Any]] = st.one_of(
    st.tuples(st.just("label"), _key_match()),
    st.tuples(st.just("annotation"), _key_match()),
    st.tuples(st.just("namespace"), _some([*NAMESPACE_NAMES, "team-*", "*-a", "t?am-b"])),
    st.tuples(st.just("ownerKind"), _some([*KINDS, "Dep*", "*Set", "Cron?ob"])),
    st.tuples(st.just("image"), _some(IMAGE_PATTERNS)),
    st.tuples(
        st.just("image"),
        st.fixed_dictionaries(
            {"contains": _some(["ngin", "SQL", "redis", "/"])},
            optional={"glob": _some(IMAGE_PATTERNS)},
        ),
    ),
    st.tuples(st.just("container"), _some(RESOURCE_TESTS).map(lambda r: {"resource": r})),
    st.tuples(st.just("volumeClaim"), st.sampled_from(["any", "template"])),
    st.tuples(st.just("port"), _some([80, 443, 8080, "http", "metrics", "*", "ht*", "*s"])),
    st.tuples(st.just("resource"), _some(RESOURCE_TESTS)),
    st.tuples(st.just("restartPolicy"), _some(["Always", "OnFailure", "Never"])),
    st.tuples(st.just("hostNetwork"), st.booleans()),
    st.tuples(st.just("privileged"), st.booleans()),
)


def _conditions(
    children: st.SearchStrategy[dict[str, Any]],
) -> st.SearchStrategy[dict[str, Any]]:
    branches = st.one_of(
        st.tuples(st.just("all"), st.lists(children, max_size=3)),
        st.tuples(st.just("any"), st.lists(children, max_size=3)),
        st.tuples(st.just("not"), children),
        LEAVES,
    )
    return st.lists(branches, min_size=1, max_size=3).map(dict)


CONDITIONS = st.recursive(
    st.lists(LEAVES, min_size=1, max_size=3).map(dict), _conditions, max_leaves=8
)


@st.composite
def _indexed_pods(draw: st.DrawFn) -> JSONObject:
    labels = draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4))
    owners = draw(
        st.lists(
            st.tuples(
                st.sampled_from([*KINDS, "StatefulSet"]),
                st.sampled_from(["web-5d4f", "x-29000001", "y"]),
            ),
            max_size=2,
        )
    )
    ports = draw(
        st.lists(
            st.fixed_dictionaries(
                {"containerPort": st.sampled_from([80, 443, 8080, 9090])},
                optional={"name": st.sampled_from(["http", "https", "metrics", ""])},
            ),
            max_size=3,
        )
    )
    requests = draw(
        st.dictionaries(
            st.sampled_from(RESOURCES), st.sampled_from(["0", "1", "500m", "2Gi", "12XY"])
        )
    )
    extra: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "restartPolicy": st.sampled_from(["Always", "OnFailure", "Never"]),
                "hostNetwork": st.booleans(),
            },
        )
    )
    subject = pod(
        labels=labels,
        annotations=draw(
            st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
        ),
        owners=owners,
        images=draw(st.lists(st.sampled_from(IMAGES), min_size=1, max_size=3)),
        ports=ports,
        requests=requests,
        spec=extra,
    )
    if draw(st.booleans()):
        subject["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    claims = draw(st.lists(st.sampled_from(["data-y-0", "data-web-1", "other"]), max_size=2))
    if claims:
        subject["spec"]["volumes"] = [
            {"name": "data", "persistentVolumeClaim": {"claimName": claim}} for claim in claims
        ]
    if draw(st.booleans()):
        subject["spec"]["initContainers"] = [
            {"name": "init", "image": "busybox", "resources": {"limits": {"memory": "3Gi"}}}
        ]
    return subject


def _outcome(call: Callable[[], Classification]) -> Classification | tuple[type, str]:
    try:
        return call()
    except PodResourceError as error:
        return (type(error), str(error))


def _rule_set(conditions: list[dict[str, Any]], profiles: list[str]) -> RuleSet:
    cfg = ClassifierConfig.model_validate(
        {
            "profiles": {name: {} for name in RULE_PROFILES},
            "rules": [
                {"name": f"r{i}", "profile": profile, "match": condition}
                for i, (condition, profile) in enumerate(zip(conditions, profiles, strict=True))
            ],
        }
    )
    # Indexed at any size, to compare it with a plain scan on rule sets small enough to shrink.
    return RuleSet(compile_rules(cfg, []), index_from=0)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conditions=st.lists(CONDITIONS, max_size=8),
    profiles=st.lists(st.sampled_from(RULE_PROFILES), min_size=8, max_size=8),
    subjects=st.lists(_indexed_pods(), min_size=1, max_size=4),
    namespace=st.sampled_from(NAMESPACE_NAMES),
    allowed=st.none() | st.frozensets(st.sampled_from(RULE_PROFILES)),
)
def test_the_index_classifies_exactly_like_a_scan_in_order(
    conditions: list[dict[str, Any]],
    profiles: list[str],
    subjects: list[JSONObject],
    namespace: str,
    allowed: frozenset[str] | None,
) -> None:
    indexed = _rule_set(conditions, profiles[: len(conditions)])
    plain = tuple(indexed)
    assert type(plain) is tuple
    for subject in subjects:

        def run(rules: Sequence[CompiledRule], subject: JSONObject = subject) -> Any:
            return _outcome(
                lambda: classify(
                    subject,
                    namespace=namespace,
                    rules=rules,
                    profiles=RULE_PROFILES,
                    default_profile="general",
                    allowed_profiles=allowed,
                )
            )

        assert run(indexed) == run(plain)


def _candidates(rules: RuleSet, subject: JSONObject, namespace: str = "default") -> list[str]:
    facts = PodFacts(subject, namespace=namespace)
    assert rules.rule_index is not None
    return [rule.name for rule in rules.rule_index.candidates(facts)]


def test_the_index_offers_only_rules_the_pod_can_match_in_order() -> None:
    conditions: list[dict[str, Any]] = [
        {"label": {"key": "team", "value": f"t{i}"}} for i in range(50)
    ]
    conditions += [
        {"namespace": "team-*"},
        {"image": ["org/*", "postgres"]},
        {"all": [{"ownerKind": "Deployment"}, {"label": {"key": "app", "value": "web"}}]},
        {"not": {"port": 80}},
        {"any": [{"restartPolicy": "Never"}, {"annotation": {"key": "x.io/*", "exists": True}}]},
        {"label": {"key": "team", "value": "t7"}},
    ]
    rules = _rule_set(conditions, ["a"] * len(conditions))
    subject = pod(
        labels={"team": "t7", "app": "web"},
        owners=[("ReplicaSet", "web-5d4f")],
        images=["postgres:16"],
    )
    subject["metadata"]["labels"]["pod-template-hash"] = "5d4f"
    assert _candidates(rules, subject) == ["r7", "r51", "r52", "r53", "r55"]
    assert _candidates(rules, subject, "team-x") == ["r7", "r50", "r51", "r52", "r53", "r55"]
    other = pod(annotations={"x.io/owner": "me"}, spec={"restartPolicy": "Always"})
    assert _candidates(rules, other) == ["r53", "r54"]


def test_requests_are_read_only_when_a_rule_needs_them() -> None:
    rules = _rule_set(
        [
            {"port": 80},
            {"resource": "nvidia.com/gpu > 0"},
            {"label": {"key": "app", "exists": True}},
        ],
        ["a", "b", "a"],
    )
    broken = pod(requests={"memory": "12XY"}, ports=[{"containerPort": 80}])
    result = classify(
        broken, namespace="d", rules=rules, profiles=RULE_PROFILES, default_profile="general"
    )
    assert result.rule == "r0"
    # The gpu rule cannot match a pod without the request, but a scan raises there, so must this.
    portless = pod(requests={"memory": "12XY"}, labels={"app": "x"})
    with pytest.raises(PodResourceError, match="memory"):
        classify(
            portless, namespace="d", rules=rules, profiles=RULE_PROFILES, default_profile="general"
        )
    # Conditions after one that reads the requests are not reached when reading them fails.
    after = _rule_set([{"resource": "cpu > 1", "restartPolicy": "Never"}], ["a"])
    with pytest.raises(PodResourceError, match="memory"):
        classify(
            broken, namespace="d", rules=after, profiles=RULE_PROFILES, default_profile="general"
        )
    valid = pod(requests={"memory": "1Gi"}, labels={"app": "x"})
    assert _candidates(rules, valid) == ["r2"]
    gpu = pod(limits={"nvidia.com/gpu": "1"}, labels={"app": "x"})
    assert _candidates(rules, gpu) == ["r1", "r2"]


def test_only_larger_rule_sets_are_indexed() -> None:
    def compiled(count: int) -> Sequence[CompiledRule]:
        cfg = ClassifierConfig.model_validate(
            {
                "profiles": {"general": {}},
                "rules": [
                    {"name": f"r{i}", "profile": "general", "match": {"namespace": f"n{i}"}}
                    for i in range(count)
                ],
            }
        )
        return compile_rules(cfg, [])

    small, large = compiled(INDEX_FROM - 1), compiled(INDEX_FROM)
    assert isinstance(small, RuleSet)
    assert small.rule_index is None
    assert isinstance(large, RuleSet)
    assert large.rule_index is not None
    assert _candidates(large, pod(), namespace="n3") == ["r3"]


# ----------------------------------------------------------- contains, containers, claims

STATEFUL_POD = pod(
    owners=[("StatefulSet", "web")],
    spec={
        "volumes": [
            {"name": "config", "configMap": {"name": "c"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-2"}},
        ]
    },
)

NEW_CASES: list[tuple[str, dict[str, Any], JSONObject, str | None]] = [
    (
        "label contains, ignoring case",
        {"label": {"key": "app.kubernetes.io/component", "contains": ["frontend"]}},
        pod(labels={"app.kubernetes.io/component": "Web-FrontEnd"}),
        'label app.kubernetes.io/component=Web-FrontEnd contains "frontend"',
    ),
    (
        "label contains miss",
        {"label": {"key": "app", "contains": "frontend"}},
        pod(labels={"app": "front"}),
        None,
    ),
    (
        "annotation contains on a key glob",
        {"annotation": {"key": "x.io/*", "contains": ["sql", "mongo"]}},
        pod(annotations={"x.io/a": "none", "x.io/b": "uses MongoDB"}),
        'annotation x.io/b=uses MongoDB contains "mongo"',
    ),
    (
        "image contains anywhere in the repository path",
        {"image": {"contains": "mysql"}},
        pod(images=["busybox", "registry.example.com/percona/percona-server-mysql:8.0"]),
        'image registry.example.com/percona/percona-server-mysql:8.0 contains "mysql"',
    ),
    (
        "image contains ignores the registry and the tag",
        {"image": {"contains": ["mysql"]}},
        pod(images=["mysql.example.com/app:mysql-8"]),
        None,
    ),
    (
        "image glob or contains: either is enough",
        {"image": {"glob": ["postgres"], "contains": ["mssql"]}},
        pod(images=["postgres:16"]),
        'image postgres:16 matches "postgres"',
    ),
    (
        "image long form with glob only",
        {"image": {"glob": "bitnami/*"}},
        pod(images=["docker.io/bitnami/redis:7"]),
        'image docker.io/bitnami/redis:7 matches "bitnami/*"',
    ),
    (
        "container memory: one container above, although the pod's sum is what counts elsewhere",
        {"container": {"resource": "memory > 8Gi"}},
        pod(images=["a", "b"], requests={"memory": "9Gi"}),
        "container c0 requests memory=9Gi > 8Gi",
    ),
    (
        "container memory: the sum is above, no container is",
        {"container": {"resource": "memory > 8Gi"}},
        {
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"memory": "6Gi"}}},
                    {"name": "b", "resources": {"requests": {"memory": "6Gi"}}},
                ]
            }
        },
        None,
    ),
    (
        "container: a limit stands in for a missing request, init containers count",
        {"container": {"resource": ["nvidia.com/gpu > 0", "memory >= 2Gi"]}},
        pod(init=[{"name": "warm", "resources": {"limits": {"memory": "2Gi"}}}]),
        "container warm requests memory=2Gi >= 2Gi",
    ),
    (
        "volumeClaim any",
        {"volumeClaim": "any"},
        pod(spec={"volumes": [{"name": "m", "persistentVolumeClaim": {"claimName": "models"}}]}),
        "volume m claims models",
    ),
    (
        "volumeClaim any: no claim",
        {"volumeClaim": "any"},
        pod(spec={"volumes": [{"name": "e", "emptyDir": {}}]}),
        None,
    ),
    (
        "volumeClaim template: the claim a StatefulSet made for its pod",
        {"volumeClaim": "template"},
        STATEFUL_POD,
        "volume data claims data-web-2 from StatefulSet web's volumeClaimTemplates",
    ),
    (
        "volumeClaim template: a claim of another name is the pod's own",
        {"volumeClaim": "template"},
        pod(
            owners=[("StatefulSet", "web")],
            spec={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}]},
        ),
        None,
    ),
    (
        "volumeClaim template: not owned by a StatefulSet",
        {"volumeClaim": "template"},
        pod(
            owners=[("ReplicaSet", "web")],
            spec={
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}]
            },
        ),
        None,
    ),
]


@pytest.mark.parametrize(
    ("condition", "subject", "reason"), [c[1:] for c in NEW_CASES], ids=[c[0] for c in NEW_CASES]
)
def test_new_conditions(condition: dict[str, Any], subject: JSONObject, reason: str | None) -> None:
    assert check(condition, subject) == reason


def test_a_container_condition_raises_on_an_invalid_quantity() -> None:
    with pytest.raises(PodResourceError) as caught:
        check({"container": {"resource": "cpu > 1"}}, pod(requests={"cpu": "lots"}))
    assert caught.value.path.startswith("spec.containers[0]")


def test_explain_names_every_signal_and_no_exclusion() -> None:
    cfg = ClassifierConfig.model_validate(
        {
            "profiles": {"general": {}, "database": {}},
            "rules": [
                {
                    "name": "db",
                    "profile": "database",
                    "match": {
                        "all": [
                            {
                                "any": [
                                    {"image": {"contains": "redis"}},
                                    {"label": {"key": "app", "value": "redis"}},
                                    {"port": 6379},
                                    {"port": 80},
                                ]
                            },
                            {"not": {"image": {"contains": "exporter"}}},
                        ]
                    },
                }
            ],
        }
    )
    subject = pod(labels={"app": "redis"}, images=["redis:7"], ports=[{"containerPort": 6379}])
    classifier = compile_classifier(cfg)
    short = classifier.classify(subject, namespace="default")
    explained = classifier.classify(subject, namespace="default", explain=True)
    # The short reason names what the pod has, not what it lacks.
    assert short.reason == 'rule "db": image redis:7 contains "redis"'
    assert explained.reason == (
        'rule "db": image redis:7 contains "redis"; label app=redis; container c0 exposes port 6379'
    )
    assert (explained.profile, explained.rule) == (short.profile, short.rule)
