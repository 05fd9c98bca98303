"""The recorder's own threads kept off the target's CPUs while it runs.

A target pinned to some CPUs (`taskset -c 3 llama-cli ...`, as a CI gate pins it) should not
share them with the recorder: its drains, its spill writes and (streamed) its trace writer would
otherwise take a few ms of the target's CPU now and then, which `--sched` shows as the
recorder's own thread stalling a decode step, and which a check reads as interference
(docs/ab.md). Where the recorder may run elsewhere, its threads (and those it starts meanwhile)
move to the CPUs the target may not use, and back once the capture ends, so the trace is
written on every CPU after the run; so do its helper processes' (`--follow`'s follower, which
at idle priority still took the pinned target's CPU whenever it blocked for a moment).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

from profinfer_perfetto.capture.process import threads


def target_cpus(pid: int) -> list[int]:
    """The CPUs any thread of `pid` may run on."""
    cpus: set[int] = set()
    for tid in threads(pid):
        try:
            cpus |= os.sched_getaffinity(tid)
        except OSError:  # the thread ended
            continue
    return sorted(cpus)


def free_of(target: Iterable[int]) -> set[int]:
    """The CPUs the recorder may run on and a target allowed on `target` may not."""
    return os.sched_getaffinity(0) - set(target)


def _move_all(pid: int | str, cpus: set[int]) -> None:
    """Every thread of process `pid` ("self": this one) allowed on `cpus` only (a thread that
    just ended, or a process, aside)."""
    for tid in threads(pid):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


def _affinity(pid: int) -> set[int] | None:
    """The CPUs process `pid` may run on (None once it is gone)."""
    try:
        return os.sched_getaffinity(pid)
    except OSError:
        return None


def elsewhere(own: set[int], target: set[int]) -> set[int] | None:
    """The CPUs the recorder should keep to, given its own and the target's: its own less the
    target's; None where that leaves nothing or changes nothing."""
    rest = own - target
    return rest if rest and rest != own else None


def _listed(cpus: set[int]) -> str:
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ", ".join(map(str, sorted(cpus)))


@contextlib.contextmanager
def kept_off(target: list[int], helpers: Iterable[int] = ()) -> Iterator[str | None]:
    """While the block runs, the recorder's threads, and those of its `helpers` (processes of
    its own), kept off the `target` CPUs where it has others; yields a note saying so, or None
    where it does not move. Each goes back to the CPUs it had."""
    own = os.sched_getaffinity(0)
    rest = elsewhere(own, set(target))
    if rest is None:
        yield None
        return
    had = {pid: cpus for pid in helpers if (cpus := _affinity(pid)) is not None}
    _move_all("self", rest)
    for pid in had:
        _move_all(pid, rest)
    try:
        yield (f"the recorder's threads kept off the target's CPUs ({_listed(set(target))}) "
               f"while it ran, on {_listed(rest)}")
    finally:
        _move_all("self", own)
        for pid, cpus in had.items():
            _move_all(pid, cpus)
