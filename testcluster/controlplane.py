"""The real control plane for tests and ``make cluster``: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, each a process of the built binary.

:class:`ControlPlane` starts them in a work directory (certificates, kubeconfigs, logs, etcd's
data), waits until each is serving, and stops them. The API server runs with upstream's
default admission plugins and ``Node,RBAC`` authorization; users authenticate with client
certificates from one CA, service accounts with tokens from the TokenRequest API.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from testcluster.binary import kube_binary
from testcluster.pki import Authority, KeyPair, service_account_key
from testcluster.processes import Component, free_port, tail

ADMIN = "testcluster-admin"
SERVICE_CIDR = "10.0.0.0/24"
START_TIMEOUT = 120.0


class StartError(RuntimeError):
    """A component did not come up; the message carries the end of its log."""


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca: Path,
    user: str,
    client: KeyPair | None = None,
    token: str | None = None,
) -> Path:
    """A kubeconfig for ``server`` authenticating with a client certificate or a token."""
    credentials: dict[str, str] = {}
    if client is not None:
        credentials = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    if token is not None:
        credentials["token"] = token
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "testcluster", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "testcluster", "user": user}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2))
    path.chmod(0o600)
    return path


def _wait(check: Callable[[], bool], component: Component, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if component.exited() is not None:
            raise StartError(component.describe_exit())
        if check():
            return
        if time.monotonic() > deadline:
            raise StartError(
                f"{component.name}: timed out waiting for {what}; its log ends:\n"
                f"{tail(component.log, 30)}"
            )
        time.sleep(0.2)


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler in ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        binary: Path | None = None,
        scheduler_profiles: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.workdir = workdir
        self.binary = binary or kube_binary()
        self.scheduler_profiles = list(scheduler_profiles)
        self.components: dict[str, Component] = {}
        self.logs = workdir / "logs"
        self.pki = Authority(workdir / "pki")
        self.api_port = free_port()
        self.url = f"https://127.0.0.1:{self.api_port}"
        self.admin_kubeconfig = workdir / "kubeconfig"
        self._users: dict[str, Path] = {}

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self.start_scheduler(self.scheduler_profiles)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        core = ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
        for name in [n for n in self.components if n not in core] + list(core):
            component = self.components.pop(name, None)
            if component is not None:
                component.stop()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _component(self, name: str, args: list[str]) -> Component:
        component = Component(name, [str(self.binary), name, *args], log=self.logs / f"{name}.log")
        self.components[name] = component.start()
        return component

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._component(
            "etcd",
            [
                "--name=testcluster",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=testcluster=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        _wait(lambda: _http_ok(f"{self.etcd_url}/health"), etcd, "etcd's /health")

    def _start_apiserver(self) -> None:
        serving = self.pki.serving("kube-apiserver")
        self.sa_private, self.sa_public = service_account_key(self.pki.directory)
        admin = self.pki.client(ADMIN, ("system:masters",))
        # The aggregation layer's front proxy, as kubeadm sets it up: the components read its
        # CA from kube-system/extension-apiserver-authentication and complain when it is empty.
        front_proxy = self.pki.client("front-proxy-client")
        write_kubeconfig(
            self.admin_kubeconfig, server=self.url, ca=self.pki.ca_cert, user=ADMIN, client=admin
        )
        self._admin_pair = admin
        apiserver = self._component(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.pki.ca_cert}",
                f"--requestheader-client-ca-file={self.pki.ca_cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={front_proxy.cert}",
                f"--proxy-client-key-file={front_proxy.key}",
                f"--service-account-issuer={self.url}",
                f"--service-account-key-file={self.sa_public}",
                f"--service-account-signing-key-file={self.sa_private}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                # The kubernetes Service's endpoint would be 127.0.0.1, which Endpoints reject.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
            ],
        )
        _wait(self._api_ready, apiserver, "the API server's /readyz")

    def _api_ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self._admin_pair.cert), str(self._admin_pair.key))
        return _http_ok(f"{self.url}/readyz", context)

    def _component_kubeconfig(self, user: str) -> Path:
        pair = self.pki.client(user)
        path = self.workdir / f"{user.replace(':', '-')}.kubeconfig"
        return write_kubeconfig(path, server=self.url, ca=self.pki.ca_cert, user=user, client=pair)

    def _start_controller_manager(self) -> None:
        kubeconfig = self._component_kubeconfig("system:kube-controller-manager")
        manager = self._component(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--root-ca-file={self.pki.ca_cert}",
                f"--service-account-private-key-file={self.sa_private}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.workdir / 'controller-manager'}",
                "--controllers=*",
            ],
        )
        # The serviceaccount and token controllers run once `default` has its ServiceAccount.
        _wait(
            lambda: self._kubectl_ok("get", "serviceaccount", "default", "-n", "default"),
            manager,
            "the default ServiceAccount (the controllers to run)",
        )

    def start_scheduler(self, profiles: Sequence[dict[str, Any]] = ()) -> None:
        """(Re)start kube-scheduler with ``default-scheduler`` plus ``profiles``."""
        previous = self.components.pop("kube-scheduler", None)
        if previous is not None:
            previous.stop()
        self.scheduler_profiles = list(profiles)
        kubeconfig = self._component_kubeconfig("system:kube-scheduler")
        names = {profile.get("schedulerName") for profile in profiles}
        default = [] if "default-scheduler" in names else [{"schedulerName": "default-scheduler"}]
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "profiles": [*default, *profiles],
        }
        path = self.workdir / "kube-scheduler.yaml"
        path.write_text(json.dumps(config, indent=2))
        port = free_port()
        scheduler = self._component(
            "kube-scheduler",
            [
                f"--config={path}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'scheduler'}",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate
        _wait(
            lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", insecure),
            scheduler,
            "kube-scheduler's /healthz",
        )

    def start_second_scheduler(
        self, name: str, configuration: dict[str, Any], *, kubeconfig: Path
    ) -> Component:
        """Another kube-scheduler, as a cluster runs one next to its own: ``configuration`` (a
        KubeSchedulerConfiguration) with ``kubeconfig``'s credentials (a ServiceAccount's
        token, so that its RBAC is what is enforced). Stopped with the control plane."""
        previous = self.components.pop(name, None)
        if previous is not None:
            previous.stop()
        config = {**configuration, "clientConnection": {"kubeconfig": str(kubeconfig)}}
        path = self.workdir / f"{name}.yaml"
        path.write_text(json.dumps(config, indent=2))
        port = free_port()
        component = Component(
            name,
            [
                str(self.binary),
                "kube-scheduler",
                f"--config={path}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / name}",
            ],
            log=self.logs / f"{name}.log",
        )
        self.components[name] = component.start()
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate
        _wait(
            lambda: _http_ok(f"https://127.0.0.1:{port}/readyz", insecure),
            component,
            f"{name}'s /readyz",
        )
        return component

    def stop_component(self, name: str) -> None:
        component = self.components.pop(name, None)
        if component is not None:
            component.stop()

    # --- access ------------------------------------------------------------------------------

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for ``user`` (in ``groups``), authenticated by a client certificate."""
        key = f"{user}\0{','.join(groups)}"
        if key not in self._users:
            pair = self.pki.client(user, groups)
            path = self.workdir / "users" / f"{pair.cert.stem}-{len(self._users)}.kubeconfig"
            self._users[key] = write_kubeconfig(
                path, server=self.url, ca=self.pki.ca_cert, user=user, client=pair
            )
        return self._users[key]

    def token_kubeconfig(
        self, path: Path, *, token: str, user: str, server: str | None = None
    ) -> Path:
        """A kubeconfig that presents ``token`` (a ServiceAccount's, say) to ``server``."""
        return write_kubeconfig(
            path, server=server or self.url, ca=self.pki.ca_cert, user=user, token=token
        )

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl; raises with its output when ``check`` and it fails."""
        command = [
            str(self.binary),
            "kubectl",
            f"--kubeconfig={kubeconfig or self.admin_kubeconfig}",
        ]
        result = subprocess.run(
            [*command, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, ["kubectl", *args], result.stdout, result.stderr
            )
        return result

    def _kubectl_ok(self, *args: str) -> bool:
        return self.kubectl(*args, check=False, timeout=30).returncode == 0

    def log_tails(self, lines: int = 40) -> str:
        """The end of every component's log, for a failed test's report."""
        parts = []
        for name, component in self.components.items():
            parts.append(f"----- {name} ({component.log}) -----\n{tail(component.log, lines)}")
        return "\n".join(parts)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:  # noqa: S310 (http(s) only)
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
