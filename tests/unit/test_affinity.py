"""The recorder's threads kept off the target's CPUs (capture/affinity.py), on this process's own
threads (setting one's own affinity needs no root)."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from profinfer_perfetto.capture.affinity import elsewhere, kept_off, target_cpus
from profinfer_perfetto.capture.process import threads


def _affinities() -> set[frozenset[int]]:
    """The CPU sets this process's threads may run on, as /proc lists them now."""
    return {frozenset(os.sched_getaffinity(tid)) for tid in threads("self")}


def test_the_recorder_moves_only_where_it_has_other_cpus() -> None:
    assert elsewhere({0, 1, 2, 3}, {3}) == {0, 1, 2}
    assert elsewhere({0, 1}, {0, 1}) is None  # the target may use them all: nowhere to go
    assert elsewhere({0, 1}, {0, 1, 2}) is None
    assert elsewhere({0, 1}, {5}) is None  # the target is elsewhere already
    assert elsewhere({2, 3}, {1, 2}) == {3}


def test_every_thread_moves_while_the_block_runs_and_comes_back() -> None:
    own = os.sched_getaffinity(0)
    if len(own) < 2:
        pytest.skip("one CPU: there is nowhere to move to")
    target = [max(own)]
    before = threading.Event()
    started = threading.Thread(target=before.wait, daemon=True)  # a thread from before
    started.start()
    try:
        with kept_off(target) as note:
            assert note is not None and f"CPU {target[0]})" in note
            assert _affinities() == {frozenset(own - set(target))}
            seen: list[set[int]] = []
            new = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
            new.start()  # a thread started meanwhile inherits the move
            new.join()
            assert seen == [own - set(target)]
        assert _affinities() == {frozenset(own)}
    finally:
        before.set()
        started.join()


def test_a_helper_process_moves_with_the_recorder_and_comes_back() -> None:
    """--follow's follower (here a child that sleeps) keeps off the target's CPUs as the
    recorder's threads do; a helper that is gone is passed over."""
    own = os.sched_getaffinity(0)
    if len(own) < 2:
        pytest.skip("one CPU: there is nowhere to move to")
    target = [max(own)]
    gone = subprocess.Popen(["true"])
    gone.wait()
    helper = subprocess.Popen(["sleep", "60"])
    try:
        with kept_off(target, [helper.pid, gone.pid]) as note:
            assert note is not None
            assert os.sched_getaffinity(helper.pid) == own - set(target)
        assert os.sched_getaffinity(helper.pid) == own
    finally:
        helper.kill()
        helper.wait()


def test_no_move_where_the_target_may_use_every_cpu() -> None:
    own = os.sched_getaffinity(0)
    with kept_off(sorted(own)) as note:
        assert note is None
        assert os.sched_getaffinity(0) == own


def test_the_target_s_cpus_are_its_threads_affinity() -> None:
    assert target_cpus(os.getpid()) == sorted(set().union(*_affinities()))
