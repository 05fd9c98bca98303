"""Hardware counters per op, where a PMU counts: the emulated arm64 machine of `nox -s arm64`
(QEMU's `-cpu max` has Arm's PMUv3; this VM has no PMU, so here these tests skip and say so).

The oracle is `perf stat`, counting the same process over the same run: the cycles the ops
account for can only be part of the process's cycles."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.capture.counters import PMUS
from profinfer_perfetto.model.names import counted_arg
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.test_record import completion, record_slice

pytestmark = pytest.mark.root

ARM_PMU = PMUS / "armv8_pmuv3"
NAMED = "armv8_pmuv3/stall_backend/"
RAW = "armv8_pmuv3/event=0x11/"
"""CPU_CYCLES by its number in Arm's architecture, as a raw event."""
MORE = [f"armv8_pmuv3/event={n:#x}/" for n in (0x1, 0x3, 0x4, 0x8, 0x10)]
"""With cycles, NAMED and RAW: eight counters (the others raw: L1I_CACHE_REFILL,
L1D_CACHE_REFILL, L1D_CACHE, INST_RETIRED, BR_MIS_PRED; raw because QEMU's PMU does not
announce them, so the generic `instructions` does not open there), more than the PMU's seven
(six and the cycle counter), so the kernel multiplexes them and the per-op counts are
scaled."""


@pytest.fixture
def arm_pmu() -> None:
    if not ARM_PMU.is_dir():
        pytest.skip("no Arm PMUv3 here: `nox -s arm64` runs this in an emulated arm64 machine")


def _totals(out: Path) -> dict[str, float]:
    with TraceQuery(out, EngineChoice("builtin")) as q:
        counted = q.metric("counters")
    totals: dict[str, float] = {}
    for row in counted.rows:
        r = dict(zip(counted.columns, row, strict=True))
        totals[r["counter"]] = totals.get(r["counter"], 0.0) + r["total"]
    return totals


def test_cycles_per_op_add_up_to_no_more_than_perf_stat_s(
        arm_pmu: None, cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path],
        tmp_path: Path) -> None:
    """`--counter cycles`, a named and a raw event per op; perf stat runs the target (record
    follows it through perf's fork and exec) and counts its cycles over the whole run."""
    perf = shutil.which("perf")
    if perf is None:
        pytest.fail("perf is missing (the guest image has Debian's linux-perf)")
    out, stat = tmp_path / "pmu.pftrace", tmp_path / "stat.csv"
    # an emulated machine may take longer than record's 30 s to start perf, then llama.cpp
    result = cli("record", "--counter", "cycles", "--counter", NAMED, "--counter", RAW,
                 "--duration", "900", "-o", out, "--", perf, "stat", "-e", "cycles", "-x", ",",
                 "-o", stat, "--", *completion(llama, model("tiny-llama"), 1, n=4))
    assert result.returncode == 0, result.stderr
    totals = _totals(out)
    assert totals["cycles"] > 0 and totals[RAW] > 0
    # opened and counted the whole run (QEMU's PMU counts no stall: a board's does)
    assert record_slice(trace_reader.read(out)).args[counted_arg(NAMED)] == 1.0
    (line,) = [s for s in stat.read_text().splitlines() if ",cycles" in s]
    whole_run = float(line.split(",")[0])
    assert totals["cycles"] <= whole_run


def test_more_counters_than_the_pmu_has_are_multiplexed_and_scaled(
        arm_pmu: None, cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path],
        tmp_path: Path) -> None:
    counters = ["cycles", NAMED, RAW, *MORE]
    out = tmp_path / "many.pftrace"
    result = cli("record", *(a for c in counters for a in ("--counter", c)), "-o", out,
                 "--", *completion(llama, model("tiny-llama"), 1, n=4))
    assert result.returncode == 0, result.stderr
    rec = record_slice(trace_reader.read(out))
    shares = [rec.args[counted_arg(c)] for c in counters]
    assert all(0 < s <= 1 for s in shares) and min(shares) < 1
    assert _totals(out)["cycles"] > 0
