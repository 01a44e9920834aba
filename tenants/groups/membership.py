"""Which pod group an admitted member belongs to, as /mutate records it on the pod.

/mutate resolves a member's group (:func:`classifier.podgroups.claim_group`, and the size from
the cluster when the pod does not carry it) and writes it in two annotations, so that the
controller, on any replica and after any restart, reads the group from the stored pod alone:

* ``tenantgate.io/group``: the group's key (unique in the namespace, e.g. ``job/train-42``);
* ``tenantgate.io/group-size``: how many members the group has (absent while unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from classifier import podview
from classifier.podgroups import MAX_GROUP_SIZE
from classifier.types import JSONObject

GROUP_ANNOTATION: Final = "tenantgate.io/group"
GROUP_SIZE_ANNOTATION: Final = "tenantgate.io/group-size"


@dataclass(frozen=True, slots=True)
class Membership:
    """A member's group: ``key`` within ``namespace``; ``size`` None while unknown."""

    namespace: str
    key: str
    size: int | None

    @property
    def id(self) -> str:
        """Unique in the cluster: ``namespace/key``."""
        return f"{self.namespace}/{self.key}"

    @property
    def name(self) -> str:
        """What people read: the key without its source (``job/train-42`` -> ``train-42``)."""
        return self.key.partition("/")[2] or self.key


def write_membership(pod: JSONObject, *, key: str, size: int | None) -> None:
    """Record the group on ``pod`` (whose metadata and annotations are its own copies)."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        pod["metadata"] = meta
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
        meta["annotations"] = annotations
    annotations[GROUP_ANNOTATION] = key
    if size is None:
        annotations.pop(GROUP_SIZE_ANNOTATION, None)
    else:
        annotations[GROUP_SIZE_ANNOTATION] = str(size)


def read_membership(pod: Mapping[str, Any]) -> Membership | None:
    """The group /mutate recorded on a stored pod, or None."""
    meta = podview.metadata(pod)
    annotations = podview.obj(meta.get("annotations"))
    return membership_of(
        podview.string(meta.get("namespace")) or "",
        annotations.get(GROUP_ANNOTATION),
        annotations.get(GROUP_SIZE_ANNOTATION),
    )


def membership_of(namespace: str, key: Any, size: Any) -> Membership | None:
    """A membership from the two annotations' raw values (None without a key)."""
    if not isinstance(key, str) or not key:
        return None
    count: int | None = None
    if isinstance(size, str) and size.isdigit() and 1 <= int(size) <= MAX_GROUP_SIZE:
        count = int(size)
    return Membership(namespace, key, count)


__all__ = [
    "GROUP_ANNOTATION",
    "GROUP_SIZE_ANNOTATION",
    "Membership",
    "membership_of",
    "read_membership",
    "write_membership",
]
