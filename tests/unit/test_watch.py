"""What of capture/watch.py runs without root: a process's state from /proc, and the signals
that resume or end a process that may be gone. (The watch program itself: test_stops.py and
test_launch.py, as root.)"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from profinfer_perfetto.capture import recorder
from profinfer_perfetto.capture.watch import missed_stops, process_state, resume, send
from tests.waiting import wait_until


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
        wait_until(lambda: process_state(child.pid) != "T", "SIGCONT did not resume it")
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


def test_a_target_gone_before_its_probes_were_attached_is_said_with_how_it_ended() -> None:
    """The kernel refuses probes for a process that is gone; the recorder says which process
    ended and, where it is the launched command's own, how."""
    launched = recorder._Launched(["sleep", "60"])
    os.kill(launched.proc.pid, signal.SIGKILL)
    launched.proc.wait()
    launched._close_go(b"s")  # the pipe's end, closed
    assert recorder._gone(launched.proc.pid, launched) == (
        f"sleep (pid {launched.proc.pid}) ended (killed by SIGKILL) before its probes were "
        "attached: nothing recorded")
    held = recorder._Launched(["true"])
    held._close_go(b"s")  # held before its exec, it exits with 1
    held.proc.wait()
    assert recorder._gone(held.proc.pid, held) == (
        f"true (pid {held.proc.pid}) ended (exited with code 1) before its probes were "
        "attached: nothing recorded")
    assert recorder._gone(held.proc.pid, None) == (
        f"the process (pid {held.proc.pid}) ended before its probes were attached: nothing "
        "recorded")


# The recorder's part: launch a command held before its exec, stop it as the watch program would,
# say both PIDs and whether it is in a terminal's foreground (never: its session is new), and
# wait to be killed.
_RECORDER = """
import os, signal
from profinfer_perfetto.capture.recorder import _Launched, _in_terminal_foreground
launched = _Launched(["sleep", "60"])
os.kill(launched.proc.pid, signal.SIGSTOP)
os.waitpid(launched.proc.pid, os.WUNTRACED)
print(os.getpid(), launched.proc.pid, int(_in_terminal_foreground()), flush=True)
signal.pause()
"""
# The shell that started the recorder, in a group of its own: it exits when told to, leaving the
# recorder's group with no parent in another group of the session.
_SHELL = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", sys.argv[1]], process_group=0)
sys.stdin.readline()
"""


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return 0


def _ended(pid: int) -> None:
    """Waits until every thread of the process has ended: its leader is a zombie while its other
    threads still exit, and the last of them is the one that hands its children on (and so
    orphans their groups)."""
    wait_until(lambda: not recorder._runs(pid) and _threads(pid) <= 1, f"{pid} did not end")


def test_a_held_command_outlives_the_exit_of_the_shell_that_started_its_recorder() -> None:
    """Without a terminal the command goes in a process group of its own, below the recorder:
    when the shell that started the recorder exits, the recorder's group is orphaned, and the
    kernel's SIGHUP and SIGCONT for such a group (sent within the shell's exit, before it can
    be reaped) do not reach the command, still held stopped. When the recorder dies, the
    command's own group is orphaned with it stopped: the same rule ends it (nothing is left
    stopped)."""
    shell = subprocess.Popen([sys.executable, "-c", _SHELL, _RECORDER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, start_new_session=True)
    assert shell.stdin is not None and shell.stdout is not None
    recorder_pid, command, foreground = (int(w) for w in shell.stdout.readline().split())
    try:
        assert not foreground
        assert os.getpgid(command) == command != os.getpgid(recorder_pid)
        shell.stdin.close()
        shell.wait()
        assert process_state(command) == "T"
        os.kill(recorder_pid, signal.SIGKILL)
        _ended(recorder_pid)
        assert process_state(command) != "T"
        _ended(command)
    finally:
        send(recorder_pid, signal.SIGKILL)
        send(command, signal.SIGKILL)
