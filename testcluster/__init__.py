"""Real Kubernetes for tenantgate's tests and ``make cluster``.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl v1.37 come from one
binary built from the Go module in ``kube/`` (:mod:`testcluster.binary`); the kubelet is
simulated (:mod:`testcluster.kubelet`); faults come from a proxy in front of the API server
(:mod:`testcluster.proxy`). Never imported by the product.
"""

from __future__ import annotations

from testcluster.cluster import DEFAULT_NODES, Cluster
from testcluster.controlplane import ControlPlane
from testcluster.kubelet import NodeSpec, SimulatedKubelet
from testcluster.proxy import FaultProxy

__all__ = ["DEFAULT_NODES", "Cluster", "ControlPlane", "FaultProxy", "NodeSpec", "SimulatedKubelet"]
