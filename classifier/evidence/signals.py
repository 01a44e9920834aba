"""The signals evidence is weighed from: one pass over the pod, each as a short text.

A signal is ``kind:value``, lower-case but for environment names (``image:postgres``,
``port:5432``, ``env:MYSQL``, ``flag:--leader-elect``, ``hostpath:/var/lib/kubelet``,
``owner:DaemonSet``, ``resource:nvidia.com/gpu``). A probe that fetches a page (a path ending
``.html`` or ``.htm``) also gives ``probe:*.html``. An extended resource whose name says it is an
accelerator (a GPU, TPU, NPU, a MIG slice, Neuron, Gaudi, Ascend...) also gives
``resource:accelerator``, so a vendor no weight names still counts as one; a pod whose main
containers declare no port and probe none gives ``port:none``. Weights
(:mod:`classifier.evidence.weights`) are keyed by these texts, so weighing is a dictionary
look-up per signal.

Containers that only assist the main one (a mesh proxy, a VPN client, an exporter, a log
shipper) are *sidecars*: their container signals are set aside, so they do not change what the
pod is, unless every container is one (an exporter Deployment is what it exports) or the
workload is named after it (an ``envoy`` DaemonSet's Envoy is its main container). A port bound
on the node (``hostPort``) also gives ``hostport:N``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from classifier import podview
from classifier.facts import PodFacts, image_repository
from classifier.records import record

# The parts of names and image paths: "front-end", "catalogue_db", "kafka.connect".
_WORD_SPLIT = re.compile(r"[-_./:]+")
# Labels whose value names the application or its role.
NAME_LABELS = (
    "app",
    "app.kubernetes.io/name",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "k8s-app",
    "name",
    "component",
    "tier",
    "role",
)
# Host paths told apart by prefix: the kubelet's directories, devices, kernel interfaces,
# CNI configuration and node logs.
HOST_PATHS = (
    "/var/lib/kubelet",
    "/dev",
    "/sys",
    "/proc",
    "/lib/modules",
    "/etc/cni",
    "/opt/cni",
    "/var/run",
    "/run",
    "/var/log",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/etc/kubernetes",
)
# Words of an image path or container name that mark an assisting container.
SIDECAR_WORDS = frozenset(
    {
        "istio-proxy",
        "proxyv2",
        "linkerd-proxy",
        "envoy",
        "envoyproxy",
        "tailscale",
        "openvpn",
        "wireguard",
        "gluetun",
        "vpn",
        "exporter",
        "fluent-bit",
        "fluentbit",
        "fluentd",
        "filebeat",
        "promtail",
        "vector",
        "logrotate",
        "oauth2-proxy",
        "cloud-sql-proxy",
        "cloudsql-proxy",
        "cloudsql-docker",
        "vault-agent",
        "jaeger-agent",
        "config-reloader",
        "configmap-reload",
        "kube-rbac-proxy",
        "queue-proxy",
        "queue",
        "git-sync",
        "sidecar",
        "daprd",
        "consul-dataplane",
        "kuma-dp",
        "xray-daemon",
        "otel-agent",
        "ghostunnel",
        "stunnel",
        "alloydb-auth-proxy",
    }
)
# Image names that say nothing of their own (mssql/server, database/enterprise): the part
# before them names the software.
GENERIC_IMAGE_NAMES = frozenset(
    {
        "server",
        "enterprise",
        "free",
        "express",
        "community",
        "standard",
        "app",
        "image",
        "main",
        "controller",
    }
)
_EXTENDED_SKIP = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
# Words of an extended resource's name (domain or name, split at ``./-``) that say accelerator:
# nvidia.com/gpu, gpu.intel.com/xe, sophgo.com/tpu, huawei.com/Ascend910, cambricon.com/mlu,
# nvidia.com/mig-3g.20gb, aws.amazon.com/neuroncore, habana.ai/gaudi2, iluvatar.ai/vgpu. An
# FPGA or a crypto accelerator (QAT) is not one: they are programmed for any kind of work.
_ACCELERATOR_WORDS = frozenset({"mlu", "dcu", "xpu", "qaic", "accel", "mig"})
_ACCELERATOR_PREFIXES = ("gpu", "vgpu", "tpu", "npu", "neuron", "gaudi", "ascend", "vcuda")


def words(text: str) -> Iterator[str]:
    """The text itself, lower-cased, and each part between ``-_./:``."""
    low = text.lower()
    yield low
    parts = [p for p in _WORD_SPLIT.split(low) if p]
    if len(parts) > 1:
        yield from parts


@lru_cache(maxsize=4096)
def _is_sidecar(name: str, repository: str) -> bool:
    name = name.lower()
    last = repository.rsplit("/", 1)[-1]
    found = {name, last, *_WORD_SPLIT.split(name), *_WORD_SPLIT.split(last)}
    found |= {w for w in (name, last) for w in _dashed_pairs(w)}
    return bool(found & SIDECAR_WORDS) or last.endswith("-exporter")


def _dashed_pairs(text: str) -> Iterator[str]:
    parts = text.split("-")
    for i in range(len(parts) - 1):
        yield f"{parts[i]}-{parts[i + 1]}"


def image_signals(repository: str) -> tuple[str, ...]:
    """The signals of an image repository path: its own name's words and its role."""
    found: list[str] = []
    # The image's own name (the last part of its repository, or the last two when the last is
    # generic): an organisation or a registry path (istio/..., zalando/..., a project id)
    # names who publishes it, not what it runs.
    parts = repository.split("/")
    own = parts[-1:] if parts[-1] not in GENERIC_IMAGE_NAMES else parts[-2:]
    for part in own:
        if part != "library":
            found.extend(f"image:{word}" for word in words(part))
    # The last word of a compound name is its role: postgres-operator-ui is a UI,
    # percona-server-mongodb-operator an operator, mysqld-exporter an exporter.
    last = [w for w in _WORD_SPLIT.split(parts[-1]) if w and not w.isdigit()]
    if len(last) > 1:
        found.append(f"image-role:{last[-1]}")
    # Who publishes it: the path before the image's own name, without a registry host.
    publisher = parts[: len(parts) - len(own)]
    if publisher and "." in publisher[0]:
        publisher = publisher[1:]
    for part in publisher:
        found.extend(f"image-org:{word}" for word in words(part))
    return tuple(found)


def name_signals(name: str) -> tuple[str, ...]:
    return tuple(f"name:{word}" for word in words(name))


@lru_cache(maxsize=4096)
def env_list_signals(names: tuple[Any, ...]) -> tuple[str, ...]:
    """The signals of a container's environment variable names, once each: every name and
    its first ``_``-separated part (the containers of one workload share them: cached)."""
    found: dict[str, None] = {}
    for name in names:
        if not isinstance(name, str) or not name:
            continue
        upper = name.upper()
        found[f"env:{upper.split('_', 1)[0]}"] = None
        found[f"env:{upper}"] = None
    return tuple(found)


@lru_cache(maxsize=4096)
def _image_repository(image: str) -> str:
    return image_repository(image)


def _container_signals(
    reader: SignalReader, container: Mapping[str, Any], name: str, repository: str
) -> tuple[list[str], bool]:
    """What one container says of itself (image words, name words, ports, env, probes, flags)
    and whether it serves: it declares a port, or a probe reaches one (HTTP, gRPC, TCP).

    ``name`` and ``repository`` are the container's name and image as the caller read them.
    The words of its image and name, and its environment, come already filtered by
    ``reader``; the rest is filtered by the caller.
    """
    found = [*reader.strings(image_signals, repository), *reader.strings(name_signals, name)]
    serves = False
    ports = podview.objects(container.get("ports"))
    if ports:
        serves = True
        found.append("port:any")
    for port in ports:
        number = port.get("containerPort")
        if isinstance(number, int):
            found.append(_text("port", number))
        host_port = port.get("hostPort")
        if isinstance(host_port, int):
            found.append(_text("hostport", host_port))
        port_name = podview.string(port.get("name"))
        if port_name:
            found.append(_text("port-name", port_name))
    env = container.get("env")
    if isinstance(env, list) and env:
        names = tuple([item.get("name") for item in env if type(item) is dict])
        found += reader.environment(names)
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if not isinstance(probe, dict):
            continue  # most containers lack some probes: nothing more to read
        http = podview.obj(probe.get("httpGet"))
        path = podview.string(http.get("path"))
        if path is not None:
            serves = True
            clean = path.split("?", 1)[0] or "/"
            found.append(_text("probe", clean))
            # Any page a probe fetches says the container serves pages, whatever its name.
            if clean.lower().endswith((".html", ".htm")):
                found.append("probe:*.html")
        elif "grpc" in probe:
            serves = True
            found.append("probe:grpc")
        elif "tcpSocket" in probe:
            serves = True
            found.append("probe:tcp")
    argv: list[str] = []
    for group in ("command", "args"):
        items = container.get(group)
        if not isinstance(items, list):
            continue
        texts = [item for item in items if isinstance(item, str)]
        for item in texts:
            if item.startswith("--") and item != "--":
                found.append(_text("flag", item.split("=", 1)[0]))
        argv += texts
    # The container runs command + args (args alone follow the image's entrypoint; the
    # kubelet's ExpandContainerCommandAndArgs, pkg/kubelet/container/helpers.go, passes both
    # on as given): a shell's script may come in args after "sh -c" in command.
    program = _program(argv)
    if program:
        found.append(f"command:{program}")
    resources = podview.obj(container.get("resources"))
    for part in ("requests", "limits"):
        for resource, amount in podview.obj(resources.get(part)).items():
            if resource in _EXTENDED_SKIP or resource.startswith("hugepages-"):
                continue
            if str(amount).strip() not in ("0", "", "0.0"):
                found.append(_text("resource", resource))
                if _is_accelerator(resource):
                    found.append("resource:accelerator")
    return found, serves


@lru_cache(maxsize=1024)
def _is_accelerator(resource: str) -> bool:
    parts = [p for p in _WORD_SPLIT.split(resource.lower()) if p]
    return any(p in _ACCELERATOR_WORDS or p.startswith(_ACCELERATOR_PREFIXES) for p in parts)


_SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh"})
_SCRIPT_FLAG = re.compile(r"-[a-z]*c$")
# A script whose only work is to keep the container alive waits, as ``sleep`` does: ``while
# true; do sleep 3600; done``, ``while :; do sleep 30; done`` (a placeholder or a debugging
# pod), and the same loop when all it does besides sleeping is note the time or the host, in
# its log or a file: ``while true; do echo $(date) >> /data/out; sleep 1; done``, the volume
# smoke test of storage drivers' examples. Setup before the loop may only set shell options,
# sleep or touch a file. The script comes from the pod, so it is read in one pass, without a
# regular expression that could backtrack, and only up to a length no such loop needs.
_LOOP_HEADS = frozenset({"while true", "while :", "while [ 1 ]", "while [1]", "until false"})
_LOGGING_PROGRAMS = frozenset({"echo", "date", "hostname"})
_WAITING_SCRIPT_MAX = 1024


def _only_waits(script: str) -> bool:
    """Whether a shell script only keeps its container alive (see above)."""
    if len(script) > _WAITING_SCRIPT_MAX:
        return False
    statements = [" ".join(part.split()) for part in script.replace("\n", ";").split(";")]
    statements = [statement for statement in statements if statement]
    start = 0
    while start < len(statements) and _is_setup(statements[start]):
        start += 1
    if len(statements) - start < 3 or statements[start] not in _LOOP_HEADS:
        return False
    opening, body, closing = statements[start + 1], statements[start + 2 : -1], statements[-1]
    if closing != "done" or not (opening == "do" or opening.startswith("do ")):
        return False
    if opening != "do":
        body = [opening[3:], *body]
    steps = [_without_harmless_substitutions(step) for step in body]
    kept = [step for step in steps if step is not None]
    return (
        len(kept) == len(steps)
        and any(step.startswith("sleep ") for step in kept)
        and all(_is_logged_step(step) for step in kept)
    )


def _is_setup(statement: str) -> bool:
    words_ = statement.split()
    return (words_[0] == "set" and len(words_) > 1 and words_[1][:1] in "-+") or (
        words_[0] in ("sleep", "touch") and len(words_) == 2
    )


def _without_harmless_substitutions(step: str) -> str | None:
    """``step`` with ``$(date ...)``, ``$(hostname)`` and ``$((arithmetic))`` replaced by a
    word; None when it substitutes anything else (that does work)."""
    out: list[str] = []
    at = 0
    while (found := step.find("$(", at)) >= 0:
        out.append(step[at:found])
        if step.startswith("$((", found):
            end = step.find("))", found + 3)
            if end < 0:
                return None
            at = end + 2
        else:
            end = step.find(")", found + 2)
            inside = step[found + 2 : end] if end >= 0 else ""
            if inside.split()[:1] not in (["date"], ["hostname"]) or "(" in inside:
                return None
            at = end + 1
        out.append("x")
    out.append(step[at:])
    return "".join(out)


def _is_logged_step(step: str) -> bool:
    """A sleep, or a program that only prints the time or the host (to a file at most)."""
    words_ = step.split()
    if words_[0] == "sleep":
        return len(words_) == 2
    return words_[0] in _LOGGING_PROGRAMS and not any(c in step for c in "|&<`$")


def _program(items: list[str]) -> str:
    """The program a command (or args) runs: its base name, or for ``sh -c SCRIPT`` the first
    word of the script (after ``exec``)."""
    if not items or items[0].startswith("-"):
        return ""
    words_ = items[0].split()
    program = words_[0].rsplit("/", 1)[-1].lower() if words_ else ""
    if program not in _SHELLS:
        return program
    # "-c" may come with other flags in one word: "-ec", "-xc", "-lc".
    flag = next((i for i, item in enumerate(items[1:], 1) if _SCRIPT_FLAG.match(item)), None)
    if flag is not None:
        script = items[flag + 1 :]
        if script and script[0] == "--":  # the end of the shell's options
            script = script[1:]
        if script and _only_waits(script[0]):
            return "sleep"
        first = script[0].split() if script else []
        while first and first[0] in ("exec", "set", "-e", "-x", "-ex"):
            first = first[1:]
        if first:
            program = first[0].rsplit("/", 1)[-1].lower().rstrip(";")
    return program


def _app_names(reader: SignalReader, facts: PodFacts, found: list[str]) -> None:
    labels = facts.labels
    for key in NAME_LABELS:
        value = labels.get(key)
        if value:
            found += reader.strings(name_signals, value)
    owners = facts.owners
    # The workload's own name: a Deployment's rather than its ReplicaSet's (which adds a hash),
    # a CronJob's rather than its Job's (which adds a time).
    implied = [owner for owner in owners if owner.via]
    for owner in implied or owners:
        if owner.name:
            found += reader.strings(name_signals, owner.name)
    if not owners:
        meta = podview.metadata(facts.pod)
        pod_name = podview.string(meta.get("name")) or podview.string(meta.get("generateName"))
        if pod_name:
            found += reader.strings(name_signals, pod_name.rstrip("-"))


def _namespace_signals(namespace: str) -> tuple[str, ...]:
    """The namespace, and each of its words: an add-on's second namespace (``linkerd-viz``,
    ``istio-ingress``) is named after the add-on."""
    return tuple(f"namespace:{word}" for word in words(namespace))


def _account_signals(account: str) -> tuple[str, ...]:
    return tuple(f"account:{word}" for word in words(account))


def _pod_signals(reader: SignalReader, facts: PodFacts) -> list[str]:
    """What the pod says as a whole: owners, namespace, names, label and annotation keys,
    volumes, scheduling. Names come filtered by ``reader``; the rest is filtered by the
    caller."""
    spec = facts.spec
    found = [_owner_text(owner.kind) for owner in facts.owners]
    found += reader.strings(_namespace_signals, facts.namespace)
    _app_names(reader, facts, found)
    found += reader.keys("label", facts.labels)
    found += reader.keys("annotation", facts.annotations)
    account = podview.string(spec.get("serviceAccountName"))
    if account:
        found += reader.strings(_account_signals, account)
    runtime = podview.string(spec.get("runtimeClassName"))
    if runtime:
        found.append(f"runtime:{runtime.lower()}")
    priority = podview.string(spec.get("priorityClassName"))
    if priority:
        found.append(f"priority:{priority.lower()}")
    found.append(_text("restart", facts.restart_policy))
    if facts.host_network:
        found.append("host:network")
    if spec.get("hostPID") is True:
        found.append("host:pid")
    found += reader.keys("node", podview.obj(spec.get("nodeSelector")))
    tolerations = podview.objects(spec.get("tolerations"))
    if tolerations:
        tolerated = [podview.string(item.get("key")) or "*" for item in tolerations]
        found += reader.keys("toleration", tolerated)
    for volume in podview.objects(spec.get("volumes")):
        if "persistentVolumeClaim" in volume:
            found.append("volume:claim")
        elif "csi" in volume:
            found.append("volume:csi")
        host = podview.string(podview.obj(volume.get("hostPath")).get("path"))
        if host:
            found.append(_host_text(host))
    if facts.template_claim() is not None:
        found.append("volume:claim-template")
    found.extend(_device_claim_signals(spec.get("resourceClaims")))
    return found


def _device_claim_signals(claims: Any) -> Iterator[str]:
    """A pod's dynamic resource allocation claims (``spec.resourceClaims``): devices the pod
    asks a driver for. A claim or claim template named after an accelerator (``gpu``,
    ``neurons``) counts as an accelerator request."""
    for claim in podview.objects(claims):
        yield "claim:device"
        for field in ("name", "resourceClaimName", "resourceClaimTemplateName"):
            text = podview.string(claim.get(field))
            if text and _is_accelerator(text):
                yield "resource:accelerator"
                break


@lru_cache(maxsize=8192)
def _text(kind: str, value: object) -> str:
    """``kind:value``, lower-cased (cached: pods repeat the same values)."""
    return f"{kind}:{str(value).lower()}"


@lru_cache(maxsize=1024)
def _owner_text(kind: str) -> str:
    return f"owner:{kind}"


@lru_cache(maxsize=4096)
def _host_text(path: str) -> str:
    return f"hostpath:{_host_prefix(path)}"


def _host_prefix(path: str) -> str:
    clean = path.rstrip("/") or "/"
    for prefix in HOST_PATHS:
        if clean == prefix or clean.startswith(prefix + "/"):
            return prefix
    return clean


@record
class PodSignals:
    """Every signal of a pod, once each, with where it was first read; and the sidecars."""

    signals: Mapping[str, str]  # signal -> "container NAME" or "pod"
    sidecars: tuple[str, ...]

    def texts(self) -> Iterable[str]:
        return self.signals.keys()


def _privileged(container: Mapping[str, Any]) -> bool:
    return podview.obj(container.get("securityContext")).get("privileged") is True


# Labels whose value is the workload's own name.
_OWN_NAME_LABELS = ("app", "app.kubernetes.io/name", "k8s-app", "name")


def _workload_names(facts: PodFacts) -> frozenset[str]:
    """The names the workload goes by: its name labels and its owners' names, lower-cased."""
    labels = facts.labels
    found = {labels[key].lower() for key in _OWN_NAME_LABELS if labels.get(key)}
    found.update(owner.name.lower() for owner in facts.owners if owner.name)
    return frozenset(found)


def _named_after(name: str, repository: str, workload: frozenset[str]) -> bool:
    """Whether the workload is named after this container or its image."""
    return name.lower() in workload or repository.rsplit("/", 1)[-1] in workload


# How many texts a reader keeps the signals of (names, images, namespaces) before it starts
# over: pods repeat a few hundred of them.
_READER_CACHE_SIZE = 8192


class SignalReader:
    """Reads a pod's signals; with ``known``, only those (weighing reads with its table's).

    The signals of a name, an image or a namespace, less those ``known`` leaves out, are kept
    per text: pods of one workload repeat them. Keys (of labels and annotations, node selector
    keys, tolerated taint keys) are looked up in a map of the table's own.
    """

    __slots__ = ("_cache", "_environments", "_keys", "known")

    def __init__(self, known: frozenset[str] | None = None) -> None:
        self.known = known
        self._cache: dict[tuple[Callable[[str], tuple[str, ...]], str], tuple[str, ...]] = {}
        # A container's environment variable names -> their signals less those ``known``
        # leaves out. Kept here, not in a cache shared by every reader: a key holding
        # ``known`` would make a reader compiled later (a reload) compare its equal but
        # distinct set, element by element, with the one in the key on every lookup.
        self._environments: dict[tuple[Any, ...], tuple[str, ...]] = {}
        # kind -> lower-cased key -> signal, for the kinds read from keys: label and
        # annotation keys, node selector keys, tolerated taint keys.
        self._keys: dict[str, dict[str, str]] | None = None
        if known is not None:
            self._keys = {"label": {}, "annotation": {}, "node": {}, "toleration": {}}
            for text in known:
                kind, _, value = text.partition(":")
                if kind in self._keys:
                    self._keys[kind][value] = text

    def strings(self, read: Callable[[str], tuple[str, ...]], text: str) -> tuple[str, ...]:
        """``read(text)``, less the signals ``known`` leaves out."""
        key = (read, text)
        found = self._cache.get(key)
        if found is None:
            found = read(text)
            if self.known is not None:
                found = tuple(signal for signal in found if signal in self.known)
            if len(self._cache) >= _READER_CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = found
        return found

    def keys(self, kind: str, keys: Iterable[str]) -> list[str]:
        """``kind:key`` of each of ``keys``, lower-cased, less those ``known`` leaves out."""
        if self._keys is None:
            return [_text(kind, key) for key in keys]
        table = self._keys[kind]
        if not table:
            return []
        return [table[low] for key in keys if (low := key.lower()) in table]

    def environment(self, names: tuple[Any, ...]) -> tuple[str, ...]:
        """The signals of a container's environment variable names, less those ``known``
        leaves out."""
        known = self.known
        if known is None:
            return env_list_signals(names)
        found = self._environments.get(names)
        if found is None:
            # A pod may carry dozens of variables; the containers of one workload share them.
            found = tuple(known.intersection(env_list_signals(names)))
            if len(self._environments) >= _READER_CACHE_SIZE:
                self._environments.clear()
            self._environments[names] = found
        return found

    def read(self, facts: PodFacts) -> PodSignals:
        """The pod's signals, reading each part of the pod once."""
        known = self.known
        seen: dict[str, str] = {}
        spec = facts.spec
        containers = podview.objects(spec.get("containers"))
        names = [podview.string(c.get("name")) or "" for c in containers]
        repositories = [_image_repository(podview.string(c.get("image")) or "") for c in containers]
        sidecar_flags = [_is_sidecar(n, r) for n, r in zip(names, repositories, strict=True)]
        if len(containers) > 1 and any(sidecar_flags):
            # A container the workload is named after is its main one, whatever its software.
            workload = _workload_names(facts)
            sidecar_flags = [
                flag and not _named_after(n, r, workload)
                for flag, n, r in zip(sidecar_flags, names, repositories, strict=True)
            ]
        all_sidecars = all(sidecar_flags)
        sidecars: list[str] = []
        serves = False
        for container, name, repository, is_sidecar in zip(
            containers, names, repositories, sidecar_flags, strict=True
        ):
            if _privileged(container):
                seen.setdefault("host:privileged", f"container {name or '?'}")
            if is_sidecar and not all_sidecars:
                sidecars.append(name or "?")
                continue
            where = f"container {name or '?'}"
            found, serving = _container_signals(self, container, name, repository)
            serves = serves or serving
            for text in found:
                if text not in seen and (known is None or text in known):
                    seen[text] = where
        for group in ("initContainers", "ephemeralContainers"):
            for container in podview.objects(spec.get(group)):
                if _privileged(container):
                    seen.setdefault("host:privileged", f"container {container.get('name') or '?'}")
        # No main container declares a port or probes one: nothing says the pod serves anyone.
        if not serves and containers and (known is None or "port:none" in known):
            seen["port:none"] = "pod"
        for text in _pod_signals(self, facts):
            if text not in seen and (known is None or text in known):
                seen[text] = "pod"
        return PodSignals(seen, tuple(sidecars))


_EVERY_SIGNAL = SignalReader()


def read_signals(facts: PodFacts, *, known: frozenset[str] | None = None) -> PodSignals:
    """The pod's signals, reading each part of the pod once; with ``known``, only those."""
    return (_EVERY_SIGNAL if known is None else SignalReader(known)).read(facts)


# Every kind of signal, for checking the weights a config writes.
SIGNAL_KINDS = (
    "image",
    "image-role",
    "image-org",
    "name",
    "port",
    "port-name",
    "hostport",
    "env",
    "probe",
    "flag",
    "command",
    "resource",
    "owner",
    "namespace",
    "label",
    "annotation",
    "account",
    "runtime",
    "priority",
    "restart",
    "host",
    "node",
    "toleration",
    "volume",
    "hostpath",
    "claim",
)
