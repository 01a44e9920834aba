"""Process-wide logging: human-readable text or one JSON object per line, on stderr.

Structured context travels in ``extra={...}``; both formats print it. Fields whose names
suggest a secret are masked, and values are truncated, so nothing sensitive or huge reaches a
log pipeline by accident.
"""

from __future__ import annotations

import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any, Literal

import orjson

LogFormat = Literal["text", "json"]

MAX_VALUE_CHARS = 2048
_REDACTED = "[redacted]"
_SECRET_NAME = re.compile(r"pass(word|wd)?|secret|token|authorization|cookie|private|^key$", re.I)
# Attributes every LogRecord has; anything else on a record came from ``extra``.
_RECORD_FIELDS = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
) | {"message", "asctime", "color_message", "taskName"}
_HANDLER_NAME = "tenantgate"


def configure_logging(
    fmt: LogFormat, level: str | int = "info", *, stream: IO[str] | None = None
) -> None:
    """Send every logger's records to ``stream`` (stderr) in ``fmt`` at ``level`` and above.

    Idempotent: calling it again replaces the handler it installed, so a CLI entry point and
    a test can both call it.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # uvicorn's loggers must reach the root handler rather than print on their own.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers = []
        uvicorn_logger.propagate = True
        uvicorn_logger.setLevel(logging.NOTSET)
    # Two uvicorn servers repeat each lifecycle line (admission.server logs its own); keep
    # their warnings and errors, and the chatter for debugging.
    if root.getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of ``record``, masked and truncated."""
    return {
        key: _REDACTED if _SECRET_NAME.search(key) else _plain(value)
        for key, value in vars(record).items()
        if key not in _RECORD_FIELDS and not key.startswith("_")
    }


class JSONFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...extra, "exc"}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": _truncate(record.getMessage()),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger: message key=value ...``, then any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record.created)} {record.levelname:<7} {record.name}: "
        line += _truncate(record.getMessage())
        for key, value in extra_fields(record).items():
            line += f" {key}={_text(value)}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _timestamp(created: float) -> str:
    moment = datetime.fromtimestamp(created, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _plain(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return str(value)  # JSON consumers lose precision beyond 64 bits
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value[:100]]
    if isinstance(value, dict):
        return {
            str(k): _REDACTED if _SECRET_NAME.search(str(k)) else _plain(v)
            for k, v in list(value.items())[:100]
        }
    return _truncate(str(value))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return (
            value
            if value and " " not in value and '"' not in value
            else orjson.dumps(value).decode()
        )
    return orjson.dumps(value, default=str).decode()


def _truncate(text: str) -> str:
    if len(text) <= MAX_VALUE_CHARS:
        return text
    return text[:MAX_VALUE_CHARS] + f"...[{len(text) - MAX_VALUE_CHARS} more]"
