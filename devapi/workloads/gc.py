"""The garbage collector (``pkg/controller/garbagecollector``) for workloads and their pods.

An object whose owners are all gone is deleted in the background. Deleting an owner follows
its propagation policy, as the API server and the collector do together: ``Orphan`` gives it
the ``orphan`` finalizer, and the collector removes the owner reference from each dependent
before letting the owner go; ``Foreground`` gives it ``foregroundDeletion``, and the collector
deletes the dependents first; ``Background`` (kubectl's default) deletes the owner at once and
its dependents after (``deletionFinalizersForGarbageCollection`` in
``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``).
"""

from __future__ import annotations

from typing import Any

from devapi.errors import APIError
from devapi.registry import DeleteOptions
from devapi.resources import PODS, ResourceType
from devapi.store import Store, clone
from devapi.types import JSONObject
from devapi.workloads.kinds import CRON_JOBS, DEPLOYMENTS, JOBS, REPLICA_SETS
from devapi.workloads.podcontrol import ControllerClient

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
OWNERS = (DEPLOYMENTS, REPLICA_SETS, JOBS, CRON_JOBS)
DEPENDENTS = (PODS, REPLICA_SETS, JOBS)


def _owner_refs(obj: JSONObject) -> list[dict[str, Any]]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [r for r in refs if isinstance(r, dict)]


def deletion_finalizers(rt: ResourceType, options: DeleteOptions, current: list[str]) -> list[str]:
    """The finalizers an owner gets when deleted with ``options``."""
    if rt not in OWNERS or options.propagation_policy not in ("Orphan", "Foreground", "Background"):
        return current
    kept = [f for f in current if f not in (ORPHAN, FOREGROUND)]
    if options.propagation_policy == "Orphan":
        kept.append(ORPHAN)
    elif options.propagation_policy == "Foreground":
        kept.append(FOREGROUND)
    return kept


class GarbageCollector:
    def __init__(self, client: ControllerClient, store: Store) -> None:
        self.client = client
        self.store = store

    def _dependents(self, owner: JSONObject) -> list[tuple[ResourceType, JSONObject]]:
        uid = owner["metadata"]["uid"]
        namespace = owner["metadata"].get("namespace")
        found = []
        for rt in DEPENDENTS:
            for obj in self.store.scan(
                rt.key,
                lambda o: (
                    (o.get("metadata") or {}).get("namespace") == namespace
                    and any(r.get("uid") == uid for r in _owner_refs(o))
                ),
            ):
                found.append((rt, obj))
        return found

    async def collect_once(self) -> None:
        await self._finish_deletions()
        await self._delete_orphans()

    async def _finish_deletions(self) -> None:
        for rt in OWNERS:
            for owner in self.store.scan(
                rt.key,
                lambda o: (
                    bool((o.get("metadata") or {}).get("deletionTimestamp"))
                    and bool(
                        {ORPHAN, FOREGROUND}
                        & set((o.get("metadata") or {}).get("finalizers") or [])
                    )
                ),
            ):
                finalizers = owner["metadata"]["finalizers"]
                dependents = self._dependents(owner)
                if ORPHAN in finalizers:
                    released_all = True
                    for dependent_rt, dependent in dependents:
                        released = clone(dependent)
                        remaining = [
                            r
                            for r in _owner_refs(dependent)
                            if r.get("uid") != owner["metadata"]["uid"]
                        ]
                        released["metadata"]["ownerReferences"] = remaining
                        if not remaining:  # omitempty, as the real server stores it
                            del released["metadata"]["ownerReferences"]
                        released_all &= await self._update(dependent_rt, released)
                    if not released_all:
                        continue  # a dependent changed meanwhile: next pass
                    finalizers = [f for f in finalizers if f != ORPHAN]
                else:
                    for dependent_rt, dependent in dependents:
                        if not dependent["metadata"].get("deletionTimestamp"):
                            await self.client.delete(dependent_rt, dependent)
                    if dependents:
                        continue  # the owner goes once its dependents are gone
                    finalizers = [f for f in finalizers if f != FOREGROUND]
                released_owner = clone(owner)
                released_owner["metadata"]["finalizers"] = finalizers
                await self._update(rt, released_owner)

    async def _update(self, rt: ResourceType, obj: JSONObject) -> bool:
        """Whether the object was written (or is gone); False on a conflict."""
        try:
            await self.client.update(rt, obj)
        except APIError as err:
            if err.code == 404:
                return True
            if err.code != 409:
                raise
            return False
        return True

    async def _delete_orphans(self) -> None:
        kinds = {rt.kind: rt for rt in OWNERS}
        for rt in DEPENDENTS:
            for obj in self.store.scan(rt.key, lambda o: bool(_owner_refs(o)), copy=False):
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                namespace = str(obj["metadata"].get("namespace") or "")
                alive = known = False
                for ref in _owner_refs(obj):
                    owner_rt = kinds.get(str(ref.get("kind")))
                    if owner_rt is None:
                        alive = True  # an owner kind the collector does not know: keep
                        continue
                    known = True
                    owner = self.store.get(owner_rt.key, namespace, str(ref.get("name")))
                    if owner is not None and owner["metadata"].get("uid") == ref.get("uid"):
                        alive = True
                if known and not alive:
                    await self.client.delete(rt, obj)
