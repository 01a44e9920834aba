"""The workload: realistic AdmissionReviews from the fixtures, with per-request slots."""

from __future__ import annotations

import random

import orjson
import pytest

from admission.reviews import decode_review
from bench import workload as wl
from bench.apiserver import DEFAULT_TOLERATION_KEYS
from bench.configgen import GeneratedPolicy
from bench.stack import Pipeline, offline_runtime
from bench.workload import SourcePod, Template, Workload, build_workload, pair_ids
from tenants.config import RESERVATION_ANNOTATION, TENANT_LABEL, TIER_LABEL
from tenants.controller import pod_facts
from tenants.decisions import reservation_id_for


def test_template_cuts_at_every_slot_and_renders_back() -> None:
    document = {
        "uid": "@@bench-uid@@",
        "name": "web-@@bench-suffix@@",
        "nested": {"again": ["@@bench-uid@@", "plain"]},
    }

    template = Template.from_document(document)

    assert template.slots == ("uid", "suffix", "uid")
    rendered = orjson.loads(template.render({"uid": "u-1", "suffix": "x7k2q"}))
    assert rendered == {"uid": "u-1", "name": "web-x7k2q", "nested": {"again": ["u-1", "plain"]}}
    assert template.size == len(template.render({"uid": "", "suffix": ""}))


def test_template_without_slots_is_its_document() -> None:
    template = Template.from_document({"a": 1})

    assert template.slots == ()
    assert template.render({}) == b'{"a":1}'


def test_render_names_a_missing_value() -> None:
    with pytest.raises(KeyError, match="uid"):
        Template.from_document({"uid": "@@bench-uid@@"}).render({})


def test_pair_ids_are_deterministic_and_unique() -> None:
    assert pair_ids(1, 5) == pair_ids(1, 5)
    ids = [pair_ids(run, index) for run in (1, 2) for index in range(200)]
    uids = [uid for i in ids for uid in (i.mutate_uid, i.validate_uid, i.pod_uid)]
    assert len(set(uids)) == len(uids)
    assert len({(i.suffix) for i in ids[:200]}) == 200
    first = ids[0]
    assert first.reservation_id == reservation_id_for(first.mutate_uid)


def test_name_suffix_alphabet_and_length() -> None:
    for index in (0, 1, 26, 27, 27**5 - 1):
        suffix = wl.name_suffix(index)
        assert len(suffix) == 5
        assert set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_sources_cover_every_fixture_template(sources: list[SourcePod]) -> None:
    keys = {source.key.split(":", 1)[0] for source in sources}

    assert len(sources) >= 50
    assert "coredns-deployment.yaml" in keys
    # system-* classes are dropped (tenantgate refuses them to tenant pods), others kept.
    assert all(
        source.pod["spec"].get("priorityClassName") in (None, "batch-low", "tenant-guaranteed")
        for source in sources
    )


def test_reviews_look_like_the_api_server_sent_them(workload: Workload) -> None:
    ids = pair_ids(3, 0)
    for pair in workload.pairs:
        mutate_body, validate_body = pair.bodies(ids)
        mutate = decode_review(mutate_body).request
        validate = decode_review(validate_body).request

        assert wl.MIN_BYTES <= len(mutate_body) <= wl.MAX_BYTES, pair.source
        assert mutate.uid == ids.mutate_uid
        assert validate.uid == ids.validate_uid
        assert mutate.operation == validate.operation == "CREATE"
        assert mutate.namespace == validate.namespace == pair.namespace
        pod = mutate.object
        assert pod is not None
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["creationTimestamp"] is None
        assert "uid" not in meta
        sent = orjson.loads(mutate_body)["request"]["object"]["metadata"]  # decoding skips it
        assert sent["managedFields"][0]["fieldsType"] == "FieldsV1"
        assert any(v["name"].startswith("kube-api-access-") for v in spec["volumes"])
        keys = [t.get("key") for t in spec["tolerations"]]
        # DefaultTolerationSeconds adds nothing for a pod that already tolerates every
        # NoExecute taint with a keyless toleration (a DaemonSet's "operator: Exists";
        # plugin/pkg/admission/defaulttolerationseconds/admission.go).
        tolerates_all = any(
            not t.get("key") and t.get("effect") in (None, "", "NoExecute")
            for t in spec["tolerations"]
        )
        assert tolerates_all or set(DEFAULT_TOLERATION_KEYS) <= set(keys)
        assert pod["status"] == {}

        stored = validate.object
        assert stored is not None
        stored_meta = stored["metadata"]
        assert stored_meta["uid"] == ids.pod_uid
        assert stored_meta["name"] == validate.name
        assert stored_meta["annotations"][RESERVATION_ANNOTATION] == ids.reservation_id
        assert stored_meta["labels"][TENANT_LABEL] == pair.tenant
        assert stored_meta["labels"][TIER_LABEL] == pair.tier
        assert stored["status"]["phase"] == "Pending"


def test_sizes_spread_around_ten_kilobytes(workload: Workload) -> None:
    sizes = workload.sizes("mutate")

    assert all(wl.MIN_BYTES <= size <= wl.MAX_BYTES for size in sizes)
    assert len(set(sizes)) > len(sizes) // 2
    ids = pair_ids(0, 0)
    assert sizes == [len(pair.bodies(ids)[0]) for pair in workload.pairs]


def test_the_same_seed_builds_the_same_bytes(
    generated: GeneratedPolicy, sources: list[SourcePod]
) -> None:
    ids = pair_ids(1, 1)
    first = build_workload(generated, pairs=4, seed=11, sources=sources)
    again = build_workload(generated, pairs=4, seed=11, sources=sources)
    other = build_workload(generated, pairs=4, seed=12, sources=sources)

    assert [p.bodies(ids) for p in first.pairs] == [p.bodies(ids) for p in again.pairs]
    assert [p.bodies(ids) for p in first.pairs] != [p.bodies(ids) for p in other.pairs]


def test_pairs_are_admitted_by_the_server_stack_as_real_creations(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    runtime = offline_runtime(generated)
    pipeline = Pipeline(runtime.guard)
    for index, pair in enumerate(workload.pairs):
        ids = pair_ids(9, index)
        mutate_body, validate_body = pair.bodies(ids)

        _, mutated = pipeline.mutate(mutate_body, now=wl.NOW)
        answer, validated = pipeline.validate(validate_body, now=wl.NOW)

        assert mutated.allowed, pair.source
        assert validated.allowed, pair.source
        assert mutated.audit_annotations["reservation"] == ids.reservation_id
        assert mutated.audit_annotations["tier"] == pair.tier
        assert validated.warnings == ()  # it found the reservation /mutate booked
        assert orjson.loads(answer)["response"]["uid"] == ids.validate_uid
    bound = sum(len(ledger.bound) for ledger in runtime.ledger.snapshot().values())
    assert bound == len(workload.pairs)


def test_workload_spreads_over_tenants_tiers_and_profiles(workload: Workload) -> None:
    assert len({pair.tenant for pair in workload.pairs}) > 1
    assert set(workload.histogram("tier")) == {"guaranteed", "burst"}
    assert len(workload.histogram("profile")) > 3


def test_stored_pods_read_as_the_controller_reads_them(workload: Workload) -> None:
    pair = workload.pairs[0]
    ids = pair_ids(4, 2)

    raw = pair.stored_pod(ids, resource_version=77, namespace="t00002-dev", tenant="t00002")
    facts = pod_facts(orjson.loads(raw))

    assert facts is not None
    assert (facts.uid, facts.namespace, facts.resource_version) == (ids.pod_uid, "t00002-dev", "77")
    assert facts.reservation == ids.reservation_id
    assert facts.amount["pods"].value() == 1
    assert orjson.loads(raw)["status"]["phase"] == "Running"


def test_decorations_stop_at_the_target(sources: list[SourcePod]) -> None:
    small = min(sources, key=lambda s: len(orjson.dumps(s.pod)))
    sizes = []
    for target in (6000, 9000, 12000):
        _, admitted = wl.decorated_pod(
            small, namespace="t00000-prod", target=target, rng=random.Random(1), classes={}
        )
        sizes.append(len(orjson.dumps(admitted)))
    assert sizes == sorted(sizes)
    assert sizes[-1] - sizes[0] > 4000


def test_no_pair_is_a_pod_group_member(
    generated: GeneratedPolicy, sources: list[SourcePod]
) -> None:
    # A member waits behind the gate for its whole group (the groups phase measures it); a
    # pair of this workload is booked at /mutate, whichever fixture pod it is built from.
    every = build_workload(generated, pairs=len(sources), seed=5, sources=sources)
    pipeline = Pipeline(offline_runtime(generated).guard)
    for index, pair in enumerate(every.pairs):
        mutate_body, validate_body = pair.bodies(pair_ids(5, index))
        _, mutated = pipeline.mutate(mutate_body, now=wl.NOW)
        _, validated = pipeline.validate(validate_body, now=wl.NOW)
        assert mutated.allowed, pair.source
        assert validated.allowed, pair.source
        assert validated.warnings == (), pair.source
