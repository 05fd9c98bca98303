"""What of capture/watch.py runs without root: a process's state from /proc, and the signals
that resume or end a process that may be gone. (The watch program itself: test_stops.py and
test_launch.py, as root.)"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from profinfer_perfetto.capture import recorder
from profinfer_perfetto.capture.watch import missed_stops, process_state, resume, send


@contextmanager
def _running(program: str = "cat") -> Iterator[subprocess.Popen[bytes]]:
    """`cat` (under another name, if given), once it runs: it has echoed a line back."""
    child = subprocess.Popen([program], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdin.write(b"up\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"up\n"
        yield child
    finally:
        child.kill()
        child.wait()


def test_the_states_of_a_process_through_its_life() -> None:
    """Sleeping, stopped, resumed, a zombie, reaped: each state as the kernel reports it once
    waitpid says it was reached."""
    with _running() as child:
        os.kill(child.pid, signal.SIGSTOP)
        os.waitpid(child.pid, os.WUNTRACED)
        assert process_state(child.pid) == "T"
        resume(child.pid)
        os.waitpid(child.pid, os.WCONTINUED)
        assert process_state(child.pid) in ("S", "R")
        send(child.pid, signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert process_state(child.pid) == "Z"
    assert process_state(child.pid) is None


def test_a_name_with_parentheses_and_a_state_letter(tmp_path: Path) -> None:
    """The state follows the name's closing parenthesis, the last in /proc/PID/stat: a name
    that holds `) T (` is not read as a state."""
    program = tmp_path / "a) T (b"
    program.symlink_to("/bin/cat")
    with _running(str(program)) as child:
        assert Path(f"/proc/{child.pid}/comm").read_text().strip() == program.name
        assert process_state(child.pid) in ("S", "R")


def test_signals_to_a_process_that_is_gone_are_dropped() -> None:
    with _running() as child:
        pass
    send(child.pid, signal.SIGKILL)
    resume(child.pid)


def test_a_found_process_that_its_stop_did_not_hold_is_stopped_and_said() -> None:
    """The recorder holds the process it found: one its probe stopped stays as it is (no
    note); one that runs on (its stop did not hold) is stopped by the recorder, and the run's
    notes say so."""
    with _running() as child:
        os.kill(child.pid, signal.SIGSTOP)
        assert recorder._hold(child.pid, "cat") is None
        resume(child.pid)
        deadline = time.monotonic() + 60  # a guard against a hang, not a timing
        while process_state(child.pid) == "T":
            assert time.monotonic() < deadline, "SIGCONT did not resume it"
        note = recorder._hold(child.pid, "cat")
        assert note is not None and "did not hold" in note
        assert process_state(child.pid) == "T"


def test_the_stops_the_watch_program_missed_are_said() -> None:
    assert missed_stops(0, 0, 0) is None
    assert missed_stops(2, 0, -errno.EBUSY) == (
        "the watch program missed stops of the launched command: 2 refused by the kernel "
        "(Device or resource busy)")
    assert missed_stops(1, 3, -errno.EAGAIN) == (
        "the watch program missed stops of the launched command: 1 refused by the kernel "
        "(Resource temporarily unavailable), 3 lost to a full ring")


def test_a_command_whose_runtime_was_not_found_is_told_why() -> None:
    assert recorder._not_loaded("sh", "exit 0", 30, None) == (
        "sh ended (exit 0) without loading the ggml runtime: is it a llama.cpp (ggml) program?")
    assert recorder._not_loaded("sh", None, 30, "the watch program missed stops") == (
        "sh did not load the ggml runtime in its first 30 s (the watch program missed stops) "
        "(use --duration to wait longer)")
