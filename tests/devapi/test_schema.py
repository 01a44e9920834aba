"""The committed typed schema is what ``devapi.schemabuild`` builds from kubernetes-validate."""

from __future__ import annotations

from devapi import schemabuild, typed


def test_the_committed_schema_is_up_to_date() -> None:
    """Rebuild with ``make devapi-schema`` when this fails (a new kubernetes-validate)."""
    assert typed.SCHEMA_FILE.read_text() == schemabuild.render(schemabuild.build())


def test_the_schema_targets_the_version_the_manifests_are_validated_against() -> None:
    import kubernetes_validate

    assert typed.schema().kubernetes == kubernetes_validate.latest_version()
