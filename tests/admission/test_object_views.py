"""/mutate and /validate build only part of each pod: the admitter must not need the rest.

Every pod of the real-world fixtures, as the API server sends it, goes through the admitter:

* ``validate`` (create, update and resize) with its JSON wrapped so that every member read is
  recorded; each read must fall inside what ``decode_review(..., objects="validation")`` keeps,
  and the reviews decoded both ways must get the same verdicts and leave the same ledger;
* ``mutate`` on the whole pod and on what ``objects="mutation"`` keeps, under a config with a
  rule of every condition kind: the same verdicts, and the JSONPatch computed on the partial
  pod, applied to the whole pod as the API server does, gives the very same pod.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import orjson
import pytest

from admission.patch import apply_json_patch, make_json_patch
from admission.reviews import decode_review
from bench.configgen import GeneratedPolicy, compile_generated, generate_config, generated_policy
from bench.workload import PairTemplate, Workload, build_workload, load_sources, pair_ids
from tenants.decisions import PolicyAdmitter
from tenants.ledger import MemoryLedger
from tenants.verdicts import AdmissionInput, Verdict

NOW = 1_000.0
Path = tuple[str, ...]
CONTAINER_MEMBERS = frozenset({"name", "resources", "restartPolicy"})
SPEC_MEMBERS = frozenset(
    {"overhead", "resources", "priorityClassName", "priority", "schedulingGates"}
)


def kept_by_the_view(path: Path) -> bool:
    """Whether the validation view keeps the member at ``path`` (``*``: every member)."""
    if not path or path[0] in ("apiVersion", "kind"):
        return True
    if path[0] == "metadata":
        return path[1:2] != ("managedFields",) and path[1:2] != ("*",)
    if path[0] != "spec":
        return False
    if len(path) == 1:
        return True
    if path[1] in SPEC_MEMBERS:
        return True
    if path[1] in ("containers", "initContainers"):
        return len(path) <= 3 or path[3] in CONTAINER_MEMBERS
    return False


class Traced(dict[str, Any]):
    """A JSON object that records the path of every member read through it."""

    def __init__(self, data: dict[str, Any], path: Path, reads: set[Path]) -> None:
        super().__init__({key: _traced(value, (*path, key), reads) for key, value in data.items()})
        self._path = path
        self._reads = reads

    def get(self, key: str, default: Any = None) -> Any:
        self._reads.add((*self._path, key))
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self._reads.add((*self._path, key))
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._reads.add((*self._path, str(key)))
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self._reads.add((*self._path, "*"))
        return super().__iter__()

    def items(self) -> Any:
        self._reads.add((*self._path, "*"))
        return super().items()

    def values(self) -> Any:
        self._reads.add((*self._path, "*"))
        return super().values()

    def keys(self) -> Any:
        self._reads.add((*self._path, "*"))
        return super().keys()


def _traced(value: Any, path: Path, reads: set[Path]) -> Any:
    if isinstance(value, dict):
        return Traced(value, path, reads)
    if isinstance(value, list):
        return [_traced(item, (*path, "[]"), reads) for item in value]
    return value


@pytest.fixture(scope="module")
def generated() -> GeneratedPolicy:
    return generated_policy(tenants=8)


@pytest.fixture(scope="module")
def workload(generated: GeneratedPolicy) -> Workload:
    allowed = frozenset(
        name for tenant in generated.policy.tenants.values() for name in tenant.allowed_classes
    )
    sources = load_sources(priority_classes=allowed)
    # One pair per fixture pod, each in a tenant of the generated config.
    return build_workload(generated, pairs=len(sources), seed=11, sources=sources)


def _mutated(admitter: PolicyAdmitter, pair: PairTemplate, index: int) -> None:
    mutate_body, _ = pair.bodies(pair_ids(1, index))
    verdict = asyncio.run(admitter.mutate(decode_review(mutate_body).request, now=NOW))
    assert verdict.allowed, verdict.message


def _requests(pair: PairTemplate, index: int, objects: Any) -> list[AdmissionInput]:
    """The pod's create, a label update and a resize, as /validate would decode them."""
    _, validate_body = pair.bodies(pair_ids(1, index))
    create = decode_review(validate_body, objects=objects).request
    pod = create.object
    assert isinstance(pod, dict)
    relabelled = {**pod, "metadata": {**pod["metadata"], "labels": {"changed": "yes"}}}
    update = replace(create, operation="UPDATE", object=relabelled, old_object=pod)
    resize = replace(create, operation="UPDATE", sub_resource="resize", old_object=pod)
    return [create, update, resize]


def _validate(admitter: PolicyAdmitter, request: AdmissionInput) -> Verdict:
    return asyncio.run(admitter.validate(request, now=NOW))


def test_validation_reads_nothing_the_view_leaves_out(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    admitter = PolicyAdmitter(generated.policy, MemoryLedger())
    reads: set[Path] = set()
    for index, pair in enumerate(workload.pairs):
        _mutated(admitter, pair, index)
        for request in _requests(pair, index, "whole"):
            if request.sub_resource == "resize":
                continue  # a resize is decoded whole: it is judged on the status too
            traced = replace(
                request,
                object=_traced(request.object, (), reads),
                old_object=_traced(request.old_object, (), reads),
            )
            _validate(admitter, traced)

    assert ("spec", "containers", "[]", "resources") in reads  # the tracing sees the reads
    outside = sorted(path for path in reads if not kept_by_the_view(path))
    assert outside == []


def test_the_view_gets_the_same_verdicts_as_the_whole_pod(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    whole = PolicyAdmitter(generated.policy, MemoryLedger())
    view = PolicyAdmitter(generated.policy, MemoryLedger())
    verdicts = 0
    for index, pair in enumerate(workload.pairs):
        _mutated(whole, pair, index)
        _mutated(view, pair, index)
        for full, slim in zip(
            _requests(pair, index, "whole"), _requests(pair, index, "validation"), strict=True
        ):
            assert slim.object != full.object  # the view did leave things out
            assert _validate(view, slim) == _validate(whole, full), pair.source
            verdicts += 1

    assert verdicts == 3 * len(workload.pairs) >= 150
    for tenant in generated.policy.tenants:
        assert view.ledger.get(tenant) == whole.ledger.get(tenant)


# --------------------------------------------------------------------------- /mutate

# Rules of every condition kind, placed first so that each pod is tested against all of them.
EVERY_CONDITION: list[dict[str, Any]] = [
    {"name": "claims", "profile": "database", "match": {"volumeClaim": "template"}},
    {
        "name": "big-container",
        "profile": "batch",
        "match": {"container": {"resource": "memory >= 1Gi"}},
    },
    {
        "name": "contains",
        "profile": "web-frontend",
        "match": {
            "any": [{"image": {"contains": "ngin"}}, {"label": {"key": "app", "contains": "db"}}]
        },
    },
    {"name": "privileged", "profile": "system", "match": {"privileged": True}},
    {"name": "host-network", "profile": "system", "match": {"hostNetwork": True}},
    {
        "name": "metrics-port",
        "profile": "web-frontend",
        "match": {"all": [{"port": "metrics"}, {"restartPolicy": ["Always"]}]},
    },
    {"name": "big", "profile": "batch", "match": {"resource": ["memory > 64Gi", "cpu >= 32"]}},
    {"name": "owned", "profile": "batch", "match": {"ownerKind": "StatefulSet"}},
    {
        "name": "annotated",
        "profile": "batch",
        "match": {"annotation": {"key": "x/*", "exists": True}},
    },
    {"name": "ns", "profile": "batch", "match": {"namespace": ["kube-*"]}},
    {"name": "image", "profile": "database", "match": {"image": ["bitnami/*"]}},
]


@pytest.fixture(scope="module")
def every_condition() -> GeneratedPolicy:
    document = generate_config(tenants=8)
    # Every profile also places and schedules: pods' own settings must be merged or kept.
    profiles = {
        name: {"schedulerName": "tenant-scheduler", "nodeSelector": {"example.com/pool": name}}
        | profile
        for name, profile in document["profiles"].items()
    }
    document = {**document, "profiles": profiles, "rules": [*EVERY_CONDITION, *document["rules"]]}
    return compile_generated(document)


def _variants(body: bytes) -> Iterator[bytes]:
    """The review; the pod privileged; run to completion on the host network without an owner;
    with scheduling settings and a priority class of its own."""
    yield body
    document = orjson.loads(body)
    pod = document["request"]["object"]
    pod["spec"]["containers"][0].setdefault("securityContext", {})["privileged"] = True
    yield orjson.dumps(document)
    document = orjson.loads(body)
    pod = document["request"]["object"]
    pod["metadata"].pop("ownerReferences", None)
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["hostNetwork"] = True
    yield orjson.dumps(document)
    # Settings of its own that a profile merges with or leaves alone.
    document = orjson.loads(body)
    spec = document["request"]["object"]["spec"]
    spec["nodeSelector"] = {"example.com/disk": "ssd"}
    spec["schedulerName"] = "custom-scheduler"
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "example.com/rack",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"example.com/group": "a"}},
        }
    ]
    spec["priorityClassName"] = "custom-low"  # not the tenant's: allowed only as low as this
    spec["priority"] = 5
    spec["overhead"] = {"cpu": "250m", "memory": "120Mi"}  # from a RuntimeClass
    spec["resources"] = {"requests": {"cpu": "3"}}  # pod-level resources
    yield orjson.dumps(document)


@pytest.mark.parametrize("config", ["generated", "every_condition"])
def test_mutating_the_view_patches_the_whole_pod_the_same(
    config: str, request: pytest.FixtureRequest, workload: Workload
) -> None:
    generated: GeneratedPolicy = request.getfixturevalue(config)
    whole = PolicyAdmitter(generated.policy, MemoryLedger())
    view = PolicyAdmitter(generated.policy, MemoryLedger())
    rules = set()
    profiles = set()
    for index, pair in enumerate(workload.pairs):
        for variant, mutate_body in enumerate(_variants(pair.bodies(pair_ids(2, index))[0])):
            full = decode_review(mutate_body).request
            slim = decode_review(mutate_body, objects="mutation").request
            assert isinstance(full.object, dict)
            assert isinstance(slim.object, dict)
            assert slim.object != full.object, pair.source  # the view did leave things out

            expected = asyncio.run(whole.mutate(full, now=NOW))
            got = asyncio.run(view.mutate(slim, now=NOW))

            where = f"{pair.source}, variant {variant}"
            assert replace(got, patched=None) == replace(expected, patched=None), where
            assert expected.patched is not None
            assert got.patched is not None
            stored = apply_json_patch(full.object, make_json_patch(full.object, expected.patched))
            from_view = apply_json_patch(full.object, make_json_patch(slim.object, got.patched))
            assert from_view == stored, where
            rules.add(got.patched["metadata"]["annotations"]["tenantgate.io/classified-by"])
            profiles.add(got.patched["metadata"]["annotations"]["tenantgate.io/profile"])

    # The pods went through many profiles' plans (by rules, or by weighed evidence).
    assert len(profiles) >= 6
    if config == "every_condition":
        assert {
            "rule/privileged",
            "rule/host-network",
            "rule/metrics-port",
            "rule/claims",
            "rule/big-container",
            "rule/contains",
        } <= rules
    for tenant in generated.policy.tenants:
        assert view.ledger.get(tenant) == whole.ledger.get(tenant)


def test_a_resize_is_decoded_whole(workload: Workload) -> None:
    """An in-place resize is charged from the containers' status as well (UseStatusResources)."""
    _, validate_body = workload.pairs[0].bodies(pair_ids(1, 0))
    document = orjson.loads(validate_body)
    request = document["request"]
    request.update(operation="UPDATE", subResource="resize", oldObject=request["object"])
    request["object"]["status"] = {"containerStatuses": [{"name": "x", "resources": {}}]}
    body = orjson.dumps(document)
    assert "status" in (decode_review(body, objects="validation").request.object or {})
    request["subResource"] = ""
    assert "status" not in (
        decode_review(orjson.dumps(document), objects="validation").request.object or {}
    )
