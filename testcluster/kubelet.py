"""A simulated kubelet for N nodes: the one part of the cluster that is not real.

It does what the control plane needs from kubelets, through the API like a kubelet:
* registers each Node (capacity, allocatable, labels, taints, Ready) and renews its Lease in
  ``kube-node-lease``, so the node-lifecycle controller keeps it Ready and untainted;
* starts pods bound to its nodes: status Running with the kubelet's conditions, container
  statuses (with ``allocatedResources`` and ``resources``) and a pod IP;
* finishes pods that do not restart ``Always``: Succeeded after their run time, or Failed with
  an exit code (annotations below), so Jobs and CronJobs complete;
* removes pods being deleted once they have stopped (within their grace period) with a
  UID-preconditioned delete of grace 0, as the kubelet's status manager does
  (``pkg/kubelet/status/status_manager.go``, ``canBeDeleted``); without it preemption
  never completes;
* answers in-place resizes: the new resources become allocated when the node has room,
  else the pod gets ``PodResizePending`` (``Infeasible`` beyond the node's allocatable,
  ``Deferred`` beyond what is free now), as ``pkg/kubelet/allocation`` decides.

Gated pods are never bound, so they are never started.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from kubernetes import client, config

from testcluster.quantity import parse_quantity

logger = logging.getLogger(__name__)

PREFIX = "testcluster.tenantgate.io/"
# How long a pod that does not restart Always runs, in seconds (default 1).
RUN_SECONDS = PREFIX + "run-seconds"
# The exit code it ends with (default 0: Succeeded; anything else: Failed).
EXIT_CODE = PREFIX + "exit-code"
# How long its containers take to stop once deleted, capped by the grace period (default 0.2).
STOP_SECONDS = PREFIX + "stop-seconds"

DEFAULT_CAPACITY = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"}
LEASE_SECONDS = 40
Pod = dict[str, Any]


@dataclass(frozen=True)
class NodeSpec:
    """One simulated node."""

    name: str
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _api(kubeconfig: Path) -> Any:
    factory: Any = config.new_client_from_config
    return factory(config_file=str(kubeconfig))


class SimulatedKubelet:
    """Runs the nodes of ``nodes`` against the API server of ``kubeconfig`` until stopped."""

    def __init__(
        self,
        kubeconfig: Path,
        nodes: Sequence[NodeSpec],
        *,
        heartbeat_seconds: float = 10.0,
    ) -> None:
        self._kubeconfig = kubeconfig
        self._nodes: dict[str, NodeSpec] = {}
        self._initial = list(nodes)
        self._heartbeat = heartbeat_seconds
        self._stop = threading.Event()
        self._work: queue.Queue[tuple[str, str]] = queue.Queue()
        self._timers: list[tuple[float, int, str, str]] = []
        self._timer_seq = itertools.count()
        self._lock = threading.Lock()
        self._pods: dict[str, Pod] = {}  # namespace/name -> last seen, for pods on our nodes
        self._ips = itertools.count(2)
        self._stopping: set[str] = set()  # pods whose containers are stopping
        self._paused = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch: Any = None  # the open pod watch's response, shut down by stop()
        self._api: Any = None
        self._core: Any = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SimulatedKubelet:
        self._api = _api(self._kubeconfig)
        self._core = client.CoreV1Api(self._api)
        for spec in self._initial:
            self.add_node(spec)
        for target, name in (
            (self._watch_pods, "kubelet-watch"),
            (self._work_loop, "kubelet-work"),
            (self._heartbeat_loop, "kubelet-heartbeat"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._work.put(("", ""))
        # The watch thread blocks reading its stream until the next event (up to a minute):
        # shutting the response down unblocks it, so the join below does not time out.
        watch = self._watch
        if watch is not None:
            with contextlib.suppress(Exception):
                watch.shutdown()
        for thread in self._threads:
            thread.join(10)
        if self._api is not None:
            self._api.close()

    def __enter__(self) -> SimulatedKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def nodes(self) -> list[str]:
        """The names of the nodes it runs."""
        with self._lock:
            return list(self._nodes)

    def pause(self) -> None:
        """Act on nothing until :meth:`resume` (a busy kubelet): tests see a pod between its
        spec's change and the kubelet's answer."""
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()
        with self._lock:
            keys = [(key, pod["metadata"]["uid"]) for key, pod in self._pods.items()]
        for key, uid in keys:
            self._work.put((key, uid))

    # --- nodes -------------------------------------------------------------------------------

    def add_node(self, spec: NodeSpec) -> None:
        """Register ``spec`` (created, or its labels, taints and capacity replaced)."""
        labels = {
            "kubernetes.io/hostname": spec.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **spec.labels,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": spec.name, "labels": labels},
            "spec": {"taints": [dict(taint) for taint in spec.taints]},
        }
        try:
            self._core.create_node(body, _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            self._core.patch_node(spec.name, body, _preload_content=False)
        with self._lock:
            self._nodes[spec.name] = spec
        self._report_status(spec)
        self._renew_lease(spec.name)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)
        try:
            self._core.delete_node(name, _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _report_status(self, spec: NodeSpec) -> None:
        now = _now()
        conditions = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        status = {
            "capacity": dict(spec.capacity),
            "allocatable": dict(spec.capacity),
            "conditions": [
                {
                    "type": kind,
                    "status": value,
                    "reason": reason,
                    "message": "simulated kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
                for kind, value, reason in conditions
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": spec.name},
            ],
            "nodeInfo": {
                "machineID": spec.name,
                "systemUUID": spec.name,
                "bootID": spec.name,
                "kernelVersion": "simulated",
                "osImage": "simulated",
                "containerRuntimeVersion": "simulated://1",
                "kubeletVersion": "v1.37.2",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        self._core.patch_node_status(spec.name, {"status": status}, _preload_content=False)

    def _renew_lease(self, name: str) -> None:
        leases: Any = client.CoordinationV1Api(self._api)
        body = {
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _micro_now(),
            },
        }
        try:
            leases.patch_namespaced_lease(name, "kube-node-lease", body, _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            leases.create_namespaced_lease("kube-node-lease", body, _preload_content=False)

    def _heartbeat_loop(self) -> None:
        beats = 0
        while not self._stop.wait(self._heartbeat):
            beats += 1
            with self._lock:
                nodes = list(self._nodes.values())
            for spec in nodes:
                try:
                    self._renew_lease(spec.name)
                    if beats % 6 == 0:  # the kubelet reports status far less often than leases
                        self._report_status(spec)
                except Exception:  # a beat lost now is retried at the next one
                    logger.warning("heartbeat of node %s failed", spec.name, exc_info=True)

    # --- pods --------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list_pods()
                version = self._stream_pods(version)
            except client.ApiException as exc:
                if exc.status == 410:
                    version = ""
                elif not self._stop.is_set():
                    logger.warning("pod watch failed: %s", exc.reason)
                    time.sleep(0.5)
            except Exception:
                if not self._stop.is_set():
                    logger.warning("pod watch failed", exc_info=True)
                    time.sleep(0.5)

    def _list_pods(self) -> str:
        response = self._core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=", _preload_content=False
        )
        document = json.loads(response.data)
        for pod in document["items"]:
            self._seen(pod)
        return str(document["metadata"]["resourceVersion"])

    def _stream_pods(self, version: str) -> str:
        response = self._core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=",
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=60,
            _preload_content=False,
        )
        self._watch = response
        buffer = b""
        try:
            if self._stop.is_set():
                return version
            for chunk in response.stream(65536):
                if self._stop.is_set():
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            return ""
                        raise RuntimeError(f"watch error: {obj.get('message')}")
                    version = str(obj["metadata"]["resourceVersion"])
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        self._forget(obj)
                    else:
                        self._seen(obj)
        finally:
            self._watch = None
            response.release_conn()
        return version

    def _key(self, pod: Pod) -> str:
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

    def _seen(self, pod: Pod) -> None:
        with self._lock:
            ours = pod["spec"].get("nodeName") in self._nodes
            if not ours:
                return
            self._pods[self._key(pod)] = pod
        self._work.put((self._key(pod), pod["metadata"]["uid"]))

    def _forget(self, pod: Pod) -> None:
        with self._lock:
            current = self._pods.get(self._key(pod))
            if current is not None and current["metadata"]["uid"] == pod["metadata"]["uid"]:
                del self._pods[self._key(pod)]

    def _after(self, seconds: float, key: str, uid: str) -> None:
        with self._lock:
            heapq.heappush(
                self._timers, (time.monotonic() + seconds, next(self._timer_seq), key, uid)
            )
        self._work.put(("", ""))  # wake the worker to see the new deadline

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                due = self._timers[0][0] - time.monotonic() if self._timers else 1.0
            try:
                key, uid = self._work.get(timeout=max(0.0, min(due, 1.0)))
            except queue.Empty:
                key, uid = "", ""
            ready: list[tuple[str, str]] = [(key, uid)] if key else []
            with self._lock:
                while self._timers and self._timers[0][0] <= time.monotonic():
                    _, _, timer_key, timer_uid = heapq.heappop(self._timers)
                    ready.append((timer_key, timer_uid))
            for item_key, item_uid in ready:
                try:
                    self._sync(item_key, item_uid)
                except client.ApiException as exc:
                    if exc.status not in (404, 409):
                        logger.warning("syncing pod %s: %s %s", item_key, exc.status, exc.reason)
                        self._after(0.5, item_key, item_uid)
                    elif exc.status == 409:
                        self._after(0.1, item_key, item_uid)
                except Exception:
                    logger.warning("syncing pod %s failed", item_key, exc_info=True)

    def _sync(self, key: str, uid: str) -> None:
        if self._paused.is_set():
            return  # resume() looks at every pod again
        with self._lock:
            pod = self._pods.get(key)
        if pod is None or pod["metadata"]["uid"] != uid:
            return
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            self._finish_deletion(pod)
            return
        phase = status.get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            return
        if not status.get("startTime") or phase == "Pending":
            self._start(pod)
            return
        if pod["spec"].get("restartPolicy", "Always") != "Always":
            deadline = self._deadline(pod)
            if deadline is not None and deadline <= time.time():
                self._complete(pod)
                return
        self._resize(pod)

    # --- pod lifecycle -----------------------------------------------------------------------

    def _annotation(self, pod: Pod, name: str, default: float) -> float:
        value = (pod["metadata"].get("annotations") or {}).get(name)
        try:
            return float(value) if value is not None else default
        except ValueError:
            return default

    def _deadline(self, pod: Pod) -> float | None:
        started = (pod.get("status") or {}).get("startTime")
        if not started:
            return None
        begun = datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        return begun + self._annotation(pod, RUN_SECONDS, 1.0)

    def _container_status(
        self, container: Mapping[str, Any], *, running: bool, ready: bool
    ) -> dict[str, Any]:
        resources = container.get("resources") or {}
        state: dict[str, Any] = (
            {"running": {"startedAt": _now()}}
            if running
            else {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": _now(),
                    "finishedAt": _now(),
                }
            }
        )
        return {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": f"simulated://{container.get('image', '')}",
            "containerID": f"simulated://{container['name']}",
            "ready": ready,
            "started": running,
            "restartCount": 0,
            "state": state,
            "allocatedResources": dict(resources.get("requests") or {}),
            "resources": {k: dict(v) for k, v in resources.items() if k in ("requests", "limits")},
        }

    def _conditions(self, ready: bool, reason: str | None = None) -> list[dict[str, Any]]:
        now = _now()
        conditions = []
        for kind, value in (
            ("PodReadyToStartContainers", True),
            ("Initialized", True),
            ("ContainersReady", ready),
            ("Ready", ready),
        ):
            condition: dict[str, Any] = {
                "type": kind,
                "status": "True" if value else "False",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
            if not value and reason:
                condition["reason"] = reason
            conditions.append(condition)
        return conditions

    def _start(self, pod: Pod) -> None:
        spec = pod["spec"]
        node = spec["nodeName"]
        with self._lock:
            index = list(self._nodes).index(node) if node in self._nodes else 0
        address = f"10.244.{index}.{next(self._ips) % 250 + 2}"
        init = [
            self._container_status(
                container, running=container.get("restartPolicy") == "Always", ready=True
            )
            for container in spec.get("initContainers") or []
        ]
        status: dict[str, Any] = {
            "phase": "Running",
            "conditions": self._conditions(True),
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": address,
            "podIPs": [{"ip": address}],
            "startTime": _now(),
            "qosClass": (pod.get("status") or {}).get("qosClass"),
            "containerStatuses": [
                self._container_status(container, running=True, ready=True)
                for container in spec["containers"]
            ],
        }
        if init:
            status["initContainerStatuses"] = init
        self._patch_status(pod, status)
        if spec.get("restartPolicy", "Always") != "Always":
            self._after(
                self._annotation(pod, RUN_SECONDS, 1.0) + 0.05,
                self._key(pod),
                pod["metadata"]["uid"],
            )

    def _complete(self, pod: Pod) -> None:
        code = int(self._annotation(pod, EXIT_CODE, 0))
        now = _now()
        statuses = []
        for container in pod["spec"]["containers"]:
            entry = self._container_status(container, running=False, ready=False)
            entry["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": (pod.get("status") or {}).get("startTime") or now,
                    "finishedAt": now,
                }
            }
            statuses.append(entry)
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": self._conditions(False, "PodCompleted" if code == 0 else "PodFailed"),
            "containerStatuses": statuses,
        }
        self._patch_status(pod, status)

    def _finish_deletion(self, pod: Pod) -> None:
        meta = pod["metadata"]
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        stop = min(grace, self._annotation(pod, STOP_SECONDS, 0.2))
        deleted = datetime.strptime(meta["deletionTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        # deletionTimestamp is when the grace period ends; it started `grace` seconds before.
        began = deleted.replace(tzinfo=UTC).timestamp() - grace
        remaining = began + stop - time.time()
        key = self._key(pod)
        if remaining > 0.01 and key not in self._stopping:
            self._stopping.add(key)
            self._after(remaining, key, meta["uid"])
            return
        self._stopping.discard(key)
        self._core.delete_namespaced_pod(
            meta["name"],
            meta["namespace"],
            body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            _preload_content=False,
        )

    def _patch_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        # Conditional on the version the decision was made from: a pod someone else changed
        # meanwhile (finished, deleted) is looked at again (409), never overwritten.
        body = {
            "metadata": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
            "status": status,
        }
        self._core.patch_namespaced_pod_status(
            meta["name"], meta["namespace"], body, _preload_content=False
        )

    # --- in-place resize ---------------------------------------------------------------------

    def _resize(self, pod: Pod) -> None:
        spec, status = pod["spec"], pod.get("status") or {}
        allocated = {
            c["name"]: c.get("allocatedResources") or {}
            for c in status.get("containerStatuses") or []
        }
        wanted = {
            c["name"]: dict((c.get("resources") or {}).get("requests") or {})
            for c in spec["containers"]
        }
        if all(_same(allocated.get(name, {}), want) for name, want in wanted.items()):
            if any(c["type"] == "PodResizePending" for c in status.get("conditions") or []):
                self._patch_status(
                    pod, {"conditions": [{"type": "PodResizePending", "$patch": "delete"}]}
                )
            return
        verdict = self._room_for(pod, wanted)
        if verdict is None:
            statuses = [
                self._container_status(container, running=True, ready=True)
                for container in spec["containers"]
            ]
            conditions = [
                {"type": "PodResizePending", "$patch": "delete"},
                {"type": "PodResizeInProgress", "$patch": "delete"},
            ]
            self._patch_status(pod, {"containerStatuses": statuses, "conditions": conditions})
            return
        reason, message = verdict
        self._patch_status(
            pod,
            {
                "conditions": [
                    {
                        "type": "PodResizePending",
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": _now(),
                    }
                ]
            },
        )

    def _room_for(
        self, pod: Pod, wanted: Mapping[str, Mapping[str, str]]
    ) -> tuple[str, str] | None:
        """None when the node can allocate ``wanted``; else (reason, message)."""
        node = pod["spec"]["nodeName"]
        with self._lock:
            spec = self._nodes.get(node)
            others = [
                other
                for key, other in self._pods.items()
                if key != self._key(pod)
                and other["spec"].get("nodeName") == node
                and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ]
        if spec is None:
            return ("Infeasible", f"node {node} is not simulated")
        for resource in ("cpu", "memory"):
            capacity = parse_quantity(spec.capacity.get(resource, "0"))
            want = sum((parse_quantity(r.get(resource, "0")) for r in wanted.values()), Fraction(0))
            if want > capacity:
                return (
                    "Infeasible",
                    f"Node didn't have enough capacity: {resource}, "
                    f"requested: {want}, capacity: {capacity}",
                )
            used = Fraction(0)
            for other in others:
                for container in (other.get("status") or {}).get("containerStatuses") or []:
                    used += parse_quantity(
                        (container.get("allocatedResources") or {}).get(resource, "0")
                    )
            if used + want > capacity:
                return ("Deferred", f"Node didn't have enough resource: {resource}")
        return None


def _same(left: Mapping[str, str], right: Mapping[str, str]) -> bool:
    names = set(left) | set(right)
    return all(parse_quantity(left.get(n, "0")) == parse_quantity(right.get(n, "0")) for n in names)
