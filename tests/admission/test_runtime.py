"""The runtime: config loading and hot reload, offline mode, the guard, priority classes, sweeps."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

import admission.runtime
import certs
from admission.runtime import (
    DEFAULT_CONFIG,
    GC_YOUNG_THRESHOLD,
    ClusterGuard,
    Runtime,
    Timings,
    build_runtime,
    effective_classes,
)
from admission.server import ServeError
from admission.settings import Settings
from admission.version import package_version
from classifier.config import PriorityClassSpec
from tenants.configfile import load_text
from tenants.decisions import PolicyAdmitter
from tenants.ledger import MemoryLedger
from tenants.verdicts import AdmissionInput

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
reservationTTLSeconds: 30
tenants:
  team-a:
    namespaces: [team-a]
    quota: {guaranteed: {cpu: "4"}, burst: {ratio: 2}}
"""
FAST = Timings(config_poll_seconds=0.02, sweep_seconds=0.02, recount_seconds=60)
WAIT = 30.0
NO_CLUSTER: dict[str, str] = {}


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def eventually(check: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def pod_request(name: str, *, cpu: str = "1", namespace: str = "team-a") -> AdmissionInput:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]
        },
    }
    return AdmissionInput(
        uid=f"req-{name}", operation="CREATE", namespace=namespace, name=name, object=pod
    )


def offline_runtime(tmp_path: Path, *, config: str = CONFIG, clock: Clock | None = None) -> Runtime:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(config)
    settings = Settings(config=path, cert_dir=tmp_path / "certs", offline=True)
    return build_runtime(settings, timings=FAST, clock=clock or Clock(), environ=NO_CLUSTER)


def run(runtime: Runtime, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        await runtime.startup()
        try:
            await scenario()
        finally:
            await runtime.shutdown()

    asyncio.run(main())


# --------------------------------------------------------------------------- building


def test_without_a_cluster_it_runs_offline_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(cert_dir=tmp_path / "certs")
    runtime = build_runtime(settings, timings=FAST, environ=NO_CLUSTER)
    assert runtime.target.offline
    assert runtime.sync is None
    assert runtime.config_file == str(DEFAULT_CONFIG)
    assert set(runtime.policy.tenants) == {"team-a", "ml"}

    async def scenario() -> None:
        checks = runtime.readiness.report().checks
        assert checks["cluster"].ok
        assert checks["cluster"].detail == (
            "offline: no cluster configured; ledger counts admissions only"
        )
        assert not checks["certs"].ok  # no TLS material yet: the server creates it
        assert runtime.synced()

    with caplog.at_level(logging.WARNING, logger="admission.runtime"):
        run(runtime, scenario)
    assert "running OFFLINE: no cluster configured" in caplog.text


@pytest.fixture
def gc_untuned(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process whose collector is as CPython starts it; restored afterwards."""
    threshold = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, *threshold[1:])
    monkeypatch.setattr(admission.runtime, "_gc_tuned", False)
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("gc_untuned")
def test_starting_freezes_the_config_and_raises_the_young_threshold(tmp_path: Path) -> None:
    runtime = offline_runtime(tmp_path)
    assert gc.get_freeze_count() == 0

    async def scenario() -> None:
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD

    run(runtime, scenario)


@pytest.mark.usefixtures("gc_untuned")
def test_the_ledger_of_the_first_sync_is_frozen_once_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = offline_runtime(tmp_path)
    synced = False
    monkeypatch.setattr(runtime, "synced", lambda: synced)
    monkeypatch.setattr(admission.runtime, "_SYNC_POLL_SECONDS", 0.01)

    async def main() -> None:
        nonlocal synced
        waiting = asyncio.create_task(runtime._freeze_when_synced())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        gc.unfreeze()
        synced = True
        await asyncio.wait_for(waiting, WAIT)
        assert gc.get_freeze_count() > 0

    asyncio.run(main())


def test_an_invalid_config_stops_the_start_with_every_problem_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(CONFIG.replace('cpu: "4"', 'cpu: "4x"'))
    with caplog.at_level(logging.ERROR), pytest.raises(ServeError, match="is invalid"):
        build_runtime(Settings(config=path), timings=FAST, environ=NO_CLUSTER)
    assert f"config: {path}:11: tenants.team-a.quota.guaranteed.cpu: " in caplog.text


def test_an_unusable_kubeconfig_stops_the_start(tmp_path: Path) -> None:
    settings = Settings(kubeconfig=tmp_path / "missing")
    with pytest.raises(ServeError, match="cannot use kubeconfig"):
        build_runtime(settings, timings=FAST, environ=NO_CLUSTER)


def test_timings_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENANTGATE_RECOUNT_SECONDS", "30")
    monkeypatch.setenv("TENANTGATE_WATCH_TIMEOUT_SECONDS", "60")
    timings = Timings.from_settings(Settings(sweep_seconds=1.5))
    assert timings.recount_seconds == 30.0
    assert timings.watch_timeout_seconds == 60
    assert timings.sweep_seconds == 1.5
    assert timings.config_poll_seconds == Timings().config_poll_seconds
    monkeypatch.setenv("TENANTGATE_SWEEP_SECONDS", "soon")
    with pytest.raises(ValidationError, match="sweep_seconds"):
        Settings()
    monkeypatch.setenv("TENANTGATE_SWEEP_SECONDS", "0")
    with pytest.raises(ValidationError, match="greater than 0"):
        Settings()


# --------------------------------------------------------------------------- config hot reload


def test_a_changed_config_is_swapped_in_and_a_broken_one_keeps_the_last_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = offline_runtime(tmp_path)
    path = tmp_path / "tenantgate.yaml"
    with_b = CONFIG + '  team-b:\n    namespaces: [team-b]\n    quota: {guaranteed: {cpu: "2"}}\n'

    async def metrics_text() -> str:
        transport = httpx.ASGITransport(app=runtime.metrics_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return (await http.get("/metrics")).text

    async def scenario() -> None:
        path.write_text(with_b)
        await eventually(lambda: "team-b" in runtime.policy.tenants, "the new config")
        assert runtime.admitter.policy is runtime.policy
        assert runtime.controller.policy is runtime.policy
        good = runtime.policy

        path.write_text(with_b.replace('cpu: "2"', "cpu: lots") + "    bogus: 1\n")
        await eventually(lambda: runtime.config_error is not None, "the rejection")
        assert runtime.policy is good
        check = runtime.readiness.report().checks["config"]
        assert check.ok
        assert "(last good); reload rejected: 2 problems: " in check.detail
        text = await metrics_text()
        assert "tenantgate_config_reload_failures_total 1.0" in text
        assert "tenantgate_config_last_reload_ok 0.0" in text

        path.write_text(CONFIG)
        await eventually(lambda: "team-b" not in runtime.policy.tenants, "the fixed config")
        assert runtime.config_error is None
        assert "tenantgate_config_last_reload_ok 1.0" in await metrics_text()

    with caplog.at_level(logging.ERROR, logger="admission.runtime"):
        run(runtime, scenario)
    messages = [record.getMessage() for record in caplog.records]
    assert messages[:3] == [
        f"config rejected: {path}:14: tenants.team-b.quota.guaranteed.cpu: "
        'invalid quantity "lots": not a number',
        f"config rejected: {path}:15: tenants.team-b.bogus: unknown field",
        f"config {path} rejected (2 problems); keeping the last good config",
    ]


# --------------------------------------------------------------------------- offline ledger


def test_offline_reservations_expire_after_the_ttl(tmp_path: Path) -> None:
    clock = Clock()
    runtime = offline_runtime(tmp_path, clock=clock)

    async def scenario() -> None:
        verdict = await runtime.guard.mutate(pod_request("web", cpu="3"), now=clock())
        assert verdict.allowed
        assert runtime.ledger.get("team-a").guaranteed["cpu"].value() == 3
        clock.now += 30
        await eventually(lambda: not runtime.ledger.get("team-a").reservations, "expiry")
        assert runtime.ledger.get("team-a").guaranteed == {}
        assert runtime.controller.stats.expired == {"team-a": 1}

    run(runtime, scenario)


def test_status_is_served_on_the_metrics_app(tmp_path: Path) -> None:
    runtime = offline_runtime(tmp_path)

    async def scenario() -> None:
        await runtime.guard.mutate(pod_request("web", cpu="5"), now=1_700_000_000.0)
        transport = httpx.ASGITransport(app=runtime.metrics_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            document = (await http.get("/status")).json()
        assert document["mode"] == "offline"
        assert document["synced"] is True
        team_a = document["tenants"]["team-a"]
        assert team_a["used"] == {"guaranteed": {}, "burst": {"cpu": "5", "pods": "1"}}
        assert team_a["reservations"] == 1
        assert document["config"]["file"] == str(tmp_path / "tenantgate.yaml")

    run(runtime, scenario)


# --------------------------------------------------------------------------- priority classes


def test_the_clusters_priority_classes_replace_the_configs_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = offline_runtime(tmp_path)
    live = {
        "tenant-guaranteed": PriorityClassSpec(value=2000, preemptionPolicy="Never"),
        "system-node-critical": PriorityClassSpec(value=2_000_001_000),
    }

    async def scenario() -> None:
        runtime._priority_classes_changed(live)
        await eventually(
            lambda: runtime.policy.priority_classes["tenant-guaranteed"].value == 2000,
            "the recompiled policy",
        )
        assert runtime.policy.priority_classes["tenant-burst"].value == 10
        assert runtime.guard.missing_classes == frozenset({"tenant-burst"})
        check = runtime.readiness.report().checks["priorityClasses"]
        assert check.detail == (
            "priority classes named by the config do not exist in the cluster: tenant-burst "
            "(pods that would get them are denied)"
        )
        verdict = await runtime.guard.mutate(pod_request("web"), now=1_700_000_000.0)
        assert verdict.patched is not None
        assert verdict.patched["spec"]["priority"] == 2000
        assert verdict.patched["spec"]["preemptionPolicy"] == "Never"

    with caplog.at_level(logging.INFO, logger="admission.runtime"):
        run(runtime, scenario)
    assert "the cluster's value 2000 (Never) replaces the config's 1000" in caplog.text


def test_a_reloaded_config_gets_the_clusters_priority_classes_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = offline_runtime(tmp_path)
    path = tmp_path / "tenantgate.yaml"
    live = {
        "tenant-guaranteed": PriorityClassSpec(value=2000, preemptionPolicy="Never"),
        "tenant-burst": PriorityClassSpec(value=10, preemptionPolicy="Never"),
    }
    with_b = CONFIG + '  team-b:\n    namespaces: [team-b]\n    quota: {guaranteed: {cpu: "2"}}\n'

    def guaranteed_value() -> int:
        return runtime.policy.priority_classes["tenant-guaranteed"].value

    async def scenario() -> None:
        runtime._priority_classes_changed(live)
        await eventually(lambda: guaranteed_value() == 2000, "the recompiled policy")
        path.write_text(with_b)
        await eventually(lambda: "team-b" in runtime.policy.tenants, "the new config")
        assert guaranteed_value() == 2000
        verdict = await runtime.guard.mutate(pod_request("web", namespace="team-b"), now=1.0)
        assert verdict.patched is not None
        assert verdict.patched["spec"]["priority"] == 2000
        # A broken file keeps the last good policy, cluster values included.
        path.write_text(with_b.replace('cpu: "2"', "cpu: lots"))
        await eventually(lambda: runtime.config_error is not None, "the rejection")
        assert "team-b" in runtime.policy.tenants
        assert guaranteed_value() == 2000
        # The cluster's classes go away: the config's values are back.
        runtime._priority_classes_changed({})
        await eventually(lambda: guaranteed_value() == 1000, "the config's values")
        assert "team-b" in runtime.policy.tenants
        assert runtime.guard.missing_classes == frozenset({"tenant-burst", "tenant-guaranteed"})
        # Only compiled state is kept: the validated config was freed once compiled.
        assert not hasattr(runtime.policy, "config")

    with caplog.at_level(logging.INFO, logger="admission.runtime"):
        run(runtime, scenario)


def test_effective_classes_reports_missing_classes() -> None:
    declared = load_text(CONFIG).policy.priority_classes
    merged, missing = effective_classes(declared, {})
    assert missing == frozenset({"tenant-burst", "tenant-guaranteed"})
    assert merged == declared


# --------------------------------------------------------------------------- the guard


def guard_for(
    *, synced: bool, labels: dict[str, str] | None = None
) -> tuple[ClusterGuard, MemoryLedger]:
    ledger = MemoryLedger()
    admitter = PolicyAdmitter(load_text(CONFIG).policy, ledger)
    guard = ClusterGuard(admitter, synced=lambda: synced, namespace_labels=lambda ns: labels)
    return guard, ledger


def test_until_synced_pods_of_claimed_namespaces_are_told_to_retry() -> None:
    guard, ledger = guard_for(synced=False)

    async def scenario() -> None:
        for call in (guard.mutate, guard.validate):
            verdict = await call(pod_request("web"), now=0)
            assert not verdict.allowed
            assert verdict.code == 503
            assert verdict.reason == "ServiceUnavailable"
            assert verdict.message == (
                "tenantgate is still counting the cluster's pods (ledger not synced yet); "
                "retry in a few seconds"
            )
        elsewhere = await guard.mutate(pod_request("x", namespace="unclaimed"), now=0)
        assert elsewhere.allowed
        update = AdmissionInput(
            uid="u",
            operation="UPDATE",
            namespace="team-a",
            name="web",
            object={"metadata": {}},
            old_object={"metadata": {}},
        )
        assert (await guard.validate(update, now=0)).allowed

    asyncio.run(scenario())
    assert ledger.snapshot() == {}


def test_a_pod_that_would_get_a_missing_class_is_denied_and_its_booking_cancelled() -> None:
    guard, ledger = guard_for(synced=True)
    guard.missing_classes = frozenset({"tenant-burst"})

    async def scenario() -> None:
        fits = await guard.mutate(pod_request("small", cpu="4"), now=0)
        assert fits.allowed  # guaranteed: tenant-guaranteed exists
        burst = await guard.mutate(pod_request("big", cpu="2"), now=0)
        assert not burst.allowed
        assert burst.message == (
            "priority class tenant-burst (tier burst of tenant team-a) does not exist in the "
            "cluster; ask the platform team to create it (deploy/webhooks/) or to fix the "
            "tenantgate config"
        )

    asyncio.run(scenario())
    assert ledger.get("team-a").guaranteed["cpu"].value() == 4
    assert ledger.get("team-a").burst == {}
    assert len(ledger.get("team-a").reservations) == 1


def test_the_status_page_and_what_it_reads_are_wired(tmp_path: Path) -> None:
    runtime = offline_runtime(tmp_path)
    big = pod_request("huge", cpu="9")  # over team-a's ceiling of 8
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": big.uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": big.namespace,
            "name": big.name,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": big.object,
        },
    }
    served = certs.init(tmp_path / "served", service="tenantgate", namespace="tenantgate-system")

    async def scenario() -> None:
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=runtime.app), base_url="https://t"
            ) as webhook,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=runtime.metrics_app), base_url="http://t"
            ) as metrics,
        ):
            answer = (await webhook.post("/mutate", json=review)).json()
            assert answer["response"]["allowed"] is False
            before = (await metrics.get("/status")).json()
            runtime.certificate_loaded(served)
            after = (await metrics.get("/status?q=team&limit=10")).json()
            page = await metrics.get("/")
        (denial,) = before["recent"]["denials"]
        assert denial["pod"] == "team-a/huge"
        assert denial["tenant"] == "team-a"
        assert denial["message"] == answer["response"]["status"]["message"]
        assert before["recent"]["releases"] == []
        assert before["certificate"] is None
        assert after["certificate"] == {
            "notBefore": served.not_before.timestamp(),
            "notAfter": served.not_after.timestamp(),
            "serial": served.serial_hex,
        }
        assert before["replica"] == {
            "role": "leader",
            "election": False,
            "holder": None,
            "identity": None,
        }
        assert set(before["readiness"]["checks"]) >= {"config", "cluster"}
        assert before["version"] == package_version()
        assert after["page"] == {"matched": 1, "total": 1, "offset": 0, "limit": 10}
        assert page.status_code == 200
        assert "default-src 'none'" in page.headers["content-security-policy"]

    run(runtime, scenario)
