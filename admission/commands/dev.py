"""``tenantgate dev``: development tools; ``tenantgate dev apiserver`` runs the test API server."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from devapi.manifests import ManifestError
from devapi.server import (
    DEFAULT_BOOKMARK_INTERVAL,
    DEFAULT_WATCH_TIMEOUT,
    DevAPIServer,
    DevAPIServerError,
)
from devapi.store import DEFAULT_HISTORY_SIZE
from devapi.workloads.controllers import DEFAULT_RUN_SECONDS, WorkloadSettings

logger = logging.getLogger(__name__)

_DESCRIPTION = """\
Run a Kubernetes test API server: pods, namespaces, priority classes, leases, events,
Deployments, ReplicaSets, Jobs, CronJobs (with their controllers), CRDs and webhook
configurations, with resourceVersions, watches, selectors, server-side dry-run and the real
admission chain calling your webhooks over HTTPS. Point kubectl or any client at the kubeconfig
it writes. Fault injection: /__dev/faults.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = subparsers.add_parser("dev", help="development tools", description="Development tools.")
    tools = dev.add_subparsers(dest="tool", metavar="TOOL", required=True)
    parser = tools.add_parser(
        "apiserver",
        help="run a Kubernetes test API server with the real admission chain",
        description=_DESCRIPTION,
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one")
    parser.add_argument(
        "--webhooks",
        type=Path,
        metavar="DIR",
        help="directory of manifests (recursively; kustomization.yaml ignored) holding the "
        "webhook configurations, and any namespaces, priority classes or CRDs to create",
    )
    parser.add_argument(
        "--manifests",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="more manifests to load at start (file or directory; repeatable)",
    )
    parser.add_argument(
        "--kubeconfig-out", type=Path, metavar="FILE", help="write a kubeconfig here"
    )
    parser.add_argument(
        "--webhook-ca",
        type=Path,
        metavar="FILE",
        help="PEM CA that verifies every webhook, overriding the configurations' caBundle "
        "(for configurations shipped with a placeholder)",
    )
    parser.add_argument(
        "--webhook-service",
        action="append",
        default=[],
        metavar="NAME.NAMESPACE[:PORT]=HOST:PORT",
        help="where a webhook's service reference is served, e.g. "
        "tenantgate.tenantgate-system=127.0.0.1:8443 (repeatable)",
    )
    parser.add_argument(
        "--history-size",
        type=int,
        default=DEFAULT_HISTORY_SIZE,
        help="events kept for watch resumption; older resourceVersions are 410 Gone "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=DEFAULT_BOOKMARK_INTERVAL,
        help="seconds between watch bookmarks (default %(default)s)",
    )
    parser.add_argument(
        "--watch-timeout",
        type=float,
        default=DEFAULT_WATCH_TIMEOUT,
        help="seconds before a watch without timeoutSeconds ends (default %(default)s)",
    )
    parser.add_argument(
        "--no-kubelet",
        action="store_true",
        help="keep gracefully deleted pods until deleted again with grace 0 "
        "(no simulated kubelet finishes them)",
    )
    parser.add_argument(
        "--run-pods",
        action="store_true",
        help="schedule pods on a simulated node and run them: Running and ready; pods that do "
        "not restart Always (Job pods) succeed after --pod-run-seconds",
    )
    parser.add_argument(
        "--pod-run-seconds",
        type=float,
        default=DEFAULT_RUN_SECONDS,
        metavar="SECONDS",
        help="how long a Job's pod runs under --run-pods (default %(default)s)",
    )
    tls = parser.add_argument_group("TLS (plain HTTP by default)")
    tls.add_argument("--tls", action="store_true", help="serve HTTPS with a generated certificate")
    tls.add_argument("--tls-cert-file", type=Path, metavar="FILE", help="serving certificate (PEM)")
    tls.add_argument("--tls-key-file", type=Path, metavar="FILE", help="serving key (PEM)")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    parser.set_defaults(func=run_apiserver)


def parse_services(values: list[str]) -> dict[str, str]:
    services: dict[str, str] = {}
    for value in values:
        service, sep, address = value.partition("=")
        host, colon, port = address.rpartition(":")
        if not sep or "." not in service or not colon or not host or not port.isdigit():
            raise ValueError(
                f"--webhook-service {value!r}: expected NAME.NAMESPACE[:PORT]=HOST:PORT"
            )
        services[service] = address
    return services


def run_apiserver(args: argparse.Namespace) -> int:
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        if args.pod_run_seconds < 0:
            raise ValueError("--pod-run-seconds must not be negative")
        services = parse_services(args.webhook_service)
        server = DevAPIServer(
            host=args.host,
            port=args.port,
            webhooks_dir=args.webhooks,
            manifests=args.manifests,
            webhook_ca=args.webhook_ca,
            webhook_services=services,
            history_size=args.history_size,
            bookmark_interval=args.bookmark_interval,
            watch_timeout=args.watch_timeout,
            kubelet=not args.no_kubelet,
            workloads=WorkloadSettings(run_pods=args.run_pods, run_seconds=args.pod_run_seconds),
            tls=args.tls,
            tls_cert_file=args.tls_cert_file,
            tls_key_file=args.tls_key_file,
        )
        server.prepare()
    except (ManifestError, DevAPIServerError, ValueError, OSError) as err:
        print(f"tenantgate dev apiserver: {err}", file=sys.stderr)
        return 2
    print(f"tenantgate dev apiserver: serving {server.url}", flush=True)
    if args.kubeconfig_out is not None:
        server.write_kubeconfig(args.kubeconfig_out)
        print(f"tenantgate dev apiserver: kubeconfig written to {args.kubeconfig_out}", flush=True)
    try:
        server.run()
    except DevAPIServerError as err:
        print(f"tenantgate dev apiserver: {err}", file=sys.stderr)
        return 1
    return 0
