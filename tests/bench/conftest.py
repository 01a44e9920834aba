"""Shared, module-wide fixtures for the benchmark helpers' tests (kept small and fast)."""

from __future__ import annotations

import pytest

from bench.configgen import GeneratedPolicy, generated_policy
from bench.workload import SourcePod, Workload, build_workload, load_sources


@pytest.fixture(scope="session")
def sources() -> list[SourcePod]:
    return load_sources(priority_classes=frozenset({"batch-low", "tenant-guaranteed"}))


@pytest.fixture(scope="session")
def generated() -> GeneratedPolicy:
    return generated_policy(tenants=8)


@pytest.fixture(scope="session")
def workload(generated: GeneratedPolicy, sources: list[SourcePod]) -> Workload:
    return build_workload(generated, pairs=12, seed=7, sources=sources)
