"""The pod groups with released members, from the controller's pods.

A group some of whose members run (released, not finished) is *running*: a member created
for it later (a restarted worker, the Job's next index) is released on its own as soon as it
fits, never queued behind other work (:func:`tenants.groups.release.plan_groups`). Rebuilt
from the pods like everything the controller keeps.
"""

from __future__ import annotations

from tenants.groups.membership import Membership


class RunningGroups:
    """group id -> uids of its released members that have not finished."""

    def __init__(self) -> None:
        self._members: dict[str, set[str]] = {}
        self._group_of: dict[str, str] = {}

    def observe(self, uid: str, group: Membership | None, *, running: bool) -> None:
        """The pod as last seen: a released, unfinished member of ``group`` or not."""
        if group is None or not running:
            self.forget(uid)
            return
        before = self._group_of.get(uid)
        if before == group.id:
            return
        if before is not None:
            self.forget(uid)
        self._group_of[uid] = group.id
        self._members.setdefault(group.id, set()).add(uid)

    def forget(self, uid: str) -> None:
        group = self._group_of.pop(uid, None)
        if group is None:
            return
        members = self._members.get(group)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._members[group]

    def __bool__(self) -> bool:
        return bool(self._group_of)

    def running(self, group: str) -> bool:
        return group in self._members

    def clear(self) -> None:
        self._members.clear()
        self._group_of.clear()


__all__ = ["RunningGroups"]
