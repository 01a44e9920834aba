"""The installed tenantgate version: ``tenantgate --version``, the image label, ``build_info``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The version of the installed distribution (``unknown`` when run from a bare checkout)."""
    try:
        return version("tenantgate")
    except PackageNotFoundError:
        return "unknown"
