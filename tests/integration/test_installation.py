"""tenantgate as installed from deploy/: the shipped webhook configurations, RBAC and
TenantLedger schema, on the real control plane.

* The webhooks select every namespace but kube-system and tenantgate-system. With tenantgate
  down, the validating webhook (``failurePolicy: Fail``) rejects pod creates and updates in the
  selected namespaces, the mutating one (``Ignore``) is skipped, and kube-system keeps working.
* The shipped ClusterRoles and Role are enough for everything tenantgate does, and grant
  nothing it does not use: the fault proxy records every request tenantgate makes with the
  ServiceAccount's token, and what it answered. That includes what the pod group rules read
  (an Indexed Job's Job, the shipped rules' PyTorchJob, MPIJob, JobSet and RayCluster, a
  watch of coscheduling PodGroups where their CRD is installed).
* Every field the ledger store writes into a TenantLedger's status survives the real
  structural schema (a field the schema does not declare is pruned by kube-apiserver,
  ``apiextensions-apiserver/pkg/apiserver/schema/pruning``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from immutables import Map
from kubernetes import client

from classifier.quantities import Quantity
from tenants.cohorts.booked import CohortLedger, Pending, cohort_from_json, cohort_to_json
from tenants.kube.cohortclient import KubeCohortClient
from tenants.kube.connection import ClusterTarget, Connection
from tenants.kube.ledgerstore import KubeLedgerClient
from tenants.ledger import Queued, Reservation, TenantLedger, ledger_from_json, ledger_to_json
from testcluster import Cluster
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import ROOT, create_namespace, eventually, installed_crds, pod

# Every API request tenantgate makes in these scenarios: queue mode with the kubernetes ledger
# and leader election (the superset of what it does with the memory ledger).
HA_QUEUE_CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
ledger: {backend: kubernetes}
cohorts:
  lab: {}
tenants:
  team-r:
    namespaces: [team-r]
    quota: {guaranteed: {cpu: "2"}}
    overQuota: queue
  team-s:
    namespaces: [team-s]
    cohort: lab
    quota: {guaranteed: {cpu: "2"}}
  team-t:
    namespaces: [team-t]
    cohort: lab
    quota: {guaranteed: {cpu: "1"}}
"""


def indexed_job(name: str, *, parallelism: int, cpu: str = "1") -> dict[str, Any]:
    """An Indexed Job of ``parallelism`` pods, each run for 1 s by the simulated kubelet."""
    template = pod(name, cpu=cpu)
    del template["apiVersion"], template["kind"]
    template["metadata"] = {"annotations": {"testcluster.tenantgate.io/run-seconds": "1"}}
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": parallelism,
            "parallelism": parallelism,
            "template": template,
        },
    }


def restricted(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` made to pass the Pod Security "restricted" level tenantgate-system enforces."""
    body["spec"]["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in body["spec"]["containers"]:
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    return body


def gated(stored: Any) -> bool:
    return any(gate.name == "tenantgate.io/quota" for gate in stored.spec.scheduling_gates or [])


# --------------------------------------------------------------------------- the webhooks


def test_the_shipped_selectors_leave_kube_system_and_tenantgate_system_alone(
    start_tenantgate: StartTenantgate, core: Any
) -> None:
    start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    seen = core.create_namespaced_pod("team-a", pod("seen"))
    assert seen.metadata.annotations["tenantgate.io/profile"] == "general"
    for namespace in ("kube-system", "tenantgate-system"):
        left = core.create_namespaced_pod(namespace, restricted(pod("left-alone")), dry_run="All")
        assert not any(key.startswith("tenantgate.io/") for key in left.metadata.annotations or {})


def test_with_tenantgate_down_pods_are_refused_where_selected_and_kube_system_works(
    start_tenantgate: StartTenantgate, core: Any, kube: Cluster
) -> None:
    start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", pod("before"))
    kube.balancer.set_backends([])  # every replica gone; the webhooks stay registered

    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod("team-a", pod("during"))
    assert refused.value.status == 500
    message = json.loads(refused.value.body or "{}")["message"]
    assert message.startswith(
        'Internal error occurred: failed calling webhook "validate.tenantgate.io"'
    )
    # Updates of pods are selected too: even a label change waits for tenantgate.
    with pytest.raises(client.ApiException) as relabel:
        core.patch_namespaced_pod("before", "team-a", {"metadata": {"labels": {"x": "y"}}})
    relabel_message = json.loads(relabel.value.body or "{}")["message"]
    assert 'failed calling webhook "validate.tenantgate.io"' in relabel_message
    # The mutating webhook fails open and the exempt namespaces never call either.
    stored = core.create_namespaced_pod("kube-system", pod("system-pod"))
    assert stored.metadata.name == "system-pod"
    core.delete_namespaced_pod("system-pod", "kube-system", grace_period_seconds=0)


# --------------------------------------------------------------------------- RBAC


def granted(kube: Cluster) -> set[tuple[str, str]]:
    """(verb, resource[/subresource]) the installed roles grant the ServiceAccount."""
    assert kube.installation is not None
    documents = kube.installation.rendered
    roles = {
        (doc["kind"], doc["metadata"]["name"]): doc
        for doc in documents
        if doc["kind"] in ("ClusterRole", "Role")
    }
    rules: set[tuple[str, str]] = set()
    for doc in documents:
        if doc["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = doc.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == "tenantgate" for s in subjects
        ):
            continue
        role = roles[(doc["roleRef"]["kind"], doc["roleRef"]["name"])]
        for rule in role["rules"]:
            for group in rule.get("apiGroups", [""]):
                for resource in rule["resources"]:
                    name, _, sub = resource.partition("/")
                    qualified = f"{name}.{group}" if group else name
                    for verb in rule["verbs"]:
                        rules.add((verb, f"{qualified}/{sub}" if sub else qualified))
    return rules


@pytest.fixture
def ha_config(config_file: Path) -> Path:
    """The HA queue config, with the pod group rules tenantgate ships."""
    config = yaml.safe_load(HA_QUEUE_CONFIG)
    shipped = yaml.safe_load((ROOT / "examples" / "tenantgate.yaml").read_text())
    config["profiles"]["general"]["podGroup"] = shipped["profiles"]["ml-training"]["podGroup"]
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    return config_file


def owned_member(name: str, labels: dict[str, str], owner: tuple[str, str, str]) -> dict[str, Any]:
    """A pod as an operator creates it: its labels, owned by ``owner`` (which need not exist:
    tenantgate's read of it is what is checked)."""
    body = pod(name)
    body["metadata"]["labels"] = labels
    api_version, kind, owner_name = owner
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": owner_name,
            "uid": "9b1c2e53-2c8e-4a52-9d1e-0f6e1c9d2a10",
            "controller": True,
        }
    ]
    return body


# One member per shipped podGroup rule (the labels and owners their operators write:
# classifier/workloads/training.py), and a coscheduling member: each makes tenantgate read
# the object its group's size is in.
SHIPPED_RULE_MEMBERS = [
    owned_member(
        "pytorch-worker-0",
        {"training.kubeflow.org/job-name": "pt", "training.kubeflow.org/replica-type": "worker"},
        ("kubeflow.org/v1", "PyTorchJob", "pt"),
    ),
    owned_member(
        "mpi-worker-0",
        {
            "training.kubeflow.org/job-name": "mpi",
            "training.kubeflow.org/operator-name": "mpi-operator",
        },
        ("kubeflow.org/v2beta1", "MPIJob", "mpi"),
    ),
    owned_member(
        "js-workers-0-0",
        {"jobset.sigs.k8s.io/jobset-name": "js"},
        ("batch/v1", "Job", "js-workers-0"),
    ),
    owned_member(
        "ray-worker",
        {"ray.io/cluster": "rc", "ray.io/node-type": "worker"},
        ("ray.io/v1", "RayCluster", "rc"),
    ),
]


@pytest.fixture
def podgroup_crd(kubeconfig: Path) -> Iterator[None]:
    # Installed before tenantgate starts, which then watches PodGroups.
    with installed_crds(kubeconfig, "scheduling.x-k8s.io_podgroups.yaml"):
        yield


def test_the_shipped_rbac_is_exactly_what_tenantgate_uses(
    ha_config: Path,
    podgroup_crd: None,
    start_tenantgate: StartTenantgate,
    core: Any,
    kube: Cluster,
) -> None:
    kube.proxy.seen.clear()
    tenantgate = start_tenantgate()
    eventually(lambda: tenantgate.status()["queue"]["leading"], "the Lease")
    lease = kube.plane.kubectl("get", "lease", "-n", "tenantgate-system", "-o", "json").stdout
    create_namespace(core, {"metadata": {"name": "team-r"}})
    stored = [core.create_namespaced_pod("team-r", pod(f"r-{i}")) for i in range(3)]
    assert [gated(p) for p in stored] == [False, False, True]
    # The release's answer is lost: tenantgate reads the pod to learn whether it applied.
    kube.proxy.cut_answers(verb="patch", resource="pods")
    core.delete_namespaced_pod("r-0", "team-r", grace_period_seconds=0)
    eventually(lambda: not gated(core.read_namespaced_pod("r-2", "team-r")), "r-2 released")
    releaser = tenantgate.state.releaser
    assert releaser is not None
    eventually(lambda: releaser.stats.released.get(("team-r", "guaranteed")) == 1, "counted")

    def renewed() -> bool:
        now = kube.plane.kubectl("get", "lease", "-n", "tenantgate-system", "-o", "json").stdout
        return now != lease

    eventually(renewed, "the leader to renew its Lease")

    def events_recorded() -> bool:
        reasons = {e.reason for e in core.list_namespaced_event("team-r").items}
        return {"Queued", "Released"} <= reasons

    eventually(events_recorded, "the Queued and Released events")
    # A cohort member borrows: its TenantCohortLedger is created and compare-and-swapped.
    create_namespace(core, {"metadata": {"name": "team-t"}})
    borrowed = [core.create_namespaced_pod("team-t", pod(f"t-{i}")) for i in range(2)]
    assert [p.metadata.labels["tenantgate.io/tier"] for p in borrowed] == ["guaranteed", "burst"]
    # An Indexed Job's pod is a pod group's member: tenantgate reads the Job for its size.
    batch: Any = client.BatchV1Api(core.api_client)
    batch.create_namespaced_job("team-r", indexed_job("j", parallelism=1))

    def job_read() -> bool:
        return any(key[0] == "tenantgate" and key[2] == "jobs.batch" for key in kube.proxy.seen)

    eventually(job_read, "tenantgate to read the Job")
    # The shipped podGroup rules read their operators' objects; PodGroups are watched.
    for member in SHIPPED_RULE_MEMBERS:
        core.create_namespaced_pod("team-r", member)
    read = {"pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org", "jobsets.jobset.x-k8s.io"}
    read |= {"rayclusters.ray.io"}

    def operators_read() -> bool:
        seen = {key[2] for key in kube.proxy.seen if key[0] == "tenantgate" and key[1] == "get"}
        watched = {
            key[1]
            for key in kube.proxy.seen
            if key[0] == "tenantgate" and key[2] == "podgroups.scheduling.x-k8s.io"
        }
        return read <= seen and {"list", "watch"} <= watched

    eventually(operators_read, "tenantgate to read the operators' objects and watch PodGroups")
    # Admission reads a namespace its watch has not shown yet (a race no test can time: the
    # reader is called as admission calls it).
    reader = tenantgate.state.namespaces
    assert reader is not None
    assert tenantgate.run(reader("team-r")) is not None
    used: dict[tuple[str, str], set[int]] = {}
    for (agent, verb, resource, sub, status), _ in kube.proxy.seen.items():
        if agent == "tenantgate":
            used.setdefault((verb, f"{resource}/{sub}" if sub else resource), set()).add(status)
    refused = {key: codes for key, codes in used.items() if codes & {401, 403}}
    assert refused == {}, "requests the shipped RBAC refused"
    # Every authenticated user may create a SelfSubjectReview (system:basic-user).
    asked = set(used) - {("create", "selfsubjectreviews.authentication.k8s.io")}
    grants = granted(kube)
    assert sorted(asked - grants) == []
    assert sorted(grants - asked) == [], (
        f"granted but never used: remove the grant; used {sorted(asked)}"
    )


# --------------------------------------------------------------------------- the CRD


@pytest.fixture
def ledgers(kube: Cluster, tmp_path: Path) -> Iterator[KubeLedgerClient]:
    kubeconfig = kube.tenantgate_kubeconfig(tmp_path / "tenantgate.kubeconfig")
    connection = Connection.open(ClusterTarget("kubeconfig", "test", str(kubeconfig)))
    yield KubeLedgerClient(connection.api_client)
    connection.close()


def full_ledger() -> TenantLedger:
    """A ledger using every field the store writes (charges are never stored)."""
    amount = {
        "cpu": Quantity.parse("1500m"),
        "memory": Quantity.parse("3Gi"),
        "nvidia.com/gpu": Quantity.parse("2"),
        "hugepages-2Mi": Quantity.parse("64Mi"),
        "pods": Quantity.parse("3"),
    }
    return TenantLedger(
        "round-trip",
        guaranteed=dict(amount),
        burst={"cpu": Quantity.parse("250m"), "ephemeral-storage": Quantity.parse("10G")},
        reservations=Map(
            {
                "r-held": Reservation("r-held", "burst", {"cpu": Quantity.parse("1")}, 10.5, 40.25),
                "r-bound": Reservation(
                    "r-bound", "guaranteed", dict(amount), 11.0, 3611.0, pod_uid="uid-1"
                ),
            }
        ),
        queued=Map(
            {
                "q-booked": Queued("q-booked", 1000, 12.0, 42.0),
                "q-seen": Queued("q-seen", -5, 13.5, None, pod_uid="uid-2"),
            }
        ),
    )


def test_every_field_the_store_writes_survives_the_structural_schema(
    ledgers: KubeLedgerClient,
) -> None:
    ledger = full_ledger()
    status = ledger_to_json(ledger, charges=False)
    status.pop("tenant")
    created = ledgers.create("round-trip")
    ledgers.write_status("round-trip", status, resource_version=created.resource_version)
    stored = ledgers.read("round-trip")
    assert stored is not None
    assert stored.status == status
    read_back = ledger_from_json(dict(stored.status or {}), tenant="round-trip")
    assert ledger_to_json(read_back, charges=False) == ledger_to_json(ledger, charges=False)


def test_every_field_of_the_cohort_ledger_survives_the_structural_schema(
    kube: Cluster, tmp_path: Path
) -> None:
    kubeconfig = kube.tenantgate_kubeconfig(tmp_path / "tenantgate.kubeconfig")
    connection = Connection.open(ClusterTarget("kubeconfig", "test", str(kubeconfig)))
    try:
        cohorts = KubeCohortClient(connection.api_client)
        cpu = {"cpu": Quantity.parse("1500m"), "nvidia.com/gpu": Quantity.parse("1")}
        ledger = CohortLedger(
            "round-trip",
            (Pending("p-1", "team-a", cpu, {"r-1": cpu}, 1234.5),),
            {"team-a": {"guaranteed": {"cpu": Quantity.parse("4")}, "burst": cpu}},
        )
        created = cohorts.create("round-trip")
        status = cohort_to_json(ledger)
        cohorts.write_status("round-trip", status, resource_version=created.resource_version)
        stored = cohorts.read("round-trip")
        assert stored is not None
        assert stored.status == status
        assert cohort_from_json("round-trip", stored.status) == ledger
    finally:
        connection.close()


def test_the_schema_prunes_what_it_does_not_declare(ledgers: KubeLedgerClient) -> None:
    created = ledgers.create("pruned")
    status = {"used": {"guaranteed": {"cpu": "1"}, "burst": {}}, "reservations": [], "extra": 1}
    ledgers.write_status("pruned", status, resource_version=created.resource_version)
    stored = ledgers.read("pruned")
    assert stored is not None
    assert "extra" not in (stored.status or {})  # pruned: this test can see a pruned field
