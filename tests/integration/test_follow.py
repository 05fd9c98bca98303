"""record --follow with a real generation: its follower writes the trace while the run goes,
the same bytes as the trace written from the same records after the run (a trace that cannot
take its name: tests/integration/test_records_kept.py)."""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profinfer_perfetto.capture.run import Recording, Records, Run, drained_dtypes
from profinfer_perfetto.capture.spill import read_drains, spill_path
from profinfer_perfetto.capture.watch import process_state
from profinfer_perfetto.encode.follow import noted
from profinfer_perfetto.encode.stream import write_trace
from tests.integration.test_record import start_recorder
from tests.integration.test_stream import generation

pytestmark = pytest.mark.root

KEEPING = """
import pickle, sys
from pathlib import Path
from profinfer_perfetto import cli
from profinfer_perfetto.capture.spill import Spill
from profinfer_perfetto.encode.follow import Follower

Spill.remove = Spill.close  # the records kept, to write their trace again
finish, kept = Follower.finish, Path(sys.argv[1])

def keeping(self, run, output):
    kept.write_bytes(pickle.dumps(run))  # the final run handed to the follower
    return finish(self, run, output)

Follower.finish = keeping
sys.argv = ["profinfer-perfetto", *sys.argv[2:]]
cli.main()
"""


def test_the_followers_trace_is_the_after_run_trace_of_its_records(tmp_path: Path) -> None:
    out, kept = tmp_path / "run.pftrace", tmp_path / "run.pickle"
    result = subprocess.run(
        [sys.executable, "-c", KEEPING, str(kept), "record", "--follow", "-o", str(out), "--",
         *generation("tiny-llama", 48)], capture_output=True, text=True, errors="replace")
    assert result.returncode == 0, result.stderr
    assert "by its follower at idle priority" in result.stdout, result.stdout
    run = pickle.loads(kept.read_bytes())
    assert isinstance(run, Run) and run.complete
    drains = read_drains(spill_path(out), drained_dtypes(len(run.counters)))
    ended = noted(Recording(**vars(Records.empty(len(run.counters))), run=run), drains.notes)
    after = write_trace(tmp_path / "after.pftrace", drains, ended).files[0]
    assert out.read_bytes() == after.read_bytes()


def _follower(recorder: int) -> int | None:
    """The recorder's follower process, if it has one now (a thread or child that ends
    meanwhile passed over)."""
    for children in Path(f"/proc/{recorder}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for pid in children.read_text().split():
                if b"profinfer_perfetto.encode.follow" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(pid)
    return None


def _followers_cpus(recorder: subprocess.Popen[str], target: int) -> list[set[int]]:
    """The CPUs the recorder's follower may run on, read once while the target runs (released,
    not yet ended: read before and after); none if the recorder ends first."""
    seen: list[set[int]] = []
    while recorder.poll() is None and not seen:
        follower = _follower(recorder.pid)
        if follower is None or process_state(target) not in ("R", "S", "D"):
            time.sleep(0.01)  # no follower yet, or the target held, or ended
            continue
        with contextlib.suppress(OSError):
            cpus = os.sched_getaffinity(follower)
            if process_state(target) in ("R", "S", "D"):  # still running: the capture had not ended
                seen.append(cpus)
    return seen


def test_a_pinned_target_gets_a_follower_that_keeps_off_its_cpu(tmp_path: Path) -> None:
    """A target pinned to one CPU has a follower by default (no --follow), and while it runs
    the follower may not run there, as the recorder's own threads may not."""
    own = os.sched_getaffinity(0)
    if len(own) < 2:
        pytest.skip("one CPU: the follower has nowhere else to run")
    cpu = max(own)
    recorder, target = start_recorder(tmp_path / "pinned.pftrace", "--", "taskset",
                                      "-c", str(cpu), *generation("tiny-llama", 2000))
    seen = _followers_cpus(recorder, target)
    out, err = recorder.communicate(timeout=300)
    assert recorder.returncode == 0, err
    assert "by its follower at idle priority" in out, out
    assert seen == [own - {cpu}]


def test_a_target_computing_on_fewer_threads_than_cpus_gets_a_follower(tmp_path: Path) -> None:
    """Not pinned, one compute thread on a machine of two CPUs or more: its first graph says so,
    and a follower comes by default (the CPU its thread leaves is the follower's), not moved:
    the target may run anywhere, so the recorder is not kept off any CPU either."""
    own = os.sched_getaffinity(0)
    if len(own) < 2:
        pytest.skip("one CPU: a thread leaves none free")
    command = generation("tiny-llama", 2000)
    command[command.index("-t") + 1] = "1"
    recorder, target = start_recorder(tmp_path / "one-thread.pftrace", "--", *command)
    seen = _followers_cpus(recorder, target)
    out, err = recorder.communicate(timeout=300)
    assert recorder.returncode == 0, err
    assert "by its follower at idle priority" in out, out
    assert "kept off" not in out, out
    assert seen == [own]


def test_a_target_that_pins_its_compute_threads_itself_gets_a_follower_then(
        tmp_path: Path) -> None:
    """llama.cpp's own --cpu-mask pins its compute threads once it runs (its log's thread stays
    on every CPU): the drain that sees it moves the recorder off that CPU and starts a follower
    there too. Two threads on one CPU (on a machine of two there is no other way to pin and keep
    a CPU free: llama.cpp pins none at one thread) wait for each other at every barrier, so only
    a few tokens."""
    own = os.sched_getaffinity(0)
    if len(own) < 2:
        pytest.skip("one CPU: the follower has nowhere else to run")
    cpu = max(own)
    recorder, target = start_recorder(
        tmp_path / "self-pinned.pftrace", "--", *generation("tiny-llama", 6), "-C",
        hex(1 << cpu), "--cpu-strict", "1")
    seen = _followers_cpus(recorder, target)
    out, err = recorder.communicate(timeout=300)
    assert recorder.returncode == 0, err
    assert "by its follower at idle priority" in out, out
    rest = sorted(own - {cpu})
    listed = ("CPU " if len(rest) == 1 else "CPUs ") + ", ".join(map(str, rest))
    assert (f"kept off the target's CPUs (CPU {cpu}) while it ran, on {listed}, from "
            in out), out
    assert "s into the capture (when the target pinned its threads)" in out, out
    assert seen == [own - {cpu}]
