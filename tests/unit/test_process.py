"""Whether a process goes on: what record's after-run write chooses its way by."""

from __future__ import annotations

import os
import subprocess
import time

from profinfer_perfetto.capture import process


def test_a_running_process_goes_on() -> None:
    assert process.goes_on(os.getpid())


def test_an_exited_child_does_not_go_on_reaped_or_not() -> None:
    """A child that exited is a zombie until reaped: it does not go on, then or after."""
    child = subprocess.Popen(["true"])
    while (fields := process.stat_fields(child.pid)) is not None and fields[0] != "Z":
        time.sleep(0.01)  # until it has exited, however loaded the machine
    assert not process.goes_on(child.pid)
    child.wait()
    assert not process.goes_on(child.pid)
