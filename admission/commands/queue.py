"""``tenantgate queue``: the pods waiting behind tenantgate's scheduling gate, in order.

Reads ``GET /queue`` from a running webhook's metrics port (``--server``, default
``http://127.0.0.1:8080``): per tenant, every queued pod with its position, priority, effective
priority (priority plus aging boost), request and time waited; a pod group is one line, with
its members and total request. With several replicas, ask the one holding the controller
Lease: only it watches pods. Exit codes: 0, 1 when the server cannot be read, 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import urllib.parse
from collections.abc import Mapping
from typing import IO, Any

from admission.commands.usage import DEFAULT_SERVER, UsageError, fetch_document

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
HEADER = ["TENANT", "POSITION", "POD", "PRIORITY", "EFFECTIVE", "REQUEST", "WAITED"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "queue",
        help="show the pods waiting for their tenant's room, in order",
        description="Read /queue from a running tenantgate (its metrics port): every pod "
        "waiting behind the scheduling gate tenantgate.io/quota, first in line first.",
    )
    parser.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        metavar="URL",
        help=f"tenantgate metrics/health endpoint (default: {DEFAULT_SERVER})",
    )
    parser.add_argument("--tenant", metavar="NAME", help="show only this tenant")
    parser.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="output format"
    )
    parser.set_defaults(func=run_queue)


def waited(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _pod(row: Mapping[str, Any]) -> str:
    """A pod, or a pod group as one line: ``team-a/train-42 (group: 5 of 8 members)``."""
    name = str(row.get("pod", ""))
    if "group" not in row:
        return name
    size = row.get("size")
    of = f" of {size}" if size else " (size unknown)"
    return f"{name} (group: {row.get('members')}{of} members)"


def render(document: Mapping[str, Any]) -> str:
    """The table of a ``/queue`` document."""
    rows = [HEADER]
    tenants: Mapping[str, Any] = document["tenants"]
    empty = []
    for name in sorted(tenants):
        entry = tenants[name] if isinstance(tenants[name], dict) else {}
        raw = entry.get("pods")
        pods: list[Any] = raw if isinstance(raw, list) else []
        if not pods:
            empty.append(name)
        for index, row in enumerate(pods):
            if not isinstance(row, dict):
                continue
            rows.append(
                [
                    name if index == 0 else "",
                    str(row.get("position", "")),
                    _pod(row),
                    str(row.get("priority", "")),
                    str(row.get("effectivePriority", "")),
                    str(row.get("request", "")),
                    waited(float(row.get("waitedSeconds", 0) or 0)),
                ]
            )
    lines = []
    if len(rows) > 1:
        widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
        lines = [
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
        ]
    else:
        lines.append("no pod is waiting")
    if empty and len(rows) > 1:
        lines.append("")
        lines.append(f"nothing waiting in: {', '.join(empty)}")
    if document.get("leading") is False:
        lines.append("")
        lines.append(
            "this replica does not hold the controller Lease: ask the leader for the queue"
        )
    return "\n".join(lines) + "\n"


def run_queue(args: argparse.Namespace, *, out: IO[str] | None = None) -> int:
    stream = out if out is not None else sys.stdout
    path = "/queue"
    if args.tenant:
        path += "?" + urllib.parse.urlencode({"tenant": args.tenant})
    try:
        document = fetch_document(args.server, path)
    except UsageError as exc:
        print(f"tenantgate queue: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.output == "json":
        stream.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        stream.write(render(document))
    return EXIT_OK


__all__ = ["register", "render", "run_queue", "waited"]
