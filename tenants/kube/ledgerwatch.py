"""Every replica's view of the TenantLedger objects, kept current by watching them.

With ``ledger.backend: kubernetes`` a replica admits from the freshly read object, never from
its view; the view is what ``/status``, ``tenantgate usage`` and the usage metrics show. Only
the lease holder changes the ledgers after admission (confirmations, releases, expiries,
recounts), so without this watch a follower's view stayed as its own last write left it, for
as long as it wrote nothing. :class:`LedgerWatch` lists and watches the objects (an
:class:`~tenants.kube.informer.Informer` thread) and hands each one to
:meth:`~tenants.kube.ledgerstore.KubeLedgerStore.observe` on the event loop, so every
replica answers within a watch event of a change, whichever wrote it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from tenants.kube.backoff import BackoffPolicy, ItemBackoff
from tenants.kube.connection import Connection
from tenants.kube.informer import WATCH_TIMEOUT_SECONDS, Informer, RestartHook
from tenants.kube.ledgerstore import KubeLedgerStore, StoredLedger, stored_ledger

logger = logging.getLogger(__name__)

STOP_SECONDS = 5.0


def ledger_item(obj: Mapping[str, Any]) -> StoredLedger | None:
    """A listed or watched TenantLedger object; None without a name."""
    item = stored_ledger(obj, "")
    return item if item.name else None


class _LedgerSink:
    def __init__(self, store: KubeLedgerStore) -> None:
        self._store = store
        self._names: set[str] = set()

    def replace(self, items: list[StoredLedger], *, initial: bool) -> None:
        names = {item.name for item in items}
        for gone in self._names - names:
            self._store.forget(gone)
        self._names = names
        for item in items:
            self._store.observe(item)

    def upsert(self, item: StoredLedger) -> None:
        self._names.add(item.name)
        self._store.observe(item)

    def delete(self, item: StoredLedger) -> None:
        self._names.discard(item.name)
        self._store.forget(item.name)


class LedgerWatch:
    """Watches the TenantLedger objects into ``store``'s view (every replica runs one)."""

    def __init__(
        self,
        connection: Connection,
        store: KubeLedgerStore,
        *,
        backoff: BackoffPolicy | None = None,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        on_restart: RestartHook | None = None,
    ) -> None:
        self._connection = connection
        self._store = store
        self._backoff = ItemBackoff(backoff)
        self._watch_timeout = watch_timeout
        self._on_restart = on_restart
        self._informer: Informer[StoredLedger] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._informer is not None:
            raise RuntimeError("the ledger watch was already started")
        # call_soon_threadsafe's signature is wider than the informer's Deliver.
        deliver: Any = loop.call_soon_threadsafe
        self._informer = Informer(
            "tenantledgers",
            connection=self._connection,
            convert=ledger_item,
            sink=_LedgerSink(self._store),
            deliver=deliver,
            backoff=self._backoff,
            on_restart=self._on_restart,
            watch_timeout=self._watch_timeout,
        )
        self._informer.start()
        logger.info("watching the TenantLedger objects from %s", self._connection.host)

    @property
    def synced(self) -> bool:
        return self._informer is not None and self._informer.synced

    async def stop(self) -> None:
        informer = self._informer
        if informer is None:
            return
        informer.stop()
        deadline = time.monotonic() + STOP_SECONDS
        done = await asyncio.to_thread(informer.join, max(deadline - time.monotonic(), 0.0))
        if not done:
            logger.warning("ledger watch: still finishing a call")


__all__ = ["LedgerWatch", "ledger_item"]
