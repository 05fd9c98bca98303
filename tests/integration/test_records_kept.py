"""A real recorder keeps its records (OUTPUT.records) until a whole trace is written from them:
a trace it cannot write leaves them for `recover`, and `recover` refuses the folder of a
recorder still running (it once deleted it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.capture.spill import RUN_FILE, spill_path
from profinfer_perfetto.commands.recover import RECOVERED
from profinfer_perfetto.encode.stream import part_path
from tests.conftest import Cli
from tests.integration.test_record import start_recorder, wait_for_a_token
from tests.integration.test_stream import generation

pytestmark = pytest.mark.root


@pytest.mark.parametrize(("options", "blocked", "said"), [
    ((), part_path, "writes its trace"),  # written after the run, to OUTPUT.part
    (("--follow",), Path, "cannot write"),  # the follower's trace cannot take OUTPUT's name
])
def test_a_trace_that_cannot_be_written_leaves_the_records_for_recover(
        cli: Cli, tmp_path: Path, options: tuple[str, ...], blocked: Callable[[Path], Path],
        said: str) -> None:
    """A folder takes the path the trace goes to while the capture runs: writing it then
    fails, and the records stay for `recover` (with --follow, the follower's trace among them,
    which `recover` removes with them)."""
    out = tmp_path / "run.pftrace"
    recorder, pid = start_recorder(out, *options, "--", *generation("tiny-llama", -1))
    try:
        wait_for_a_token(recorder)
        blocked(out).mkdir()
        recorder.send_signal(signal.SIGINT)
        _, stderr = recorder.communicate()
    finally:
        _end(recorder, pid)
    assert recorder.returncode == 2, stderr
    assert said in stderr and f"`profinfer-perfetto recover {out}` writes its trace" in stderr
    assert (spill_path(out) / RUN_FILE).is_file()
    blocked(out).rmdir()
    recovered = cli("recover", out)
    assert recovered.returncode == 0, recovered.stderr
    assert f": {RECOVERED}" in recovered.stdout
    assert sorted(tmp_path.iterdir()) == [out]


def test_recover_refuses_the_records_of_a_recorder_still_running(
        cli: Cli, tmp_path: Path) -> None:
    """The recorder holds its folder's lock: `recover` says so and leaves the folder, and the
    recorder, stopped by Ctrl-C, writes its trace from it."""
    out = tmp_path / "run.pftrace"
    recorder, pid = start_recorder(out, "--", *generation("tiny-llama", -1))
    try:
        wait_for_a_token(recorder)
        refused = cli("recover", out)
        assert refused.returncode == 2, refused.stderr
        assert "a recorder is still writing" in refused.stderr
        assert spill_path(out).is_dir() and not out.exists()
        recorder.send_signal(signal.SIGINT)
        stdout, stderr = recorder.communicate()
    finally:
        _end(recorder, pid)
    assert recorder.returncode == 0, stderr
    assert "recorder stopped by SIGINT" in stdout
    assert sorted(tmp_path.iterdir()) == [out]


def _end(recorder: subprocess.Popen[str], pid: int) -> None:
    """Whatever failed, no recorder nor target is left running."""
    if recorder.poll() is None:
        recorder.kill()
        recorder.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
