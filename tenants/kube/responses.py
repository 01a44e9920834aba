"""Raw responses of the official client (``_preload_content=False``)."""

from __future__ import annotations

from typing import Any


def drain(response: Any) -> bytes:
    """The whole body, read before the connection goes back to the pool: a connection handed
    back with unread bytes answers the next request with them."""
    try:
        data: bytes = response.data
    finally:
        response.release_conn()
    return data


__all__ = ["drain"]
