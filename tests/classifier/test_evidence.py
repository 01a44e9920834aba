"""Weighed evidence: the config's evidence section, the weighing rule, sidecars, one read.

The shipped weights are measured on real manifests in test_fixtures.py and on the issue's
patterns in test_default_evidence.py; here the mechanism itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from classifier.config import ClassifierConfig, ClassifierConfigError
from classifier.evidence import Item, Weighing, compile_evidence
from classifier.evidence.signals import SignalReader, read_signals
from classifier.facts import PodFacts
from classifier.plan import Classifier, compile_classifier
from classifier.templates import pod_from_template
from classifier.types import JSONObject
from tests.classifier import test_fixtures

PROFILES = ["web-frontend", "api", "database", "streaming", "batch", "ml-training", "system"]


def compiled(**fields: Any) -> Classifier:
    config: dict[str, Any] = {"profiles": {name: {} for name in [*PROFILES, "general"]}}
    config.update(fields)
    return compile_classifier(ClassifierConfig.model_validate(config))


def pod(*containers: JSONObject, **spec: Any) -> JSONObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"containers": list(containers), **spec},
    }


POSTGRES = pod({"name": "db", "image": "postgres:16", "ports": [{"containerPort": 5432}]})


def test_built_in_weights_decide_for_the_built_in_names() -> None:
    found = compiled().classify(POSTGRES, namespace="shop")
    assert (found.profile, found.source, found.classified_by) == (
        "database",
        "evidence",
        "evidence",
    )
    assert found.reason.startswith("evidence: database 12 (image:postgres +6, port:5432 +4, ")


def test_a_config_without_the_built_in_names_weighs_nothing() -> None:
    classifier = compile_classifier(
        ClassifierConfig.model_validate({"profiles": {"general": {}, "stores": {}}})
    )
    found = classifier.classify(POSTGRES, namespace="shop")
    assert (found.profile, found.source, found.reason) == ("general", "default", "no rule matched")


def test_builtin_false_gives_the_default_as_before() -> None:
    found = compiled(evidence={"builtin": False}).classify(POSTGRES, namespace="shop")
    assert (found.profile, found.source, found.reason) == ("general", "default", "no rule matched")


def test_a_weight_of_zero_removes_a_built_in_one_and_others_adjust() -> None:
    evidence = {"weights": {"database": {"image:postgres": 0, "port:5432": 1}}}
    found = compiled(evidence=evidence).classify(POSTGRES, namespace="shop", explain=True)
    # name:db +2 and port:5432 +1 are left: 3, below the threshold 4.
    assert found.profile == "general"
    assert found.reason.startswith("no rule matched; evidence below the threshold 4: database 3")
    assert "image:postgres" not in found.reason


def test_evidence_for_a_profile_of_the_config_own() -> None:
    classifier = compiled(
        profiles={name: {} for name in [*PROFILES, "general", "ledger"]},
        evidence={"weights": {"ledger": {"image:ledgerd": 6, "env:LEDGER": 2}}},
    )
    found = classifier.classify(
        pod({"name": "main", "image": "registry.example.com/fin/ledgerd:3"}), namespace="fin"
    )
    assert (found.profile, found.reason) == ("ledger", "evidence: ledger 6 (image:ledgerd +6)")


def test_below_the_threshold_the_default_says_how_far() -> None:
    found = compiled(evidence={"threshold": 20}).classify(POSTGRES, namespace="shop")
    assert found.profile == "general"
    assert found.reason.startswith("no rule matched; evidence below the threshold 20: database")


def test_a_matched_rule_beats_any_evidence() -> None:
    rules = [{"name": "everything-is-api", "profile": "api", "match": {"namespace": "shop"}}]
    found = compiled(rules=rules).classify(POSTGRES, namespace="shop")
    assert (found.profile, found.source, found.rule) == ("api", "rule", "everything-is-api")


def test_profiles_a_tenant_may_not_use_are_not_weighed() -> None:
    found = compiled().classify(
        POSTGRES, namespace="shop", allowed_profiles=frozenset({"api", "system"})
    )
    assert found.profile == "general"  # api 3 (port:any, ...) stays below 4; database is out


@pytest.mark.parametrize(
    ("weights", "profile"),
    [
        # 4 each; api's heaviest single signal (4) beats database's (2 + 2): api.
        ({"api": {"name:x": 4}, "database": {"image:x": 2, "port:1": 2}}, "api"),
        # 4 each, heaviest 4 each: the profile declared first (web-frontend before api).
        ({"api": {"name:x": 4}, "web-frontend": {"image:x": 4}}, "web-frontend"),
    ],
)
def test_ties(weights: dict[str, dict[str, int]], profile: str) -> None:
    classifier = compiled(evidence={"builtin": False, "weights": weights})
    subject = pod({"name": "x", "image": "x", "ports": [{"containerPort": 1}]})
    found = classifier.classify(subject, namespace="n")
    assert found.profile == profile
    # The reason leads with the profile that won the tie, whatever the names' order.
    assert found.reason.startswith(f"evidence: {profile} 4 ("), found.reason


@pytest.mark.parametrize(
    ("weights", "path", "message"),
    [
        ({"nosuch": {"image:x": 1}}, "evidence.weights.nosuch", 'unknown profile "nosuch"'),
        ({"api": {"x": 1}}, "evidence.weights.api.x", "is not a signal"),
        ({"api": {"color:red": 1}}, "evidence.weights.api.color:red", "KIND one of image"),
    ],
)
def test_bad_weights_are_config_errors(
    weights: dict[str, dict[str, int]], path: str, message: str
) -> None:
    with pytest.raises(ClassifierConfigError) as raised:
        compiled(evidence={"weights": weights})
    (problem,) = raised.value.problems
    assert problem.path == path
    assert message in problem.message


def test_a_sidecar_is_set_aside_unless_every_container_is_one() -> None:
    proxy = {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.22"}
    shipper = {"name": "logs", "image": "fluent/fluent-bit:3"}
    main = {"name": "db", "image": "postgres:16"}
    mixed = read_signals(PodFacts(pod(main, proxy, shipper), namespace="n"))
    assert mixed.sidecars == ("istio-proxy", "logs")
    assert "image:fluent-bit" not in mixed.signals
    alone = read_signals(PodFacts(pod(shipper), namespace="n"))
    assert alone.sidecars == ()
    assert alone.signals["image:fluent-bit"] == "container logs"


def _commands(container: JSONObject) -> set[str]:
    found = read_signals(
        PodFacts(pod({"name": "app", "image": "x/y:1", **container}), namespace="n")
    )
    return {text for text in found.signals if text.startswith(("command:", "flag:"))}


@pytest.mark.parametrize(
    ("container", "signals"),
    [
        # The container runs command + args: a shell's script may come in args. The kubelet
        # passes command and args on as given (ExpandContainerCommandAndArgs in
        # pkg/kubelet/container/helpers.go); the runtime runs command, or the image's
        # entrypoint when command is empty, followed by args.
        (
            {"command": ["/bin/bash", "-c", "--"], "args": ["while true; do sleep 30; done;"]},
            {"command:sleep"},
        ),
        ({"command": ["sh", "-c"], "args": ["exec nginx -g 'daemon off;'"]}, {"command:nginx"}),
        (
            {"command": ["python", "serve.py"], "args": ["--port=8080"]},
            {"command:python", "flag:--port"},
        ),
        # Args alone follow the image's entrypoint: a leading flag names no program.
        ({"args": ["--model", "m"]}, {"flag:--model"}),
        # A loop that only notes the time or the host between sleeps waits.
        (
            {
                "command": ["/bin/bash", "-c"],
                "args": [
                    "set -euo pipefail; while true; do echo $(date) >> /mnt/out; sleep 1; done"
                ],
            },
            {"command:sleep"},
        ),
        (
            {
                "command": [
                    "/bin/sh",
                    "-c",
                    "touch /data/index.html; while true; do date >> /data/index.html; "
                    "hostname >> /data/index.html; sleep $(($RANDOM % 5 + 5)); done",
                ]
            },
            {"command:sleep"},
        ),
        # Work between the sleeps is work.
        ({"command": ["sh", "-c", "while true; do vectorAdd; sleep 30; done"]}, {"command:while"}),
        (
            {
                "command": [
                    "sh",
                    "-c",
                    "while true; do echo $(curl -s http://x/) >> f; sleep 5; done",
                ]
            },
            {"command:while"},
        ),
        (
            {"command": ["sh", "-c", "while true; do echo hi | nc x 80; sleep 1; done"]},
            {"command:while"},
        ),
    ],
)
def test_the_program_is_read_from_command_and_args_as_the_container_runs_them(
    container: JSONObject, signals: set[str]
) -> None:
    assert _commands(container) == signals


@pytest.mark.parametrize(
    "script",
    [
        # Runs of blanks and unclosed substitutions that a backtracking pattern would try to
        # split every way before failing: the pod's script is read in one pass.
        "while true; do echo a" + " " * 200_000 + "x",
        "while true; do sleep 1" + " " * 200_000 + "x",
        "while true; do echo " + "$((" * 50_000 + "; sleep 1; done",
        "while true; do " + "echo $(date) ; " * 20_000 + "sleep 1; done",
    ],
    ids=["blanks after echo", "blanks after sleep", "unclosed arithmetic", "long loop"],
)
def test_a_hostile_script_is_read_as_a_program_not_a_wait(script: str) -> None:
    assert _commands({"command": ["sh", "-c", script]}) == {"command:while"}


class CountingDict(dict[str, Any]):
    """A container whose reads of each field are counted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: dict[str, int] = {}

    def get(self, key: str, default: Any = None) -> Any:
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().get(key, default)


def test_weighing_reads_each_container_field_once() -> None:
    container = CountingDict(
        name="app",
        image="example.com/shop/orders-api:1",
        ports=[{"containerPort": 8080}],
        env=[{"name": "SPRING_PROFILES_ACTIVE", "value": "prod"}],
        args=["--port=8080"],
        readinessProbe={"httpGet": {"path": "/actuator/health"}},
        securityContext={},
    )
    found = compiled().classify(pod(container), namespace="shop")
    assert found.source == "evidence"
    fields = ("ports", "env", "args", "command", "readinessProbe", "securityContext", "resources")
    assert {key: container.reads.get(key, 0) for key in fields} == dict.fromkeys(fields, 1)


def test_reading_only_the_known_signals_gives_the_known_part_of_every_signal() -> None:
    """Weighing reads a pod with the table's signals (``known``), which leaves the others out
    early (a container's environment by a cached intersection); on every fixture pod that is
    exactly the part of a read without ``known`` that some weight names, each signal where it
    was first read, and the same sidecars."""
    evidence = compile_evidence(test_fixtures.classifier().config, [])
    assert evidence is not None
    known = evidence.known
    for name, key in test_fixtures.all_templates():
        pod = pod_from_template(test_fixtures.template(name, key), namespace="default")
        namespace = str(pod["metadata"]["namespace"])
        every = read_signals(PodFacts(pod, namespace=namespace))
        only = read_signals(PodFacts(pod, namespace=namespace), known=known)
        wanted = {text: where for text, where in every.signals.items() if text in known}
        assert {t: w for t, w in only.signals.items() if t in known} == wanted, (name, key)
        assert only.signals.keys() - known <= {"host:privileged"}, (name, key)
        assert only.sidecars == every.sidecars, (name, key)


class _CountedSet(frozenset[str]):
    """A frozenset that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        type(self).compared += 1
        return frozenset.__eq__(self, other)

    __hash__ = frozenset.__hash__


def test_a_reader_compiled_after_another_never_compares_their_signal_sets() -> None:
    """A reload compiles a table whose signals equal the old one's, in a set of its own. A
    cache shared by both readers and keyed by that set would compare the two sets, element by
    element, on every lookup of the new reader: the readers of a process must not share one."""
    evidence = compile_evidence(test_fixtures.classifier().config, [])
    assert evidence is not None
    env = [{"name": name, "value": "x"} for name in ("POSTGRES_USER", "POSTGRES_DB", "TZ")]
    facts = PodFacts(
        pod({"name": "db", "image": "example.com/store:1", "env": env}), namespace="shop"
    )
    before, after = _CountedSet(evidence.known), _CountedSet(evidence.known)
    _CountedSet.compared = 0
    first = SignalReader(before).read(facts)
    again = [SignalReader(after).read(facts) for _ in range(3)]
    assert _CountedSet.compared == 0
    assert all(read == first for read in again)
    assert "env:POSTGRES" in first.signals


def _described_from_items(
    weighing: Weighing, items: list[Item], *, explain: bool, limit: int = 4
) -> str:
    """The reason as it was built from every counted :class:`~classifier.evidence.Item`."""
    ranking = [(p, s) for p, s in weighing.ranking() if s > 0]
    if not ranking:
        return ""
    parts = []
    for profile, score in ranking if explain else ranking[:1]:
        listed_items = sorted(
            (i for i in items if i.profile == profile and i.weight),
            key=lambda i: (-i.weight, i.signal),
        )
        listed = listed_items if explain else listed_items[:limit]
        text = ", ".join(
            f"{i.signal} {i.weight:+d}" + (f" ({i.where})" if explain else "") for i in listed
        )
        if len(listed) < len(listed_items):
            text += f", +{len(listed_items) - len(listed)} more"
        parts.append(f"{profile} {score} ({text})")
    if not explain and len(ranking) > 1:
        parts.append(f"next {ranking[1][0]} {ranking[1][1]}")
    tail = f"; sidecars set aside: {', '.join(weighing.sidecars)}" if weighing.sidecars else ""
    return "; ".join(parts) + tail


@pytest.mark.parametrize(
    "allowed", [None, frozenset({"api", "batch", "general"})], ids=["all", "some"]
)
def test_the_reason_read_from_the_signals_is_the_one_built_from_every_item(
    allowed: frozenset[str] | None,
) -> None:
    """The reason reads the counted signals without building an item per signal and profile:
    on every fixture pod, with every profile allowed or a few, the items asked for are those
    an item per allowed entry of each signal read gives, and the reason is the text they
    give."""
    evidence = compile_evidence(test_fixtures.classifier().config, [])
    assert evidence is not None
    for name, key in test_fixtures.all_templates():
        pod = pod_from_template(test_fixtures.template(name, key), namespace="default")
        facts = PodFacts(pod, namespace=str(pod["metadata"]["namespace"]))
        weighing = evidence.weigh(facts, allowed=allowed)
        items = [
            Item(profile, signal, weight, where)
            for signal, where in read_signals(facts, known=evidence.known).signals.items()
            for profile, weight in evidence.table.get(signal, ())
            if allowed is None or profile in allowed
        ]
        assert list(weighing.items) == items, (name, key)
        for explain in (False, True):
            wanted = _described_from_items(weighing, items, explain=explain)
            assert weighing.describe(explain=explain) == wanted, (name, key, explain)
