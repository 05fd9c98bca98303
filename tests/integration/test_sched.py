"""record --sched on a real llama.cpp: a CPU hog beside it is seen, named and timed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from profinfer_perfetto.query.engines import EngineChoice, Result
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests import trace_reader
from tests.integration.test_record import PROMPT, start_recorder, wait_for_a_token

pytestmark = pytest.mark.root

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
HOG_CPU = 1
HOG_S = 2.0


def _cpu_ns(pid: int) -> int:
    """A task's time on a CPU so far, from the scheduler's own account."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _records(result: Result) -> list[dict[str, Any]]:
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def _engines() -> tuple[str, ...]:
    return ("builtin", "trace_processor") if TP_BIN else ("builtin",)


def test_a_cpu_hog_is_named_with_the_time_it_took(tmp_path: Path) -> None:
    """A busy loop pinned to one of the target's CPUs while it decodes: `interference_tasks`
    names it with the time it took there (within 10 % of the CPU time the kernel gave it: the
    target wants both CPUs all along), steps name it as the task that ran most, and `sched`
    has it on that CPU."""
    if HOG_CPU not in os.sched_getaffinity(0):
        pytest.skip(f"CPU {HOG_CPU} is not available here")
    out = tmp_path / "hog.pftrace"
    recorder, _ = start_recorder(
        out, "--sched", "--", str(assets.llama_bin("llama-completion")), "-m",
        str(assets.model("medium-llama")), "-p", PROMPT, "-n", "-1", "-t", "2", "-no-cnv",
        "--no-warmup", "-s", "1")
    wait_for_a_token(recorder)
    hog = subprocess.Popen(["taskset", "-c", str(HOG_CPU), "sh", "-c", "while :; do :; done"])
    try:
        time.sleep(HOG_S)
        hog.send_signal(signal.SIGSTOP)
        hog_ns = _cpu_ns(hog.pid)
    finally:
        hog.kill()
        hog.wait()
    recorder.send_signal(signal.SIGINT)
    _, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err
    assert hog_ns > 0.1 * HOG_S * 1e9, "the hog hardly ran"
    for engine in _engines():
        with TraceQuery(out, EngineChoice(engine)) as q:
            tasks = {row["tid"]: row for row in _records(q.metric("interference_tasks"))}
            steps = _records(q.metric("interference"))
            on_cpu = q.sql(f"select cpu, count(*) from sched s join thread t using (utid) "
                           f"where t.tid = {hog.pid} group by cpu").rows
        assert hog.pid in tasks, (engine, sorted(tasks))
        taken = tasks[hog.pid]["taken_ns"]
        assert abs(taken - hog_ns) <= 0.1 * hog_ns, (engine, taken, hog_ns)
        # (before taskset pinned it, the hog's process may have begun on another CPU)
        assert str(HOG_CPU) in tasks[hog.pid]["cpus"].split(",")
        assert any(str(s["top"]).endswith(f" {hog.pid}") for s in steps), engine
        assert max(on_cpu, key=lambda row: row[1])[0] == HOG_CPU, (engine, on_cpu)


def test_each_op_says_its_cpu(tmp_path: Path) -> None:
    """With --sched every op slice has the CPU its thread ran it on, one the target may use,
    and the recording says which CPUs were watched."""
    out = tmp_path / "cpus.pftrace"
    recorder, _ = start_recorder(
        out, "--sched", "--", str(assets.llama_bin("llama-completion")), "-m",
        str(assets.model("tiny-llama")), "-p", PROMPT, "-n", "8", "-t", "2", "-no-cnv",
        "--no-warmup", "-s", "1")
    _, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err
    trace = trace_reader.read(out)
    (rec,) = [s for s in trace.slices if s.name == "record"]
    watched = {int(c) for c in str(rec.args["sched_cpus"]).split(",")}
    assert watched == os.sched_getaffinity(0)
    ops = [s for s in trace.slices if "node" in s.args]
    assert ops and all(s.args["cpu"] in watched for s in ops)
