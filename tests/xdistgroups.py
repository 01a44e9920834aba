"""``--dist loadgroup`` for pytest 9: the tests of one ``xdist_group`` run on one worker.

pytest-xdist (3.8) groups tests by appending the group's name to each test's node id on the
workers, and pytest 9 builds node ids from their parts, so that rename is lost and every test
became a group of its own (two workers, two control planes). Here the workers write each
grouped test's id and group to a file the controller names (tests/conftest.py), and
:class:`GroupScheduling` makes one work unit of each group, as xdist's ``LoadGroupScheduling``
means to: the largest unit (the control-plane tests) is handed out first, whole, in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling


def write_groups(path: Path, items: list[pytest.Item]) -> None:
    """On a worker: ``group<TAB>node id`` for every test with an ``xdist_group`` mark."""
    lines = []
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            name = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
            lines.append(f"{name}\t{item.nodeid}\n")
    path.write_text("".join(lines))


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """Load scheduling where a work unit is a group's tests, or one test outside any group."""

    def __init__(self, config: pytest.Config, log: Producer | None = None, *, files: Path):
        super().__init__(config, log)
        self._files = files
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            # Every worker wrote one (they collected the same tests); any will do.
            written = sorted(self._files.glob("groups-*"))
            lines = written[0].read_text().splitlines() if written else []
            pairs = (line.split("\t", 1) for line in lines)
            self._groups = {test: group for group, test in pairs}
        return self._groups.get(nodeid, nodeid)
