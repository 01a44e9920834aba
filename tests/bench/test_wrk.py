"""Feeding wrk: Lua literals, the templates file, the ids file and wrk's summary."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench import wrk
from bench.workload import Workload, pair_ids


@pytest.mark.parametrize(
    ("data", "literal"),
    [
        (b'{"a":1}', b'[[{"a":1}]]'),
        (b'[["x"]]', b'[=[[["x"]]]=]'),
        (b'[["x"]]=]', b'[==[[["x"]]=]]==]'),
        (b"", b"[[]]"),
    ],
)
def test_lua_string_picks_a_closing_bracket_absent_from_the_data(
    data: bytes, literal: bytes
) -> None:
    assert wrk.lua_string(data) == literal


def test_ids_file_has_one_pod_per_line(tmp_path: Path) -> None:
    path = tmp_path / "ids.txt"

    wrk.write_ids(path, run=5, pairs=3)

    lines = path.read_text().splitlines()
    assert len(lines) == 3
    ids = pair_ids(5, 2)
    assert lines[2].split() == [
        ids.mutate_uid,
        ids.validate_uid,
        ids.reservation_id,
        ids.pod_uid,
        ids.suffix,
    ]


def test_summary_line_is_parsed() -> None:
    text = 'Running 1s test\nBENCH-JSON {"requests": 10, "p99_us": 1200}\n'

    assert wrk.parse_output(text) == {"requests": 10, "p99_us": 1200}
    with pytest.raises(wrk.WrkUnavailable, match="no summary"):
        wrk.parse_output("unable to connect")


LUAJIT = shutil.which("luajit")


@pytest.mark.skipif(LUAJIT is None, reason="luajit (wrk's Lua) is not installed")
def test_templates_file_renders_the_same_bodies_in_lua(tmp_path: Path, workload: Workload) -> None:
    templates = tmp_path / "pairs.lua"
    wrk.write_templates(workload, templates)
    pair = workload.pairs[1]
    ids = pair_ids(0, 0)
    script = tmp_path / "check.lua"
    script.write_text(
        f"""
local t = dofile({str(templates)!r})[2]
local function render(doc, values)
  local out = {{}}
  for i = 1, #doc.slots do
    out[#out + 1] = doc.parts[i]
    out[#out + 1] = values[doc.slots[i]]
  end
  out[#out + 1] = doc.parts[#doc.parts]
  return table.concat(out)
end
io.write(render(t.mutate, {{uid = "{ids.mutate_uid}"}}))
"""
    )
    assert LUAJIT is not None
    completed = subprocess.run([LUAJIT, str(script)], capture_output=True, check=True)

    assert completed.stdout == pair.bodies(ids)[0]
