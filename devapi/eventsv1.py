"""``events.k8s.io/v1`` Events: the same objects as ``v1`` Events, seen through the newer API.

The field correspondence and the field-selector labels follow
``pkg/apis/events/v1/conversion.go`` (``Convert_v1_Event_To_core_Event`` and back,
``AddFieldLabelConversionsForEvent``): ``regarding`` is ``involvedObject``, ``note`` is
``message``, ``reportingController`` is ``reportingComponent``, and the ``deprecated*`` fields
are the legacy source, timestamps and count. Objects are stored once, as ``v1`` Events; a
webhook registered for ``events.k8s.io`` sees them in ``v1`` form (a difference from the real
server, which converts them for it).
"""

from __future__ import annotations

from typing import Any

from devapi import errors
from devapi.errors import APIError
from devapi.selectors import FieldRequirement, FieldSelector
from devapi.types import JSONObject

API_VERSION = "events.k8s.io/v1"

# events.k8s.io/v1 field -> v1 field.
_RENAMED = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_SAME = (
    "metadata",
    "eventTime",
    "series",
    "reportingInstance",
    "action",
    "reason",
    "related",
    "type",
)
# AddFieldLabelConversionsForEvent: the field labels of events.k8s.io/v1, as v1's.
FIELD_LABELS = {
    "metadata.name": "metadata.name",
    "metadata.namespace": "metadata.namespace",
    "reason": "reason",
    "type": "type",
    "reportingController": "reportingComponent",
    "source": "source",  # EventToSelectableFields keeps the legacy label
    **{
        f"regarding.{part}": f"involvedObject.{part}"
        for part in (
            "kind",
            "namespace",
            "name",
            "uid",
            "apiVersion",
            "resourceVersion",
            "fieldPath",
        )
    },
}


def to_v1(event: JSONObject) -> JSONObject:
    """A stored ``v1`` Event as ``events.k8s.io/v1`` shows it."""
    shown: JSONObject = {"apiVersion": API_VERSION, "kind": "Event"}
    for name in _SAME:
        if name in event:
            shown[name] = event[name]
    shown.setdefault("eventTime", None)
    for new, old in _RENAMED.items():
        if old in event:
            shown[new] = event[old]
    return shown


def from_v1(event: Any, *, name: str = "") -> JSONObject:
    """An ``events.k8s.io/v1`` body as the ``v1`` Event to store."""
    if not isinstance(event, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    api_version = event.get("apiVersion")
    if api_version not in (None, API_VERSION):
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({API_VERSION})"
        )
    stored: JSONObject = {"apiVersion": "v1", "kind": "Event"}
    for key in _SAME:
        if key in event:
            stored[key] = event[key]
    for new, old in _RENAMED.items():
        if new in event:
            stored[old] = event[new]
    return stored


def require_event_time(event: JSONObject, name: str) -> None:
    """``ValidateEventCreate`` for events.k8s.io: a new event says when it happened."""
    if not event.get("eventTime"):
        raise errors.invalid_object("events.k8s.io", "Event", name, [errors.required("eventTime")])


def convert_field_selector(selector: FieldSelector) -> FieldSelector:
    converted = []
    for requirement in selector.requirements:
        field = FIELD_LABELS.get(requirement.field)
        if field is None:
            raise APIError(400, "BadRequest", f"field label not supported: {requirement.field}")
        converted.append(FieldRequirement(field, requirement.equal, requirement.value))
    return FieldSelector(tuple(converted))
