"""The workload resources: ``apps/v1`` Deployments and ReplicaSets, ``batch/v1`` Jobs and
CronJobs: their types, defaulting, validation, status and scale rules, and ``kubectl get``
columns.

Defaults follow ``pkg/apis/apps/v1/defaults.go`` and ``pkg/apis/batch/v1/defaults.go``; the
checks are those of ``pkg/apis/apps/validation`` and ``pkg/apis/batch/validation`` that a
user meets first (selector required, matching the template's labels and immutable; the
template's restart policy). A Job's selector and its pods' labels are generated as
``pkg/registry/batch/job/strategy.go`` (``generateSelector``) does. The template's pod spec is
defaulted as a pod's is.
"""

from __future__ import annotations

import time
from typing import Any

from devapi import errors, meta, tables
from devapi.errors import FieldError
from devapi.patching import GENERIC_PATCH_META, POD_PATCH_META, PatchMeta
from devapi.resources import PODS, ResourceType
from devapi.selectors import SelectorError, label_selector_from_object
from devapi.store import clone
from devapi.strategies import PodStrategy, Strategy
from devapi.types import JSONObject
from devapi.workloads.cron import CronError, parse_schedule

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
MAX_INT32 = 2**31 - 1


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _workload(
    group: str, plural: str, kind: str, short: tuple[str, ...], columns: Any, *, scale: bool
) -> ResourceType:
    return ResourceType(
        group=group,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        namespaced=True,
        versions=("v1",),
        storage_version="v1",
        short_names=short,
        categories=("all",),
        subresources=frozenset({"status", "scale"} if scale else {"status"}),
        tracks_generation=True,
        columns=columns,
    )


DEPLOYMENTS = _workload(
    "apps", "deployments", "Deployment", ("deploy",), lambda: deployment_columns(), scale=True
)
REPLICA_SETS = _workload(
    "apps", "replicasets", "ReplicaSet", ("rs",), lambda: replica_set_columns(), scale=True
)
JOBS = _workload("batch", "jobs", "Job", (), lambda: job_columns(), scale=False)
CRON_JOBS = _workload(
    "batch", "cronjobs", "CronJob", ("cj",), lambda: cron_job_columns(), scale=False
)

_TEMPLATE_PATCH_META = PatchMeta(
    fields={"metadata": POD_PATCH_META.child("metadata"), "spec": POD_PATCH_META.child("spec")}
)
_WORKLOAD_PATCH_META = PatchMeta(
    fields={
        "metadata": GENERIC_PATCH_META.child("metadata"),
        "spec": PatchMeta(fields={"template": _TEMPLATE_PATCH_META}),
        "status": PatchMeta(fields={"conditions": PatchMeta(merge_key="type", strategy="merge")}),
    }
)
_CRON_JOB_PATCH_META = PatchMeta(
    fields={
        "metadata": GENERIC_PATCH_META.child("metadata"),
        "spec": PatchMeta(
            fields={"jobTemplate": PatchMeta(fields={"spec": _WORKLOAD_PATCH_META.child("spec")})}
        ),
    }
)


def default_template(template: Any) -> None:
    """A pod template's spec is defaulted as a pod's (``SetDefaults_PodSpec``)."""
    if isinstance(template, dict):
        PodStrategy(PODS).default(template)


def _template_problems(
    spec: JSONObject, path: str, *, restart_policies: tuple[str, ...], required_detail: str = ""
) -> list[FieldError]:
    problems: list[FieldError] = []
    template = _obj(spec.get("template"))
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        return [errors.required(f"{path}.template.spec")]
    if not [c for c in pod_spec.get("containers") or [] if isinstance(c, dict)]:
        problems.append(errors.required(f"{path}.template.spec.containers"))
    policy = pod_spec.get("restartPolicy")
    if policy not in restart_policies:
        if required_detail:
            problems.append(errors.required(f"{path}.template.spec.restartPolicy", required_detail))
        else:
            problems.append(
                errors.not_supported(
                    f"{path}.template.spec.restartPolicy", policy, restart_policies
                )
            )
    return problems


def _selector_problems(spec: JSONObject, path: str) -> list[FieldError]:
    """``ValidateDeploymentSpec`` / ``ValidateReplicaSetSpec``: a non-empty selector that
    selects the template's labels."""
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        return [errors.required(f"{path}.selector")]
    try:
        parsed = label_selector_from_object(selector, where=f"{path}.selector")
    except SelectorError as err:
        return [errors.invalid(f"{path}.selector", "", str(err))]
    labels = meta.string_map(_obj(_obj(spec.get("template")).get("metadata")).get("labels"))
    if not parsed.matches(labels):
        return [
            errors.invalid(
                f"{path}.template.metadata.labels",
                _go_map(labels),
                "`selector` does not match template `labels`",
            )
        ]
    return []


def _go_map(labels: dict[str, str]) -> str:
    return "map[" + " ".join(f"{k}:{v}" for k, v in sorted(labels.items())) + "]"


def _non_negative(spec: JSONObject, path: str, *fields: str) -> list[FieldError]:
    problems: list[FieldError] = []
    for name in fields:
        value = spec.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(errors.invalid(f"{path}.{name}", value, "must be an integer"))
        elif value < 0:
            problems.append(
                errors.invalid(f"{path}.{name}", value, "must be greater than or equal to 0")
            )
    return problems


class _WorkloadStrategy(Strategy):
    @property
    def patch_meta(self) -> PatchMeta | None:
        return _WORKLOAD_PATCH_META

    def spec_changed(self, new: JSONObject, old: JSONObject) -> bool:
        return new.get("spec") != old.get("spec")

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        problems = self.validate(new)
        old_selector = _obj(old.get("spec")).get("selector")
        if _obj(new.get("spec")).get("selector") != old_selector:
            problems.append(
                errors.invalid(
                    "spec.selector",
                    _obj(new.get("spec")).get("selector"),
                    "field is immutable",
                )
            )
        return problems


class ReplicaSetStrategy(_WorkloadStrategy):
    """``SetDefaults_ReplicaSet``, ``ValidateReplicaSet``."""

    def default(self, obj: JSONObject) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        default_template(spec.get("template"))

    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [*problems, errors.required("spec")]
        problems += _non_negative(spec, "spec", "replicas", "minReadySeconds")
        problems += _selector_problems(spec, "spec")
        problems += _template_problems(spec, "spec", restart_policies=("Always",))
        return problems


class DeploymentStrategy(ReplicaSetStrategy):
    """``SetDefaults_Deployment``, ``ValidateDeployment``."""

    def default(self, obj: JSONObject) -> None:
        super().default(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy.get("type") == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)

    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        spec = _obj(obj.get("spec"))
        strategy = _obj(spec.get("strategy")).get("type")
        if strategy not in ("RollingUpdate", "Recreate"):
            problems.append(
                errors.not_supported("spec.strategy.type", strategy, ("Recreate", "RollingUpdate"))
            )
        return problems


class JobStrategy(_WorkloadStrategy):
    """``SetDefaults_Job``; ``generateSelector``; ``ValidateJob``."""

    def default(self, obj: JSONObject) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
            spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        if not spec.get("podFailurePolicy"):
            spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        default_template(spec.get("template"))

    def prepare_for_create(self, obj: JSONObject) -> None:
        super().prepare_for_create(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict) or spec.get("manualSelector") is True:
            return
        metadata = meta.metadata(obj)
        uid, name = str(metadata.get("uid") or ""), str(metadata.get("name") or "")
        spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
        template = spec.setdefault("template", {})
        if isinstance(template, dict):
            labels = meta.metadata(template).setdefault("labels", {})
            if isinstance(labels, dict):
                labels.update(
                    {
                        CONTROLLER_UID_LABEL: uid,
                        JOB_NAME_LABEL: name,
                        LEGACY_CONTROLLER_UID_LABEL: uid,
                        LEGACY_JOB_NAME_LABEL: name,
                    }
                )

    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [*problems, errors.required("spec")]
        problems += _non_negative(
            spec, "spec", "parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"
        )
        if spec.get("selector") is not None:
            problems += _selector_problems(spec, "spec")
        problems += _template_problems(
            spec,
            "spec",
            restart_policies=("OnFailure", "Never"),
            required_detail='valid values: "OnFailure", "Never"',
        )
        return problems

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        problems = super().validate_update(new, old)
        new_spec, old_spec = _obj(new.get("spec")), _obj(old.get("spec"))
        if new_spec.get("completions") != old_spec.get("completions"):
            problems.append(
                errors.invalid(
                    "spec.completions", new_spec.get("completions"), "field is immutable"
                )
            )
        if new_spec.get("template") != old_spec.get("template"):
            problems.append(errors.invalid("spec.template", "", "field is immutable"))
        return problems


class CronJobStrategy(_WorkloadStrategy):
    """``SetDefaults_CronJob``, ``ValidateCronJobCreate``."""

    @property
    def patch_meta(self) -> PatchMeta | None:
        return _CRON_JOB_PATCH_META

    def default(self, obj: JSONObject) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        job_template = _obj(spec.get("jobTemplate"))
        job_spec = job_template.get("spec")
        if isinstance(job_spec, dict):
            JobStrategy(JOBS).default({"spec": job_spec})

    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = Strategy.validate(self, obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [*problems, errors.required("spec")]
        schedule = spec.get("schedule")
        if not isinstance(schedule, str) or not schedule:
            problems.append(errors.required("spec.schedule"))
        else:
            try:
                parse_schedule(schedule)
            except CronError as err:
                problems.append(errors.invalid("spec.schedule", schedule, str(err)))
        policy = spec.get("concurrencyPolicy")
        if policy not in ("Allow", "Forbid", "Replace"):
            problems.append(
                errors.not_supported(
                    "spec.concurrencyPolicy", policy, ("Allow", "Forbid", "Replace")
                )
            )
        job_spec = _obj(_obj(spec.get("jobTemplate")).get("spec"))
        problems += _template_problems(
            job_spec,
            "spec.jobTemplate.spec",
            restart_policies=("OnFailure", "Never"),
            required_detail='valid values: "OnFailure", "Never"',
        )
        return problems

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        return self.validate(new)


# --- scale ------------------------------------------------------------------------------------


def scale_of(obj: JSONObject) -> JSONObject:
    """The ``autoscaling/v1`` Scale of a Deployment or ReplicaSet (``scaleFromDeployment``)."""
    metadata = _obj(obj.get("metadata"))
    spec, status = _obj(obj.get("spec")), _obj(obj.get("status"))
    selector = ""
    try:
        parsed = label_selector_from_object(spec.get("selector"), where="spec.selector")
        selector = ",".join(
            f"{r.key}={r.values[0]}" if r.operator == "in" and len(r.values) == 1 else r.key
            for r in parsed.requirements
        )
    except SelectorError:
        selector = ""
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: metadata[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in metadata
        },
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {"replicas": status.get("replicas", 0), "selector": selector},
    }


def scaled(obj: JSONObject, scale: JSONObject) -> JSONObject:
    """``obj`` with the replicas a Scale asks for."""
    result = clone(obj)
    replicas = _obj(scale.get("spec")).get("replicas", 0)
    result.setdefault("spec", {})["replicas"] = replicas
    rv = _obj(scale.get("metadata")).get("resourceVersion")
    if rv:
        meta.metadata(result)["resourceVersion"] = rv
    return result


# --- kubectl get ------------------------------------------------------------------------------


def _column(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> JSONObject:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


_NAME_COLUMN: tuple[JSONObject, tables.Cell] = (
    _column("Name", fmt="name"),
    lambda o: _obj(o.get("metadata")).get("name"),
)
_AGE_COLUMN: tuple[JSONObject, tables.Cell] = (_column("Age"), tables.age)


def _template_spec(obj: JSONObject) -> JSONObject:
    spec = _obj(obj.get("spec"))
    if "jobTemplate" in spec:
        spec = _obj(_obj(spec["jobTemplate"]).get("spec"))
    return _obj(_obj(spec.get("template")).get("spec"))


def _containers(obj: JSONObject) -> list[JSONObject]:
    return [c for c in _template_spec(obj).get("containers") or [] if isinstance(c, dict)]


def _selector_text(obj: JSONObject) -> str:
    selector = _obj(_obj(obj.get("spec")).get("selector"))
    labels = meta.string_map(selector.get("matchLabels"))
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def _wide_columns() -> list[tuple[JSONObject, tables.Cell]]:
    return [
        (
            _column("Containers", priority=1),
            lambda o: ",".join(str(c.get("name")) for c in _containers(o)),
        ),
        (
            _column("Images", priority=1),
            lambda o: ",".join(str(c.get("image")) for c in _containers(o)),
        ),
        (_column("Selector", priority=1), _selector_text),
    ]


def _status_int(obj: JSONObject, name: str) -> int:
    value = _obj(obj.get("status")).get(name)
    return value if isinstance(value, int) else 0


def deployment_columns() -> list[tuple[JSONObject, tables.Cell]]:
    """``printDeployment``."""
    return [
        _NAME_COLUMN,
        (
            _column("Ready"),
            lambda o: f"{_status_int(o, 'readyReplicas')}/{_obj(o.get('spec')).get('replicas', 0)}",
        ),
        (_column("Up-to-date", "integer"), lambda o: _status_int(o, "updatedReplicas")),
        (_column("Available", "integer"), lambda o: _status_int(o, "availableReplicas")),
        _AGE_COLUMN,
        *_wide_columns(),
    ]


def replica_set_columns() -> list[tuple[JSONObject, tables.Cell]]:
    """``printReplicaSet``."""
    return [
        _NAME_COLUMN,
        (_column("Desired", "integer"), lambda o: _obj(o.get("spec")).get("replicas", 0)),
        (_column("Current", "integer"), lambda o: _status_int(o, "replicas")),
        (_column("Ready", "integer"), lambda o: _status_int(o, "readyReplicas")),
        _AGE_COLUMN,
        *_wide_columns(),
    ]


def _job_status(job: JSONObject) -> str:
    for condition in _obj(job.get("status")).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("status") == "True":
            if condition.get("type") in ("Complete", "Failed", "Suspended"):
                return str(condition["type"])
            if condition.get("type") == "FailureTarget":
                return "FailureTarget"
    if _obj(job.get("metadata")).get("deletionTimestamp"):
        return "Terminating"
    return "Running"


def _job_completions(job: JSONObject) -> str:
    spec = _obj(job.get("spec"))
    succeeded = _status_int(job, "succeeded")
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism") or 0
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _job_duration(job: JSONObject) -> str:
    status = _obj(job.get("status"))
    start = meta.parse_timestamp(status.get("startTime"))
    if start is None:
        return ""
    end = meta.parse_timestamp(status.get("completionTime"))
    finish = end.timestamp() if end is not None else time.time()
    return tables.human_duration(finish - start.timestamp())


def job_columns() -> list[tuple[JSONObject, tables.Cell]]:
    """``printJob``."""
    return [
        _NAME_COLUMN,
        (_column("Status"), _job_status),
        (_column("Completions"), _job_completions),
        (_column("Duration"), _job_duration),
        _AGE_COLUMN,
        *_wide_columns(),
    ]


def _last_schedule(cron_job: JSONObject) -> str:
    moment = meta.parse_timestamp(_obj(cron_job.get("status")).get("lastScheduleTime"))
    if moment is None:
        return "<none>"
    return tables.human_duration(time.time() - moment.timestamp())


def cron_job_columns() -> list[tuple[JSONObject, tables.Cell]]:
    """``printCronJob``."""
    return [
        _NAME_COLUMN,
        (_column("Schedule"), lambda o: _obj(o.get("spec")).get("schedule") or ""),
        (_column("Timezone"), lambda o: _obj(o.get("spec")).get("timeZone") or "<none>"),
        (_column("Suspend", "boolean"), lambda o: bool(_obj(o.get("spec")).get("suspend"))),
        (
            _column("Active", "integer"),
            lambda o: len(_obj(o.get("status")).get("active") or []),
        ),
        (_column("Last Schedule"), _last_schedule),
        _AGE_COLUMN,
        *_wide_columns(),
    ]


WORKLOAD_TYPES = (DEPLOYMENTS, REPLICA_SETS, JOBS, CRON_JOBS)
WORKLOAD_STRATEGIES = {
    DEPLOYMENTS.key: DeploymentStrategy,
    REPLICA_SETS.key: ReplicaSetStrategy,
    JOBS.key: JobStrategy,
    CRON_JOBS.key: CronJobStrategy,
}
