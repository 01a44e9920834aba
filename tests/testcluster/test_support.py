"""The parts of testcluster that need no cluster: the build's checks and pins, quantities, and
how the fault proxy reads a request."""

from __future__ import annotations

import importlib.util
import sys
from fractions import Fraction
from pathlib import Path
from types import ModuleType

import pytest

from testcluster import binary
from testcluster.proxy import request_info
from testcluster.quantity import parse_quantity

GOMOD = Path(binary.__file__).resolve().parent / "kube" / "gomod.py"


def load_gomod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gomod", GOMOD)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gomod"] = module
    spec.loader.exec_module(module)
    return module


def test_without_go_the_build_stops_with_one_line_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no go on it
    monkeypatch.setenv("TENANTGATE_KUBE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(binary.BuildError) as stopped:
        binary.build(progress=False)
    message = str(stopped.value)
    assert "\n" not in message
    assert message == (
        "building Kubernetes v1.37.2 for the tests needs Go 1.26 or newer (no go on PATH): "
        "install it from your distribution or go.dev/dl and put `go` on PATH"
    )


def test_an_old_go_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go1.22.5\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TENANTGATE_KUBE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(binary.BuildError, match=r"\(found go1\.22\)"):
        binary.build(progress=False)


def test_the_cache_is_keyed_by_the_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENANTGATE_KUBE_CACHE", str(tmp_path))
    path = binary.binary_path()
    assert path.parent.parent == tmp_path
    assert path.parent.name == binary.pins_digest()
    assert len(binary.pins_digest()) == 16


def test_the_version_ldflags_say_v1_37_2() -> None:
    flags = binary.ldflags()
    assert "-X k8s.io/component-base/version.gitVersion=v1.37.2" in flags
    assert "-X k8s.io/client-go/pkg/version.gitVersion=v1.37.2" in flags
    assert "-X k8s.io/component-base/version.gitMinor=37" in flags


def test_go_mod_replaces_every_staging_module_with_its_tag() -> None:
    gomod = load_gomod()
    upstream = "\n".join(
        [
            "module k8s.io/kubernetes",
            "go 1.26.0",
            "require k8s.io/api v0.0.0",
            "replace (",
            "\tk8s.io/api => ./staging/src/k8s.io/api",
            "\tk8s.io/client-go => ./staging/src/k8s.io/client-go",
            ")",
        ]
    )
    rendered = gomod.render(upstream, "v1.37.2")
    assert "\tk8s.io/api => k8s.io/api v0.37.2" in rendered
    assert "\tk8s.io/client-go => k8s.io/client-go v0.37.2" in rendered
    assert "require k8s.io/kubernetes v1.37.2" in rendered
    assert "go 1.26.0" in rendered


def test_the_committed_go_mod_has_the_33_staging_replaces() -> None:
    text = (GOMOD.parent / "go.mod").read_text()
    replaces = [line for line in text.splitlines() if " => k8s.io/" in line]
    assert len(replaces) == 33
    assert all(line.endswith(" v0.37.2") for line in replaces)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("2k", Fraction(2000)),
        ("1e3", Fraction(1000)),
        ("0.1", Fraction(1, 10)),
        ("4", Fraction(4)),
    ],
)
def test_quantities(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_a_bad_quantity_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity("1.5 Gi")


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/a/pods", "watch=true&resourceVersion=5", ("watch", "pods", "")),
        ("GET", "/api/v1/pods", "", ("list", "pods", "")),
        ("PATCH", "/api/v1/namespaces/a/pods/p", "", ("patch", "pods", "")),
        ("PATCH", "/api/v1/namespaces/a/pods/p/status", "", ("patch", "pods", "status")),
        (
            "PUT",
            "/apis/tenantgate.io/v1alpha1/tenantledgers/t/status",
            "",
            ("update", "tenantledgers.tenantgate.io", "status"),
        ),
        (
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/n/leases",
            "",
            ("create", "leases.coordination.k8s.io", ""),
        ),
        ("DELETE", "/api/v1/namespaces/a/pods", "", ("deletecollection", "pods", "")),
    ],
)
def test_the_proxy_reads_requests_as_the_api_server_does(
    method: str, path: str, query: str, expected: tuple[str, str, str]
) -> None:
    info = request_info(method, path, query)
    assert info is not None
    assert (info.verb, info.resource, info.subresource) == expected


def test_non_resource_requests_are_not_matched() -> None:
    assert request_info("GET", "/version", "") is None
    assert request_info("GET", "/apis", "") is None
