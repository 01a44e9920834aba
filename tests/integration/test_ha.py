"""Three tenantgate processes sharing one quota ledger, on the real control plane.

Three real ``tenantgate serve`` processes (real TLS, ``ledger.backend: kubernetes``, the shipped
ServiceAccount's token through the fault proxy) sit behind the cluster's TCP balancer (TLS
passes through, as with a Service); kube-apiserver calls them for every pod create. 600 creates
race for a tenant whose ceiling allows exactly ``N`` pods: exactly ``N`` are admitted with the
right tiers, and the TenantLedger (a custom resource, written by compare-and-swap on its
resourceVersion in etcd) equals the truth after the lease holder's next recount; also under
conflict storms, and with the leader SIGKILLed mid-run. A second test kills the leader while
reservations are in flight: another replica takes the coordination.k8s.io Lease and those
reservations are released exactly once.

:func:`run_ha_scenario` is also what the benchmark calls to report throughput and
compare-and-swap retries next to the single-replica memory backend.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

import certs
from classifier.quantities import Quantity
from classifier.resources import pod_requests
from tenants.kube.ledgerstore import GROUP, PLURAL, VERSION
from tenants.ledger import ledger_from_json
from testcluster import Cluster
from tests.integration.harness import (
    PODS_QUOTA_CONFIG,
    api_client,
    create_namespace,
    create_or_deny,
    eventually,
    installed_cluster,
    wait_webhooks_active,
)
from tests.tlsclient import ServerProcess, client_context, start_process

NAMESPACE = "team-a"
TENANT = "team-a"
RESOURCE = f"{PLURAL}.{GROUP}"
LEASE = ("tenantgate-system", "tenantgate-controller")
WAIT = 90.0
TTL_SECONDS = 8
# 600 creates through kube-apiserver and two webhooks on a small machine take minutes, not
# seconds: the waits are generous, and no figure here is a timing threshold.
pytestmark = pytest.mark.timeout(900)

CONFIG = PODS_QUOTA_CONFIG + '      burst: {{max: {{pods: "{ceiling}"}}}}\n'

# Short, but in client-go's proportions: the tests see a hand-over in seconds.
ENVIRONMENT = {
    "TENANTGATE_SWEEP_SECONDS": "0.5",
    "TENANTGATE_RECOUNT_SECONDS": "2",
    "TENANTGATE_CONFIG_POLL_SECONDS": "5",
    "TENANTGATE_LEASE_DURATION_SECONDS": "3",
    "TENANTGATE_LEASE_RENEW_DEADLINE_SECONDS": "2",
    "TENANTGATE_LEASE_RETRY_PERIOD_SECONDS": "0.5",
    "TENANTGATE_NAMESPACE": "tenantgate-system",
}


# --------------------------------------------------------------------------- the replicas


@dataclass
class Replica:
    """One ``tenantgate serve`` process."""

    name: str
    process: ServerProcess
    port: int
    metrics_port: int

    @property
    def alive(self) -> bool:
        return self.process.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, no Lease release."""
        self.process.process.send_signal(signal.SIGKILL)
        self.process.process.wait(WAIT)

    def get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def metrics(self) -> dict[str, float]:
        """Every sample without labels, plus ``name{label=value}`` for labelled ones."""
        _, body = self.get("/metrics")
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"


@dataclass
class HACluster:
    """tenantgate's replicas on the real control plane, behind its balancer."""

    kube: Cluster
    cert_dir: Path
    replicas: list[Replica]
    guaranteed: int
    ceiling: int
    reader: Any = None

    @property
    def kubeconfig(self) -> Path:
        """The cluster admin's: what the tests act as (straight to kube-apiserver)."""
        return self.kube.plane.admin_kubeconfig

    @property
    def connections(self) -> Counter[int]:
        """Connections the API server opened to each replica's webhook port."""
        return self.kube.balancer.connections

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    def api_client(self, *, pool: int = 8) -> Any:
        configuration = client.Configuration()
        load: Any = config.load_kube_config
        load(config_file=str(self.kubeconfig), client_configuration=configuration)
        configuration.connection_pool_maxsize = pool
        configuration.retries = False
        return client.ApiClient(configuration)

    def leader(self) -> Replica:
        holder = self.lease()["spec"].get("holderIdentity") or ""
        for replica in self.replicas:
            if holder.startswith(f"{replica.name}_"):
                return replica
        raise AssertionError(f"no replica holds the Lease (holder {holder!r})")

    def _reader(self) -> Any:
        if self.reader is None:
            self.reader = self.api_client()
        return self.reader

    def read(self, method: str, *args: Any) -> dict[str, Any]:
        """Call an official client method, raw, and parse the JSON it answered."""
        api_class, name = method.split(".")
        api = getattr(client, api_class)(self._reader())
        response = getattr(api, name)(*args, _preload_content=False)
        try:
            document: dict[str, Any] = json.loads(response.data)
        finally:
            response.release_conn()
        return document

    def lease(self) -> dict[str, Any]:
        namespace, name = LEASE
        return self.read("CoordinationV1Api.read_namespaced_lease", name, namespace)

    def ledger_status(self) -> dict[str, Any]:
        found = self.read(
            "CustomObjectsApi.get_cluster_custom_object", GROUP, VERSION, PLURAL, TENANT
        )
        status: dict[str, Any] = found.get("status") or {}
        return status

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.read("CoreV1Api.list_namespaced_pod", NAMESPACE)["items"]
        return items


def start_replica(
    name: str,
    *,
    config_file: Path,
    cert_dir: Path,
    kubeconfig: Path,
    environment: dict[str, str] | None = None,
) -> Replica:
    argv = [
        sys.executable,
        "-m",
        "admission.cli",
        "serve",
        "--config",
        str(config_file),
        "--cert-dir",
        str(cert_dir),
        "--kubeconfig",
        str(kubeconfig),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        "0",
        "--log-format",
        "json",
        "--shutdown-grace-seconds",
        "1",
    ]
    process = start_process(argv, env={**ENVIRONMENT, **(environment or {}), "POD_NAME": name})
    port, metrics_port = process.endpoints()
    return Replica(name, process, port, metrics_port)


@contextlib.contextmanager
def ha_cluster(
    kube: Cluster,
    directory: Path,
    *,
    cert_dir: Path,
    replicas: int = 3,
    guaranteed: int,
    ceiling: int,
    backend: str = "kubernetes",
    config: str = CONFIG,
    environment: dict[str, str] | None = None,
) -> Iterator[HACluster]:
    """``replicas`` tenantgate processes on the real control plane ``kube``, the webhooks
    registered and called through its balancer; stopped and unregistered on the way out.

    Each replica runs with a token of the shipped ServiceAccount through the fault proxy (the
    shipped RBAC applies, faults reach it) and serves the certificate in ``cert_dir``, which
    the installed caBundle trusts. ``backend: memory`` (one replica) is the single-process
    baseline the benchmark compares with. ``config`` is formatted with ``ttl``, ``guaranteed``,
    ``ceiling`` and ``backend``; ``environment`` is added to the replicas'.
    """
    if backend == "memory" and replicas != 1:
        raise ValueError("the memory backend serves one replica only")
    config_file = directory / "tenantgate.yaml"
    config_file.write_text(
        config.format(ttl=TTL_SECONDS, guaranteed=guaranteed, ceiling=ceiling, backend=backend)
    )
    admin = api_client(kube.plane.admin_kubeconfig)
    try:
        create_namespace(client.CoreV1Api(admin), {"metadata": {"name": NAMESPACE}})
    finally:
        admin.close()
    kubeconfig = kube.tenantgate_kubeconfig(directory / "tenantgate.kubeconfig")
    running: list[Replica] = []
    try:
        with ThreadPoolExecutor(replicas) as pool:
            running = list(
                pool.map(
                    lambda n: start_replica(
                        f"replica-{n}",
                        config_file=config_file,
                        cert_dir=cert_dir,
                        kubeconfig=kubeconfig,
                        environment=environment,
                    ),
                    range(replicas),
                )
            )
        kube.serve([r.port for r in running])
        for replica in running:
            eventually(replica.ready, f"{replica.name} to be ready", timeout=WAIT)
        wait_webhooks_active(kube.plane.admin_kubeconfig, [r.metrics_url for r in running])
        cluster = HACluster(kube, cert_dir, running, guaranteed, ceiling)
        try:
            if backend == "kubernetes":
                eventually(lambda: _has_leader(cluster), "a leader", timeout=WAIT)
            yield cluster
        finally:
            cluster.close()
    finally:
        kube.unregister_webhooks()
        kube.balancer.set_backends([])
        # Together: each takes its shutdown grace, and none waits for another.
        with ThreadPoolExecutor(max(len(running), 1)) as pool:
            list(pool.map(lambda replica: replica.process.stop(), running))
        for replica in running:
            (directory / f"{replica.name}.log").write_text("".join(replica.process.lines))


def replica_warnings(cluster: HACluster, *, last: int = 20) -> str:
    """The replicas' last warnings and errors, for a failure message (CI keeps nothing else)."""
    lines = [
        f"{replica.name}: {line.rstrip()}"
        for replica in cluster.replicas
        for line in replica.process.lines
        if '"level":"warning"' in line or '"level":"error"' in line
    ]
    return "\n".join(lines[-last:])


def _recounts(cluster: HACluster) -> float:
    """Full recounts run so far by the live replicas (only a lease holder runs them)."""
    return sum(
        r.metrics().get("tenantgate_ledger_recounts_total", 0.0)
        for r in cluster.replicas
        if r.alive
    )


def _has_leader(cluster: HACluster) -> bool:
    try:
        cluster.leader()
    except (AssertionError, client.ApiException):
        return False
    return True


# --------------------------------------------------------------------------- the scenario


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "burst-test"}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ]
        },
    }


def create_pod(core: Any, name: str, make: Callable[[str], dict[str, Any]] = pod) -> str:
    """``created`` or ``denied`` (over quota), retrying answers that say to retry."""
    return create_or_deny(core, make(name))


@dataclass
class ScenarioResult:
    """What one run did: outcomes, time, and each replica's ledger counters."""

    admitted: int
    denied: int
    seconds: float
    per_replica: dict[str, dict[str, float]] = field(default_factory=dict)
    second_wave: int = 0

    @property
    def throughput(self) -> float:
        return (self.admitted + self.denied) / self.seconds if self.seconds else 0.0

    def total(self, metric: str) -> float:
        return sum(values.get(metric, 0.0) for values in self.per_replica.values())

    def summary(self) -> dict[str, Any]:
        """The figures the benchmark reports (counters summed over the surviving replicas)."""
        return {
            "admitted": self.admitted,
            "denied": self.denied,
            "seconds": round(self.seconds, 3),
            "throughput_rps": round(self.throughput, 1),
            "second_wave": self.second_wave,
            "replicas": len(self.per_replica),
            **{
                key: self.total(f"tenantgate_{metric}")
                for key, metric in (
                    ("cas_writes", "ledger_cas_writes_total"),
                    ("cas_conflicts", "ledger_cas_conflicts_total"),
                    ("cas_exhausted", "ledger_cas_exhausted_total"),
                    ("ledger_unavailable", "ledger_unavailable_total"),
                    ("ledger_reads", "ledger_reads_total"),
                    ("group_commits", "ledger_group_commits_total"),
                    ("group_commit_changes", "ledger_group_commit_changes_total"),
                )
            },
            "max_group_commit": max(
                (
                    v.get("tenantgate_ledger_group_commit_max_changes", 0.0)
                    for v in self.per_replica.values()
                ),
                default=0.0,
            ),
        }


def create_all(
    cluster: HACluster,
    names: list[str],
    *,
    during: Callable[[int, int], None],
    make: Callable[[str], dict[str, Any]] = pod,
) -> Counter[str]:
    """Create ``names`` (pods built by ``make``) concurrently; ``during(answered, created)``
    runs after each answer, with the counts so far."""
    api = cluster.api_client(pool=64)
    core = client.CoreV1Api(api)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def one(name: str) -> None:
        outcome = create_pod(core, name, make)
        with lock:
            outcomes[outcome] += 1
            done, created = sum(outcomes.values()), outcomes["created"]
        during(done, created)

    try:
        with ThreadPoolExecutor(64) as pool:
            list(pool.map(one, names))
    finally:
        api.close()
    return outcomes


def run_ha_scenario(
    cluster: HACluster,
    *,
    pods: int = 600,
    storms: int = 0,
    kill_leader_after: int | None = None,
) -> ScenarioResult:
    """``pods`` concurrent creates; ``storms`` conflict storms of 25 refused ledger writes
    spread over the admissions; optionally SIGKILL the lease holder after that many answers.

    When reservations were orphaned (a replica died between booking and answering, a
    validation gave up after too many conflicts), their quota comes back after the TTL: the
    pods refused meanwhile are created again, so that the run ends with the full ceiling.
    """
    names = [f"p-{n}" for n in range(pods)]
    # Storms break out while pods are still being admitted, so that the writers they refuse
    # are the racing creates; placed by answers, they would mostly fall after the ceiling,
    # when denials write nothing and only the lease holder's changes are left to refuse.
    storm_points = [int(cluster.ceiling * (k + 1) / (storms + 1)) for k in range(storms)]
    storm_lock = threading.Lock()
    killed = threading.Event()

    def during(done: int, created: int) -> None:
        with storm_lock:
            if storm_points and created >= storm_points[0]:
                storm_points.pop(0)
                cluster.kube.proxy.conflict_storm(RESOURCE, count=25)
        if kill_leader_after is not None and done >= kill_leader_after and not killed.is_set():
            killed.set()
            cluster.leader().kill()

    started = time.monotonic()
    outcomes = create_all(cluster, names, during=during)
    seconds = time.monotonic() - started
    if storms:
        # Whatever the creates left of the last storm would fall on the lease holder's changes
        # alone (ten refused writes per try, tries spaced up to 10 s apart): refusals no real
        # cluster produces once its writers have stopped.
        cluster.kube.proxy.clear()
    assert len(cluster.pods()) == outcomes["created"]
    assert outcomes["created"] <= cluster.ceiling, "over-admission"

    second_wave = 0
    if outcomes["created"] < cluster.ceiling:
        # Orphaned reservations hold quota until they expire: wait for the lease holder to
        # release them, then try the refused pods again.
        try:
            eventually(lambda: not cluster.ledger_status().get("reservations"), "orphans to expire")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{replica_warnings(cluster)}") from None
        created = {p["metadata"]["name"] for p in cluster.pods()}
        retry = [n for n in names if n not in created]
        again = create_all(cluster, retry, during=lambda *_: None)
        second_wave = again["created"]
    alive = [r for r in cluster.replicas if r.alive]
    return ScenarioResult(
        admitted=len(cluster.pods()),
        denied=pods - len(cluster.pods()),
        seconds=seconds,
        per_replica={r.name: r.metrics() for r in alive},
        second_wave=second_wave,
    )


def truth(cluster: HACluster) -> dict[str, dict[str, int]]:
    """Usage by tier as the live pods say (a pod without a tier label was booked guaranteed)."""
    nanos: dict[str, Counter[str]] = {"guaranteed": Counter(), "burst": Counter()}
    for stored in cluster.pods():
        tier = stored["metadata"].get("labels", {}).get("tenantgate.io/tier", "guaranteed")
        for name, quantity in pod_requests(stored).items():
            nanos[tier][name] += quantity.nanos
    return {tier: {k: v for k, v in sums.items() if v} for tier, sums in nanos.items()}


def stored_usage(cluster: HACluster) -> dict[str, dict[str, int]]:
    used = cluster.ledger_status().get("used") or {}
    return {
        tier: {name: Quantity.parse(text).nanos for name, text in (used.get(tier) or {}).items()}
        for tier in ("guaranteed", "burst")
    }


def check_outcome(cluster: HACluster) -> None:
    """Exactly the ceiling admitted, the right tiers, and the ledger equal to the truth."""
    pods = cluster.pods()
    assert len(pods) == cluster.ceiling
    tiers = Counter(
        p["metadata"].get("labels", {}).get("tenantgate.io/tier", "guaranteed") for p in pods
    )
    assert tiers == {
        "guaranteed": cluster.guaranteed,
        "burst": cluster.ceiling - cluster.guaranteed,
    }
    for stored in pods:
        if stored["metadata"].get("labels", {}).get("tenantgate.io/tier") == "burst":
            assert stored["spec"]["priorityClassName"] == "tenant-burst"
            assert stored["spec"]["priority"] == 10

    recounts = _recounts(cluster)
    eventually(lambda: _recounts(cluster) > recounts, "the lease holder's next recount")
    expected = truth(cluster)
    seen: list[dict[str, Any]] = []

    def equal() -> bool:
        status = cluster.ledger_status()
        seen[:] = [status]
        return stored_usage(cluster) == expected and not status.get("reservations")

    try:
        eventually(equal, "the TenantLedger to equal the truth")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: expected {expected}, last status {seen}\n{replica_warnings(cluster)}"
        ) from None
    ledger = ledger_from_json(cluster.ledger_status(), tenant=TENANT)
    assert ledger.guaranteed["pods"] == Quantity.parse(str(cluster.guaranteed))
    assert ledger.burst["pods"] == Quantity.parse(str(cluster.ceiling - cluster.guaranteed))


# --------------------------------------------------------------------------- tests


@pytest.fixture
def cluster(kube: Cluster, kube_cert_dir: Path, tmp_path: Path) -> Iterator[HACluster]:
    with ha_cluster(kube, tmp_path, cert_dir=kube_cert_dir, guaranteed=40, ceiling=100) as running:
        yield running


def test_600_concurrent_creates_admit_exactly_the_ceiling(cluster: HACluster) -> None:
    result = run_ha_scenario(cluster, pods=600)
    check_outcome(cluster)
    # Every replica answered reviews and wrote the shared ledger.
    assert all(c > 0 for c in cluster.connections.values())
    assert len(cluster.connections) == 3
    assert result.total("tenantgate_ledger_cas_writes_total") > 0
    # Group commit: far fewer writes than the changes they carried.
    assert result.total("tenantgate_ledger_cas_writes_total") < result.total(
        "tenantgate_ledger_group_commit_changes_total"
    )


def test_600_creates_under_conflict_storms(cluster: HACluster) -> None:
    result = run_ha_scenario(cluster, pods=600, storms=4)
    check_outcome(cluster)
    assert result.total("tenantgate_ledger_cas_conflicts_total") >= 4 * 25 * 0.5


def test_600_creates_with_the_leader_killed_mid_run(cluster: HACluster) -> None:
    first = cluster.leader()
    result = run_ha_scenario(cluster, pods=600, kill_leader_after=150)
    assert not first.alive
    check_outcome(cluster)
    assert cluster.leader() is not first
    assert len(result.per_replica) == 2


def test_a_new_leader_releases_the_old_leaders_reservations_exactly_once(
    cluster: HACluster,
) -> None:
    # Reservations nobody will confirm: mutations whose pods are never created.
    orphans = 7
    context = client_context(certs.MaterialPaths(cluster.cert_dir).ca_cert)
    for n in range(orphans):
        replica = cluster.replicas[n % len(cluster.replicas)]
        answer = mutate(replica, context, uid=f"orphan-{n}")
        assert answer["response"]["allowed"] is True
    status = cluster.ledger_status()
    assert len(status["reservations"]) == orphans
    assert status["used"]["guaranteed"]["pods"] == str(orphans)

    old = cluster.leader()
    old_lease = cluster.lease()["spec"]
    old.kill()
    eventually(lambda: _has_other_leader(cluster, old), "another replica to take the Lease")
    new = cluster.leader()
    new_lease = cluster.lease()["spec"]
    assert new_lease["leaseTransitions"] == old_lease["leaseTransitions"] + 1
    # The new holder waited for the old Lease to expire, as observed on its own clock.
    waited = _time(new_lease["acquireTime"]) - _time(old_lease["renewTime"])
    assert waited >= float(ENVIRONMENT["TENANTGATE_LEASE_DURATION_SECONDS"])

    eventually(
        lambda: not cluster.ledger_status().get("reservations"), "the reservations to expire"
    )
    assert cluster.ledger_status()["used"] == {"guaranteed": {}, "burst": {}}
    # Exactly once: the expiries reported by the surviving replicas add up to the orphans.
    expired = sum(
        r.metrics().get("tenantgate_reservations_expired_total{tenant=team-a}", 0.0)
        for r in cluster.replicas
        if r.alive
    )
    assert expired == orphans
    assert new.metrics().get("tenantgate_leader") == 1.0


@pytest.fixture
def small_cluster(kube: Cluster, kube_cert_dir: Path, tmp_path: Path) -> Iterator[HACluster]:
    with ha_cluster(kube, tmp_path, cert_dir=kube_cert_dir, guaranteed=2, ceiling=3) as running:
        yield running


def test_a_new_leader_slow_to_list_the_pods_keeps_the_room_of_pods_admitted_without_a_leader(
    small_cluster: HACluster,
) -> None:
    # Pods admitted while no replica leads are stored with bound reservations nobody confirms.
    # Their reservations outlive their TTL while the next lease holder's first pod list is
    # slow (the fault proxy holds it): its sweeps must not free their room meanwhile, or the
    # ceiling is lent again before that list charges them.
    cluster = small_cluster
    old = cluster.leader()
    old.kill()
    cluster.kube.balancer.set_backends([r.port for r in cluster.replicas if r.alive])
    # Held well past the checks below, yet answered within the client's 60 s list timeout.
    cluster.kube.proxy.add_latency(50.0, verb="list", resource="pods", path="/api/v1/pods")
    api = cluster.api_client()
    try:
        core = client.CoreV1Api(api)
        for n in range(cluster.ceiling):
            assert create_pod(core, f"leaderless-{n}") == "created"
        admitted = time.monotonic()
        eventually(lambda: _has_other_leader(cluster, old), "another replica to take the Lease")
        # Past every reservation's TTL, with sweeps every half second on the new holder.
        time.sleep(max(0.0, admitted + TTL_SECONDS + 3.0 - time.monotonic()))
        status = cluster.ledger_status()
        assert len(status.get("reservations") or []) == cluster.ceiling, (
            f"the admitted pods' reservations were freed before their pods were listed: "
            f"{status}\n{replica_warnings(cluster)}"
        )
        assert create_pod(core, "one-too-many") == "denied"
    finally:
        api.close()
        cluster.kube.proxy.clear()
    # Once the list arrives the pods are charged and their reservations settled.
    eventually(
        lambda: not cluster.ledger_status().get("reservations"),
        "the new lease holder to confirm the pods",
        timeout=WAIT,
    )
    assert stored_usage(cluster) == truth(cluster)
    assert len(cluster.pods()) == cluster.ceiling


def _has_other_leader(cluster: HACluster, old: Replica) -> bool:
    try:
        return cluster.leader() is not old
    except (AssertionError, client.ApiException):
        return False


def _time(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def mutate(replica: Replica, context: Any, *, uid: str) -> dict[str, Any]:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": "test"},
            "object": {
                **pod("orphan"),
                "metadata": {"generateName": "orphan-", "namespace": NAMESPACE},
            },
            "dryRun": False,
        },
    }
    with httpx.Client(verify=context, trust_env=False) as http:
        response = http.post(f"https://127.0.0.1:{replica.port}/mutate", json=review, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_an_unreachable_ledger_fails_closed_with_a_message_that_says_so(
    cluster: HACluster,
) -> None:
    # The mutating webhook's call fails (failurePolicy: Ignore skips it); the validating one
    # denies, saying why.
    cluster.kube.proxy.add_errors(503, resource=RESOURCE, count=100_000)
    api = cluster.api_client()
    try:
        core: Any = client.CoreV1Api(api)
        with pytest.raises(client.ApiException) as raised:
            core.create_namespaced_pod(NAMESPACE, pod("unlucky"))
    finally:
        api.close()
        cluster.kube.proxy.clear()
    assert raised.value.status == 503
    message = json.loads(raised.value.body or "{}")["message"]
    assert message.startswith(
        'admission webhook "validate.tenantgate.io" denied the request: tenant team-a: '
        "cannot check the quota ledger: the Kubernetes API server is unreachable ("
    )
    assert message.endswith("; retry")
    assert cluster.pods() == []
    # Once the API server answers again, so does the ledger.
    core_api = cluster.api_client()
    try:
        assert create_pod(client.CoreV1Api(core_api), "lucky") == "created"
    finally:
        core_api.close()


def test_replicas_name_themselves_in_the_lease(cluster: HACluster) -> None:
    holder = cluster.lease()["spec"]["holderIdentity"]
    assert any(holder.startswith(f"{r.name}_") for r in cluster.replicas)
    followers = [r for r in cluster.replicas if r is not cluster.leader()]
    assert [r.metrics().get("tenantgate_leader") for r in followers] == [0.0, 0.0]


def test_one_replica_on_the_memory_backend_admits_the_ceiling_and_says_it_is_connected(
    kube: Cluster, kube_cert_dir: Path, tmp_path: Path
) -> None:
    """The benchmark's baseline: the memory ledger has no TenantLedger watch, and a replica
    connected to the cluster must not log that it runs offline (it did, from 0639dd2 on)."""
    with ha_cluster(
        kube,
        tmp_path,
        cert_dir=kube_cert_dir,
        replicas=1,
        guaranteed=4,
        ceiling=10,
        backend="memory",
    ) as cluster:
        outcomes = create_all(cluster, [f"p-{n}" for n in range(30)], during=lambda *_: None)
        assert outcomes == {"created": 10, "denied": 20}
        (replica,) = cluster.replicas
        assert replica.metrics()["tenantgate_cluster_synced"] == 1.0
        assert not [line for line in replica.process.lines if "OFFLINE" in line]


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.integration.test_ha``: run the scenario once and print its figures.

    The benchmark calls this (``--json``) to report throughput and compare-and-swap retries
    of three replicas next to the single-replica memory backend.
    """
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--pods", type=int, default=600)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--guaranteed", type=int, default=40)
    parser.add_argument("--ceiling", type=int, default=100)
    parser.add_argument("--storms", type=int, default=0, help="conflict storms of 25 writes")
    parser.add_argument("--kill-leader-after", type=int, default=None)
    parser.add_argument("--backend", choices=["kubernetes", "memory"], default="kubernetes")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="tenantgate-ha-") as directory,
        installed_cluster(Path(directory) / "kube") as (kube, cert_dir),
        ha_cluster(
            kube,
            Path(directory),
            cert_dir=cert_dir,
            replicas=args.replicas,
            guaranteed=args.guaranteed,
            ceiling=args.ceiling,
            backend=args.backend,
        ) as cluster,
    ):
        result = run_ha_scenario(
            cluster,
            pods=args.pods,
            storms=args.storms,
            kill_leader_after=args.kill_leader_after,
        )
    summary = result.summary()
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        for key, value in summary.items():
            print(f"{key:>22}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
