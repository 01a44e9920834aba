"""Object metadata rules shared by every kind: names, timestamps, uids, metadata validation."""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from devapi import errors
from devapi.errors import FieldError
from devapi.selectors import SelectorError, validate_label_key, validate_label_value
from devapi.types import JSONObject

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# The alphabet of generated name suffixes: no vowels (no words), no confusable characters.
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATE_PREFIX = 58

NameCheck = Callable[[str], str | None]


def now_timestamp(now: float | None = None) -> str:
    moment = datetime.fromtimestamp(now, UTC) if now is not None else datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def new_uid() -> str:
    return str(uuid.uuid4())


def generate_name(prefix: str) -> str:
    suffix = "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
    return prefix[:_MAX_GENERATE_PREFIX] + suffix


def check_dns1123_subdomain(name: str) -> str | None:
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not DNS1123_SUBDOMAIN.fullmatch(name):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character (e.g. "
            "'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    return None


def check_dns1123_label(name: str) -> str | None:
    if len(name) > 63:
        return "must be no more than 63 characters"
    if not DNS1123_LABEL.fullmatch(name):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
            "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )
    return None


def check_path_segment(name: str) -> str | None:
    if name in (".", ".."):
        return f"may not be '{name}'"
    for bad in ("/", "%"):
        if bad in name:
            return f"may not contain '{bad}'"
    return None


def metadata(obj: JSONObject) -> JSONObject:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def labels(obj: JSONObject) -> dict[str, str]:
    return string_map((obj.get("metadata") or {}).get("labels"))


def validate_metadata(
    obj: JSONObject, *, namespaced: bool, check_name: NameCheck
) -> list[FieldError]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [errors.required("metadata")]
    problems: list[FieldError] = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        problems.append(errors.required("metadata.name", "name or generateName is required"))
    else:
        why = check_name(name)
        if why:
            problems.append(errors.invalid("metadata.name", name, why))
    namespace = meta.get("namespace")
    if namespaced and not namespace:
        problems.append(errors.required("metadata.namespace"))
    if not namespaced and namespace:
        problems.append(errors.forbidden("metadata.namespace", "not allowed on this type"))
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            problems.append(
                errors.invalid(f"metadata.{field}", str(value), "must be a map of strings")
            )
            continue
        for key, item in value.items():
            try:
                validate_label_key(key)
                if field == "labels":
                    validate_label_value(item)
            except SelectorError as err:
                problems.append(
                    errors.invalid(
                        f"metadata.{field}", key if field == "annotations" else item, str(err)
                    )
                )
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        problems.append(
            errors.invalid("metadata.finalizers", str(finalizers), "must be a list of strings")
        )
    return problems
