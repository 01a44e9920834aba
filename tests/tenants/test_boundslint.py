"""``tenantgate lint`` on container defaults, bounds and limits quotas (tenants/boundslint.py)."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from admission.commands import lint as lint_command
from tenants.lint import lint_file, lint_text

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "examples" / "production-limits.yaml"

HEADER = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  t:
    namespaces: [t]
"""


def test_the_production_example_is_clean_without_warnings() -> None:
    report = lint_file(PRODUCTION)
    assert (report.problems, report.warnings) == ((), ())


def test_contradicting_bounds_are_errors_with_lines() -> None:
    text = HEADER + (
        "    quota:\n"
        '      guaranteed: {requests.cpu: "1", memory: 1Gi}\n'
        "    containerDefaults:\n"
        "      requests: {cpu: 10m, memory: 2Gi}\n"
        "      limits: {cpu: 5m, memory: 16Gi}\n"
        "    bounds:\n"
        "      container:\n"
        '        min: {cpu: "2", memory: 64Mi}\n'
        '        max: {cpu: "1", memory: 4Gi}\n'
        '        maxLimitRequestRatio: {cpu: 500m, memory: "4"}\n'
        "      pod:\n"
        "        min: {memory: 2Gi}\n"
    )
    report = lint_text(text, filename="c.yaml")
    # Problems are ordered by line and field; on one field their order is not fixed.
    assert sorted(str(p) for p in report.problems) == [
        "c.yaml:11: tenants.t.containerDefaults.requests.cpu: default request cpu=10m is below "
        "bounds.container.min cpu=2: defaulted containers would be denied",
        "c.yaml:12: tenants.t.containerDefaults.limits.cpu: default limit cpu=5m is below "
        "bounds.container.min cpu=2: defaulted containers would be denied",
        "c.yaml:12: tenants.t.containerDefaults.limits.cpu: default limit cpu=5m is below the "
        "default request 10m",
        "c.yaml:12: tenants.t.containerDefaults.limits.memory: default limit memory=16Gi is 8 "
        "times the default request 2Gi, above bounds.container.maxLimitRequestRatio "
        "memory=4: defaulted containers would be denied",
        "c.yaml:12: tenants.t.containerDefaults.limits.memory: default limit memory=16Gi is "
        "above bounds.container.max memory=4Gi: defaulted containers would be denied",
        "c.yaml:15: tenants.t.bounds.container.min.cpu: container minimum cpu=2 is above its "
        "maximum 1",
        "c.yaml:15: tenants.t.bounds.container.min.cpu: container minimum cpu=2 is above the "
        "tenant's guarantee cpu=1: no pod could be admitted",
        "c.yaml:17: tenants.t.bounds.container.maxLimitRequestRatio.cpu: maxLimitRequestRatio "
        "cpu=500m is below 1: a limit is never below its request, so every pod would be denied",
        "c.yaml:19: tenants.t.bounds.pod.min.memory: pod minimum memory=2Gi is above the "
        "tenant's guarantee memory=1Gi: no pod could be admitted",
    ]


def test_a_limits_quota_without_default_limits_is_a_warning(tmp_path: Path) -> None:
    text = HEADER + (
        "    quota:\n"
        '      guaranteed: {limits.cpu: "4"}\n'
        "      burst: {max: {limits.memory: 8Gi, limits.ephemeral-storage: 10Gi}}\n"
        "    containerDefaults:\n"
        "      limits: {cpu: 500m}\n"
    )
    report = lint_text(text, filename="c.yaml")
    assert report.problems == ()
    assert [str(w) for w in report.warnings] == [
        "c.yaml:10: tenants.t.quota.burst.max[limits.memory]: the quota caps limits.memory but "
        "containerDefaults.limits has no memory: pods with a container without a memory limit "
        "will be denied"
    ]
    path = tmp_path / "c.yaml"
    path.write_text(text)
    out = io.StringIO()
    code = lint_command.run(argparse.Namespace(files=[path], quiet=False), out=out)
    assert code == lint_command.EXIT_OK
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        f"{path}:10: tenants.t.quota.burst.max[limits.memory]: warning: the quota caps "
        "limits.memory but containerDefaults.limits has no memory: pods with a container "
        "without a memory limit will be denied"
    )
    assert lines[1].startswith(f"{path}: ok: 1 tenants")
