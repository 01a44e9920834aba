"""A profile's ``podGroup`` rules (classifier/grouprules.py) and the rules tenantgate ships.

The shipped rules are checked on published manifests (tests/fixtures/manifests, SOURCES.md),
with pods built the way their operators build them (classifier/workloads/training.py names
the upstream functions): each pod claims its group, and the size read from the manifest's own
object equals the number of pods the operator creates from the group's templates.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from admission.commands.review import read_manifests
from classifier.config import ClassifierConfig, ClassifierConfigError, ProfileSpec
from classifier.grouprules import lint_group_rules
from classifier.plan import Classifier, compile_classifier
from classifier.podgroups import GroupClaimError, SizeRef, claim_group
from classifier.templates import PodTemplate, find_pod_templates, pod_from_template
from tenants.configfile import ConfigError, load_policy, load_text
from tests.tenants.conftest import EXAMPLE_CONFIG

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


def classifier(*rules: dict[str, Any]) -> Classifier:
    return compile_classifier(
        ClassifierConfig.model_validate({"profiles": {"general": {"podGroup": list(rules)}}})
    )


def pod(
    labels: Mapping[str, str] | None = None,
    *,
    annotations: Mapping[str, str] | None = None,
    owner: tuple[str, str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        api_version, kind, name = owner
        meta["ownerReferences"] = [
            {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": True}
        ]
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}}


RULE = {"name": "op", "label": "example.com/job", "size": {"label": "example.com/size"}}


# --------------------------------------------------------------------------- the field


def test_a_label_rule_groups_by_the_label_value_and_reads_the_size_label() -> None:
    rules = classifier(RULE).group_rules
    claim = claim_group(pod({"example.com/job": "j1", "example.com/size": "4"}), rules)
    assert claim is not None
    assert (claim.key, claim.name, claim.source, claim.size) == ("op/j1", "j1", "rule:op", 4)
    assert claim_group(pod({"other": "x"}), rules) is None


def test_a_member_without_its_size_is_an_error_naming_the_rule_and_the_key() -> None:
    rules = classifier(RULE).group_rules
    with pytest.raises(GroupClaimError, match=r"pod group rule op: .* no example\.com/size"):
        claim_group(pod({"example.com/job": "j1"}), rules)
    with pytest.raises(GroupClaimError, match=r"example\.com/size='x'"):
        claim_group(pod({"example.com/job": "j1", "example.com/size": "x"}), rules)


def test_annotation_size_and_match_labels() -> None:
    rules = classifier(
        {
            "name": "op",
            "label": "example.com/job",
            "matchLabels": {"example.com/role": "worker"},
            "size": {"annotation": "example.com/size"},
        }
    ).group_rules
    worker = pod(
        {"example.com/job": "j", "example.com/role": "worker"},
        annotations={"example.com/size": "3"},
    )
    claim = claim_group(worker, rules)
    assert claim is not None
    assert claim.size == 3
    head = pod({"example.com/job": "j", "example.com/role": "head"})
    assert claim_group(head, rules) is None


def test_owner_size_reads_the_controlling_owner_and_owners_narrow_the_rule() -> None:
    rules = classifier(
        {
            "name": "op",
            "label": "example.com/job",
            "owners": [{"apiGroup": "example.com", "kind": "Train"}],
            "size": {"owner": {"fields": ["spec.replicas.*.count"], "factors": ["hosts"]}},
        }
    ).group_rules
    claim = claim_group(
        pod({"example.com/job": "j"}, owner=("example.com/v2", "Train", "j-owner")), rules
    )
    assert claim is not None
    assert claim.size_from == SizeRef(
        "example.com/v2", "Train", "ns", "j-owner", ("spec.replicas.*.count",), ("hosts",)
    )
    owner = {"spec": {"replicas": {"a": {"count": 2, "hosts": 4}, "b": {"count": 1}}}}
    assert claim.size_from.size_of(owner) == 9
    other_owner = pod({"example.com/job": "j"}, owner=("batch/v1", "Job", "j"))
    assert claim_group(other_owner, rules) is None
    assert claim_group(pod({"example.com/job": "j"}), rules) is None


def test_owner_size_without_any_owner_is_an_error() -> None:
    rules = classifier(
        {"name": "op", "label": "example.com/job", "size": {"owner": {"fields": "spec.n"}}}
    ).group_rules
    with pytest.raises(GroupClaimError, match="no controlling owner"):
        claim_group(pod({"example.com/job": "j"}), rules)


def test_object_size_names_the_object_by_the_label_value() -> None:
    rules = classifier(
        {
            "name": "op",
            "label": "example.com/job",
            "size": {"object": {"apiVersion": "example.com/v1", "kind": "Train", "fields": "n"}},
        }
    ).group_rules
    claim = claim_group(pod({"example.com/job": "j"}, owner=("batch/v1", "Job", "x")), rules)
    assert claim is not None
    assert claim.size_from == SizeRef("example.com/v1", "Train", "ns", "j", ("n",))


def test_rules_are_read_in_profile_order_whatever_the_pod_profile() -> None:
    config = ClassifierConfig.model_validate(
        {
            "profiles": {
                "general": {"podGroup": [{**RULE, "name": "first"}]},
                "batch": {
                    "podGroup": [
                        {**RULE, "name": "second", "label": "example.com/other"},
                    ]
                },
            }
        }
    )
    rules = compile_classifier(config).group_rules
    assert [rule.name for rule in rules] == ["first", "second"]


@pytest.mark.parametrize(
    ("rule", "loc", "message"),
    [
        ({"name": "a", "label": "k"}, "podGroup.0.size", "Field required"),
        (
            {"name": "a", "label": "k", "size": {}},
            "podGroup.0.size",
            "set exactly one of label, annotation, owner, object",
        ),
        (
            {"name": "a", "label": "k", "size": {"label": "s", "annotation": "s"}},
            "podGroup.0.size",
            "(got label, annotation)",
        ),
        (
            {"name": "a", "label": "bad key!", "size": {"label": "s"}},
            "podGroup.0.label",
            "is not a valid label or annotation key",
        ),
        (
            {"name": "a", "label": "k", "size": {"owner": {"fields": ["spec..x"]}}},
            "podGroup.0.size.owner.fields.0",
            "is not a field path",
        ),
        (
            {"name": "a", "label": "k", "size": {"object": {"kind": "K", "fields": "n"}}},
            "podGroup.0.size.object.apiVersion",
            "Field required",
        ),
    ],
)
def test_invalid_rules_name_the_field(rule: dict[str, Any], loc: str, message: str) -> None:
    with pytest.raises(Exception) as caught:
        ProfileSpec.model_validate({"podGroup": [rule]})
    errors = caught.value.errors()  # type: ignore[attr-defined]
    assert any(".".join(str(p) for p in e["loc"]) == loc and message in e["msg"] for e in errors), (
        errors
    )


def test_a_rule_name_used_twice_is_a_problem_at_its_path() -> None:
    config = ClassifierConfig.model_validate(
        {"profiles": {"general": {"podGroup": [RULE]}, "batch": {"podGroup": [RULE]}}}
    )
    with pytest.raises(ClassifierConfigError) as caught:
        compile_classifier(config)
    assert str(caught.value) == (
        'profiles.batch.podGroup[0].name: pod group rule "op" is already defined at '
        "profiles.general.podGroup[0]"
    )


def test_config_errors_carry_file_and_line() -> None:
    text = EXAMPLE_CONFIG.read_text().replace(
        "kind: MPIJob\n            fields: [spec.mpiReplicaSpecs.*.replicas]",
        "kind: MPIJob\n            fields: [spec.mpiReplicaSpecs.*.]",
    )
    with pytest.raises(ConfigError) as caught:
        load_text(text, filename="cfg.yaml")
    (line,) = str(caught.value).splitlines()
    number = text.splitlines().index("            fields: [spec.mpiReplicaSpecs.*.]") + 1
    assert line.startswith(
        f"cfg.yaml:{number}: profiles.ml-training.podGroup[1].size.object.fields[0]: "
    )
    assert "is not a field path" in line


def test_lint_finds_a_rule_an_earlier_one_always_claims_first() -> None:
    config = ClassifierConfig.model_validate(
        {
            "profiles": {
                "general": {
                    "podGroup": [
                        RULE,
                        {**RULE, "name": "later", "matchLabels": {"role": "worker"}},
                        {**RULE, "name": "kept", "label": "example.com/other"},
                    ]
                }
            }
        }
    )
    assert [str(p) for p in lint_group_rules(config)] == [
        "profiles.general.podGroup[1]: pod group rule later never applies: op "
        "(profiles.general.podGroup[0]) claims every pod it would; narrow op with matchLabels "
        "or owners, or move it after this one"
    ]


def test_schema_lists_the_field() -> None:
    schema = ClassifierConfig.model_json_schema()
    assert schema["$defs"]["ProfileSpec"]["properties"]["podGroup"]["type"] == "array"
    assert set(schema["$defs"]["GroupSizeSpec"]["properties"]) == {
        "label",
        "annotation",
        "owner",
        "object",
    }


# --------------------------------------------------------------------------- shipped rules


def templates(name: str) -> tuple[dict[str, Any], list[PodTemplate]]:
    documents = read_manifests(name, (FIXTURES / name).read_text(encoding="utf-8"))
    (document,) = [d.body for d in documents if isinstance(d.body, dict) and d.body.get("spec")]
    return document, list(find_pod_templates(document))


SHIPPED = load_policy(EXAMPLE_CONFIG).classifier.group_rules


@pytest.mark.parametrize(
    ("fixture", "rule", "members", "size"),
    [
        # examples/pytorch/simple.yaml: a master and a worker.
        ("kubeflow-pytorchjob-simple.yaml", "pytorchjob", 2, 2),
        # examples/v2beta1/pi/pi.yaml: the launcher (through its Job) and 2 workers.
        ("mpi-operator-mpijob-pi.yaml", "mpijob", 2, 3),
        # 2 replicas of an Indexed Job with parallelism 8.
        ("gke-samples-sax-model-server-jobset-tpu.yaml", "jobset", 1, 16),
        # The JobSet project's example: 4 workers and a driver; replicas left to the default.
        ("jobset-paralleljobs.yaml", "jobset", 2, 5),
        # ray-cluster.sample.yaml: the worker group only; the head stands alone.
        ("kuberay-raycluster-sample.yaml", "raycluster-workers", 1, 1),
    ],
)
def test_shipped_rules_group_published_manifests(
    fixture: str, rule: str, members: int, size: int
) -> None:
    document, found = templates(fixture)
    claimed = []
    refs = []
    for template in found:
        member = pod_from_template(template, namespace="team-a")
        claim = claim_group(member, SHIPPED)
        if claim is None:
            continue
        assert claim.source == f"rule:{rule}"
        assert claim.name == document["metadata"]["name"]
        ref = claim.size_from
        assert ref is not None
        namespace = document["metadata"].get("namespace", "team-a")
        assert (ref.kind, ref.name, ref.namespace) == (
            document["kind"],
            document["metadata"]["name"],
            namespace,
        )
        assert ref.api_version == document["apiVersion"]
        claimed.append(template)
        refs.append(ref)
    assert len(claimed) == members
    # The size the object gives is the number of pods its operator creates for the group.
    assert {ref.size_of(document) for ref in refs} == {size}
    assert sum(t.count for t in claimed) == size


def test_the_raycluster_head_is_not_a_member() -> None:
    _, found = templates("kuberay-raycluster-sample.yaml")
    head = next(t for t in found if t.path == "spec.headGroupSpec.template")
    assert claim_group(pod_from_template(head, namespace="ns"), SHIPPED) is None


def test_a_tfjob_pod_with_the_same_job_name_label_is_not_a_pytorchjob_member() -> None:
    tf = pod(
        {"training.kubeflow.org/job-name": "j", "training.kubeflow.org/operator-name": "x"},
        owner=("kubeflow.org/v1", "TFJob", "j"),
    )
    assert claim_group(tf, SHIPPED) is None


def test_jobset_child_jobs_are_grouped_by_the_jobset_not_the_indexed_job_fallback() -> None:
    _, (template,) = templates("gke-samples-sax-model-server-jobset-tpu.yaml")
    member = pod_from_template(template, namespace="ns")
    assert member["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "0"
    claim = claim_group(member, SHIPPED)
    assert claim is not None
    assert claim.key == "jobset/sax-model-server-set"
    fallback = claim_group(member)  # without the rules: the Indexed Job fallback
    assert fallback is not None
    assert (fallback.source, fallback.key) == (
        "indexed-job",
        "job/sax-model-server-set-sax-model-server-0",
    )
