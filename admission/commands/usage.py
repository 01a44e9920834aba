"""``tenantgate usage``: every tenant's usage against its guarantee and burst ceiling, as a table.

Reads ``GET /status`` from a running webhook's metrics port (``--server``, default
``http://127.0.0.1:8080``). Each resource row shows the guarantee, the ceiling, the usage (in
all, then of each tier) and a bar over the ceiling: ``=`` guaranteed-tier usage, ``+`` burst
usage, ``|`` where the guarantee ends. Percentages are of the ceiling. With cohorts, a second
table shows each cohort tree: per resource its lendable capacity, the room free to lend and who
borrows it, then each member's share against its fair share. Exit codes: 0, 1 when the server
cannot be read, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import IO, Any, Final

from classifier.quantities import Quantity, QuantityError

logger = logging.getLogger(__name__)

DEFAULT_SERVER: Final = "http://127.0.0.1:8080"
TIMEOUT_SECONDS: Final = 10.0
BAR_WIDTH: Final = 24
EXIT_OK: Final = 0
EXIT_FAILED: Final = 1

_ZERO = Quantity(0)


class UsageError(Exception):
    """The status could not be read or understood."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "usage",
        help="show each tenant's usage against its guarantee and burst ceiling",
        description="Read /status from a running tenantgate (its metrics port) and show every "
        "tenant's usage per resource. Bars span the burst ceiling: '=' guaranteed-tier usage, "
        "'+' burst usage, '|' the end of the guarantee.",
    )
    parser.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        metavar="URL",
        help=f"tenantgate metrics/health endpoint (default: {DEFAULT_SERVER})",
    )
    parser.add_argument(
        "--tenant", action="append", metavar="NAME", help="show only this tenant (repeatable)"
    )
    parser.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="output format"
    )
    parser.set_defaults(func=run_usage)


def fetch_status(server: str, *, timeout: float = TIMEOUT_SECONDS) -> dict[str, Any]:
    """``GET {server}/status`` as JSON; :class:`UsageError` says why it failed."""
    return fetch_document(server, "/status", timeout=timeout)


def fetch_document(server: str, path: str, *, timeout: float = TIMEOUT_SECONDS) -> dict[str, Any]:
    """``GET {server}{path}`` as a JSON object with ``tenants`` (``/status``, ``/queue``)."""
    base = server.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise UsageError(f"--server must be an http:// or https:// URL, not {server!r}")
    url = f"{base}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise UsageError(f"{url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise UsageError(f"cannot reach {url}: {reason}") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise UsageError(f"{url} did not answer JSON; is it a tenantgate metrics port?") from None
    if not isinstance(document, dict) or not isinstance(document.get("tenants"), dict):
        raise UsageError(f"{url} did not answer a tenantgate {path.strip('/')} document")
    return document


def _quantity(value: Any, *, where: str) -> Quantity:
    try:
        return Quantity.from_json(value)
    except QuantityError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _quantities(value: Any, *, where: str) -> dict[str, Quantity]:
    if not isinstance(value, dict):
        return {}
    return {str(k): _quantity(v, where=f"{where}.{k}") for k, v in value.items()}


def bar(
    guaranteed_used: Quantity,
    burst_used: Quantity,
    *,
    guaranteed: Quantity,
    ceiling: Quantity,
    width: int = BAR_WIDTH,
) -> str:
    """``[=====+++   |      ]``: usage of each tier over the ceiling, the guarantee marked.

    Usage above the ceiling fills the bar and ends it with ``!``.
    """
    if ceiling.nanos <= 0:
        return "[" + " " * width + "]"
    total = max(ceiling.nanos, 1)

    def cells(nanos: int) -> int:
        return min(width, round(Fraction(max(nanos, 0) * width, total)))

    g_cells = cells(guaranteed_used.nanos)
    b_cells = min(width - g_cells, cells(guaranteed_used.nanos + burst_used.nanos) - g_cells)
    chars = ["="] * g_cells + ["+"] * max(b_cells, 0)
    chars += [" "] * (width - len(chars))
    mark = cells(guaranteed.nanos)
    if 0 < mark < width and chars[mark] == " ":
        chars[mark] = "|"
    end = "!" if guaranteed_used.nanos + burst_used.nanos > ceiling.nanos else "]"
    return "[" + "".join(chars) + end


def _percent(used: Quantity, limit: Quantity) -> str:
    if limit.nanos <= 0:
        return "-"
    return f"{round(Fraction(used.nanos * 100, limit.nanos))}%"


def render(document: Mapping[str, Any], *, tenants: Sequence[str] | None = None) -> str:
    """The usage table of a ``/status`` document."""
    rows: list[list[str]] = [
        [
            "TENANT",
            "RESOURCE",
            "GUARANTEED",
            "CEILING",
            "USED",
            "IN-GUARANTEE",
            "ON-BURST",
            "USAGE",
            "",
        ]
    ]
    notes: list[str] = []
    all_tenants: Mapping[str, Any] = document["tenants"]
    names = sorted(all_tenants) if not tenants else list(tenants)
    _check_known(all_tenants, names)
    for name in names:
        entry = all_tenants[name] if isinstance(all_tenants[name], dict) else {}
        where = f"tenants.{name}"
        guaranteed = _quantities(entry.get("guaranteed"), where=f"{where}.guaranteed")
        ceiling = _quantities(entry.get("ceiling"), where=f"{where}.ceiling")
        raw_used = entry.get("used")
        used: Mapping[str, Any] = raw_used if isinstance(raw_used, dict) else {}
        g_used = _quantities(used.get("guaranteed"), where=f"{where}.used.guaranteed")
        b_used = _quantities(used.get("burst"), where=f"{where}.used.burst")
        resources = sorted(set(ceiling) | set(guaranteed) | set(g_used) | set(b_used))
        first = True
        for resource in resources:
            g = g_used.get(resource, _ZERO)
            b = b_used.get(resource, _ZERO)
            limit = ceiling.get(resource)
            share = guaranteed.get(resource, _ZERO)
            total = g + b
            rows.append(
                [
                    name if first else "",
                    resource,
                    str(share) if resource in guaranteed else "-",
                    str(limit) if limit is not None else "-",
                    str(total),
                    str(g),
                    str(b),
                    bar(g, b, guaranteed=share, ceiling=limit) if limit is not None else "no limit",
                    _percent(total, limit) if limit is not None else "",
                ]
            )
            first = False
        queue = entry.get("queue")
        pending = queue.get("pending") if isinstance(queue, dict) else None
        if isinstance(pending, int) and pending:
            oldest = queue.get("oldestWaitSeconds") if isinstance(queue, dict) else None
            waited = f", the oldest for {oldest:.0f}s" if isinstance(oldest, int | float) else ""
            notes.append(
                f"{name}: {pending} pod{'s' if pending != 1 else ''} queued{waited} "
                "(tenantgate queue shows them)"
            )
        reservations = entry.get("reservations")
        if isinstance(reservations, int) and reservations:
            notes.append(
                f"{name}: {reservations} reservation{'s' if reservations != 1 else ''} in flight "
                "(admitted, not yet seen stored)"
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    ]
    lines.append("")
    cohorts = document.get("cohorts")
    if isinstance(cohorts, dict) and cohorts:
        lines.extend(_cohort_lines(cohorts))
        lines.append("")
    lines.extend(notes)
    lines.append(_footer(document))
    return "\n".join(lines) + "\n"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _cohort_lines(cohorts: Mapping[str, Any]) -> list[str]:
    """The cohort table: capacity, free room and borrowers per resource; shares per member."""
    rows = [["COHORT", "RESOURCE", "CAPACITY", "FREE", "BORROWED"]]
    shares: list[str] = []
    for name in sorted(cohorts):
        entry = cohorts[name] if isinstance(cohorts[name], dict) else {}
        where = f"cohorts.{name}"
        capacity = _quantities(entry.get("capacity"), where=f"{where}.capacity")
        free = _quantities(entry.get("free"), where=f"{where}.free")
        raw = entry.get("borrowed")
        borrowed_by: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        borrowed = {
            member: _quantities(amounts, where=f"{where}.borrowed.{member}")
            for member, amounts in borrowed_by.items()
        }
        for index, resource in enumerate(sorted(set(capacity) | set(free))):
            takers = [
                f"{member} {borrowed[member][resource]}"
                for member in sorted(borrowed)
                if resource in borrowed[member]
            ]
            total = sum((borrowed[m].get(resource, _ZERO) for m in borrowed), _ZERO)
            rows.append(
                [
                    name if index == 0 else "",
                    resource,
                    str(capacity.get(resource, _ZERO)),
                    str(free.get(resource, _ZERO)),
                    f"{total} ({', '.join(takers)})" if takers else "0",
                ]
            )
        share = entry.get("shares")
        fair = entry.get("fairShares")
        if isinstance(share, dict) and isinstance(fair, dict):
            shares.append(
                f"{name} shares: "
                + ", ".join(
                    f"{member} {share[member]:.0%} of a fair {fair.get(member, 0):.0%}"
                    for member in sorted(share)
                    if isinstance(share[member], int | float)
                )
            )
    return [*_table(rows), *shares]


def only_tenants(document: Mapping[str, Any], tenants: Sequence[str] | None) -> dict[str, Any]:
    """``document`` with just ``tenants`` (all of them when None or empty)."""
    all_tenants: Mapping[str, Any] = document["tenants"]
    if not tenants:
        return dict(document)
    _check_known(all_tenants, tenants)
    return {**document, "tenants": {name: all_tenants[name] for name in tenants}}


def _check_known(all_tenants: Mapping[str, Any], names: Sequence[str]) -> None:
    unknown = [name for name in names if name not in all_tenants]
    if unknown:
        raise UsageError(
            f"unknown tenant {', '.join(unknown)} (known: {', '.join(sorted(all_tenants))})"
        )


def _footer(document: Mapping[str, Any]) -> str:
    mode = document.get("mode")
    if mode == "offline":
        return "offline: no cluster; usage counts admissions only (reservations expire)"
    synced = "synced" if document.get("synced") else "NOT synced yet"
    cluster = document.get("cluster") or "the cluster"
    pods = document.get("pods")
    counted = f", {pods} pods watched" if isinstance(pods, int) else ""
    return f"{synced} with {cluster}{counted}"


def run_usage(args: argparse.Namespace, *, out: IO[str] | None = None) -> int:
    stream = out if out is not None else sys.stdout
    try:
        document = fetch_status(args.server)
        if args.output == "json":
            shown = only_tenants(document, args.tenant)
            stream.write(json.dumps(shown, indent=2, sort_keys=True) + "\n")
        else:
            stream.write(render(document, tenants=args.tenant))
    except UsageError as exc:
        print(f"tenantgate usage: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


__all__ = [
    "DEFAULT_SERVER",
    "UsageError",
    "bar",
    "fetch_document",
    "fetch_status",
    "only_tenants",
    "register",
    "render",
    "run_usage",
]
