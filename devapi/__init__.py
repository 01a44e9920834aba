"""A Kubernetes test API server for development and CI: ``tenantgate dev apiserver``.

It serves the subset of the Kubernetes REST API tenantgate uses (pods, namespaces, priority
classes, limit ranges, runtime classes, leases, custom resources, webhook configurations) with
the real server's semantics — resourceVersions, conflicts, watches with bookmarks and 410 Gone,
selectors, server-side dry-run, discovery — and runs the admission chain of a 1.37 server: the
in-tree plugins in their order, and the registered webhooks called over HTTPS exactly as the
real API server calls them. Tests use :class:`DevAPIServer`; operators use the CLI.
"""

from __future__ import annotations

from devapi.faults import Faults
from devapi.server import DevAPIServer

__all__ = ["DevAPIServer", "Faults"]
