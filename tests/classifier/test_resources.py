"""Tests for classifier.resources: the effective pod request, exactly as Kubernetes computes it.

The tables are ported from ``staging/src/k8s.io/component-helpers/resource/helpers_test.go``
(each table names its Go test). Two differences from those tests are deliberate and noted per
case: overhead is always included (tenantgate has no ``ExcludeOverhead`` option) and the API
server's defaulting of ``pkg/apis/core/v1/defaults.go`` is applied (a limit without a request
counts as the request), because the webhook and ``tenantgate review`` must agree with what the
cluster stores. Every result also carries ``pods: 1``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from classifier.quantities import Quantity, QuantityError, format_list
from classifier.resources import (
    PodResourceError,
    container_limits,
    container_requests,
    pod_requests,
)

JSONDict = dict[str, Any]


def c(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    *,
    sidecar: bool = False,
    name: str = "c",
) -> JSONDict:
    """A container; ``sidecar`` sets ``restartPolicy: Always`` (meaningful on init containers)."""
    resources: JSONDict = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    container: JSONDict = {"name": name, "image": "busybox", "resources": resources}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def pod(
    containers: list[JSONDict] | None = None,
    init: list[JSONDict] | None = None,
    *,
    overhead: dict[str, Any] | None = None,
    resources: JSONDict | None = None,
) -> JSONDict:
    spec: JSONDict = {"containers": containers or []}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    if resources is not None:
        spec["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def expect(names: dict[str, str] | None = None, /, **values: str) -> dict[str, Quantity]:
    """Expected requests, plus ``pods: 1``; keyword ``hugepages_2Mi`` means ``hugepages-2Mi``.

    Names that are not identifiers (``nvidia.com/gpu``) go in the positional dict.
    """
    texts = {name.replace("_", "-"): text for name, text in values.items()}
    texts.update(names or {})
    result = {name: Quantity.parse(text) for name, text in texts.items()}
    result["pods"] = Quantity.from_int(1)
    return result


Case = tuple[str, JSONDict, dict[str, Quantity]]

# helpers_test.go, TestPodRequestsAndLimits (requests half). getPod() builds one container.
POD_REQUESTS_AND_LIMITS: list[Case] = [
    (
        # Go expects {} because the helper test skips API defaulting; a stored pod has its
        # request defaulted to the limit, so the effective request is cpu=9.
        "just-limit-no-overhead",
        pod([c(limits={"cpu": "9"})]),
        expect(cpu="9"),
    ),
    (
        "just-overhead",
        pod([c()], overhead={"cpu": "5", "memory": "5"}),
        expect(cpu="5", memory="5"),
    ),
    (
        "req-and-overhead",
        pod([c({"cpu": "1", "memory": "10"})], overhead={"cpu": "5", "memory": "5"}),
        expect(cpu="6", memory="15"),
    ),
    (
        "all-req-lim-and-overhead",
        pod(
            [c({"cpu": "1", "memory": "10"}, {"cpu": "2", "memory": "12"})],
            overhead={"cpu": "5", "memory": "5"},
        ),
        expect(cpu="6", memory="15"),
    ),
    (
        "req-some-lim-and-overhead",
        pod(
            [c({"cpu": "1", "memory": "10"}, {"cpu": "2"})],
            overhead={"cpu": "5", "memory": "5"},
        ),
        expect(cpu="6", memory="15"),
    ),
]

_TWO_CONTAINERS = [
    c({"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}, name="foobar"),
    c({"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"}, name="foobar2"),
]

# helpers_test.go, TestPodRequestsAndLimitsWithoutOverhead. Go excludes overhead there; here
# it is always added, so the expectations include it.
POD_REQUESTS_WITHOUT_OVERHEAD: list[Case] = [
    (
        "two container no overhead - should just be sum of containers",
        pod(_TWO_CONTAINERS),
        expect(cpu="5", memory="17"),
    ),
    (
        "two container with overhead (Go excludes it: 5/17)",
        pod(_TWO_CONTAINERS, overhead={"cpu": "3", "memory": "8"}),
        expect(cpu="8", memory="25"),
    ),
    (
        "two container with overhead, massive init - the largest init (Go excludes: 40/120)",
        pod(
            _TWO_CONTAINERS,
            [
                c({"cpu": "1", "memory": "5"}, {"cpu": "1", "memory": "5"}, name="small-init"),
                c({"cpu": "40", "memory": "120"}, {"cpu": "80", "memory": "240"}, name="big"),
            ],
            overhead={"cpu": "3", "memory": "8"},
        ),
        expect(cpu="43", memory="128"),
    ),
]

# helpers_test.go, TestPodResourceRequests: the spec-only cases (tenantgate never reads the
# status, i.e. UseStatusResources=false), including the native sidecar rules.
POD_RESOURCE_REQUESTS: list[Case] = [
    (
        "nil options, larger init container",
        pod([c({"cpu": "1"})], [c({"cpu": "4"})]),
        expect(cpu="4"),
    ),
    (
        "nil options, larger containers",
        pod([c({"cpu": "2"}), c({"cpu": "3"})], [c({"cpu": "2"})]),
        expect(cpu="5"),
    ),
    (
        "pod overhead excluded (Go excludes it: 5)",
        pod([c({"cpu": "2"}), c({"cpu": "3"})], [c({"cpu": "2"})], overhead={"cpu": "1"}),
        expect(cpu="6"),
    ),
    (
        "pod overhead included",
        pod(
            [c({"cpu": "2"}), c({"cpu": "3"})],
            [c({"cpu": "2"}, {"cpu": "2"})],
            overhead={"cpu": "1", "memory": "1Gi"},
        ),
        expect(cpu="6", memory="1Gi"),
    ),
    (
        "resized, infeasible, but don't use status",
        pod([c({"cpu": "4"}, name="container-1")]),
        expect(cpu="4"),
    ),
    (
        "resized, restartable init container, infeasible, but don't use status",
        pod([], [c({"cpu": "4"}, sidecar=True, name="restartable-init-1")]),
        expect(cpu="4"),
    ),
    (
        "restartable init container",
        pod([c({"cpu": "1"})], [c({"cpu": "1"}, sidecar=True)]),
        expect(cpu="2"),
    ),
    (
        # max(5, restartable init containers(3+2+1) + regular(1)) = 7
        "multiple restartable init containers",
        pod(
            [c({"cpu": "1"})],
            [
                c({"cpu": "5"}, name="init-1"),
                c({"cpu": "1"}, sidecar=True),
                c({"cpu": "2"}, sidecar=True),
                c({"cpu": "3"}, sidecar=True),
            ],
        ),
        expect(cpu="7"),
    ),
    (
        # init-2 requires 5 + the previously running restartable init containers (1+2) = 8;
        # the restartable init container that starts after it doesn't count.
        "multiple restartable and regular init containers",
        pod(
            [c({"cpu": "1"})],
            [
                c({"cpu": "5"}, name="init-1"),
                c({"cpu": "1"}, sidecar=True),
                c({"cpu": "2"}, sidecar=True),
                c({"cpu": "5"}, name="init-2"),
                c({"cpu": "3"}, sidecar=True),
            ],
        ),
        expect(cpu="8"),
    ),
    (
        "restartable-init, init and regular",
        pod([c({"cpu": "100"})], [c({"cpu": "10"}, sidecar=True), c({"cpu": "200"})]),
        expect(cpu="210"),
    ),
]

# helpers_test.go, TestPodLevelResourceRequests (SkipPodLevelResources=false, no status).
POD_LEVEL_RESOURCE_REQUESTS: list[Case] = [
    ("nil", pod(), expect()),
    (
        "pod level memory resource",
        pod(resources={"requests": {"memory": "2Mi"}}),
        expect(memory="2Mi"),
    ),
    (
        "pod level memory and container level cpu resources",
        pod([c({"cpu": "2m"})], resources={"requests": {"memory": "2Mi"}}),
        expect(memory="2Mi", cpu="2m"),
    ),
    (
        "pod level unsupported resources set at both pod-level and container-level",
        pod([c({"storage": "3Mi"})], resources={"requests": {"storage": "2Mi"}}),
        expect(storage="3Mi"),
    ),
    (
        "pod level unsupported resources set at pod-level",
        pod([c({"memory": "3Mi"})], resources={"requests": {"storage": "2Mi"}}),
        expect(memory="3Mi"),
    ),
    (
        "only container level resources set",
        pod([c({"memory": "3Mi", "cpu": "2m"})]),
        expect(memory="3Mi", cpu="2m"),
    ),
    (
        "both container-level and pod-level resources set",
        pod(
            [c({"memory": "3Mi", "cpu": "2m"})],
            resources={"requests": {"memory": "6Mi", "cpu": "8m"}},
        ),
        expect(memory="6Mi", cpu="8m"),
    ),
    (
        "container-level resources and init container set",
        pod([c({"memory": "3Mi", "cpu": "2m"})], [c({"memory": "5Mi", "cpu": "4m"})]),
        expect(memory="5Mi", cpu="4m"),
    ),
    (
        "container-level resources and sidecar container set",
        pod(
            [c({"memory": "3Mi", "cpu": "2m"})],
            [c({"memory": "5Mi", "cpu": "4m"}, sidecar=True)],
        ),
        expect(memory="8Mi", cpu="6m"),
    ),
    (
        "container-level resources, init and sidecar container set",
        pod(
            [c({"memory": "3Mi", "cpu": "2m"})],
            [c({"memory": "5Mi", "cpu": "4m"}, sidecar=True), c({"memory": "6Mi", "cpu": "8m"})],
        ),
        expect(memory="11Mi", cpu="12m"),
    ),
    (
        "pod-level resources, container-level resources, init and sidecar container set",
        pod(
            [c({"memory": "3Mi", "cpu": "2m"})],
            [c({"memory": "5Mi", "cpu": "4m"}, sidecar=True), c({"memory": "6Mi", "cpu": "8m"})],
            resources={"requests": {"memory": "15Mi", "cpu": "18m"}},
        ),
        expect(memory="15Mi", cpu="18m"),
    ),
    (
        "pod-level resources, hugepage request/limit single page size",
        pod(
            resources={
                "limits": {"hugepages-2Mi": "2Mi"},
                "requests": {"memory": "10Mi", "hugepages-2Mi": "2Mi"},
            }
        ),
        expect(memory="10Mi", hugepages_2Mi="2Mi"),
    ),
    (
        "pod-level resources, hugepage request/limit multiple page sizes",
        pod(
            resources={
                "limits": {"hugepages-2Mi": "2Mi", "hugepages-1Gi": "1Gi"},
                "requests": {"cpu": "1", "hugepages-2Mi": "2Mi", "hugepages-1Gi": "1Gi"},
            }
        ),
        expect(cpu="1", hugepages_2Mi="2Mi", hugepages_1Gi="1Gi"),
    ),
    (
        "pod-level resources, container-level resources, hugepage single page size",
        pod(
            [c({"hugepages-2Mi": "6Mi"}, {"hugepages-2Mi": "6Mi"})],
            resources={
                "limits": {"hugepages-2Mi": "10Mi"},
                "requests": {"cpu": "1", "hugepages-2Mi": "10Mi"},
            },
        ),
        expect(cpu="1", hugepages_2Mi="10Mi"),
    ),
    (
        "pod-level resources, container-level resources, hugepage multiple page sizes",
        pod(
            [c({"cpu": "1", "hugepages-1Gi": "2Gi"}, {"hugepages-1Gi": "2Gi"})],
            resources={
                "limits": {"hugepages-2Mi": "10Mi", "hugepages-1Gi": "2Gi"},
                "requests": {"cpu": "1", "hugepages-2Mi": "10Mi", "hugepages-1Gi": "2Gi"},
            },
        ),
        expect(cpu="1", hugepages_2Mi="10Mi", hugepages_1Gi="2Gi"),
    ),
    (
        "hugepage multiple page sizes between pod-level and container-level",
        pod(
            [c({"memory": "4Mi", "hugepages-1Gi": "1Gi"}, {"hugepages-1Gi": "1Gi"})],
            resources={
                "limits": {"hugepages-2Mi": "10Mi"},
                "requests": {"cpu": "1", "hugepages-2Mi": "10Mi"},
            },
        ),
        expect(cpu="1", memory="4Mi", hugepages_2Mi="10Mi", hugepages_1Gi="1Gi"),
    ),
]

# pkg/apis/core/v1/defaults.go: SetDefaults_Pod (requests from limits), defaultHugePagePodLimits,
# defaultPodRequests and SetDefaults_ResourceList (milli rounding), as the stored pod has them.
API_DEFAULTING: list[Case] = [
    (
        "container limit fills a missing request, per resource",
        pod([c({"cpu": "250m"}, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"})]),
        expect({"nvidia.com/gpu": "2"}, cpu="250m", memory="1Gi"),
    ),
    (
        "init container limit fills a missing request",
        pod([c({"cpu": "1"})], [c(limits={"cpu": "3"})]),
        expect(cpu="3"),
    ),
    (
        "sub-milli values round up to 1m per container before summing",
        pod([c({"cpu": "0.5m"}), c({"cpu": "100n"}), c({"memory": "1.0005"})]),
        expect(cpu="2m", memory="1001m"),
    ),
    (
        "overhead rounds up to milli too",
        pod([c({"cpu": "1"})], overhead={"cpu": "1u"}),
        expect(cpu="1001m"),
    ),
    (
        "pod-level limits only: requests default to the limits",
        pod([c()], resources={"limits": {"cpu": "2", "memory": "1Gi"}}),
        expect(cpu="2", memory="1Gi"),
    ),
    (
        "pod-level limits, containers request cpu: cpu request is their aggregate",
        pod(
            [c({"cpu": "500m"}), c({"cpu": "250m"})],
            [c({"cpu": "1"})],
            resources={"limits": {"cpu": "4", "memory": "1Gi"}},
        ),
        expect(cpu="1", memory="1Gi"),
    ),
    (
        "pod-level defaulting sums the containers before milli rounding",
        pod(
            [c({"cpu": "0.5m"}), c({"cpu": "0.5m"})],
            resources={"limits": {"cpu": "1"}},
        ),
        expect(cpu="1m"),
    ),
    (
        "pod-level hugepages limit defaults the hugepages request",
        pod(
            [c({"memory": "1Gi"})],
            resources={"requests": {"cpu": "1"}, "limits": {"hugepages-2Mi": "8Mi"}},
        ),
        expect(cpu="1", memory="1Gi", hugepages_2Mi="8Mi"),
    ),
    (
        "container hugepages limits become the pod-level hugepages limit and request",
        pod(
            [c(limits={"hugepages-2Mi": "4Mi"}), c(limits={"hugepages-2Mi": "2Mi"})],
            resources={"requests": {"cpu": "1"}},
        ),
        expect(cpu="1", hugepages_2Mi="6Mi"),
    ),
    (
        "pod-level resources naming only unsupported resources change nothing",
        pod(
            [c({"ephemeral-storage": "1Gi", "cpu": "1"})],
            resources={"requests": {"ephemeral-storage": "5Gi"}, "limits": {"nvidia.com/gpu": 1}},
        ),
        expect(cpu="1", ephemeral_storage="1Gi"),
    ),
    ("empty pod-level resources", pod([c({"cpu": "1"})], resources={}), expect(cpu="1")),
]

ALL_CASES = (
    POD_REQUESTS_AND_LIMITS
    + POD_REQUESTS_WITHOUT_OVERHEAD
    + POD_RESOURCE_REQUESTS
    + POD_LEVEL_RESOURCE_REQUESTS
    + API_DEFAULTING
)


@pytest.mark.parametrize(
    ("name", "manifest", "expected"), ALL_CASES, ids=[n for n, _, _ in ALL_CASES]
)
def test_pod_requests(name: str, manifest: JSONDict, expected: dict[str, Quantity]) -> None:
    before = copy.deepcopy(manifest)
    assert pod_requests(manifest) == expected
    assert manifest == before


def test_every_resource_name_is_kept_including_zeros() -> None:
    manifest = pod(
        [
            c(
                {
                    "cpu": "0",
                    "memory": "256Mi",
                    "ephemeral-storage": "2Gi",
                    "hugepages-2Mi": "4Mi",
                    "nvidia.com/gpu": "1",
                    "gpu.intel.com/i915": "1",
                },
                {"hugepages-2Mi": "4Mi", "nvidia.com/gpu": "1", "gpu.intel.com/i915": "1"},
            ),
            c({"example.com/dongle": "3", "memory": "256Mi"}),
        ]
    )
    assert format_list(pod_requests(manifest)) == (
        "cpu=0,ephemeral-storage=2Gi,example.com/dongle=3,gpu.intel.com/i915=1,"
        "hugepages-2Mi=4Mi,memory=512Mi,nvidia.com/gpu=1,pods=1"
    )


def test_formats_follow_kubernetes_arithmetic() -> None:
    requests = pod_requests(pod([c({"memory": "1Gi"}), c({"memory": "512Mi", "cpu": "1500m"})]))
    assert str(requests["memory"]) == "1536Mi"
    assert str(requests["cpu"]) == "1500m"
    assert str(requests["pods"]) == "1"


def test_ties_keep_the_running_phase_value() -> None:
    # maxResourceList only replaces a strictly smaller value, so on a tie the app containers'
    # quantity (and its format) stays.
    requests = pod_requests(pod([c({"memory": "1073741824"})], [c({"memory": "1Gi"})]))
    assert str(requests["memory"]) == "1073741824"
    requests = pod_requests(pod([c({"memory": "1Gi"})], [c({"memory": "1073741824"})]))
    assert str(requests["memory"]) == "1Gi"


def test_pod_templates_and_json_numbers() -> None:
    # A Deployment's pod template has the same shape; YAML numbers arrive as int or float.
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [c({"cpu": 0.5})]}}
    assert pod_requests(template) == expect(cpu="500m")
    assert pod_requests({"spec": {"containers": [c({"memory": 1073741824})]}}) == expect(
        memory="1Gi"
    )


@pytest.mark.parametrize(
    "manifest",
    [
        {},
        {"spec": None},
        {"spec": {"containers": None}},
        {"spec": {"containers": "nope"}},
        {"spec": {"containers": [None, 3, {"resources": None}]}},
        {"spec": {"containers": [{"resources": {"requests": ["cpu"]}}]}},
        {"spec": {"containers": [], "overhead": "1", "resources": []}},
    ],
)
def test_malformed_structure_reads_as_absent(manifest: JSONDict) -> None:
    assert pod_requests(manifest) == expect()


@pytest.mark.parametrize(
    ("manifest", "path", "message"),
    [
        (
            pod([c({"cpu": "1"}), c({"memory": "12XY"})]),
            "spec.containers[1].resources.requests.memory",
            'spec.containers[1].resources.requests.memory: invalid quantity "12XY": '
            'unknown suffix "XY"',
        ),
        (
            pod([c()], [c(limits={"nvidia.com/gpu": "one"})]),
            "spec.initContainers[0].resources.limits[nvidia.com/gpu]",
            "spec.initContainers[0].resources.limits[nvidia.com/gpu]: "
            'invalid quantity "one": not a number',
        ),
        (
            pod([c({"cpu": "1"})], overhead={"memory": "1.1.1"}),
            "spec.overhead.memory",
            'spec.overhead.memory: invalid quantity "1.1.1": more than one decimal point',
        ),
        (
            pod([c({"cpu": "1"})], resources={"limits": {"cpu": True}}),
            "spec.resources.limits.cpu",
            "spec.resources.limits.cpu: invalid quantity True: "
            "expected a string or a number, not bool",
        ),
        (
            # The index counts every list item, even one that is skipped as malformed.
            {"spec": {"containers": [None, c({"cpu": "1 core"})]}},
            "spec.containers[1].resources.requests.cpu",
            'spec.containers[1].resources.requests.cpu: invalid quantity "1 core": '
            'unknown suffix " core"',
        ),
    ],
)
def test_invalid_quantities_name_their_field(manifest: JSONDict, path: str, message: str) -> None:
    with pytest.raises(PodResourceError) as info:
        pod_requests(manifest)
    assert info.value.path == path
    assert str(info.value) == message
    assert isinstance(info.value, QuantityError)
    assert isinstance(info.value, ValueError)


def test_container_requests_and_limits() -> None:
    container = c({"cpu": "0.1m"}, {"cpu": "2", "memory": "1Gi"})
    assert container_requests(container) == {
        "cpu": Quantity.parse("1m"),
        "memory": Quantity.parse("1Gi"),
    }
    assert container_limits(container) == {
        "cpu": Quantity.parse("2"),
        "memory": Quantity.parse("1Gi"),
    }
    with pytest.raises(
        PodResourceError, match=r"^spec\.containers\[0\]\.resources\.requests\.cpu: "
    ):
        container_requests(c({"cpu": "x"}), path="spec.containers[0]")


# -- properties -------------------------------------------------------------------------------

cpu_values = st.integers(min_value=0, max_value=64_000).map(lambda m: f"{m}m")
memory_values = st.integers(min_value=0, max_value=4096).map(lambda m: f"{m}Mi")


@st.composite
def containers(draw: st.DrawFn, *, may_be_sidecar: bool) -> JSONDict:
    requests: JSONDict = {}
    limits: JSONDict = {}
    if draw(st.booleans()):
        requests["cpu"] = draw(cpu_values)
    if draw(st.booleans()):
        requests["memory"] = draw(memory_values)
    if draw(st.booleans()):
        limits["cpu"] = draw(cpu_values)
    if draw(st.booleans()):
        limits["nvidia.com/gpu"] = str(draw(st.integers(min_value=0, max_value=8)))
    sidecar = may_be_sidecar and draw(st.booleans())
    return c(requests or None, limits or None, sidecar=sidecar)


app_containers = st.lists(containers(may_be_sidecar=False), max_size=5)
init_containers = st.lists(containers(may_be_sidecar=True), max_size=5)


def _total(items: list[JSONDict]) -> dict[str, Quantity]:
    total: dict[str, Quantity] = {}
    for item in items:
        for name, quantity in container_requests(item).items():
            total[name] = total[name] + quantity if name in total else quantity
    return total


@given(app_containers)
def test_without_init_containers_the_request_is_the_sum(apps: list[JSONDict]) -> None:
    assert pod_requests(pod(apps)) == {**_total(apps), "pods": Quantity.from_int(1)}


@given(app_containers, init_containers, st.randoms(use_true_random=False))
def test_app_container_order_does_not_matter(
    apps: list[JSONDict], inits: list[JSONDict], rnd: Any
) -> None:
    shuffled = list(apps)
    rnd.shuffle(shuffled)
    assert pod_requests(pod(apps, inits)) == pod_requests(pod(shuffled, inits))


@given(app_containers, init_containers)
def test_request_covers_every_phase(apps: list[JSONDict], inits: list[JSONDict]) -> None:
    requests = pod_requests(pod(apps, inits))
    sidecars = [i for i in inits if i.get("restartPolicy") == "Always"]
    running = _total(apps + sidecars)
    for name, quantity in running.items():
        assert requests[name] >= quantity
    for index, init in enumerate(inits):
        before = [s for s in inits[:index] if s.get("restartPolicy") == "Always"]
        for name, quantity in _total([init, *before]).items():
            assert requests[name] >= quantity
    # And nothing more than the largest phase: every value is reached by some phase.
    phases = [running] + [
        _total([init, *[s for s in inits[:i] if s.get("restartPolicy") == "Always"]])
        for i, init in enumerate(inits)
    ]
    for name, quantity in requests.items():
        if name != "pods":
            assert any(phase.get(name) == quantity for phase in phases)


@given(app_containers, init_containers, cpu_values)
def test_overhead_is_added_once(apps: list[JSONDict], inits: list[JSONDict], extra: str) -> None:
    without = pod_requests(pod(apps, inits))
    with_overhead = pod_requests(pod(apps, inits, overhead={"cpu": extra}))
    base = without.get("cpu", Quantity.zero())
    assert with_overhead["cpu"] == base + Quantity.parse(extra)
