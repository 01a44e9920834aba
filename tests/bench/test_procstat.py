"""Reading CPU time and memory of a process from /proc."""

from __future__ import annotations

import os
import sys

import pytest

from bench import procstat

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux")

# A real line with a command name holding spaces and parentheses, as a process may choose.
STAT = (
    "4242 (tenant gate) (x)) S 1 4242 4242 0 -1 4194560 2934 0 0 0 "
    "1234 567 0 0 20 0 3 0 1062 731467776 24871 18446744073709551615 1 1 0 0 0 0 0 "
    "16781312 17642 0 0 0 17 1 0 0 0 0 0"
)


def test_parse_stat_counts_fields_from_the_last_parenthesis() -> None:
    times = procstat.parse_stat(STAT)

    assert times.user == pytest.approx(1234 / procstat.CLOCK_TICKS)
    assert times.system == pytest.approx(567 / procstat.CLOCK_TICKS)
    assert times.total == pytest.approx((1234 + 567) / procstat.CLOCK_TICKS)


def test_cpu_times_subtract() -> None:
    later = procstat.CpuTimes(3.0, 2.0) - procstat.CpuTimes(1.0, 0.5)

    assert (later.user, later.system) == (2.0, 1.5)


@pytest.mark.parametrize("text", ["", "no parenthesis here", "1 (x) S 1 2"])
def test_parse_stat_rejects_what_is_not_a_stat_line(text: str) -> None:
    with pytest.raises(procstat.ProcError):
        procstat.parse_stat(text)


def test_parse_status_reads_kib_fields() -> None:
    text = "Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t4\n"

    assert procstat.parse_status_kib(text, "VmRSS") == 102400
    assert procstat.parse_status_kib(text, "VmHWM") == 204800
    with pytest.raises(procstat.ProcError, match="no VmSwap"):
        procstat.parse_status_kib(text, "VmSwap")


def test_own_process_is_readable() -> None:
    pid = os.getpid()

    assert procstat.cpu_times(pid).total >= 0
    rss = procstat.memory_kib(pid)
    assert 0 < rss <= procstat.memory_kib(pid, "VmHWM")


def test_a_missing_process_is_a_proc_error() -> None:
    with pytest.raises(procstat.ProcError, match="cannot read"):
        procstat.cpu_times(2**22 + 1)  # above the kernel's pid_max
