"""What the decision logic receives from the HTTP edge and what it answers.

The edge (``admission``) decodes an AdmissionReview into an :class:`AdmissionInput`, calls an
:class:`Admitter`, and encodes the returned :class:`Verdict`. The admitter never sees HTTP, and
the edge never decides: that keeps every decision testable without a server.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Final, Literal, Protocol, get_args

from classifier.records import record


@record
class AdmissionInput:
    """The parts of ``AdmissionReview.request`` the decision logic uses."""

    uid: str
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    namespace: str
    name: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    kind: str = "Pod"  # request.kind.kind
    group: str = ""  # request.kind.group
    version: str = "v1"  # request.kind.version
    sub_resource: str = ""  # e.g. "resize", "status", "binding"
    dry_run: bool = False
    username: str = ""
    options: dict[str, Any] | None = None


DenialCause = Literal[
    "over_quota",
    "queue_full",
    "priority_class",
    "profile_not_allowed",
    "invalid_request",
    "container_bounds",
    "unclaimed_namespace",
    "managed_metadata",
    "ledger_unavailable",
    "retry",
]
"""Why a pod was denied, from a small fixed set (the ``reason`` label of the denial metric)."""

DENIAL_CAUSES: Final[tuple[DenialCause, ...]] = get_args(DenialCause)


@record
class Verdict:
    """The answer to one admission request.

    ``patched`` is the whole object after this webhook's mutations, or ``None`` when nothing
    changes; the edge turns the difference into a JSONPatch. Denials carry ``code`` (HTTP-like,
    e.g. 403), ``reason`` (a Kubernetes StatusReason such as ``Forbidden``) and a one-line
    ``message`` that ``kubectl`` shows to the user, and ``cause``, the kind of denial for
    metrics (``over_quota``, ``priority_class``, ...).
    """

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    patched: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    audit_annotations: dict[str, str] = field(default_factory=dict)
    cause: DenialCause | None = None

    @classmethod
    def allow(
        cls, *, warnings: tuple[str, ...] = (), patched: dict[str, Any] | None = None
    ) -> Verdict:
        return cls(allowed=True, patched=patched, warnings=warnings)

    @classmethod
    def deny(
        cls,
        message: str,
        *,
        code: int = 403,
        reason: str = "Forbidden",
        cause: DenialCause | None = None,
    ) -> Verdict:
        return cls(allowed=False, code=code, reason=reason, message=message, cause=cause)


class Admitter(Protocol):
    """Decision logic behind ``/mutate`` and ``/validate``; ``now`` is Unix time in seconds.

    Both are coroutines: booking quota may be network I/O (the ``kubernetes`` ledger backend
    is a compare-and-swap through the API server). An admitter over the in-memory ledger never
    suspends between its check and its booking, so it stays atomic on the event loop.

    The HTTP edge builds only part of each pod (``admission.reviews.decode_review``): its
    metadata (less ``managedFields``) and, of its spec, ``containers`` and ``initContainers``
    (name, resources, restartPolicy), ``overhead``, ``resources``, ``priorityClassName``,
    ``priority`` and ``schedulingGates`` for ``validate``; for ``mutate`` also
    ``ephemeralContainers``, the containers' ``image``, ``ports`` and ``securityContext``,
    and the spec's ``preemptionPolicy``, ``schedulerName``, ``nodeSelector``,
    ``tolerations``, ``affinity``, ``topologySpreadConstraints``, ``restartPolicy``,
    ``hostNetwork`` and ``nodeName``. ``mutate`` must
    change nothing outside that part: the JSONPatch is computed against it.
    """

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict: ...

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict: ...
