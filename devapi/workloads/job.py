"""The Job controller for NonIndexed Jobs (``pkg/controller/job/job_controller.go``,
``syncJob``, ``manageJob``): keep ``min(parallelism, completions - succeeded)`` pods active,
count succeeded and failed pods, and finish the Job: ``SuccessCriteriaMet`` then ``Complete``
once ``completions`` pods succeeded (for a work queue without ``completions``: once one pod
succeeded and none is active), ``FailureTarget`` then ``Failed`` (``BackoffLimitExceeded``)
once more than ``backoffLimit`` pods failed, deleting the active ones.

A failed pod creation fails the sync, retried through the Job queue's backoff (1 s doubling to
60 s); after pod failures, replacements wait the pod-failure backoff (10 s doubling to 10 min)
from the last failure. Finished pods are counted once each, in memory (the real controller
uses the ``batch.kubernetes.io/job-tracking`` finalizer, which is not simulated). Indexed
completion, ``activeDeadlineSeconds``, ``podFailurePolicy`` and ``successPolicy`` are not
simulated either; a suspended Job creates no pods.
"""

from __future__ import annotations

from typing import Any

from devapi import meta
from devapi.errors import APIError
from devapi.events import NORMAL, WARNING
from devapi.resources import PODS
from devapi.types import JSONObject
from devapi.workloads.kinds import JOBS
from devapi.workloads.podcontrol import ControllerClient, is_active, is_ready
from devapi.workloads.replicaset import SyncFailed
from devapi.workloads.workqueue import JOB_POD_FAILURE_BACKOFF, Backoff

COMPLETIONS_REACHED = "CompletionsReached"
COMPLETIONS_MESSAGE = "Reached expected number of succeeded pods"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


def finished_condition(job: JSONObject) -> str | None:
    for condition in _obj(job.get("status")).get("conditions") or []:
        if (
            isinstance(condition, dict)
            and condition.get("type") in ("Complete", "Failed")
            and condition.get("status") == "True"
        ):
            return str(condition["type"])
    return None


def _finish_time(pod: JSONObject) -> float:
    latest = 0.0
    for status in _obj(pod.get("status")).get("containerStatuses") or []:
        terminated = _obj(_obj(_obj(status).get("state")).get("terminated"))
        moment = meta.parse_timestamp(terminated.get("finishedAt"))
        if moment is not None:
            latest = max(latest, moment.timestamp())
    return latest


class JobController:
    name = "job-controller"

    def __init__(
        self, client: ControllerClient, *, pod_failure_backoff: Backoff = JOB_POD_FAILURE_BACKOFF
    ) -> None:
        self.client = client
        self.pod_failure_backoff = pod_failure_backoff
        # Per Job uid: the finished pods already counted (uid -> phase), and the last failure.
        self._finished: dict[str, dict[str, str]] = {}
        self._last_failure: dict[str, float] = {}

    async def sync(self, namespace: str, name: str) -> float | None:
        job = self.client.get(JOBS, namespace, name)
        if job is None:
            return None
        uid = str(job["metadata"]["uid"])
        spec = _obj(job.get("spec"))
        pods = self.client.owned(PODS, job)
        finished = self._finished.setdefault(uid, {})
        for pod in pods:
            phase = _obj(pod.get("status")).get("phase")
            pod_uid = str(pod["metadata"]["uid"])
            if phase in ("Succeeded", "Failed") and pod_uid not in finished:
                finished[pod_uid] = str(phase)
                if phase == "Failed":
                    self._last_failure[uid] = max(
                        self._last_failure.get(uid, 0.0), _finish_time(pod) or self.client.clock()
                    )
        succeeded = sum(1 for phase in finished.values() if phase == "Succeeded")
        failed = sum(1 for phase in finished.values() if phase == "Failed")
        active = [p for p in pods if is_active(p)]
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism") or 0)
        limit = spec.get("backoffLimit")
        backoff_limit = limit if isinstance(limit, int) else 6
        outcome = finished_condition(job)
        failure: APIError | None = None
        requeue: float | None = None
        if outcome is None and not job["metadata"].get("deletionTimestamp"):
            if failed > backoff_limit:
                outcome = "Failed"
                await self.client.delete_pods(job, active)
                active = []
            elif (completions is not None and succeeded >= int(completions)) or (
                completions is None and succeeded > 0 and not active
            ):
                outcome = "Complete"
            elif not spec.get("suspend"):
                if completions is not None:
                    want = min(parallelism, int(completions) - succeeded)
                else:
                    want = parallelism if succeeded == 0 else len(active)
                missing = want - len(active)
                if missing > 0:
                    wait = self._pod_failure_wait(uid, failed)
                    if wait > 0:
                        requeue = wait
                    else:
                        failure = await self.client.create_pods(
                            job, _obj(spec.get("template")), missing, f"{name}-"
                        )
                elif missing < 0:
                    await self.client.delete_pods(job, active[:-missing])
        newly_finished = outcome is not None and finished_condition(job) is None
        await self._update_status(namespace, name, succeeded, failed, outcome)
        if newly_finished and outcome == "Complete":
            await self.client.events.record(job, NORMAL, "Completed", "Job completed")
        elif newly_finished:
            await self.client.events.record(
                job, WARNING, BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE
            )
        if failure is not None:
            raise SyncFailed(failure)
        return requeue

    def _pod_failure_wait(self, uid: str, failed: int) -> float:
        if failed == 0:
            return 0.0
        backoff = self.pod_failure_backoff
        delay = min(backoff.base * float(2 ** min(failed - 1, 62)), backoff.maximum)
        return self._last_failure.get(uid, 0.0) + delay - self.client.clock()

    async def _update_status(
        self, namespace: str, name: str, succeeded: int, failed: int, outcome: str | None
    ) -> None:
        for _ in range(3):
            job = self.client.get(JOBS, namespace, name)
            if job is None:
                return
            pods = self.client.owned(PODS, job)
            active = [p for p in pods if is_active(p)]
            previous = _obj(job.get("status"))
            now = meta.now_timestamp(self.client.clock())
            status: JSONObject = {
                "startTime": previous.get("startTime") or now,
                "active": len(active),
                "ready": sum(1 for p in active if is_ready(p)),
                "succeeded": succeeded,
                "failed": failed,
                "terminating": sum(
                    1 for p in pods if _obj(p.get("metadata")).get("deletionTimestamp")
                ),
                "uncountedTerminatedPods": {},
            }
            kept = ("ready", "terminating", "uncountedTerminatedPods")
            status = {k: v for k, v in status.items() if v or k in kept}
            conditions = list(previous.get("conditions") or [])
            if outcome is not None and finished_condition(job) is None:
                interim, reason, message = (
                    ("SuccessCriteriaMet", COMPLETIONS_REACHED, COMPLETIONS_MESSAGE)
                    if outcome == "Complete"
                    else ("FailureTarget", BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE)
                )
                for kind in (interim, outcome):
                    conditions.append(
                        {
                            "type": kind,
                            "status": "True",
                            "lastProbeTime": now,
                            "lastTransitionTime": now,
                            "reason": reason,
                            "message": message,
                        }
                    )
                if outcome == "Complete":
                    status["completionTime"] = now
            elif previous.get("completionTime"):
                status["completionTime"] = previous["completionTime"]
            if conditions:
                status["conditions"] = conditions
            if status == previous:
                return
            job["status"] = status
            try:
                await self.client.update_status(JOBS, job)
                return
            except APIError as err:
                if err.code != 409:
                    raise
