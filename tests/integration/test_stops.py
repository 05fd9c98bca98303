"""What `record` leaves of the processes it stops and launches (docs/signals.md): every process
it stopped is resumed or, the launched command being ended, killed; nothing is left stopped; a
launched command is ended, never left running unprofiled, whatever fails and whatever signal
comes, in every phase.

Several tests launch WRAPPER, which runs `llama.cpp | tee LOG` the way a shell does, but holds
the recorder itself stopped while both start: the recorder then reads both stops in one batch,
llama.cpp's first (a static build, whose runtime is found at its exec), which is the case that
used to leave the tee stopped. It writes both PIDs to PIDS before it lets the recorder go on.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from profinfer_perfetto.analysis import target
from profinfer_perfetto.capture.recorder import RecordRequest, plan, record
from profinfer_perfetto.capture.watch import process_state
from tests import trace_reader
from tests.integration.test_launch import PROMPT, completion
from tests.integration.test_record import record_slice, start_recorder

pytestmark = pytest.mark.root

WRAPPER = r'''
import os, signal, sys

log, pids, sig, command = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]


def stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2] == "T"


def spawn(argv, fd, to):
    pid = os.fork()
    if pid == 0:
        os.dup2(fd, to)
        os.execvp(argv[0], argv)
    while not stopped(pid):  # by the watch program, at its exec
        pass
    return pid


recorder = os.getppid()
os.kill(recorder, signal.SIGSTOP)
read, write = os.pipe()
llama = spawn(command, write, 1)
tee = spawn(["tee", log], read, 0)
os.close(read)
os.close(write)
with open(pids, "w") as f:
    f.write(f"{llama} {tee}")
if sig:
    os.kill(recorder, sig)
os.kill(recorder, signal.SIGCONT)
status = os.waitpid(llama, 0)[1]
if stopped(tee):
    os.kill(tee, signal.SIGKILL)
    sys.exit("the tee was left stopped")
os.waitpid(tee, 0)
sys.exit(os.waitstatus_to_exitcode(status))
'''


# The CLI with SIGINT, SIGTERM and SIGHUP at their defaults even where the test runner ignores
# them (a background job, nohup): a child inherits an ignored signal and the CLI leaves it so.
RECORDER = (sys.executable, "-c", "import signal\n"
            "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
            "    signal.signal(s, signal.SIG_DFL)\n"
            "from profinfer_perfetto.cli import main\n"
            "main()", "record")


def run_recorder(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RECORDER, *map(str, args)], capture_output=True, text=True,
                          errors="replace", timeout=240, stdin=subprocess.DEVNULL, check=False)


def wrapped(tmp_path: Path, sig: int = 0) -> list[str]:
    """The command that runs a static llama.cpp | tee tmp_path/log through WRAPPER, which sends
    `sig` (if any) to the recorder while both processes are stopped."""
    script = tmp_path / "wrapper.py"
    script.write_text(WRAPPER)
    return [sys.executable, str(script), str(tmp_path / "log"), str(tmp_path / "pids"),
            str(sig), *completion(build="static")]


def wrapped_pids(tmp_path: Path) -> tuple[int, int]:
    llama, tee = (int(p) for p in (tmp_path / "pids").read_text().split())
    return llama, tee


def ended(pid: int) -> bool:
    return process_state(pid) in (None, "Z")


@pytest.fixture
def leftovers() -> Iterator[list[int]]:
    """PIDs a test started through the recorder, killed at its end if a failure left them."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if not ended(pid):
            os.kill(pid, signal.SIGKILL)


def test_every_process_of_a_batch_of_stops_is_resumed(tmp_path: Path,
                                                      leftovers: list[int]) -> None:
    out = tmp_path / "run.pftrace"
    result = run_recorder("-o", out, "--", *wrapped(tmp_path))
    leftovers.extend(wrapped_pids(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "the tee was left stopped" not in result.stderr
    assert record_slice(trace_reader.read(out)).args["status"] == "complete"
    assert PROMPT.encode() in (tmp_path / "log").read_bytes()


def test_a_setup_failure_after_the_stop_ends_the_target(tmp_path: Path,
                                                        leftovers: list[int]) -> None:
    """An op name ggml does not know is found out once the runtime is found, the target
    stopped: the target is killed, the rest of the command resumed, nothing left stopped."""
    result = run_recorder("--ops", "NO_SUCH_OP", "-o", tmp_path / "run.pftrace", "--",
                          *wrapped(tmp_path))
    llama, tee = wrapped_pids(tmp_path)
    leftovers.extend((llama, tee))
    assert result.returncode == 2, result.stderr
    assert "NO_SUCH_OP is no op of ggml" in result.stderr
    assert ended(llama)
    assert process_state(tee) != "T"


def test_a_malformed_elf_after_the_stop_ends_the_target(tmp_path: Path, leftovers: list[int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only a ProfinferError: whatever the probe plan raises once the target is stopped
    (struct.error from a file that is not the ELF it claims to be, here) ends it."""
    def malformed(objects: list[Path], inner_waits: bool = False) -> None:
        raise struct.error("unpack requires a buffer of 64 bytes")

    monkeypatch.setattr(target, "plan_probes", malformed)
    request = RecordRequest(command=wrapped(tmp_path))
    with pytest.raises(struct.error):
        record(request, plan(request))
    llama, tee = wrapped_pids(tmp_path)
    leftovers.extend((llama, tee))
    assert ended(llama)
    assert process_state(tee) != "T"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda sig: signal.Signals(sig).name)
def test_a_signal_while_watching_leaves_nothing_stopped(sig: int, tmp_path: Path,
                                                       leftovers: list[int]) -> None:
    """The signal comes while the recorder has two stopped processes to look at: it ends the
    launched command (those two included) and exits as on Ctrl-C."""
    result = run_recorder("-o", tmp_path / "run.pftrace", "--", *wrapped(tmp_path, sig))
    llama, tee = wrapped_pids(tmp_path)
    leftovers.extend((llama, tee))
    assert result.returncode == 130, result.stderr
    assert ended(llama) and ended(tee)
    assert not (tmp_path / "run.pftrace").exists()


def _held_child(recorder: subprocess.Popen[str], command: list[str]) -> int:
    """The PID of the `command` the recorder launched (held before its exec: `python -c HOLD
    FD COMMAND...`), once there. Not any child: the recorder runs ldd on the command's files
    before it launches it (a fresh clone once took ldd for the command, and found it a zombie
    after the recorder), and a child it forks has, until its exec, the recorder's own
    arguments, which begin `python -c` too (RECORDER)."""
    children = Path(f"/proc/{recorder.pid}/task/{recorder.pid}/children")
    while not (held := [pid for pid in children.read_text().split()
                        if _holds(_argv(pid), command)]):
        assert recorder.poll() is None, "the recorder ended before it launched the command"
        time.sleep(0.01)
    (pid,) = held
    return int(pid)


def _holds(argv: list[str], command: list[str]) -> bool:
    """Whether a process's arguments (`_argv`'s, with the empty one after the last NUL) are the
    recorder's hold of `command`: `python -c HOLD FD COMMAND...`."""
    return argv[1:2] == ["-c"] and argv[4:-1] == command


def _argv(pid: str) -> list[str]:
    """A process's arguments ([] once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_sigterm_while_the_probes_compile_ends_the_launched_target(
        tmp_path: Path, leftovers: list[int]) -> None:
    """The command is launched held before its exec, then BCC compiles the probes (seconds):
    SIGTERM meanwhile ends the command before it ran, and no trace is written."""
    out = tmp_path / "run.pftrace"
    command = completion()
    recorder = subprocess.Popen(
        [*RECORDER, "-o", str(out), "--", *command], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, errors="replace")
    child = _held_child(recorder, command)
    leftovers.append(child)
    recorder.send_signal(signal.SIGTERM)
    stdout, stderr = recorder.communicate(timeout=120)
    assert recorder.returncode == 130, stderr
    assert process_state(child) is None  # ended, and reaped by the recorder
    assert PROMPT not in stdout  # it never ran
    assert not out.exists()


def test_a_sink_that_refuses_ends_the_launched_target(leftovers: list[int]) -> None:
    """The capture stops on the sink's word (a full disk, say): the launched command is ended
    and reaped before record() returns, not left running as root."""
    request = RecordRequest(command=completion("--ignore-eos", "--context-shift", "-c", "256",
                                               tokens=-1))
    recording = record(request, plan(request), leftovers.append,
                       lambda drained, run: "the disk is full")
    assert recording.run.status == "capture stopped: the disk is full"
    (pid,) = leftovers
    assert process_state(pid) is None


def test_a_target_that_ignores_the_signal_passed_on_is_killed(tmp_path: Path,
                                                              leftovers: list[int]) -> None:
    """SIGTERM to the recorder while it captures goes on to the target, which ignores it here:
    SIGKILL follows (END_WAIT_S later), and the trace is written (of the prompt's step only:
    the steps of those seconds would only make it longer to write)."""
    out = tmp_path / "run.pftrace"
    endless = completion("--ignore-eos", "--context-shift", "-c", "256", tokens=-1)
    recorder, pid = start_recorder(out, "--tokens", "0:1", "--", "sh", "-c",
                                   'trap "" TERM; exec "$@"', "sh", *endless)
    leftovers.extend((pid, recorder.pid))
    recorder.send_signal(signal.SIGTERM)
    _, stderr = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, stderr
    assert process_state(pid) is None
    rec = record_slice(trace_reader.read(out))
    assert rec.args["status"] == "recorder stopped by SIGTERM"
