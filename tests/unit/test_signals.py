"""SIGINT, SIGTERM and SIGHUP end a command as Ctrl-C does (profinfer_perfetto/signals.py, run by
cli.main), and a launched command held before its exec never runs if the recorder is gone first."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from profinfer_perfetto import signals
from profinfer_perfetto.capture.recorder import _launch_paused
from tests.unit.test_open import finished, free_port, serving


@pytest.fixture(autouse=True)
def _not_ignored() -> Iterator[None]:
    """Each signal with its default disposition for the test, whatever the suite was started
    with (under nohup SIGHUP is ignored, and an ignored signal stays ignored by design)."""
    ignored = [sig for sig in signals.SIGNALS if signal.getsignal(sig) == signal.SIG_IGN]
    for sig in ignored:
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    yield
    for sig in ignored:
        signal.signal(sig, signal.SIG_IGN)


def _to_self(sig: int) -> None:
    """Send `sig` to this process and give Python a bytecode to run its handler at."""
    os.kill(os.getpid(), sig)
    signal.getsignal(sig)


@pytest.mark.parametrize("sig", signals.SIGNALS)
def test_each_signal_raises_a_keyboard_interrupt(sig: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt) as raised, signals.handled():
        _to_self(sig)
    assert isinstance(raised.value, signals.Interrupted) and raised.value.signum == sig
    assert signal.getsignal(sig) == before


def test_a_signal_started_ignored_stays_ignored() -> None:
    """As under `nohup`."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.handled():
            _to_self(signal.SIGHUP)
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_noted_raises_nothing() -> None:
    with signals.handled(), signals.noted() as note:
        _to_self(signal.SIGTERM)
        assert note.signal == signal.SIGTERM


def test_deferred_raises_once_the_block_ran_whole() -> None:
    ran = []
    with pytest.raises(signals.Interrupted), signals.handled(), signals.deferred():
        _to_self(signal.SIGHUP)
        ran.append("rest of the block")
    assert ran == ["rest of the block"]


def test_deferred_within_noted_notes_it_there() -> None:
    with signals.handled(), signals.noted() as note:
        with signals.deferred():
            _to_self(signal.SIGTERM)
        assert note.signal == signal.SIGTERM

def test_a_held_command_does_not_run_once_the_recorder_is_gone(tmp_path: Path) -> None:
    """The recorder dies before it releases the command: the held child reads the end of its
    pipe, not the go byte, and exits without running the command unprofiled."""
    ran = tmp_path / "ran"
    proc, go = _launch_paused(["touch", str(ran)])
    os.close(go)  # what the recorder's death does
    assert proc.wait(timeout=60) != 0
    assert not ran.exists()


# The CLI with SIGTERM and SIGHUP at their defaults even where the test runner ignores them (as
# under nohup): a child inherits an ignored signal, and the CLI then leaves it ignored.
LAUNCH_DEFAULTS = (sys.executable, "-c", "import signal; "
                   "signal.signal(signal.SIGTERM, signal.SIG_DFL); "
                   "signal.signal(signal.SIGHUP, signal.SIG_DFL); "
                   "from profinfer_perfetto.cli import main; main()")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP],
                         ids=lambda sig: signal.Signals(sig).name)
def test_a_command_ends_on_sigterm_and_sighup_as_on_ctrl_c(sig: int, tmp_path: Path) -> None:
    """`open`, serving until the UI fetches the trace, stands in for every command."""
    trace = tmp_path / "run.pftrace"
    trace.write_bytes(bytes(1000))
    with serving(trace, "--no-browser", "--port", str(free_port()),
                 launch=LAUNCH_DEFAULTS) as (proc, _):
        proc.send_signal(sig)
        code, _, err = finished(proc)
    assert code == 130
    assert "Traceback" not in err
