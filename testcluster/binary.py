"""The Kubernetes binary the tests run: built from the Go module in ``testcluster/kube`` into a
cache outside the clone, and reused while its pins (go.mod, go.sum, main.go) are unchanged.

``python -m testcluster build`` (``make kube``) builds it; tests find it with :func:`kube_binary`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

MODULE = Path(__file__).resolve().parent / "kube"
PINNED_FILES = ("go.mod", "go.sum", "main.go")
KUBERNETES_VERSION = "v1.37.2"
GO_MINIMUM = (1, 26)
PROGRESS_EVERY = 250
# kubernetes's hack/lib/version.sh sets these; without them /version says v0.0.0-master.
VERSION_VARIABLES = (
    "k8s.io/component-base/version.gitVersion",
    "k8s.io/client-go/pkg/version.gitVersion",
)


class BuildError(RuntimeError):
    """The binary could not be built; the message says what to do."""


def cache_root() -> Path:
    override = os.environ.get("TENANTGATE_KUBE_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tenantgate" / "kube"


def pins_digest() -> str:
    digest = hashlib.sha256()
    for name in PINNED_FILES:
        digest.update(name.encode() + b"\0" + (MODULE / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def binary_path() -> Path:
    return cache_root() / pins_digest() / "kube"


def go_version() -> tuple[int, int] | None:
    """The installed Go's version, or None when there is no ``go`` on PATH."""
    go = shutil.which("go")
    if go is None:
        return None
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    match = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def ldflags() -> str:
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    flags = ["-s", "-w"]
    flags += [f"-X {variable}={KUBERNETES_VERSION}" for variable in VERSION_VARIABLES]
    flags += [
        f"-X k8s.io/component-base/version.gitMajor={major}",
        f"-X k8s.io/component-base/version.gitMinor={minor}",
        "-X k8s.io/component-base/version.gitTreeState=clean",
    ]
    return " ".join(flags)


def build(*, out: Path | None = None, progress: bool = True) -> Path:
    """Build the binary unless the cache already has it for these pins; returns its path."""
    target = out or binary_path()
    if target.exists():
        return target
    version = go_version()
    if version is None or version < GO_MINIMUM:
        found = "no go on PATH" if version is None else f"found go{version[0]}.{version[1]}"
        raise BuildError(
            f"building Kubernetes {KUBERNETES_VERSION} for the tests needs Go "
            f"{GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer ({found}): install it from your "
            "distribution or go.dev/dl and put `go` on PATH"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"kube.partial-{os.getpid()}")
    if progress:
        print(
            f"building Kubernetes {KUBERNETES_VERSION} (etcd, kube-apiserver, "
            f"kube-controller-manager, kube-scheduler, kubectl) into {target.parent}; "
            "the first build downloads the modules and takes a while",
            file=sys.stderr,
            flush=True,
        )
    started = time.monotonic()
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    command = ["go", "build", "-v", "-trimpath", "-ldflags", ldflags(), "-o", str(partial), "."]
    process = subprocess.Popen(
        command, cwd=MODULE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # `go build -v` names each package it compiles (and go's errors): a line of progress
    # every PROGRESS_EVERY packages, the last lines kept for a failure.
    last = deque[str](maxlen=40)
    for packages, line in enumerate(process.stdout or [], start=1):
        last.append(line.rstrip())
        if progress and packages % PROGRESS_EVERY == 0:
            minutes = (time.monotonic() - started) / 60
            print(f"  {packages} packages built ({minutes:.1f} min)", file=sys.stderr, flush=True)
    code = process.wait()
    if code != 0:
        partial.unlink(missing_ok=True)
        tail = "\n".join(last)
        raise BuildError(f"go build in {MODULE} failed (exit {code}):\n{tail}")
    partial.replace(target)
    if progress:
        size = target.stat().st_size / 2**20
        print(
            f"built {target} ({size:.0f} MiB) in {time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return target


def kube_binary() -> Path:
    """The built binary; raises with the command to run when it is missing."""
    path = binary_path()
    if not path.exists():
        raise BuildError(f"{path} is missing: run `make kube` first")
    return path
