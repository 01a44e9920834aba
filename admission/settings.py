"""Server settings from flags and ``TENANTGATE_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


class Settings(BaseSettings):
    """Everything ``tenantgate serve`` can be told. Flags override environment variables."""

    model_config = SettingsConfigDict(env_prefix="TENANTGATE_", extra="forbid", frozen=True)

    config: Path | None = Field(
        default=None, description="config file; the embedded example when unset"
    )
    cert_dir: Path = Field(default=Path(".tenantgate/certs"), description="TLS material directory")
    host: str = "0.0.0.0"
    port: int = Field(default=8443, ge=0, le=65535)
    metrics_host: str = "0.0.0.0"
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    # 10,000 tenants take about 5 MiB.
    max_config_bytes: int = Field(
        default=8 * 1024 * 1024, gt=0, description="a larger config file is refused unread"
    )
    max_config_problems: int = Field(
        default=20, gt=0, description="problems reported per config load (and how many more)"
    )
    service: str = "tenantgate"
    namespace: str = "tenantgate-system"
    certificate_names: tuple[str, ...] = Field(
        default=(),
        description="names a reloaded serving certificate must cover; by default, every name "
        "of the certificate served at start",
    )
    certificate_expiry_margin_seconds: float = Field(
        default=300.0,
        ge=0,
        description="not ready when the certificate served expires sooner than this",
    )
    kubeconfig: Path | None = None
    offline: bool = False
    shutdown_grace_seconds: float = Field(
        default=25.0, ge=0, description="time allowed for requests under way at shutdown"
    )
    shutdown_delay_seconds: float = Field(
        default=2.0,
        ge=0,
        description="after SIGTERM, time to keep serving (unready) before closing connections",
    )
    # Reading requests: each well under the API server's webhook timeout (5-10 s).
    header_timeout_seconds: float = Field(
        default=3.0, gt=0, description="TLS handshake, and a request head from its first byte"
    )
    body_timeout_seconds: float = Field(
        default=3.0, gt=0, description="a request body, from the end of its head"
    )
    # Longer than the API server's idle-connection timeout (90 s): the client, not the server,
    # should close idle connections, or a request may race the server's close.
    keep_alive_seconds: float = Field(
        default=120.0, gt=0, description="an idle connection is closed after this"
    )
    max_connections: int = Field(
        default=256, gt=0, description="open webhook connections; the longest idle makes room"
    )
    # Background work (see admission.runtime.Timings).
    config_poll_seconds: float = Field(default=2.0, gt=0, description="config file poll period")
    sweep_seconds: float = Field(default=5.0, gt=0, description="reservation expiry sweep period")
    recount_seconds: float = Field(default=300.0, gt=0, description="full ledger recount period")
    watch_timeout_seconds: int = Field(default=300, gt=0, description="server-side watch timeout")
    # Leader election of the kubernetes ledger backend (client-go's usual 15 s / 10 s / 2 s).
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    lease_renew_deadline_seconds: float = Field(default=10.0, gt=0)
    lease_retry_period_seconds: float = Field(default=2.0, gt=0)
