"""What rules read of a pod: each fact computed on first use, at most once per pod.

``PodFacts`` wraps the pod as parsed JSON. Owners include the kinds a direct owner implies
(a ReplicaSet with a ``pod-template-hash`` -> its Deployment, a Job named like a CronJob's ->
the CronJob); images are read as repository paths, without registry, tag or digest; the
effective request (the costly fact) is computed only when a condition asks for it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from classifier import podview
from classifier.quantities import Quantity
from classifier.resources import container_requests, pod_requests

_DOCKER_HUB = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
# CronJob controller names a Job "<cronjob>-<scheduled time in minutes>" (8+ digits today);
# the older controller used seconds (10 digits).
_CRONJOB_JOB_NAME = re.compile(r"^(?P<cronjob>.+)-[0-9]{8,10}$")
_REPLICASET_OWNERS = (
    ("pod-template-hash", "Deployment"),
    ("rollouts-pod-template-hash", "Rollout"),
)


def image_repository(image: str) -> str:
    """The repository path of an image reference, without registry, tag or digest.

    ``docker.io/library/postgres:16@sha256:...`` and ``postgres`` both give
    ``library/postgres``; ``ghcr.io/org/app:v1`` gives ``org/app``. Lower-cased.
    """
    ref = image.partition("@")[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    parts = ref.lower().split("/")
    registry = ""
    # Same rule as the Docker reference parser: the first component is a registry if it
    # looks like a host (has a dot or a port) or is "localhost".
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry = parts.pop(0)
    if len(parts) == 1 and (not registry or registry in _DOCKER_HUB):
        parts.insert(0, "library")
    return "/".join(parts)


class Owner(NamedTuple):
    """A kind the pod is (indirectly) owned by, and through what (a named tuple, not a
    dataclass: one or two are built for every pod classified)."""

    kind: str
    name: str
    via: str = ""  # "ReplicaSet web-5d4f" when derived from a direct owner


class PodFacts:
    """The facts rules test, each computed on first use."""

    __slots__ = (
        "_annotations",
        "_claims",
        "_container_requests",
        "_images",
        "_labels",
        "_owners",
        "_ports",
        "_requests",
        "_spec",
        "namespace",
        "pod",
    )

    def __init__(self, pod: Mapping[str, Any], *, namespace: str) -> None:
        self.pod = pod
        self.namespace = namespace
        self._labels: Mapping[str, str] | None = None
        self._annotations: Mapping[str, str] | None = None
        self._owners: tuple[Owner, ...] | None = None
        self._images: tuple[tuple[str, str], ...] | None = None
        self._ports: tuple[tuple[int | None, str | None, str], ...] | None = None
        self._requests: Mapping[str, Quantity] | None = None
        self._container_requests: tuple[tuple[str, Mapping[str, Quantity]], ...] | None = None
        self._claims: tuple[tuple[str, str], ...] | None = None
        self._spec: Mapping[str, Any] | None = None

    @property
    def spec(self) -> Mapping[str, Any]:
        """The pod's spec (empty if it has none): several facts read it."""
        if self._spec is None:
            self._spec = podview.spec(self.pod)
        return self._spec

    @property
    def labels(self) -> Mapping[str, str]:
        if self._labels is None:
            self._labels = podview.labels(self.pod)
        return self._labels

    @property
    def annotations(self) -> Mapping[str, str]:
        if self._annotations is None:
            self._annotations = podview.annotations(self.pod)
        return self._annotations

    @property
    def owners(self) -> tuple[Owner, ...]:
        """Direct owners plus the kinds they imply (ReplicaSet -> Deployment, Job -> CronJob)."""
        if self._owners is None:
            owners: list[Owner] = []
            for ref in podview.owner_references(self.pod):
                kind = podview.string(ref.get("kind")) or ""
                name = podview.string(ref.get("name")) or ""
                if not kind:
                    continue
                owners.append(Owner(kind, name))
                via = f"{kind} {name}".rstrip()
                if kind == "ReplicaSet":
                    # The Deployment and Argo Rollout controllers name a ReplicaSet
                    # "<owner>-<hash>" and label its pods with the hash.
                    for label, owner_kind in _REPLICASET_OWNERS:
                        if label in self.labels:
                            suffix = "-" + self.labels[label]
                            parent = name.removesuffix(suffix) if name.endswith(suffix) else ""
                            owners.append(Owner(owner_kind, parent, via))
                elif kind == "Job":
                    found = _CRONJOB_JOB_NAME.match(name)
                    if found is not None:
                        owners.append(Owner("CronJob", found.group("cronjob"), via))
            self._owners = tuple(owners)
        return self._owners

    @property
    def images(self) -> tuple[tuple[str, str], ...]:
        """(image as written, repository path) of every app container."""
        if self._images is None:
            found: list[tuple[str, str]] = []
            for container in podview.objects(self.spec.get("containers")):
                image = podview.string(container.get("image"))
                if image:
                    found.append((image, image_repository(image)))
            self._images = tuple(found)
        return self._images

    @property
    def ports(self) -> tuple[tuple[int | None, str | None, str], ...]:
        """(containerPort, name, container name) of every app container port."""
        if self._ports is None:
            found: list[tuple[int | None, str | None, str]] = []
            for container in podview.objects(self.spec.get("containers")):
                cname = podview.string(container.get("name")) or ""
                for port in podview.objects(container.get("ports")):
                    number = port.get("containerPort")
                    found.append(
                        (
                            number if isinstance(number, int) else None,
                            podview.string(port.get("name")),
                            cname,
                        )
                    )
            self._ports = tuple(found)
        return self._ports

    @property
    def requests(self) -> Mapping[str, Quantity]:
        """The effective pod request; raises ``PodResourceError`` on an invalid quantity."""
        if self._requests is None:
            self._requests = pod_requests(self.pod)
        return self._requests

    @property
    def container_requests(self) -> tuple[tuple[str, Mapping[str, Quantity]], ...]:
        """(name, requests as stored) of every init and app container, in pod order.

        Raises ``PodResourceError`` on an invalid quantity.
        """
        if self._container_requests is None:
            found: list[tuple[str, Mapping[str, Quantity]]] = []
            spec = self.spec
            for group in ("initContainers", "containers"):
                items = spec.get(group)
                if not isinstance(items, list):
                    continue
                for index, container in enumerate(items):
                    if isinstance(container, dict):
                        name = podview.string(container.get("name")) or f"{group}[{index}]"
                        path = f"spec.{group}[{index}]"
                        found.append((name, container_requests(container, path=path)))
            self._container_requests = tuple(found)
        return self._container_requests

    @property
    def claims(self) -> tuple[tuple[str, str], ...]:
        """(volume name, claim name) of every persistentVolumeClaim volume of the pod."""
        if self._claims is None:
            found: list[tuple[str, str]] = []
            for volume in podview.objects(self.spec.get("volumes")):
                claim = podview.obj(volume.get("persistentVolumeClaim"))
                claim_name = podview.string(claim.get("claimName"))
                if claim_name:
                    found.append((podview.string(volume.get("name")) or "", claim_name))
            self._claims = tuple(found)
        return self._claims

    def template_claim(self) -> tuple[str, str, str] | None:
        """(volume, claim, StatefulSet) of the first claim its StatefulSet's templates made.

        The StatefulSet controller names the claim of template T for pod ordinal N of set S
        ``T-S-N`` and mounts it as volume T (``getPersistentVolumeClaimName`` and
        ``updateStorage`` in pkg/controller/statefulset/stateful_set_utils.go).
        """
        sets = [owner.name for owner in self.owners if owner.kind == "StatefulSet"]
        if not sets:
            return None
        for volume, claim in self.claims:
            for name in sets:
                head, _, ordinal = claim.rpartition("-")
                if ordinal.isdigit() and head == f"{volume}-{name}":
                    return volume, claim, name
        return None

    @property
    def known_requests(self) -> Mapping[str, Quantity] | None:
        """The effective pod request if a rule has needed it, else None (not computed)."""
        return self._requests

    @property
    def restart_policy(self) -> str:
        return podview.string(self.spec.get("restartPolicy")) or "Always"

    @property
    def host_network(self) -> bool:
        return self.spec.get("hostNetwork") is True

    def privileged_container(self) -> str | None:
        for group in ("initContainers", "containers", "ephemeralContainers"):
            for container in podview.objects(self.spec.get(group)):
                context = podview.obj(container.get("securityContext"))
                if context.get("privileged") is True:
                    return podview.string(container.get("name")) or "?"
        return None
