"""The CronJob controller (``pkg/controller/cronjob/cronjob_controllerv2.go``, ``syncCronJob``):
at each scheduled time (from an injectable clock) create a Job from ``jobTemplate``, named
``<cronjob>-<scheduled time in minutes since the epoch>`` with the
``batch.kubernetes.io/cronjob-scheduled-timestamp`` annotation; honour ``suspend``,
``startingDeadlineSeconds`` and ``concurrencyPolicy`` (Allow, Forbid, Replace); keep
``status.active`` and ``lastScheduleTime``; delete finished Jobs beyond the history limits.
Only the most recent missed time is run, as upstream does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from devapi import meta
from devapi.errors import APIError
from devapi.events import NORMAL, WARNING
from devapi.store import clone
from devapi.types import JSONObject
from devapi.workloads.cron import CronError, parse_schedule
from devapi.workloads.job import finished_condition
from devapi.workloads.kinds import CRON_JOBS, JOBS
from devapi.workloads.podcontrol import ControllerClient, owner_reference

SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
MAX_MISSED = 100


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _reference(job: JSONObject) -> JSONObject:
    metadata = job["metadata"]
    return {
        "kind": "Job",
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "apiVersion": "batch/v1",
        "resourceVersion": metadata.get("resourceVersion"),
    }


class CronJobController:
    name = "cronjob-controller"

    def __init__(self, client: ControllerClient) -> None:
        self.client = client

    async def sync(self, namespace: str, name: str) -> float | None:
        cron_job = self.client.get(CRON_JOBS, namespace, name)
        if cron_job is None or cron_job["metadata"].get("deletionTimestamp"):
            return None
        spec = _obj(cron_job.get("spec"))
        try:
            schedule = parse_schedule(str(spec.get("schedule") or ""))
            zone = ZoneInfo(spec["timeZone"]) if spec.get("timeZone") else UTC
        except (CronError, ZoneInfoNotFoundError, ValueError) as err:
            await self.client.events.record(
                cron_job, WARNING, "UnparseableSchedule", f"unparseable schedule: {err}"
            )
            return None
        jobs = self.client.owned(JOBS, cron_job)
        active = [j for j in jobs if finished_condition(j) is None]
        now = datetime.fromtimestamp(self.client.clock(), zone)
        status = _obj(cron_job.get("status"))
        since = meta.parse_timestamp(status.get("lastScheduleTime")) or meta.parse_timestamp(
            cron_job["metadata"].get("creationTimestamp")
        )
        scheduled: datetime | None = None
        upcoming = schedule.next_after((since or now).astimezone(zone))
        for _ in range(MAX_MISSED):
            if upcoming is None or upcoming > now:
                break
            scheduled = upcoming
            upcoming = schedule.next_after(upcoming)
        created: JSONObject | None = None
        deadline = spec.get("startingDeadlineSeconds")
        too_late = (
            scheduled is not None
            and isinstance(deadline, int)
            and scheduled.timestamp() + deadline < now.timestamp()
        )
        if scheduled is not None and not spec.get("suspend") and not too_late:
            policy = spec.get("concurrencyPolicy", "Allow")
            if policy == "Forbid" and active:
                scheduled = None  # wait for the active Job; try again on its change
            else:
                if policy == "Replace":
                    for job in active:
                        await self.client.delete(JOBS, job)
                        await self.client.events.record(
                            cron_job,
                            NORMAL,
                            "SuccessfulDelete",
                            f"Deleted job {job['metadata']['name']}",
                        )
                    active = []
                created = await self._create_job(cron_job, scheduled)
                if created is not None:
                    active.append(created)
        await self._clean_history(cron_job, [j for j in jobs if finished_condition(j) is not None])
        await self._update_status(namespace, name, active, scheduled)
        if upcoming is None:
            return None
        return max(upcoming.timestamp() - self.client.clock(), 0.0)

    async def _create_job(self, cron_job: JSONObject, scheduled: datetime) -> JSONObject | None:
        template = _obj(_obj(cron_job.get("spec")).get("jobTemplate"))
        template_meta = _obj(template.get("metadata"))
        name = f"{cron_job['metadata']['name']}-{int(scheduled.timestamp() // 60)}"
        annotations = dict(meta.string_map(template_meta.get("annotations")))
        annotations[SCHEDULED_TIMESTAMP] = scheduled.isoformat()
        body: JSONObject = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "labels": dict(meta.string_map(template_meta.get("labels"))),
                "annotations": annotations,
                "ownerReferences": [owner_reference(cron_job)],
            },
            "spec": clone(_obj(template.get("spec"))),
        }
        if not body["metadata"]["labels"]:
            del body["metadata"]["labels"]
        try:
            job = await self.client.create(JOBS, cron_job["metadata"]["namespace"], body)
        except APIError as err:
            if err.code == 409:
                return None
            await self.client.events.record(
                cron_job, WARNING, "FailedCreate", f"Error creating job: {err}"
            )
            raise
        await self.client.events.record(cron_job, NORMAL, "SuccessfulCreate", f"Created job {name}")
        return job

    async def _clean_history(self, cron_job: JSONObject, finished: list[JSONObject]) -> None:
        spec = _obj(cron_job.get("spec"))
        for outcome, field, default in (
            ("Complete", "successfulJobsHistoryLimit", 3),
            ("Failed", "failedJobsHistoryLimit", 1),
        ):
            limit = spec.get(field)
            keep = limit if isinstance(limit, int) else default
            of_kind = sorted(
                (j for j in finished if finished_condition(j) == outcome),
                key=lambda j: str(_obj(j.get("status")).get("startTime") or ""),
            )
            for job in of_kind[: max(len(of_kind) - keep, 0)]:
                await self.client.delete(JOBS, job)
                await self.client.events.record(
                    cron_job, NORMAL, "SuccessfulDelete", f"Deleted job {job['metadata']['name']}"
                )

    async def _update_status(
        self, namespace: str, name: str, active: list[JSONObject], scheduled: datetime | None
    ) -> None:
        for _ in range(3):
            cron_job = self.client.get(CRON_JOBS, namespace, name)
            if cron_job is None:
                return
            previous = _obj(cron_job.get("status"))
            status: JSONObject = {}
            if active:
                status["active"] = [_reference(j) for j in active]
            last = (
                meta.now_timestamp(scheduled.timestamp())
                if scheduled is not None
                else previous.get("lastScheduleTime")
            )
            if last:
                status["lastScheduleTime"] = last
            if previous.get("lastSuccessfulTime"):
                status["lastSuccessfulTime"] = previous["lastSuccessfulTime"]
            if status == previous:
                return
            cron_job["status"] = status
            try:
                await self.client.update_status(CRON_JOBS, cron_job)
                return
            except APIError as err:
                if err.code != 409:
                    raise
