"""Argo Rollouts: the pod of a Rollout's ReplicaSet.

The rollout controller creates ReplicaSet ``<rollout>-<hash>`` from ``spec.template`` and
labels it and its pods ``rollouts-pod-template-hash: <hash>`` (utils/replicaset and
rollout/replicaset.go, argoproj/argo-rollouts); the pods are owned by that ReplicaSet. A
Rollout that refers to a Deployment's template (``workloadRef``) holds no template here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podnames import template_hash
from classifier.podview import clone
from classifier.types import JSONObject
from classifier.workloads.pods import make_pod, object_name, reference, string_map

HASH_LABEL = "rollouts-pod-template-hash"


def rollout_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    template = podview.obj(podview.spec(document).get("template"))
    if not isinstance(podview.spec(template).get("containers"), list):
        return
    name = object_name(document)
    pod_hash = template_hash(template)
    meta = podview.metadata(template)
    yield (
        "spec.template",
        make_pod(
            name=f"{name}-{pod_hash}-{template_hash(template, salt='pod')[:5]}",
            labels={**string_map(meta.get("labels")), HASH_LABEL: pod_hash},
            annotations=string_map(meta.get("annotations")),
            owners=[reference("apps/v1", "ReplicaSet", f"{name}-{pod_hash}")],
            spec=clone(dict(podview.spec(template))),
        ),
    )
