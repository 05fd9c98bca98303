"""SIGINT, SIGTERM and SIGHUP: every command ends on each of them as on Ctrl-C (docs/signals.md).

Python raises KeyboardInterrupt for SIGINT only: a CI cancel (SIGTERM) or a dropped ssh session
(SIGHUP) would end the process where it stands, with no `finally` run (processes left stopped, a
launched command left running, temporary files left behind). Within `handled()` each of the
three raises `Interrupted`, a KeyboardInterrupt, so every `finally` and `except BaseException`
that puts things back runs. A block that must run whole (putting stopped processes back) runs
under `deferred()`: a signal meanwhile is raised once it ends. The capture, which ends on a
signal its own way (it ends the target and writes what it saw), runs under `noted()`: the
signal is noted, nothing is raised. A signal the command was started with ignored (`nohup`)
stays ignored.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP came to the command."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Note:
    """The last signal that came within `noted()`, if one did."""

    signal: int | None = None


_noting: Note | None = None


def _handle(signum: int, frame: FrameType | None) -> None:
    if _noting is not None:
        _noting.signal = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise Interrupted (the handlers before it
    come back after it)."""
    previous = {sig: signal.signal(sig, _handle) for sig in SIGNALS
                if signal.getsignal(sig) != signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def noted() -> Iterator[Note]:
    """Within the block a signal raises nothing: it is noted, for the block to end on."""
    global _noting
    outer, note = _noting, Note()
    _noting = note
    try:
        yield note
    finally:
        _noting = outer


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run the block whole: a signal meanwhile is raised once it ends (within `noted()`, it is
    noted there)."""
    outer = _noting
    with noted() as note:
        yield
    if note.signal is None:
        return
    if outer is not None:
        outer.signal = note.signal
    else:
        raise Interrupted(note.signal)
