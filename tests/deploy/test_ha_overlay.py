"""The HA Component in deploy/webhooks/overlays/ha: schema validity and the HA invariants.

Static checks read the Component's files; when ``kubectl`` is installed, a cluster
kustomization including the base and the Component is rendered and checked as a whole.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from classifier.quantities import Quantity
from tenants.cohorts.booked import CohortLedger, Pending, cohort_to_json
from tenants.configfile import load_text
from tenants.kube.cohortclient import COHORT_CRD_NAME, COHORT_PLURAL
from tenants.kube.leader import LEASE_NAME
from tenants.kube.ledgerstore import GROUP, KIND, PLURAL, VERSION
from tenants.ledger import (
    LedgerError,
    TenantLedger,
    Tier,
    bind,
    book,
    enqueue,
    ledger_from_json,
    ledger_to_json,
)
from tests.deploy.kustomize import render_cluster

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "webhooks"
HA = BASE / "overlays" / "ha"
NAMESPACE = "tenantgate-system"
SERVICE_ACCOUNT = {"kind": "ServiceAccount", "name": "tenantgate", "namespace": NAMESPACE}
POD_LABELS = {"app.kubernetes.io/name": "tenantgate", "app.kubernetes.io/component": "webhook"}
REFRESH = (
    "sed 's/^  backend: memory.*$/  backend: kubernetes  # replicas share TenantLedger objects "
    "(deploy\\/webhooks\\/overlays\\/ha)/' deploy/webhooks/tenantgate.yaml > "
    "deploy/webhooks/overlays/ha/tenantgate.yaml"
)
# Changed by the Component; everything else must render exactly as in the base.
CHANGED = {("Deployment", "tenantgate"), ("PodDisruptionBudget", "tenantgate")}
CHANGED_CONFIG = ("ConfigMap", "tenantgate-config")

Obj = dict[str, Any]


def load(name: str) -> Obj:
    documents = [d for d in yaml.safe_load_all((HA / name).read_text()) if d is not None]
    assert len(documents) == 1, f"{name}: expected one object"
    document: Obj = documents[0]
    return document


def component() -> Obj:
    return load("kustomization.yaml")


def rules(role: Mapping[str, Any]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {
        (group, resource, verb, tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def validation_failure(obj: Obj) -> str | None:
    version = kubernetes_validate.latest_version()
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(part) for part in error.path) or "(root)"
        name = obj.get("metadata", {}).get("name")
        return f"{obj.get('kind')} {name} fails the {version} schema at {path}: {error.message}"
    return None


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    assert not selector.get("matchExpressions"), "only matchLabels is checked here"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


# --------------------------------------------------------------------------- the files


def test_component_uses_every_file_and_only_existing_ones() -> None:
    kustomization = component()
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert kustomization["kind"] == "Component"
    used = set(kustomization["resources"]) | {p["path"] for p in kustomization["patches"]}
    used |= {f for g in kustomization["configMapGenerator"] for f in g["files"]}
    on_disk = {p.name for p in HA.glob("*.yaml")} - {"kustomization.yaml"}
    assert used == on_disk


@pytest.mark.parametrize("name", sorted(component()["resources"]))
def test_resource_validates_against_the_kubernetes_schema(name: str) -> None:
    failure = validation_failure(load(name))
    assert failure is None, failure


def test_crd_serves_what_the_ledger_store_uses() -> None:
    crd = load("crd-tenantledger.yaml")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"]) == (GROUP, PLURAL, KIND)
    assert spec["scope"] == "Cluster"
    [version] = spec["versions"]
    assert version["name"] == VERSION
    assert version["served"] is True
    assert version["storage"] is True
    # The store writes through /status: without the subresource the writes would be ignored.
    assert version["subresources"] == {"status": {}}


def _status_schema() -> Obj:
    version = load("crd-tenantledger.yaml")["spec"]["versions"][0]
    schema: Obj = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def _status_as_the_store_writes_it(ledger: TenantLedger) -> Obj:
    status = ledger_to_json(ledger, charges=False)
    status.pop("tenant")
    return status


def test_crd_schema_accepts_the_status_the_store_writes() -> None:
    ledger = TenantLedger("team-a")
    tiers: tuple[Tier, ...] = ("guaranteed", "burst")
    for index, tier in enumerate(tiers):
        ledger = book(
            ledger,
            reservation_id=f"r-{index}",
            tier=tier,
            amount={"cpu": Quantity.parse("1500m"), "nvidia.com/gpu": Quantity.parse("1")},
            now=1_700_000_000.25,
            ttl=120,
        )
    ledger = bind(ledger, reservation_id="r-1", pod_uid="0b8c6f3e-3f1e-4f6a-9a57-0d1f0e2c9b11")
    jsonschema.validate(_status_as_the_store_writes_it(ledger), _status_schema())
    jsonschema.validate(_status_as_the_store_writes_it(TenantLedger("empty")), _status_schema())


def test_crd_schema_declares_every_field_the_store_writes() -> None:
    """A structural schema prunes what it does not declare: a field missing there is lost."""
    ledger = book(
        TenantLedger("team-a"),
        reservation_id="r-0",
        tier="guaranteed",
        amount={"cpu": Quantity.parse("1")},
        now=0,
        ttl=1,
        pod_uid="u-0",
    )
    ledger = enqueue(ledger, entry_id="q-0", priority=1000, now=0, ttl=120)
    ledger = enqueue(ledger, entry_id="q-1", priority=100, now=1, ttl=None, pod_uid="u-1")
    status = _status_as_the_store_writes_it(ledger)
    schema = _status_schema()
    assert set(status) <= set(schema["properties"])
    for key in ("reservations", "queued"):
        declared = set(schema["properties"][key]["items"]["properties"])
        for item in status[key]:
            assert set(item) <= declared, (key, item)
    jsonschema.validate(status, schema)


def test_cohort_crd_schema_declares_every_field_the_store_writes() -> None:
    crd = load("crd-tenantcohortledger.yaml")
    assert crd["metadata"]["name"] == COHORT_CRD_NAME
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    cpu = {"cpu": Quantity.parse("1")}
    status = cohort_to_json(
        CohortLedger(
            "lab",
            (Pending("p-0", "team-a", cpu, {"r-0": cpu}, 10.0),),
            {"team-a": {"guaranteed": cpu, "burst": cpu}},
        )
    )
    assert set(status) <= set(schema["properties"])
    declared = set(schema["properties"]["pending"]["items"]["properties"])
    assert set(status["pending"][0]) <= declared
    jsonschema.validate(status, schema)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s["reservations"][0].update(tier="premium"), "'premium' is not one of"),
        (lambda s: s["reservations"][0].pop("expiresAt"), "'expiresAt' is a required property"),
        (lambda s: s["used"]["guaranteed"].update(cpu=2), "2 is not of type 'string'"),
    ],
)
def test_crd_schema_rejects_a_malformed_status(change: Any, problem: str) -> None:
    ledger = book(
        TenantLedger("team-a"),
        reservation_id="r-0",
        tier="guaranteed",
        amount={"cpu": Quantity.parse("1")},
        now=0,
        ttl=1,
    )
    status = _status_as_the_store_writes_it(ledger)
    change(status)
    with pytest.raises(jsonschema.ValidationError, match=problem):
        jsonschema.validate(status, _status_schema())


def test_ledger_rbac_is_exactly_what_the_store_needs() -> None:
    role = load("clusterrole-ledger.yaml")
    # Read, watch, create; every change is a PUT of the status (compare-and-swap).
    verbs = ("get", "list", "watch", "create")
    # Cohorts: the TenantCohortLedger of a tree is read (get), created and compare-and-swapped.
    assert rules(role) == {(GROUP, PLURAL, verb, ()) for verb in verbs} | {
        (GROUP, f"{PLURAL}/status", "update", ()),
        (GROUP, COHORT_PLURAL, "get", ()),
        (GROUP, COHORT_PLURAL, "create", ()),
        (GROUP, f"{COHORT_PLURAL}/status", "update", ()),
    }
    binding = load("clusterrolebinding-ledger.yaml")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [SERVICE_ACCOUNT]


def test_lease_rbac_is_namespaced_and_limited_to_the_controller_lease() -> None:
    role = load("role-leader-election.yaml")
    assert role["kind"] == "Role"
    assert role["metadata"]["namespace"] == NAMESPACE
    group = "coordination.k8s.io"
    # KubeLeaseClient reads (get), creates and replaces (update) one Lease, nothing else.
    assert rules(role) == {
        (group, "leases", "create", ()),
        (group, "leases", "get", (LEASE_NAME,)),
        (group, "leases", "update", (LEASE_NAME,)),
    }
    binding = load("rolebinding-leader-election.yaml")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [SERVICE_ACCOUNT]


def test_config_is_the_base_config_with_the_kubernetes_ledger() -> None:
    base = (BASE / "tenantgate.yaml").read_text().splitlines()
    ha = (HA / "tenantgate.yaml").read_text().splitlines()
    differing = [(a, b) for a, b in zip(base, ha, strict=False) if a != b]
    assert len(base) == len(ha), f"the HA config drifted from the base; refresh it: {REFRESH}"
    assert len(differing) == 1, f"the HA config drifted from the base; refresh it: {REFRESH}"
    assert differing[0][0].startswith("  backend: memory")
    assert differing[0][1].startswith("  backend: kubernetes")
    config = load_text((HA / "tenantgate.yaml").read_text(), filename="tenantgate.yaml").config
    assert config.ledger.backend == "kubernetes"


def test_patches_target_the_base_objects() -> None:
    deployment = load("deployment-ha.yaml")
    assert (deployment["kind"], deployment["metadata"]["name"]) == ("Deployment", "tenantgate")
    assert deployment["metadata"]["namespace"] == NAMESPACE
    budget = load("poddisruptionbudget-ha.yaml")
    assert (budget["kind"], budget["metadata"]["name"]) == ("PodDisruptionBudget", "tenantgate")


# --------------------------------------------------------------------------- rendered


def render(directory: Path, *, components: bool) -> list[Obj]:
    return render_cluster(directory, [HA] if components else [])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Obj]:
    objects = render(tmp_path_factory.mktemp("cluster"), components=True)
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(by_kind) == len(objects), "two rendered objects share a kind and name"
    return by_kind


@pytest.fixture(scope="module")
def rendered_base(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Obj]:
    objects = render(tmp_path_factory.mktemp("single"), components=False)
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_rendered_objects_validate_against_the_kubernetes_schema(
    rendered: dict[tuple[str, str], Obj],
) -> None:
    failures = [f for f in (validation_failure(o) for o in rendered.values()) if f is not None]
    assert failures == []


def test_rendered_adds_the_ledger_and_leader_objects_and_changes_nothing_else(
    rendered: dict[tuple[str, str], Obj], rendered_base: dict[tuple[str, str], Obj]
) -> None:
    added = set(rendered) - set(rendered_base)
    assert added == {
        ("CustomResourceDefinition", f"{PLURAL}.{GROUP}"),
        ("CustomResourceDefinition", COHORT_CRD_NAME),
        ("ClusterRole", "tenantgate-ledger"),
        ("ClusterRoleBinding", "tenantgate-ledger"),
        ("Role", "tenantgate-leader-election"),
        ("RoleBinding", "tenantgate-leader-election"),
    }
    assert set(rendered_base) <= set(rendered)
    for key, obj in rendered_base.items():
        if key in CHANGED or key == CHANGED_CONFIG:
            continue
        assert rendered[key] == obj, f"the HA Component changes {key}"


def test_three_replicas_spread_over_nodes_and_zones(
    rendered: dict[tuple[str, str], Obj],
) -> None:
    deployment = rendered[("Deployment", "tenantgate")]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert POD_LABELS.items() <= labels.items()
    constraints = {c["topologyKey"]: c for c in pod["spec"]["topologySpreadConstraints"]}
    assert set(constraints) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for constraint in constraints.values():
        assert constraint["maxSkew"] == 1
        assert selects(constraint["labelSelector"], labels)
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]
    assert constraints["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert constraints["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_the_deployment_keeps_the_base_container_and_names_the_replica(
    rendered: dict[tuple[str, str], Obj], rendered_base: dict[tuple[str, str], Obj]
) -> None:
    [container] = rendered[("Deployment", "tenantgate")]["spec"]["template"]["spec"]["containers"]
    [base_container] = rendered_base[("Deployment", "tenantgate")]["spec"]["template"]["spec"][
        "containers"
    ]
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The Lease lives in the namespace the replicas run in.
    assert env["TENANTGATE_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    without_env = {k: v for k, v in container.items() if k != "env"}
    assert without_env == {k: v for k, v in base_container.items() if k != "env"}
    assert [e for e in container["env"] if e["name"] != "POD_NAME"] == base_container["env"]


def test_disruption_budget_keeps_two_replicas(rendered: dict[tuple[str, str], Obj]) -> None:
    budget = rendered[("PodDisruptionBudget", "tenantgate")]["spec"]
    assert budget["minAvailable"] == 2
    assert "maxUnavailable" not in budget
    labels = rendered[("Deployment", "tenantgate")]["spec"]["template"]["metadata"]["labels"]
    assert selects(budget["selector"], labels)
    # Three replicas, two must stay: one voluntary disruption at a time, never zero.
    replicas = rendered[("Deployment", "tenantgate")]["spec"]["replicas"]
    assert replicas - budget["minAvailable"] == 1


def test_the_config_map_carries_the_ha_config(rendered: dict[tuple[str, str], Obj]) -> None:
    config_map = rendered[CHANGED_CONFIG]
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["data"] == {"tenantgate.yaml": (HA / "tenantgate.yaml").read_text()}


def test_webhook_failure_policies_are_those_of_the_base(
    rendered: dict[tuple[str, str], Obj],
) -> None:
    # The validating webhook fails closed (the ledger may be unreachable), the mutating one
    # fails open: the Component must not change either.
    [mutating] = rendered[("MutatingWebhookConfiguration", "tenantgate")]["webhooks"]
    [validating] = rendered[("ValidatingWebhookConfiguration", "tenantgate")]["webhooks"]
    assert mutating["failurePolicy"] == "Ignore"
    assert validating["failurePolicy"] == "Fail"


def test_malformed_ledger_status_is_refused_by_the_store_too() -> None:
    # The CRD's schema and the store's reader agree on the tier values.
    status = _status_as_the_store_writes_it(
        book(
            TenantLedger("team-a"),
            reservation_id="r-0",
            tier="burst",
            amount={"cpu": Quantity.parse("1")},
            now=0,
            ttl=1,
        )
    )
    broken = copy.deepcopy(status)
    broken["reservations"][0]["tier"] = "premium"
    assert ledger_from_json(status, tenant="team-a").burst == {"cpu": Quantity.parse("1")}
    with pytest.raises(LedgerError, match="tier must be guaranteed or burst"):
        ledger_from_json(broken, tenant="team-a")
