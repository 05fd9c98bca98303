"""The default's follower (encode/follow.py): a real process at idle priority that writes the
trace from a records folder as a recorder fills it, the same bytes as the trace written from
the folder after the run; where it fails, record writes that one itself; it dies with its
recorder, leaving the folder to `recover`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from profinfer_perfetto.capture.recorder import RecordRequest
from profinfer_perfetto.capture.run import Recording, Records, Run
from profinfer_perfetto.capture.spill import Spill, read_drains, spill_path
from profinfer_perfetto.capture.watch import process_state
from profinfer_perfetto.commands import record as record_module
from profinfer_perfetto.commands.record import RecordCommand
from profinfer_perfetto.commands.recover import RecoverCommand
from profinfer_perfetto.encode import follow
from profinfer_perfetto.encode.follow import TRACE_FILE, Follower, noted
from profinfer_perfetto.encode.stream import part_path, write_trace
from profinfer_perfetto.errors import ProfinferError
from tests import synthetic
from tests.unit.test_spill_safety import _fake_record
from tests.waiting import wait_until

DRAINS = 7


@pytest.fixture
def rec() -> Recording:
    return synthetic.decode_run(3, steps=10)


@pytest.fixture
def spill(tmp_path: Path, rec: Recording) -> Iterator[Spill]:
    spill = Spill(spill_path(tmp_path / "run.pftrace"), len(rec.run.counters))
    yield spill
    spill.close()


def _started(spill: Spill, rec: Recording) -> Follower:
    follower = Follower.start(spill.folder, len(rec.run.counters))
    assert isinstance(follower, Follower), follower
    return follower


def _spilled(spill: Spill, rec: Recording, run: Run, drains: int = DRAINS) -> None:
    for i, drained in enumerate(synthetic.drains(rec, DRAINS)[:drains]):
        assert spill(drained, replace(run, status="running", end_ns=run.begin_ns + i)) is None


def _written(folder: Path) -> bool:
    """The follower of `folder` has written a chunk."""
    part = part_path(folder / TRACE_FILE)
    return part.exists() and part.stat().st_size > 0


def _after_the_run(folder: Path, spill: Spill, run: Run, out: Path) -> bytes:
    """The trace write_trace writes from the folder after the run (record's old way)."""
    drains = read_drains(folder, spill.dtypes)
    ended = Recording(**vars(Records.empty(len(run.counters))), run=run)
    return write_trace(out, drains, noted(ended, drains.notes)).files[0].read_bytes()


def test_the_follower_writes_the_after_run_trace_at_idle_priority(
        tmp_path: Path, rec: Recording, spill: Spill) -> None:
    """Half the drains come before it is told the run ended, half after: the same bytes."""
    follower = _started(spill, rec)
    assert os.sched_getscheduler(follower.proc.pid) == os.SCHED_IDLE
    _spilled(spill, rec, rec.run, drains=4)
    wait_until(lambda: _written(spill.folder), "the follower wrote no chunk")
    for drained in synthetic.drains(rec, DRAINS)[4:]:
        assert spill(drained, replace(rec.run, status="running")) is None
    assert spill.finish() is None
    out = tmp_path / "run.pftrace"
    followed = follower.finish(rec.run, out)
    assert followed is not None and followed.started_over == 0
    assert followed.drains == DRAINS and followed.left <= DRAINS - 4
    assert out.read_bytes() == _after_the_run(spill.folder, spill, rec.run,
                                              tmp_path / "after.pftrace")


def test_a_thread_that_comes_late_makes_the_follower_start_over(
        tmp_path: Path, rec: Recording, spill: Spill) -> None:
    """The final run names a thread the runs before did not, after chunks were written with
    them: those chunks are written anew, and the trace is still the after-run one."""
    early = replace(rec.run, threads={})
    follower = _started(spill, rec)
    _spilled(spill, rec, early)
    wait_until(lambda: _written(spill.folder), "the follower wrote no chunk")
    assert spill.finish() is None
    out = tmp_path / "run.pftrace"
    followed = follower.finish(rec.run, out)
    assert followed is not None and followed.started_over == 1
    assert out.read_bytes() == _after_the_run(spill.folder, spill, rec.run,
                                              tmp_path / "after.pftrace")


def _record(output: Path, follow: bool | None = True) -> int:
    """record's default path (the records kept on disk), with --follow, --no-follow or
    neither."""
    return RecordCommand(RecordRequest(command=["llama-cli"]), output, follow=follow)._spilled(
        None)


def test_a_follower_that_fails_leaves_record_to_write_the_trace(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A follower process that cannot run (here: no such module) is a follower that failed:
    record writes the trace from the records after the run, as without one, and says so."""
    monkeypatch.setattr(follow, "MODULE", "profinfer_perfetto.no_such_module")
    monkeypatch.setattr(record_module, "record", _fake_record(rec))
    output = tmp_path / "run.pftrace"
    assert _record(output) == 0
    said = capsys.readouterr()
    assert "the trace's follower failed" in said.err
    assert "from its records, its follower having failed" in said.out
    assert sorted(tmp_path.iterdir()) == [output]


FOLLOWED = (rf" s after the run, by its follower at idle priority, which had \d+ of {DRAINS} "
            r"drains left when the run ended; its CPU \d+\.\d\d s \(\d+\.\d\d µs per event\), "
            r"peak memory \d+ MB\n")
BESIDE = [max(os.sched_getaffinity(0)) + 1]
"""A CPU this process may not use: a target pinned there leaves the recorder all of its own."""


OWN = len(os.sched_getaffinity(0))
"""The CPUs this process may use: a target computing on as many threads leaves none free."""
NONE_FREE = (r" s after the run, from its records \(no follower: the target may compute on "
             r"every CPU the recorder may; --follow has one anyway\)\n")


@pytest.mark.parametrize(("follow", "cpus", "threads", "how"), [
    (False, BESIDE, 0, r" s after the run, from its records\n"),
    (True, None, OWN, FOLLOWED),
    (None, BESIDE, 0, FOLLOWED),
    pytest.param(None, None, OWN - 1, FOLLOWED,
                 marks=pytest.mark.skipif(OWN < 2, reason="one CPU: none to leave free")),
    (None, None, OWN, NONE_FREE),
    (None, None, 0, NONE_FREE)])
def test_record_says_how_the_trace_was_written(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], follow: bool | None, cpus: list[int] | None,
        threads: int, how: str) -> None:
    """--no-follow, --follow, and neither: a follower where the target leaves the recorder a
    CPU (pinned beside it, or computing on fewer threads than the recorder's CPUs), none where
    it may compute on all of the recorder's (`cpus` None) or its threads are not known (0)."""
    monkeypatch.setattr(record_module, "record", _fake_record(rec, cpus=cpus, threads=threads))
    output = tmp_path / "run.pftrace"
    assert _record(output, follow) == 0
    said = capsys.readouterr().out
    assert re.search(how, said), said
    assert sorted(tmp_path.iterdir()) == [output]


RECORDER = """
import sys, time
from pathlib import Path
from profinfer_perfetto.capture.spill import Spill
from profinfer_perfetto.encode.follow import Follower
from tests import synthetic
rec = synthetic.decode_run(3, steps=10)
spill = Spill(Path(sys.argv[1]), len(rec.run.counters))
follower = Follower.start(spill.folder, len(rec.run.counters))
for drained in synthetic.drains(rec, 7):
    spill(drained, rec.run)
spill.finish()
print(follower.proc.pid, flush=True)
time.sleep(600)
"""


def test_the_follower_dies_with_its_recorder_and_recover_writes_the_trace(
        tmp_path: Path) -> None:
    """A recorder killed (SIGKILL) takes its follower with it; what the follower wrote stays in
    the records folder, where it keeps no OUTPUT.part from `recover`, which writes the trace
    from the records and removes the folder."""
    output = tmp_path / "run.pftrace"
    recorder = subprocess.Popen([sys.executable, "-c", RECORDER, str(spill_path(output))],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert recorder.stdout is not None
        pid = int(recorder.stdout.readline())
        wait_until(lambda: _written(spill_path(output)), "the follower wrote no chunk")
    finally:
        recorder.kill()
        recorder.wait()
    wait_until(lambda: process_state(pid) in ("Z", None), "the follower outlived its recorder")
    assert RecoverCommand(output).run() == 0
    assert sorted(tmp_path.iterdir()) == [output]


def test_a_growing_folder_is_read_from_where_the_last_look_ended(
        rec: Recording, spill: Spill) -> None:
    """read_drains(after=N) of a folder a Spill still writes: the drains after the first N,
    record for record."""
    drains = synthetic.drains(rec, DRAINS)
    for drained in drains[:3]:
        assert spill(drained, rec.run) is None
    wait_until(lambda: spill.written == 3, "the spill wrote nothing")
    assert len(list(read_drains(spill.folder, spill.dtypes))) == 3
    for drained in drains[3:]:
        assert spill(drained, rec.run) is None
    assert spill.finish() is None
    back = list(read_drains(spill.folder, spill.dtypes, 3))
    assert [d.events.tobytes() for d in back] == [d.events.tobytes() for d in drains[3:]]
    assert [d.nodes.tobytes() for d in back] == [d.nodes.tobytes() for d in drains[3:]]


def test_few_events_wait_for_take_s_and_many_are_taken_at_once(
        rec: Recording, spill: Spill, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow target's drains (fewer than TAKE_EVENTS events) are taken once TAKE_S passed since
    the last take, as each take reads the folder anew; TAKE_EVENTS events at the next look.
    The clock is not waited for: the last take is set an hour ahead or TAKE_S back."""
    following = follow.Following(spill.folder, spill.dtypes)
    try:
        _spilled(spill, rec, rec.run, drains=2)
        wait_until(lambda: spill.written == 2, "the spill wrote nothing")
        following.taken = time.monotonic() + 3600  # as if it had just taken some
        following.follow()
        assert following.read == 0
        following.taken = time.monotonic() - follow.TAKE_S
        following.follow()
        assert following.read == 2
        for drained in synthetic.drains(rec, DRAINS)[2:5]:
            assert spill(drained, rec.run) is None
        wait_until(lambda: spill.written == 5, "the spill wrote nothing")
        following.taken = time.monotonic() + 3600
        monkeypatch.setattr(follow, "TAKE_EVENTS", 1)
        following.follow()
        assert following.read == 5
    finally:
        following.stream.abandon()


@pytest.mark.parametrize("other", [{"stream": True}, {"json": True}, {"sched": True},
                                   {"aggregate": True}, {"max_size": "1M"}])
def test_follow_where_the_trace_is_written_otherwise_is_bad_input(other: dict[str, object]
                                                                   ) -> None:
    with pytest.raises(ProfinferError, match=r"^--follow writes the trace from the records"):
        RecordCommand.cli(["llama-cli"], follow=True, **other)  # type: ignore[arg-type]
