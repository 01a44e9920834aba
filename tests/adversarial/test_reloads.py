"""Bad certificates and broken configs written while a real server is under load.

Each bad file is refused: the last good certificate or config keeps serving, no request fails,
readiness stays true with a detail saying what was refused, and a metric counts it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from cryptography import x509

import certs
from certs.files import certificates_pem, private_key_pem, read_certificates, read_issuer_key
from certs.issuing import Issued, issue_ca, issue_serving, serving_names
from tests.adversarial.support import (
    EXAMPLE_CONFIG,
    Server,
    broken_config,
    running_server,
    wait_for,
)

NOW = datetime.now(UTC)
NAMES = serving_names("tenantgate", "tenantgate-system")


@dataclass
class Traffic:
    """Reviews on fresh connections (each gets the certificate served now) and on a kept one."""

    server: Server
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    serials: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def fresh(self) -> None:
        index = 0
        while not self._stop.is_set():
            index += 1
            try:
                with self.server.connection() as connection:
                    connection.review("/validate", uid=f"fresh-{index}")
                    sock = connection.connection.sock
                    der = sock.getpeercert(binary_form=True) if sock is not None else None
                if der is not None:
                    self.serials.add(x509.load_der_x509_certificate(der).serial_number)
                self.answered += 1
            except Exception as exc:
                self.failures.append(f"fresh-{index}: {exc!r}")

    def kept(self) -> None:
        index = 0
        with self.server.connection() as connection:
            while not self._stop.is_set():
                index += 1
                try:
                    connection.review("/mutate", uid=f"kept-{index}")
                    self.answered += 1
                except Exception as exc:
                    self.failures.append(f"kept-{index}: {exc!r}")


@contextmanager
def under_load(server: Server) -> Iterator[Traffic]:
    traffic = Traffic(server)
    threads = [threading.Thread(target=traffic.fresh), threading.Thread(target=traffic.kept)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: traffic.answered > 10, what="traffic")
        yield traffic
    finally:
        traffic._stop.set()
        for thread in threads:
            thread.join(60)
    assert traffic.failures == []


def directory_ca(directory: Path) -> Issued:
    return Issued(
        certificate=read_certificates(directory / "ca.crt")[0],
        key=read_issuer_key(directory / "ca.key"),
    )


def write_pair(directory: Path, issued: Issued) -> None:
    (directory / "tls.key").write_bytes(private_key_pem(issued.key))
    (directory / "tls.crt").write_bytes(certificates_pem([issued.certificate]))


def write_garbage(path: Path) -> None:
    path.write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage")


def leaf(ca: Issued, **changes: object) -> Issued:
    values: dict[str, object] = {"dns_names": NAMES, "now": NOW, "valid_for": timedelta(days=30)}
    values.update(changes)
    return issue_serving(ca, **values)  # type: ignore[arg-type]


BAD_PAIRS: list[tuple[str, Callable[[Path], None]]] = [
    (
        "expired",
        lambda d: write_pair(
            d, leaf(directory_ca(d), now=NOW - timedelta(days=3), valid_for=timedelta(days=1))
        ),
    ),
    ("not_yet_valid", lambda d: write_pair(d, leaf(directory_ca(d), now=NOW + timedelta(days=1)))),
    (
        "untrusted",
        lambda d: write_pair(d, leaf(issue_ca(now=NOW, valid_for=timedelta(days=90)))),
    ),
    ("wrong_names", lambda d: write_pair(d, leaf(directory_ca(d), dns_names=("other.example",)))),
    ("unreadable", lambda d: write_garbage(d / "tls.crt")),
]


def refused_once(server: Server, reason: str) -> bool:
    return server.metric("tenantgate_certificate_reload_failures_total", reason=reason) == 1


def answered_more(traffic: Traffic, than: int) -> bool:
    return traffic.answered > than


def test_bad_certificates_are_refused_under_load_without_a_failed_request(tmp_path: Path) -> None:
    cert_dir = tmp_path / "certs"
    with running_server(cert_dir) as server:
        first = read_certificates(cert_dir / "tls.crt")[0].serial_number
        with under_load(server) as traffic:
            for reason, write in BAD_PAIRS:
                write(cert_dir)
                wait_for(partial(refused_once, server, reason), what=reason)
                status, report = server.readyz()
                assert status == 200
                detail = report["checks"]["certs"]["detail"]
                assert "degraded: new files refused" in detail
                assert server.metric("tenantgate_certificate_stale") == 1
                wait_for(partial(answered_more, traffic, traffic.answered + 5), what="answers")
            assert traffic.serials == {first}  # the last good certificate, all along
            # A good rotation goes live and clears the problem.
            write_pair(cert_dir, leaf(directory_ca(cert_dir)))
            second = read_certificates(cert_dir / "tls.crt")[0].serial_number
            wait_for(lambda: second in traffic.serials, what="the rotated certificate")
            assert server.metric("tenantgate_certificate_stale") == 0
            assert "degraded" not in server.readyz()[1]["checks"]["certs"]["detail"]
    warnings = [e for e in server.log_entries() if "keeping the current serving" in str(e)]
    assert len(warnings) == len(BAD_PAIRS)


def test_readiness_follows_the_served_certificate_near_its_expiry(tmp_path: Path) -> None:
    cert_dir = tmp_path / "certs"
    certs.init(cert_dir, service="tenantgate", namespace="tenantgate-system")
    # Valid for an hour: near its expiry under a two-hour margin, far from it under a minute's,
    # however long a loaded machine takes between the two servers.
    write_pair(cert_dir, leaf(directory_ca(cert_dir), valid_for=timedelta(hours=1)))
    env = {"TENANTGATE_CERTIFICATE_EXPIRY_MARGIN_SECONDS": "7200"}
    with running_server(cert_dir, env=env, ready=False) as server:
        wait_for(lambda: "certs" in server.readyz()[1]["checks"], what="a certs check")
        wait_for(
            lambda: (
                server.readyz()[1]["checks"]["certs"] != {"ok": False, "detail": "not loaded yet"}
            ),
            what="the certs check",
        )
        status, report = server.readyz()
        assert status == 503
        assert not report["checks"]["certs"]["ok"]
        assert report["checks"]["certs"]["detail"].endswith(": renew it")
        # Still served: the certificate is valid, only about to expire.
        with server.connection() as connection:
            connection.review("/validate", uid="near-expiry")
    env = {"TENANTGATE_CERTIFICATE_EXPIRY_MARGIN_SECONDS": "60"}
    with running_server(cert_dir, env=env) as server:
        assert server.readyz()[1]["checks"]["certs"]["ok"]


def config_detail(server: Server) -> str:
    detail: str = server.readyz()[1]["checks"]["config"]["detail"]
    return detail


def test_broken_and_oversized_configs_are_refused_under_load(tmp_path: Path) -> None:
    config = tmp_path / "tenantgate.yaml"
    config.write_text(EXAMPLE_CONFIG)
    flags = ("--config", str(config), "--config-poll-seconds", "0.2")
    env = {"TENANTGATE_MAX_CONFIG_BYTES": str(2 * 1024 * 1024)}
    with running_server(tmp_path / "certs", *flags, env=env) as server, under_load(server):
        # 4,000 problems: only the first 20 are located and reported.
        config.write_text(broken_config(2_000))
        wait_for(lambda: "reload rejected" in config_detail(server), what="the rejection")
        detail = config_detail(server)
        assert "reload rejected: 4000 problems: " in detail
        assert detail.endswith(" (and 3980 more)")
        assert server.readyz()[0] == 200  # the last good config keeps serving

        config.write_text(EXAMPLE_CONFIG + "#" * (2 * 1024 * 1024))
        wait_for(lambda: "larger than" in config_detail(server), what="the size refusal")
        assert f"{config}: larger than the limit of {2 * 1024 * 1024} bytes" in config_detail(
            server
        )

        config.write_text(EXAMPLE_CONFIG + "\n# fixed\n")
        wait_for(lambda: "reload rejected" not in config_detail(server), what="the fix")
    rejected = [
        e for e in server.log_entries() if str(e.get("msg", "")).startswith("config rejected")
    ]
    assert len(rejected) == 20 + 1 + 1  # 20 problems, "... and 3980 more", the size refusal
