"""Smoke test of a running ``tenantgate serve`` (used by ``scripts/image.sh test``).

Waits for the startup log line that names the ports, then posts an AdmissionReview over HTTPS
trusting only the server's CA (127.0.0.1 must be a name in its certificate, as the API server
checks), and reads ``/healthz`` and ``/metrics`` on the plain-HTTP port. Standard library only:
it runs with the host's python3, outside the image.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.request
from pathlib import Path


def ports(log_file: Path, *, pid: int, timeout: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = log_file.read_text() if log_file.exists() else ""
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "port" in entry and "metrics_port" in entry:
                return int(entry["port"]), int(entry["metrics_port"])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise SystemExit(f"the server exited before serving:\n{text}") from None
        time.sleep(0.5)
    raise SystemExit(f"no startup line in {log_file} after {timeout:.0f} s:\n{text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", type=Path, required=True, help="the server's JSON log")
    parser.add_argument("--pid", type=int, required=True, help="the server's process id")
    parser.add_argument("--ca", type=Path, required=True, help="the CA certificate to trust")
    parser.add_argument("--review", type=Path, required=True, help="an AdmissionReview to POST")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()

    port, metrics_port = ports(args.log, pid=args.pid, timeout=args.timeout)
    context = ssl.create_default_context(cafile=str(args.ca))
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/mutate",
        data=args.review.read_bytes(),
        headers={"Content-Type": "application/json"},
    )
    # Literal https:// and http:// URLs only.
    with urllib.request.urlopen(request, context=context, timeout=30) as response:  # noqa: S310
        answer = json.loads(response.read())
    sent = json.loads(args.review.read_bytes())
    got = answer.get("response", {})
    if got.get("uid") != sent["request"]["uid"] or "allowed" not in got:
        print(f"unexpected answer from /mutate: {answer}", file=sys.stderr)
        return 1
    print(f"POST https://127.0.0.1:{port}/mutate: allowed={got['allowed']}", file=sys.stderr)

    base = f"http://127.0.0.1:{metrics_port}"
    with urllib.request.urlopen(f"{base}/healthz", timeout=30) as response:  # noqa: S310
        print(f"GET /healthz: {response.status}", file=sys.stderr)
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as response:  # noqa: S310
        metrics = response.read().decode()
    if "tenantgate_admission_reviews_total" not in metrics:
        print("/metrics does not count the review", file=sys.stderr)
        return 1
    print("GET /metrics: counts the review", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
