"""docs/metrics.md against the ``/metrics`` of a running server: every family, its type and
its labels, both ways; and no label value a pod invented."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from testcluster import Cluster
from tests.livemetrics import UNCLAIMED_NAMESPACE, live_exposition

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(tenantgate_\w+)` \| (\w+) \|([^|]*)\|([^|]+)\|$", re.MULTILINE)


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    for name, kind, labels, meaning in ROW.findall(DOC.read_text()):
        assert name not in rows, f"{name} is listed twice"
        assert meaning.strip(), f"{name}: say what it means"
        rows[name] = (kind, frozenset(re.findall(r"`(\w+)`", labels)))
    return rows


def exposed(kube: Cluster, cert_dir: Path) -> dict[str, tuple[str, frozenset[str] | None]]:
    """Queryable name -> (type, labels); labels None for a family without samples yet."""
    families = list(text_string_to_metric_families(live_exposition(kube, cert_dir)))
    found: dict[str, tuple[str, frozenset[str] | None]] = {}
    for family in families:
        # Every family counts, whatever its suffix (a `_created` one too: they are off).
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = {key for sample in family.samples for key in sample.labels} - {"le"}
        found[name] = (family.type, frozenset(labels) if family.samples else None)
    return found


def test_the_doc_lists_exactly_the_exposed_families(kube: Cluster, kube_cert_dir: Path) -> None:
    docs, live = documented(), exposed(kube, kube_cert_dir)

    assert sorted(set(live) - set(docs)) == [], "exposed but not in docs/metrics.md"
    assert sorted(set(docs) - set(live)) == [], "in docs/metrics.md but not exposed"


def test_types_and_labels_match(kube: Cluster, kube_cert_dir: Path) -> None:
    docs = documented()
    for name, (kind, labels) in exposed(kube, kube_cert_dir).items():
        documented_kind, documented_labels = docs[name]
        assert documented_kind == kind, f"{name} is a {kind}"
        if labels is not None:
            assert documented_labels == labels, f"{name} has labels {sorted(labels)}"


def test_the_live_server_saw_every_label_of_the_decision_metrics(
    kube: Cluster, kube_cert_dir: Path
) -> None:
    live = exposed(kube, kube_cert_dir)
    for name in ("tenantgate_admissions_total", "tenantgate_denials_total"):
        assert live[name][1] is not None, f"the live run made no {name} sample"


def test_a_pod_in_an_unclaimed_namespace_adds_no_label_value(
    kube: Cluster, kube_cert_dir: Path
) -> None:
    text = live_exposition(kube, kube_cert_dir)
    assert UNCLAIMED_NAMESPACE not in text
    tenants = {
        sample.labels["tenant"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if "tenant" in sample.labels
    }
    assert tenants == {"", "team-a"}
