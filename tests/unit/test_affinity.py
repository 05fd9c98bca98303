"""The recorder's threads kept off the target's CPUs (capture/affinity.py), on this process's own
threads (setting one's own affinity needs no root)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator

import pytest

from profinfer_perfetto.capture.affinity import KeptOff, elsewhere, leaves_a_cpu, target_cpus
from profinfer_perfetto.capture.events import Kind, compute_threads
from profinfer_perfetto.capture.process import threads
from tests import synthetic


def _affinities() -> set[frozenset[int]]:
    """The CPU sets this process's threads may run on, as /proc lists them now (a thread that
    ended since it was listed aside: a thread Python has just joined can still be listed for a
    moment, as one was in a fresh-clone run, 2026-12-06)."""
    sets: set[frozenset[int]] = set()
    for tid in threads("self"):
        try:
            sets.add(frozenset(os.sched_getaffinity(tid)))
        except ProcessLookupError:
            continue
    return sets


@pytest.fixture
def own() -> set[int]:
    """This process's CPUs, where it has two or more to move among."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("one CPU: there is nowhere to move to")
    return cpus


@pytest.fixture
def helper() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the recorder's own (a follower, here a child that sleeps)."""
    child = subprocess.Popen(["sleep", "60"])
    yield child
    child.kill()
    child.wait()


def test_the_recorder_moves_only_where_it_has_other_cpus() -> None:
    assert elsewhere({0, 1, 2, 3}, {3}) == {0, 1, 2}
    assert elsewhere({0, 1}, {0, 1}) is None  # the target may use them all: nowhere to go
    assert elsewhere({0, 1}, {0, 1, 2}) is None
    assert elsewhere({0, 1}, {5}) is None  # the target is elsewhere already
    assert elsewhere({2, 3}, {1, 2}) == {3}


def test_every_thread_moves_at_a_pinned_target_s_look_and_comes_back(own: set[int]) -> None:
    target = [max(own)]
    before = threading.Event()
    started = threading.Thread(target=before.wait, daemon=True)  # a thread from before
    started.start()
    kept = KeptOff()
    try:
        kept.look(target)
        assert _affinities() == {frozenset(own - set(target))}
        seen: list[set[int]] = []
        new = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        new.start()  # a thread started meanwhile inherits the move
        new.join()
        assert seen == [own - set(target)]
    finally:
        kept.restore()
        before.set()
        started.join()
    assert _affinities() == {frozenset(own)}
    note = kept.note()
    assert note is not None and f"CPU {target[0]})" in note and "into the capture" not in note


def test_a_helper_process_moves_with_the_recorder_and_comes_back(
        own: set[int], helper: subprocess.Popen[bytes]) -> None:
    """A follower keeps off the target's CPUs as the recorder's threads do; a helper that is
    gone is passed over."""
    target = [max(own)]
    gone = subprocess.Popen(["true"])
    gone.wait()
    kept = KeptOff(lambda cpus, threads: [helper.pid, gone.pid])
    try:
        kept.look(target)
        assert os.sched_getaffinity(helper.pid) == own - set(target)
    finally:
        kept.restore()
    assert os.sched_getaffinity(helper.pid) == own


def test_a_target_that_pins_its_threads_later_moves_the_recorder_then(
        own: set[int], helper: subprocess.Popen[bytes]) -> None:
    """llama.cpp's --cpu-mask pins its compute threads once it runs: the recorder moves at the
    drain that sees it, and its helpers are told each change of the target's CPUs."""
    told: list[list[int]] = []

    def helpers(cpus: list[int], threads: int) -> list[int]:
        told.append(cpus)
        return [helper.pid] if cpus != sorted(own) else []

    kept = KeptOff(helpers)
    pinned = [max(own)]
    try:
        kept.look(sorted(own))
        assert os.sched_getaffinity(0) == own and kept.note() is None
        kept.look(sorted(own))
        kept.look([])  # the target is gone: nothing changes
        kept.look(pinned)
        assert os.sched_getaffinity(0) == own - set(pinned)
        assert os.sched_getaffinity(helper.pid) == own - set(pinned)
        kept.look(pinned)
    finally:
        kept.restore()
    assert told == [sorted(own), pinned]
    assert _affinities() == {frozenset(own)} and os.sched_getaffinity(helper.pid) == own
    note = kept.note()
    assert note is not None and "s into the capture (when the target pinned its threads)" in note


def test_a_cpu_is_left_where_the_target_is_pinned_off_one_or_computes_on_fewer(
        own: set[int]) -> None:
    """leaves_a_cpu: pinned off one of the recorder's CPUs, or fewer compute threads than the
    CPUs it shares with the recorder; not while its threads are not known (0) or as many."""
    every = sorted(own)
    assert leaves_a_cpu(every[1:], 0) and leaves_a_cpu(every[1:], len(own))
    assert leaves_a_cpu(every, 1) and leaves_a_cpu(every, len(own) - 1)
    assert not leaves_a_cpu(every, 0)  # no graph yet: its threads are not known
    assert not leaves_a_cpu(every, len(own)) and not leaves_a_cpu(every, len(own) + 2)
    beyond = max(own) + 1  # a CPU the recorder may not use leaves it none
    assert not leaves_a_cpu([*every, beyond], len(own))


def test_a_target_s_compute_threads_are_its_cpu_graphs_own_count() -> None:
    """The most threads its CPU graphs said (the synthetic runs' graphs: 2), not a GPU split's
    (one thread, the caller's); 0 where no graph began."""
    assert compute_threads(synthetic.recording().events) == 2
    assert compute_threads(synthetic.decode_run(1, steps=2).events) == 2
    assert compute_threads(synthetic.vulkan_step().events) == 0
    events = synthetic.recording().events
    assert compute_threads(events[events["kind"] != Kind.GRAPH_BEGIN]) == 0


def test_helpers_are_told_when_the_target_s_compute_threads_become_known(own: set[int]) -> None:
    """The threads come with the target's first graph, its CPUs unchanged: the helpers are told
    again (a follower is wanted from then on), and not while neither changes."""
    told: list[tuple[list[int], int]] = []

    def helpers(cpus: list[int], threads: int) -> list[int]:
        told.append((cpus, threads))
        return []

    kept = KeptOff(helpers)
    try:
        kept.look(sorted(own))
        kept.look(sorted(own), 0)
        kept.look(sorted(own), 1)
        kept.look(sorted(own), 1)
    finally:
        kept.restore()
    assert told == [(sorted(own), 0), (sorted(own), 1)]
    assert kept.note() is None and os.sched_getaffinity(0) == own


def test_no_move_where_the_target_may_use_every_cpu() -> None:
    own = os.sched_getaffinity(0)
    kept = KeptOff()
    kept.look(sorted(own))
    assert kept.note() is None and os.sched_getaffinity(0) == own
    kept.restore()


def test_the_target_s_cpus_are_those_of_its_threads_that_ran_ops(own: set[int]) -> None:
    """A pinned compute thread beside threads on every CPU (llama.cpp's log thread): its CPUs;
    where no thread that ran ops is left, every thread's."""
    assert target_cpus(os.getpid()) == sorted(set().union(*_affinities()))
    ready, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def compute() -> None:
        os.sched_setaffinity(0, {max(own)})
        tids.append(threading.get_native_id())
        ready.set()
        done.wait()

    worker = threading.Thread(target=compute)
    worker.start()
    ready.wait()
    try:
        assert target_cpus(os.getpid(), set(tids)) == [max(own)]
        assert target_cpus(os.getpid(), {-1}) == sorted(own)  # none of them is there
    finally:
        done.set()
        worker.join()
