"""``tenantgate usage``: the table, its bars, and reading ``/status`` from a server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from admission.cli import main
from admission.commands.usage import UsageError, bar, fetch_status, render
from classifier.quantities import Quantity

STATUS: dict[str, Any] = {
    "tenants": {
        "team-a": {
            "guaranteed": {"cpu": "4", "memory": "8Gi", "pods": "20"},
            "ceiling": {"cpu": "6", "memory": "12Gi", "pods": "30"},
            "used": {
                "guaranteed": {"cpu": "3500m", "memory": "6Gi", "pods": "7"},
                "burst": {"cpu": "1500m", "memory": "1Gi", "pods": "2"},
            },
            "reservations": 2,
            "pods": 9,
        },
        "ml": {
            "guaranteed": {"nvidia.com/gpu": "4"},
            "ceiling": {"nvidia.com/gpu": "6"},
            "used": {"guaranteed": {"nvidia.com/gpu": "4", "cpu": "8"}, "burst": {}},
            "reservations": 0,
            "pods": 2,
        },
    },
    "synced": True,
    "mode": "kubeconfig",
    "cluster": "https://10.0.0.1:6443",
    "pods": 140,
}

# Each row split in two literals only to keep the source lines short.
TABLE = "\n".join(
    [
        "TENANT  RESOURCE        GUARANTEED  CEILING  USED  IN-GUARANTEE  ON-BURST  USAGE",
        "ml      cpu             -           -        8     8             0         no limit",
        "        nvidia.com/gpu  4           6        4     4             0         "
        "[================|       ]  67%",
        "team-a  cpu             4           6        5     3500m         1500m     "
        "[==============++++++    ]  83%",
        "        memory          8Gi         12Gi     7Gi   6Gi           1Gi       "
        "[============++  |       ]  58%",
        "        pods            20          30       9     7             2         "
        "[======+         |       ]  30%",
        "",
        "team-a: 2 reservations in flight (admitted, not yet seen stored)",
        "synced with https://10.0.0.1:6443, 140 pods watched",
        "",
    ]
)


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def test_the_table() -> None:
    assert render(STATUS) == TABLE


def test_the_table_of_some_tenants() -> None:
    table = render(STATUS, tenants=["ml"])
    assert "team-a" not in table
    assert "nvidia.com/gpu" in table
    with pytest.raises(UsageError, match="unknown tenant nope \\(known: ml, team-a\\)"):
        render(STATUS, tenants=["nope"])


def test_offline_and_unsynced_footers() -> None:
    offline = render({**STATUS, "mode": "offline"})
    assert offline.endswith(
        "offline: no cluster; usage counts admissions only (reservations expire)\n"
    )
    assert render({**STATUS, "synced": False}).endswith(
        "NOT synced yet with https://10.0.0.1:6443, 140 pods watched\n"
    )


@pytest.mark.parametrize(
    ("guaranteed_used", "burst_used", "expected"),
    [
        ("0", "0", "[          |         ]"),
        ("5", "0", "[=====     |         ]"),
        ("10", "5", "[==========+++++     ]"),
        ("4", "16", "[====++++++++++++++++]"),
        ("12", "12", "[============++++++++!"),
    ],
)
def test_bars_span_the_ceiling(guaranteed_used: str, burst_used: str, expected: str) -> None:
    drawn = bar(q(guaranteed_used), q(burst_used), guaranteed=q("10"), ceiling=q("20"), width=20)
    assert drawn == expected


def test_a_zero_ceiling_draws_an_empty_bar() -> None:
    assert bar(q("0"), q("0"), guaranteed=q("0"), ceiling=q("0"), width=4) == "[    ]"


def test_a_bad_quantity_in_the_status_is_reported() -> None:
    broken = json.loads(json.dumps(STATUS))
    broken["tenants"]["ml"]["ceiling"]["nvidia.com/gpu"] = "six"
    with pytest.raises(
        UsageError, match=r'tenants\.ml\.ceiling\.nvidia\.com/gpu: invalid quantity "six"'
    ):
        render(broken)


class _Handler(BaseHTTPRequestHandler):
    body: bytes = b""
    status: int = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/status" else 404)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"body": json.dumps(STATUS).encode()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_usage_reads_a_running_server(
    server: tuple[str, type[_Handler]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = server
    assert main(["usage", "--server", url + "/"]) == 0
    assert capsys.readouterr().out == TABLE
    assert main(["usage", "--server", url, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == STATUS
    assert main(["usage", "--server", url, "--tenant", "ml"]) == 0
    assert "team-a" not in capsys.readouterr().out


def test_usage_explains_what_went_wrong(
    server: tuple[str, type[_Handler]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, handler = server
    assert main(["usage", "--server", url, "--tenant", "nope"]) == 1
    assert "tenantgate usage: unknown tenant nope" in capsys.readouterr().err
    handler.body = b"<html>not json</html>"
    assert main(["usage", "--server", url]) == 1
    assert "did not answer JSON; is it a tenantgate metrics port?" in capsys.readouterr().err
    handler.body = b'{"something": "else"}'
    assert main(["usage", "--server", url]) == 1
    assert "did not answer a tenantgate status document" in capsys.readouterr().err
    handler.status = 503
    assert main(["usage", "--server", url]) == 1
    assert f"{url}/status answered 503" in capsys.readouterr().err


def test_usage_says_when_nothing_listens(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["usage", "--server", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tenantgate usage: cannot reach http://127.0.0.1:{port}/status: ")
    with pytest.raises(UsageError, match="must be an http:// or https:// URL"):
        fetch_status("127.0.0.1:8080")


def test_json_output_keeps_only_the_tenants_asked_for(
    server: tuple[str, type[_Handler]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = server

    assert main(["usage", "--server", url, "--tenant", "ml", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == {**STATUS, "tenants": {"ml": STATUS["tenants"]["ml"]}}

    assert main(["usage", "--server", url, "--tenant", "nope", "-o", "json"]) == 1
    assert "tenantgate usage: unknown tenant nope (known: ml, team-a)" in capsys.readouterr().err
