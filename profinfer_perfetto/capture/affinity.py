"""The recorder's own threads kept off the target's CPUs while it runs.

A target pinned to some CPUs (`taskset -c 3 llama-cli ...`, as a CI gate pins it) should not
share them with the recorder: its drains, its spill writes and (streamed) its trace writer would
otherwise take a few ms of the target's CPU now and then, which `--sched` shows as the
recorder's own thread stalling a decode step, and which a check reads as interference
(docs/ab.md). Where the recorder may run elsewhere, its threads (and those it starts meanwhile)
move to the CPUs the target may not use, and back once the capture ends, so the trace is
written on every CPU after the run; so do its helper processes' (`--follow`'s follower, which
at idle priority still took the pinned target's CPU whenever it blocked for a moment). The
target's CPUs are those of its threads that ran ops, read again at every drain: llama.cpp
pins its compute threads itself (`--cpu-mask`, at 2 threads or more) once it runs, and leaves
its log's thread on every CPU.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Container, Iterable, Sequence

from profinfer_perfetto.capture.process import threads


def target_cpus(pid: int, ran: Container[int] = frozenset()) -> list[int]:
    """The CPUs the threads of `pid` that ran ops (`ran`) may run on; where none of them is
    there (none ran yet, or they ended), those any of its threads may. A runtime that pins its
    compute threads itself (llama.cpp's `--cpu-mask`) leaves its others where they were (its
    log's thread, a server's HTTP threads), so the CPUs of every thread would read as all."""
    tids = threads(pid)
    return sorted(_union([tid for tid in tids if tid in ran]) or _union(tids))


def _union(tids: Iterable[int]) -> set[int]:
    """The CPUs any of the threads `tids` may run on (a thread that ended aside)."""
    cpus: set[int] = set()
    for tid in tids:
        try:
            cpus |= os.sched_getaffinity(tid)
        except OSError:  # the thread ended
            continue
    return cpus


def free_of(target: Iterable[int]) -> set[int]:
    """The CPUs the recorder may run on and a target allowed on `target` may not."""
    return os.sched_getaffinity(0) - set(target)


def leaves_a_cpu(target: Iterable[int], threads: int) -> bool:
    """Whether a target allowed on `target`, computing on `threads` threads (0: not known yet),
    leaves a CPU the recorder may run on free: one it may not use (pinned), or more of them than
    it computes on (`-t 4` on a board of 8 cores)."""
    return bool(free_of(target)) or 0 < threads < len(os.sched_getaffinity(0) & set(target))


def _move_all(pid: int | str, cpus: set[int]) -> None:
    """Every thread of process `pid` ("self": this one) allowed on `cpus` only (a thread that
    just ended, or a process, aside)."""
    for tid in threads(pid):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


def elsewhere(own: set[int], target: set[int]) -> set[int] | None:
    """The CPUs the recorder should keep to, given its own and the target's: its own less the
    target's; None where that leaves nothing or changes nothing."""
    rest = own - target
    return rest if rest and rest != own else None


def _listed(cpus: set[int]) -> str:
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ", ".join(map(str, sorted(cpus)))


class KeptOff:
    """The recorder's threads, and those of its helpers (processes of its own), kept off the
    target's CPUs as they are at each `look` (at the capture's begin, then at every drain: a
    runtime that pins its threads itself does so once it runs), where it has others; all back to
    the recorder's own CPUs at `restore`. `helpers(cpus, threads)` is told the target's CPUs and
    compute threads each time they change: the helpers' pids (a follower, started where it is
    wanted)."""

    def __init__(self, helpers: Callable[[list[int], int], Sequence[int]] | None = None
                 ) -> None:
        self.own = os.sched_getaffinity(0)
        self.helpers = helpers
        self.helper_pids: set[int] = set()
        """Moved with the recorder's threads, and back to the recorder's own CPUs with them."""
        self.target: set[int] | None = None
        self.threads = 0
        """The target's compute threads as last told (0: not known yet)."""
        self.began: float | None = None
        """When the first look was (monotonic s)."""
        self.first: tuple[set[int], set[int], float] | None = None
        """The first move: the target's CPUs, the recorder's, and how long after the first
        look (s; 0 at the first look itself)."""

    def look(self, cpus: list[int], threads: int = 0) -> None:
        """Keep off `cpus` (the target's now; none: it is gone, nothing changes), where it
        computes on `threads` threads (0: not known yet)."""
        now = time.monotonic()
        self.began = now if self.began is None else self.began
        if not cpus or (set(cpus), threads) == (self.target, self.threads):
            return
        self.target, self.threads = set(cpus), threads
        rest = elsewhere(self.own, self.target)
        self._move(rest)  # first: a helper started now is forked where this thread may run
        self.helper_pids.update(self.helpers(cpus, threads) if self.helpers else ())
        self._move(rest)  # and one that was started elsewhere goes there too
        if rest is not None and self.first is None:
            self.first = self.target, rest, now - self.began

    def _move(self, rest: set[int] | None) -> None:
        """The recorder's threads and its helpers' to `rest`, or back to their own (None)."""
        pids: list[int | str] = ["self", *self.helper_pids]
        for pid in pids:
            _move_all(pid, rest or self.own)

    def restore(self) -> None:
        self._move(None)

    def note(self) -> str | None:
        """Where the recorder kept to while the target ran, or None where it did not move."""
        if self.first is None:
            return None
        target, rest, after = self.first
        since = (f", from {after:.1f} s into the capture (when the target pinned its threads)"
                 if after else "")
        return (f"the recorder's threads kept off the target's CPUs ({_listed(target)}) while "
                f"it ran, on {_listed(rest)}{since}")
