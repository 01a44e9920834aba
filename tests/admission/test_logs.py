"""Tests for admission.logs: text and JSON formats, extra fields, masking, idempotence."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from admission.logs import MAX_VALUE_CHARS, JSONFormatter, TextFormatter, configure_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root, uvicorn = logging.getLogger(), logging.getLogger("uvicorn.error")
    handlers, level, uvicorn_level = list(root.handlers), root.level, uvicorn.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    uvicorn.setLevel(uvicorn_level)


def json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_is_one_object_per_line_with_extra_fields() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    logger = logging.getLogger("tenantgate.test")
    logger.info("admitted %s", "pod-1", extra={"tenant": "team-a", "tier": "burst", "count": 3})
    logger.debug("not shown")
    (entry,) = json_lines(stream)
    assert isinstance(entry.pop("ts"), str)
    assert entry == {
        "level": "info",
        "logger": "tenantgate.test",
        "msg": "admitted pod-1",
        "tenant": "team-a",
        "tier": "burst",
        "count": 3,
    }


def test_timestamps_are_utc_rfc3339_with_milliseconds() -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "x", None, None)
    record.created = datetime(2025, 1, 1, 0, 0, 0, 123456, tzinfo=UTC).timestamp()
    assert json.loads(JSONFormatter().format(record))["ts"] == "2025-01-01T00:00:00.123Z"
    assert TextFormatter().format(record) == "2025-01-01T00:00:00.123Z INFO    t: x"


def test_secrets_are_masked_and_values_made_json_safe() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    logging.getLogger("t").info(
        "request",
        extra={
            "token": "abc",
            "password": "hunter2",
            "private_key": "-----BEGIN",
            "headers": {"Authorization": "Bearer x", "accept": "json"},
            "serial": 2**100,
            "when": datetime(2025, 1, 1, tzinfo=UTC),
            "blob": "x" * (MAX_VALUE_CHARS + 10),
        },
    )
    (entry,) = json_lines(stream)
    assert entry["token"] == entry["password"] == entry["private_key"] == "[redacted]"
    assert entry["headers"] == {"Authorization": "[redacted]", "accept": "json"}
    assert entry["serial"] == str(2**100)
    assert entry["when"] == "2025-01-01T00:00:00+00:00"
    assert entry["blob"] == "x" * MAX_VALUE_CHARS + "...[10 more]"
    assert "hunter2" not in stream.getvalue()


def test_json_includes_the_traceback() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("t").exception("failed")
    (entry,) = json_lines(stream)
    assert entry["msg"] == "failed"
    assert str(entry["exc"]).endswith("ValueError: boom")


def test_text_format() -> None:
    stream = io.StringIO()
    configure_logging("text", "debug", stream=stream)
    logging.getLogger("tenantgate.test").debug(
        "reloaded", extra={"serial": "0A", "subject": "CN=a b"}
    )
    (line,) = stream.getvalue().splitlines()
    timestamp, rest = line.split(" ", 1)
    assert timestamp.endswith("Z")
    assert rest == 'DEBUG   tenantgate.test: reloaded serial=0A subject="CN=a b"'


def test_reconfiguring_replaces_the_handler_and_level() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("text", "info", stream=first)
    configure_logging("json", "warning", stream=second)
    logging.getLogger("t").info("hidden")
    logging.getLogger("t").warning("shown")
    assert first.getvalue() == ""
    assert [e["msg"] for e in json_lines(second)] == ["shown"]
    assert logging.getLogger().level == logging.WARNING


def test_uvicorn_records_reach_the_configured_handler() -> None:
    stream = io.StringIO()
    logging.getLogger("uvicorn.error").addHandler(logging.NullHandler())
    configure_logging("json", "info", stream=stream)
    logging.getLogger("uvicorn.error").info("Started server process")  # lifecycle chatter
    logging.getLogger("uvicorn.error").error("Exception in ASGI application")
    assert [(e["logger"], e["msg"]) for e in json_lines(stream)] == [
        ("uvicorn.error", "Exception in ASGI application")
    ]
    assert logging.getLogger("uvicorn.error").handlers == []


def test_uvicorn_lifecycle_lines_show_at_debug() -> None:
    stream = io.StringIO()
    configure_logging("json", "debug", stream=stream)
    logging.getLogger("uvicorn.error").info("Started server process")
    assert [e["msg"] for e in json_lines(stream)] == ["Started server process"]
