"""Three replicas sharing one ledger never over-admit a limits quota (``limits.cpu``).

The same cluster as ``test_ha.py`` (three ``tenantgate serve`` processes, real TLS, the
``kubernetes`` ledger backend, the balancer, the real kube-apiserver calling them), with a
tenant whose quota caps ``limits.cpu`` only: 4 guaranteed, 10 at most. Its pods set no
resources at all, so every one gets the tenant's default limit of 100m in /mutate: exactly 40
guaranteed and 60 burst pods fit, whichever replica admits them, and the TenantLedger's
``limits.cpu`` equals the stored pods' limits (PodLimits) after the next recount.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from classifier.limits import pod_usage
from classifier.quantities import Quantity
from testcluster import Cluster
from tests.integration.harness import REPLICA_CONFIG_HEAD, eventually
from tests.integration.test_ha import (
    NAMESPACE,
    HACluster,
    _recounts,
    create_all,
    ha_cluster,
    stored_usage,
)

CONFIG = (
    REPLICA_CONFIG_HEAD
    + """\
      guaranteed: {{limits.cpu: "{guaranteed}"}}
      burst: {{max: {{limits.cpu: "{ceiling}"}}}}
    containerDefaults:
      requests: {{cpu: 50m}}
      limits: {{cpu: 100m}}
"""
)
PODS = 300
pytestmark = pytest.mark.timeout(900)


def bare_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "limits-test"}},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


@pytest.fixture
def cluster(kube: Cluster, kube_cert_dir: Path, tmp_path: Path) -> Iterator[HACluster]:
    # 4 and 10 CPUs of limits: 40 and 100 pods of 100m.
    with ha_cluster(
        kube, tmp_path, cert_dir=kube_cert_dir, guaranteed=4, ceiling=10, config=CONFIG
    ) as running:
        yield running


def truth(cluster: HACluster) -> dict[str, dict[str, int]]:
    """Usage by tier as the stored pods say, limits included."""
    nanos: dict[str, Counter[str]] = {"guaranteed": Counter(), "burst": Counter()}
    for stored in cluster.pods():
        tier = stored["metadata"].get("labels", {}).get("tenantgate.io/tier", "guaranteed")
        for name, quantity in pod_usage(stored).items():
            nanos[tier][name] += quantity.nanos
    return {tier: {k: v for k, v in sums.items() if v} for tier, sums in nanos.items()}


def test_concurrent_creates_admit_exactly_the_limits_ceiling(cluster: HACluster) -> None:
    names = [f"p-{n}" for n in range(PODS)]
    outcomes = create_all(cluster, names, during=lambda *_: None, make=bare_pod)
    assert outcomes["created"] <= 100, "over-admission"
    if outcomes["created"] < 100:
        # Orphaned reservations (a validation that gave up) come back after the TTL.
        eventually(lambda: not cluster.ledger_status().get("reservations"), "orphans to expire")
        created = {p["metadata"]["name"] for p in cluster.pods()}
        create_all(
            cluster, [n for n in names if n not in created], during=lambda *_: None, make=bare_pod
        )
    pods = cluster.pods()
    assert len(pods) == 100
    tiers = Counter(p["metadata"]["labels"]["tenantgate.io/tier"] for p in pods)
    assert tiers == {"guaranteed": 40, "burst": 60}
    for stored in pods:
        (container,) = stored["spec"]["containers"]
        assert container["resources"] == {"requests": {"cpu": "50m"}, "limits": {"cpu": "100m"}}

    recounts = _recounts(cluster)
    eventually(lambda: _recounts(cluster) > recounts, "the lease holder's next recount")
    expected = truth(cluster)
    assert expected["guaranteed"]["limits.cpu"] == Quantity.parse("4").nanos
    assert expected["burst"]["limits.cpu"] == Quantity.parse("6").nanos
    eventually(
        lambda: (
            stored_usage(cluster) == expected and not cluster.ledger_status().get("reservations")
        ),
        "the TenantLedger to equal the truth",
    )
