"""A simulated scheduler and kubelet for one node (opt-in: ``run_pods``).

The scheduler binds each unscheduled pod of the ``default-scheduler`` to the node, through the
``pods/binding`` subresource as kube-scheduler does, and never a gated pod (the scheduler's
``SchedulingGates`` PreEnqueue plugin; the binding would be refused anyway). The kubelet starts
the pods bound to its node: ``Running``, ready, with running container statuses. Pods whose
``restartPolicy`` is not ``Always`` (Job pods) run for ``run_seconds`` and then succeed, or fail
with the exit code their ``devapi.tenantgate.io/exit-code`` annotation names (a test-server
knob); a failing ``OnFailure`` pod is restarted instead. Graceful deletion still ends when the
grace period does (the registry's background reconcile).
"""

from __future__ import annotations

import random
from typing import Any

from devapi import gates, meta
from devapi.admission import UserInfo
from devapi.errors import APIError
from devapi.events import NORMAL
from devapi.kubelet import sync_pod
from devapi.registry import RequestContext
from devapi.resources import PODS
from devapi.store import clone
from devapi.types import JSONObject
from devapi.workloads.podcontrol import ControllerClient

NODE_NAME = "devapi-node"
EXIT_CODE_ANNOTATION = "devapi.tenantgate.io/exit-code"
SCHEDULER = UserInfo("system:kube-scheduler", ("system:authenticated",))
NODE_USER = UserInfo(f"system:node:{NODE_NAME}", ("system:nodes", "system:authenticated"))


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _conditions(scheduled: JSONObject | None, ready: bool, now: str) -> list[JSONObject]:
    value = "True" if ready else "False"
    conditions = [
        {"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]
    conditions[1]["status"] = "True"
    if not ready:
        for condition in conditions[2:]:
            condition["reason"] = "PodCompleted"
    conditions.append(
        scheduled
        or {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
    )
    return conditions


class Kubelet:
    """Scheduler and kubelet of the node ``NODE_NAME``."""

    name = "kubelet"

    def __init__(self, client: ControllerClient, *, run_seconds: float) -> None:
        self.client = client
        self.run_seconds = run_seconds
        self._scheduler = ControllerClient(client.registry, "default-scheduler", clock=client.clock)
        self._scheduler.events.component = "default-scheduler"
        self.client.events.component = "kubelet"
        self._rng = random.Random()
        self._started: dict[str, float] = {}  # pod uid -> when its containers (re)started

    async def sync(self, namespace: str, name: str) -> float | None:
        pod = self.client.get(PODS, namespace, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return None
        spec = _obj(pod.get("spec"))
        if not spec.get("nodeName"):
            await self._schedule(pod)
            return None
        if spec.get("nodeName") != NODE_NAME:
            return None
        phase = _obj(pod.get("status")).get("phase")
        # Pending, or already started by the registry's kubelet (devapi.kubelet: container
        # statuses and resources) but not yet reported ready with its pod conditions.
        if phase in (None, "Pending") or (phase == "Running" and not self._ready_reported(pod)):
            await self._start(pod)
            return self.run_seconds if spec.get("restartPolicy") != "Always" else None
        if phase == "Running" and spec.get("restartPolicy") != "Always":
            # Started here (startTime has whole seconds only), or before a restart: now.
            started = self._started.setdefault(str(pod["metadata"]["uid"]), self.client.clock())
            elapsed = self.client.clock() - started
            if elapsed < self.run_seconds:
                return self.run_seconds - elapsed
            self._started.pop(str(pod["metadata"]["uid"]), None)
            return await self._finish(pod)
        return None

    async def _schedule(self, pod: JSONObject) -> None:
        spec = _obj(pod.get("spec"))
        if gates.is_gated(pod) or spec.get("schedulerName", "default-scheduler") != (
            "default-scheduler"
        ):
            return
        metadata = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
        }
        try:
            await self.client.registry.bind(
                "v1",
                metadata["namespace"],
                metadata["name"],
                binding,
                RequestContext(user=SCHEDULER),
            )
        except APIError as err:
            if err.code in (404, 409):
                return
            raise
        await self._scheduler.events.record(
            pod,
            NORMAL,
            "Scheduled",
            f"Successfully assigned {metadata['namespace']}/{metadata['name']} to {NODE_NAME}",
        )

    def _container_statuses(
        self, pod: JSONObject, state: JSONObject, ready: bool
    ) -> list[JSONObject]:
        statuses = []
        for container in _obj(pod.get("spec")).get("containers") or []:
            if not isinstance(container, dict):
                continue
            image = str(container.get("image") or "")
            statuses.append(
                {
                    "name": container.get("name"),
                    "state": state,
                    "lastState": {},
                    "ready": ready,
                    "restartCount": 0,
                    "image": image,
                    "imageID": image,
                    "containerID": f"containerd://{self._rng.getrandbits(64):016x}",
                    "started": ready,
                }
            )
        return statuses

    def _scheduled_condition(self, pod: JSONObject) -> JSONObject | None:
        for condition in _obj(pod.get("status")).get("conditions") or []:
            if isinstance(condition, dict) and condition.get("type") == "PodScheduled":
                return condition
        return None

    @staticmethod
    def _ready_reported(pod: JSONObject) -> bool:
        return any(
            isinstance(c, dict) and c.get("type") == "Ready"
            for c in _obj(pod.get("status")).get("conditions") or []
        )

    async def _start(self, pod: JSONObject) -> None:
        now = meta.now_timestamp(self.client.clock())
        # The container statuses (allocated and actuated resources) are the registry
        # kubelet's; this one adds the pod's conditions and addresses.
        started = sync_pod(clone(pod), allocatable=None) or pod
        status = dict(_obj(started.get("status")))
        conditions = [
            c
            for c in status.get("conditions") or []
            if isinstance(c, dict)
            and c.get("type")
            not in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ]
        status.update(
            {
                "phase": "Running",
                "conditions": _conditions(self._scheduled_condition(pod), True, now) + conditions,
                "hostIP": "10.0.0.1",
                "hostIPs": [{"ip": "10.0.0.1"}],
                "podIP": status.get("podIP")
                or f"10.244.{self._rng.randint(0, 255)}.{self._rng.randint(2, 254)}",
                "startTime": status.get("startTime") or now,
            }
        )
        status["podIPs"] = [{"ip": status["podIP"]}]
        pod["status"] = status
        self._started[str(pod["metadata"]["uid"])] = self.client.clock()
        if await self._write(pod):
            for container in _obj(pod.get("spec")).get("containers") or []:
                name = _obj(container).get("name")
                await self.client.events.record(pod, NORMAL, "Started", f"Started container {name}")

    async def _finish(self, pod: JSONObject) -> float | None:
        annotations = meta.string_map(_obj(pod.get("metadata")).get("annotations"))
        code_text = annotations.get(EXIT_CODE_ANNOTATION, "0")
        code = int(code_text) if code_text.lstrip("-").isdigit() else 1
        status = _obj(pod.get("status"))
        now = meta.now_timestamp(self.client.clock())
        if code != 0 and _obj(pod.get("spec")).get("restartPolicy") == "OnFailure":
            for container in status.get("containerStatuses") or []:
                container["restartCount"] = int(container.get("restartCount") or 0) + 1
            self._started[str(pod["metadata"]["uid"])] = self.client.clock()
            await self._write(pod)
            return self.run_seconds
        terminated = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": status.get("startTime"),
                "finishedAt": now,
                "containerID": f"containerd://{self._rng.getrandbits(64):016x}",
            }
        }
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        status["conditions"] = _conditions(self._scheduled_condition(pod), False, now)
        status["containerStatuses"] = self._container_statuses(pod, terminated, False)
        await self._write(pod)
        return None

    async def _write(self, pod: JSONObject) -> bool:
        try:
            await self.client.registry.update(
                PODS,
                "v1",
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                pod,
                RequestContext(user=NODE_USER),
                subresource="status",
            )
            return True
        except APIError as err:
            if err.code in (404, 409):
                return False
            raise
