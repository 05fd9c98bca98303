"""record --sched on a real llama.cpp: a CPU hog beside it is seen, named and timed."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profinfer_perfetto.capture.events import SchedKind
from profinfer_perfetto.capture.recorder import RecordRequest, plan, record
from profinfer_perfetto.capture.watch import process_state
from profinfer_perfetto.query.engines import EngineChoice, Result
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests import trace_reader
from tests.integration.bpftrace_count import BpftraceCount
from tests.integration.test_record import PROMPT, completion, start_recorder, wait_for_a_token
from tests.waiting import wait_until

pytestmark = pytest.mark.root

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
HOG_CPU = 1
HOG_RUNS = 50
"""Times the hog is switched back in (so switched out as often, for the target's threads on its
CPU) before it is stopped."""
SWITCHED_IN = "tracepoint:sched:sched_switch { @runs[args->next_pid] = count(); }"
"""The oracle of the runs: /proc's schedstat counted one run more than the kernel's sched_switch
tracepoint showed in about 1 of 8 runs (7 of 53, 2026-11-27; bpftrace's count of the
tracepoint equalled the trace's in all 16 where it counted beside)."""


def _schedstat(pid: int) -> tuple[int, int]:
    """A task's time on a CPU so far and the number of times it was switched in, from the
    scheduler's own account."""
    ns, _, runs = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(ns), int(runs)


def _records(result: Result) -> list[dict[str, Any]]:
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def _engines() -> tuple[str, ...]:
    return ("builtin", "trace_processor") if TP_BIN else ("builtin",)


def _hog_beside(recorder: subprocess.Popen[str]) -> int:
    """A busy loop pinned to HOG_CPU beside the decoding target, until it has been switched in
    HOG_RUNS times, then stopped (SIGSTOP: it runs no more) and the recorder ended; its pid."""
    hog = subprocess.Popen(["taskset", "-c", str(HOG_CPU), "sh", "-c", "while :; do :; done"])
    try:
        wait_until(lambda: _schedstat(hog.pid)[1] >= HOG_RUNS, "the hog ran", 120)
        hog.send_signal(signal.SIGSTOP)
        wait_until(lambda: process_state(hog.pid) == "T", "the hog stopped", 120)
        recorder.send_signal(signal.SIGINT)
        _, err = recorder.communicate(timeout=120)
        assert recorder.returncode == 0, err
    except BaseException:
        hog.kill()
        hog.wait()
        raise
    return hog.pid


def test_a_cpu_hog_is_named_with_the_time_it_took(tmp_path: Path) -> None:
    """A busy loop pinned to one of the target's CPUs while it decodes, stopped before the
    recording ends: `sched` has each time the kernel switched it in (as many as bpftrace counts
    of the sched_switch tracepoint, but for the runs beside a switch a full ring lost), mostly
    on that CPU;
    `interference_tasks` names it with a part of its time there (what it took while the target
    wanted the CPUs); a step's top task took a part of the time others took. (Which task is a
    step's top depends on what else the machine runs.)"""
    if HOG_CPU not in os.sched_getaffinity(0):
        pytest.skip(f"CPU {HOG_CPU} is not available here")
    out = tmp_path / "hog.pftrace"
    recorder, _ = start_recorder(
        out, "--sched", "--", str(assets.llama_bin("llama-completion")), "-m",
        str(assets.model("medium-llama")), "-p", PROMPT, "-n", "-1", "-t", "2", "-no-cnv",
        "--no-warmup", "-s", "1")
    wait_for_a_token(recorder)
    bpftrace = BpftraceCount(SWITCHED_IN)
    pid = _hog_beside(recorder)
    try:
        hog_ns, _ = _schedstat(pid)
        hog_runs = bpftrace.stop(pid)["runs"]
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert hog_ns > 0
    for engine in _engines():
        with TraceQuery(out, EngineChoice(engine)) as q:
            tasks = {row["tid"]: row for row in _records(q.metric("interference_tasks"))}
            steps = _records(q.metric("interference"))
            lost = int(q.recording_args()["sched_lost"])
            on_cpu = q.sql(f"select cpu, count(*), sum(dur) from sched s join thread t "
                           f"using (utid) where t.tid = {pid} group by cpu").rows
        # A scheduling record lost to a full ring (counted: sched_lost) leaves the runs on each
        # side of its switch without an end or a begin.
        runs = sum(row[1] for row in on_cpu)
        assert hog_runs - 2 * lost <= runs <= hog_runs, (engine, on_cpu, hog_runs, lost)
        assert max(on_cpu, key=lambda row: row[1])[0] == HOG_CPU, (engine, on_cpu)
        assert pid in tasks, (engine, sorted(tasks))
        assert 0 < tasks[pid]["taken_ns"] <= sum(row[2] for row in on_cpu), engine
        # (before taskset pinned it, the hog's process may have begun on another CPU)
        assert str(HOG_CPU) in tasks[pid]["cpus"].split(",")
        assert all(0 < s["top_ns"] <= s["others_ns"] for s in steps if s["top"]), engine


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


def test_the_recorder_keeps_off_a_pinned_target_s_cpu(llama: Callable[..., Path],
                                                      model: Callable[[str], Path]) -> None:
    """A target pinned to one CPU (as a CI gate pins it): from its first event on, the kernel
    switched none of the recorder's threads out of that CPU (so none ran there), as --sched
    recorded every switch on it; and the run says where the recorder kept to."""
    own = os.sched_getaffinity(0)
    if len(own) < 2:
        pytest.skip("one CPU: the recorder has nowhere else to run")
    cpu = max(own)
    request = RecordRequest(command=["taskset", "-c", str(cpu),
                                     *completion(llama, model("tiny-llama"), 1, n=8)],
                            sched=True)
    rec = record(request, plan(request))
    assert any(f"kept off the target's CPUs (CPU {cpu})" in note for note in rec.run.notes)
    switches = rec.sched[rec.sched["kind"] == SchedKind.SWITCH]
    on_it = switches[(switches["cpu"] == cpu) & (switches["ts"] >= rec.events["ts"].min())]
    assert np.count_nonzero(on_it["prev_tgid"] == rec.run.pid) > 0  # the target was seen
    assert not np.count_nonzero(on_it["prev_tgid"] == os.getpid())
    assert os.sched_getaffinity(0) == own  # and back once it ended
