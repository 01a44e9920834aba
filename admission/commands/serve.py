"""``tenantgate serve``: run the webhook (HTTPS) and its metrics/health port (HTTP).

Flags override ``TENANTGATE_*`` environment variables: only the flags actually given are passed
to :class:`~admission.settings.Settings`, which reads the rest from the environment.
Exit codes: 0 after a graceful shutdown, 1 when the server cannot start, 2 invalid settings,
130 when interrupted before serving.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.types import ASGIApp

import certs
from admission.health import Readiness
from admission.logs import configure_logging
from admission.metrics import Metrics
from admission.server import ServeError, StartedCallback, serve
from admission.settings import Settings

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT

# flag -> Settings field; every flag defaults to "not given" so the environment shows through.
_FLAGS: dict[str, str] = {
    "--config": "config",
    "--cert-dir": "cert_dir",
    "--host": "host",
    "--port": "port",
    "--metrics-host": "metrics_host",
    "--metrics-port": "metrics_port",
    "--log-format": "log_format",
    "--log-level": "log_level",
    "--recount-seconds": "recount_seconds",
    "--sweep-seconds": "sweep_seconds",
    "--config-poll-seconds": "config_poll_seconds",
    "--max-body-bytes": "max_body_bytes",
    "--max-config-bytes": "max_config_bytes",
    "--max-config-problems": "max_config_problems",
    "--service": "service",
    "--namespace": "namespace",
    "--kubeconfig": "kubeconfig",
    "--offline": "offline",
    "--shutdown-grace-seconds": "shutdown_grace_seconds",
    "--shutdown-delay-seconds": "shutdown_delay_seconds",
    "--header-timeout-seconds": "header_timeout_seconds",
    "--body-timeout-seconds": "body_timeout_seconds",
    "--keep-alive-seconds": "keep_alive_seconds",
    "--max-connections": "max_connections",
    "--certificate-expiry-margin-seconds": "certificate_expiry_margin_seconds",
}


class Runtime(Protocol):
    """What ``admission.runtime.build_runtime(settings)`` returns."""

    @property
    def app(self) -> ASGIApp: ...

    @property
    def metrics_app(self) -> ASGIApp: ...

    async def startup(self) -> None: ...

    async def shutdown(self) -> None: ...


@runtime_checkable
class Observed(Protocol):
    """A runtime with readiness and metrics, which the server reports to."""

    @property
    def readiness(self) -> Readiness: ...

    @property
    def metrics(self) -> Metrics: ...


@runtime_checkable
class CertificateListener(Protocol):
    """A runtime that wants the served certificate, say for its ``certs`` readiness check."""

    def certificate_loaded(self, certificate: certs.CertificateInfo) -> None: ...


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the admission webhook",
        description="Serve the webhook over HTTPS and metrics/health over HTTP. Every flag "
        "can also be set as TENANTGATE_<NAME> (e.g. TENANTGATE_CERT_DIR); flags win.",
        argument_default=argparse.SUPPRESS,
    )
    cert_dir = Settings.model_fields["cert_dir"].default
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="tenants/profiles config file (default: $TENANTGATE_CONFIG, else the embedded "
        "example, examples/tenantgate.yaml)",
    )
    parser.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="TLS material directory; a CA and a serving certificate are created there when it "
        f"holds none (default: $TENANTGATE_CERT_DIR, else {cert_dir})",
    )
    parser.add_argument("--host", help="webhook listen address (default: 0.0.0.0)")
    parser.add_argument("--port", metavar="N", help="webhook port; 0 picks a free one (8443)")
    parser.add_argument("--metrics-host", metavar="HOST", help="metrics listen address")
    parser.add_argument("--metrics-port", metavar="N", help="metrics/health port (8080)")
    parser.add_argument("--log-format", choices=["text", "json"], help="log format (text)")
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="log level (info)"
    )
    parser.add_argument("--max-body-bytes", metavar="N", help="request body limit (4 MiB)")
    parser.add_argument(
        "--max-config-bytes", metavar="N", help="a larger config file is refused (8 MiB)"
    )
    parser.add_argument(
        "--max-config-problems", metavar="N", help="config problems reported per load (20)"
    )
    parser.add_argument("--service", help="Service name, for certificates created at start")
    parser.add_argument("--namespace", help="Service namespace, for certificates created at start")
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster)")
    parser.add_argument(
        "--offline",
        action=argparse.BooleanOptionalAction,
        help="run without a cluster, on the config alone",
    )
    parser.add_argument(
        "--shutdown-grace-seconds", metavar="S", help="time allowed for in-flight requests (25)"
    )
    parser.add_argument(
        "--shutdown-delay-seconds",
        metavar="S",
        help="after SIGTERM, time to keep serving (not ready) before closing connections (2)",
    )
    parser.add_argument(
        "--header-timeout-seconds",
        metavar="S",
        help="TLS handshake, and a request head from its first byte (3)",
    )
    parser.add_argument(
        "--body-timeout-seconds", metavar="S", help="a request body, from the end of its head (3)"
    )
    parser.add_argument(
        "--keep-alive-seconds", metavar="S", help="an idle connection is closed after this (120)"
    )
    parser.add_argument(
        "--max-connections", metavar="N", help="open webhook connections at most (256)"
    )
    parser.add_argument(
        "--certificate-expiry-margin-seconds",
        metavar="S",
        help="not ready when the certificate served expires sooner than this (300)",
    )
    parser.add_argument(
        "--recount-seconds", metavar="S", help="period of the full ledger recount (300)"
    )
    parser.add_argument(
        "--sweep-seconds", metavar="S", help="period of the reservation expiry sweep (5)"
    )
    parser.add_argument(
        "--config-poll-seconds", metavar="S", help="how often the config file is checked (2)"
    )
    parser.set_defaults(func=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The flags given in ``args`` over ``TENANTGATE_*``; raises pydantic's ValidationError."""
    given: dict[str, Any] = {
        field: getattr(args, field) for field in _FLAGS.values() if hasattr(args, field)
    }
    return Settings(**given)


def run_serve(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        for error in exc.errors():
            print(f"tenantgate serve: error: {_describe(error)}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.log_format, settings.log_level)
    try:
        runtime = _runtime_builder()(settings)
        asyncio.run(serve_runtime(settings, runtime))
    except (ServeError, certs.CertError) as exc:
        logger.error("cannot serve: %s", exc)
        return EXIT_FAILED
    except Exception as exc:
        logger.exception("cannot serve: %s", exc)
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl+C before the signal handlers are in place
        return EXIT_INTERRUPTED
    return EXIT_OK


async def serve_runtime(
    settings: Settings, runtime: Runtime, *, on_started: StartedCallback | None = None
) -> None:
    """Start ``runtime``, serve its apps until SIGTERM/SIGINT, then shut it down.

    The runtime starts before the ports open so that no request meets a half-built runtime,
    and stops only after in-flight requests are done. A runtime that is a
    :class:`CertificateListener` hears of every certificate served.
    """
    listener = runtime.certificate_loaded if isinstance(runtime, CertificateListener) else None
    observed = runtime if isinstance(runtime, Observed) else None
    await runtime.startup()
    try:
        await serve(
            settings,
            app=runtime.app,
            metrics_app=runtime.metrics_app,
            on_started=on_started,
            on_certificate=listener,
            registry=observed.metrics.registry if observed is not None else None,
            readiness=observed.readiness if observed is not None else None,
        )
    finally:
        await runtime.shutdown()


def _runtime_builder() -> Callable[[Settings], Runtime]:
    # Imported when serving only: the runtime pulls in the whole decision stack.
    module = importlib.import_module("admission.runtime")
    builder: Callable[[Settings], Runtime] = module.build_runtime
    return builder


def _describe(error: ErrorDetails) -> str:
    flags = {field: flag for flag, field in _FLAGS.items()}
    where = ", ".join(flags.get(str(part), str(part)) for part in error["loc"]) or "settings"
    value = error.get("input")
    shown = f" (got {value!r})" if isinstance(value, str | int | float) else ""
    return f"{where}: {error['msg']}{shown}"
