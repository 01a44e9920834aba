"""The API server's defaulting, field manager and admission plugins, reproduced on JSON."""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
import pytest

from bench import apiserver


def pod() -> dict[str, Any]:
    return {
        "metadata": {"generateName": "web-", "namespace": "t00001-prod", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    "readinessProbe": {"httpGet": {"port": 80}},
                    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                },
                {"name": "sidecar", "image": "busybox", "resources": {}},
            ],
            "volumes": [{"name": "config", "configMap": {"name": "c"}}],
        },
    }


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.27", "IfNotPresent"),
        ("registry.example.com:5000/team/app", "Always"),
        ("registry.example.com:5000/team/app:v2", "IfNotPresent"),
        ("nginx@sha256:" + "0" * 64, "IfNotPresent"),
    ],
)
def test_image_pull_policy(image: str, policy: str) -> None:
    assert apiserver.image_pull_policy(image) == policy


def test_defaults_follow_set_defaults_pod() -> None:
    value = pod()

    apiserver.apply_defaults(value)

    spec = value["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["terminationGracePeriodSeconds"] == 30
    web, sidecar = spec["containers"]
    # Limited but not requested: requested at the limit.
    assert web["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert sidecar["resources"] == {}
    assert web["ports"][0]["protocol"] == "TCP"
    assert web["imagePullPolicy"] == "IfNotPresent"
    assert sidecar["imagePullPolicy"] == "Always"
    assert web["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert web["readinessProbe"]["periodSeconds"] == 10
    assert web["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"
    assert spec["volumes"][0]["configMap"]["defaultMode"] == 420


def test_fields_v1_keys_associative_lists_and_marks_owned_maps() -> None:
    fields = apiserver.fields_v1(
        {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "web", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]
            },
        }
    )

    assert fields["f:metadata"] == {"f:labels": {".": {}, "f:app": {}}}
    container = fields["f:spec"]["f:containers"]['k:{"name":"web"}']
    assert "." not in fields["f:spec"]["f:containers"]
    assert container["f:name"] == {}
    assert container["f:ports"] == {
        ".": {},
        'k:{"containerPort":80,"protocol":"TCP"}': {
            ".": {},
            "f:containerPort": {},
            "f:protocol": {},
        },
    }


def test_admitted_pod_is_what_the_first_webhook_sees() -> None:
    original = pod()
    before = copy.deepcopy(original)

    admitted = apiserver.admitted_pod(
        original,
        manager="kube-controller-manager",
        time="2025-03-14T09:26:53Z",
        classes={"batch-low": (100, "PreemptLowerPriority")},
        rng=random.Random(1),
    )

    assert original == before
    assert list(admitted)[:5] == ["kind", "apiVersion", "metadata", "spec", "status"]
    meta, spec = admitted["metadata"], admitted["spec"]
    assert meta["creationTimestamp"] is None
    assert "uid" not in meta
    assert "name" not in meta
    (entry,) = meta["managedFields"]
    assert entry["manager"] == "kube-controller-manager"
    # Defaults are owned by the creator; what admission plugins add is not.
    assert "f:dnsPolicy" in entry["fieldsV1"]["f:spec"]
    assert "f:tolerations" not in entry["fieldsV1"]["f:spec"]
    assert spec["serviceAccountName"] == spec["serviceAccount"] == "default"
    token = spec["volumes"][-1]
    assert token["name"].startswith("kube-api-access-")
    for container in spec["containers"]:
        assert container["volumeMounts"][-1]["mountPath"] == apiserver.SERVICE_ACCOUNT_MOUNT
    assert [t["key"] for t in spec["tolerations"]] == list(apiserver.DEFAULT_TOLERATION_KEYS)
    assert (spec["priority"], spec["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    assert admitted["status"] == {}
    orjson.dumps(admitted)  # plain JSON all the way down


def test_admission_plugins_respect_what_the_pod_says() -> None:
    value = pod()
    value["spec"]["automountServiceAccountToken"] = False
    value["spec"]["priorityClassName"] = "batch-low"
    value["spec"]["tolerations"] = [{"operator": "Exists"}]

    admitted = apiserver.admitted_pod(
        value, manager="m", time="t", classes={"batch-low": (100, "Never")}, rng=random.Random(1)
    )

    spec = admitted["spec"]
    assert all(not v["name"].startswith("kube-api-access-") for v in spec["volumes"])
    assert spec["tolerations"] == [{"operator": "Exists"}]  # tolerates everything already
    assert (spec["priority"], spec["preemptionPolicy"]) == (100, "Never")


def test_default_tolerations_are_not_added_twice() -> None:
    value: dict[str, Any] = {"spec": {}}

    apiserver.add_default_tolerations(value)
    apiserver.add_default_tolerations(value)

    assert len(value["spec"]["tolerations"]) == 2


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ([{}], "BestEffort"),
        ([{"requests": {"cpu": "1"}}], "Burstable"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
        (
            [{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}],
            "Guaranteed",
        ),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable"),
        ([{"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}], "Burstable"),
    ],
)
def test_qos_class(resources: list[dict[str, Any]], qos: str) -> None:
    value = {
        "spec": {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}
    }

    assert apiserver.qos_class(value) == qos


def test_stored_pod_is_named_and_reset_without_touching_its_input() -> None:
    admitted = {
        "metadata": {"generateName": "web-", "labels": {"a": "b"}},
        "spec": {},
        "status": {},
    }

    stored = apiserver.stored_pod(
        admitted, name="web-x7k2q", uid="u-1", created="2025-03-14T09:26:54Z"
    )

    assert stored["metadata"] == {
        "generateName": "web-",
        "labels": {"a": "b"},
        "name": "web-x7k2q",
        "uid": "u-1",
        "creationTimestamp": "2025-03-14T09:26:54Z",
    }
    assert stored["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert admitted["metadata"] == {"generateName": "web-", "labels": {"a": "b"}}
    assert admitted["status"] == {}


def test_random_suffix_uses_the_name_alphabet() -> None:
    suffix = apiserver.random_suffix(random.Random(3), 12)

    assert len(suffix) == 12
    assert set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")
