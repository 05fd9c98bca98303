"""`profinfer-perfetto ab`: real runs recorded in pairs and checked on them.

Whether two builds pass depends on them, and whether two runs of one command pass depends on
the machine's noise (two pairs of 8 tokens, beside other work, can differ past a rule); what
holds by construction is that the same command as baseline and candidate is recorded in the
order said, checked without bad input, and has the same graph.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.check.graph import SAME
from profinfer_perfetto.commands.record import READY
from profinfer_perfetto.errors import ExitCode
from tests.conftest import TIMEOUT, Cli
from tests.integration.test_record import completion

pytestmark = pytest.mark.root


def test_the_same_command_twice_in_pairs_passes(
    cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path
) -> None:
    command = completion(llama, model("tiny-llama"), 1, n=8)
    runs = tmp_path / "ab"
    result = cli("ab", "-o", runs, "--runs", "2", "--baseline-cmd", shlex.join(command),
                 "--format", "json", "--engine", "builtin", "--", *command,
                 timeout=5 * TIMEOUT)  # four runs recorded, then checked
    assert result.returncode in (ExitCode.OK, ExitCode.REGRESSION), result.stderr
    doc = json.loads(result.stdout)  # what record says goes to stderr
    assert doc["verdicts"] and doc["graph"]["verdict"] == SAME
    traces = {p.name: p.stat().st_mtime_ns for p in runs.iterdir()}
    assert sorted(traces) == ["base-00.pftrace", "base-01.pftrace", "cand-00.pftrace",
                              "cand-01.pftrace"]
    # A then B, then B then A.
    assert (traces["base-00.pftrace"] < traces["cand-00.pftrace"]
            < traces["cand-01.pftrace"] < traces["base-01.pftrace"])


def test_a_held_run_whose_turn_never_comes_ends_its_target(
    llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path
) -> None:
    """The next run of a pair waits with its probes attached and its target held (`record
    --hold-fd`, as `ab` starts it); where `ab` ends first (the end of its socket), the target is
    ended, nothing is recorded, and the run says so."""
    output = tmp_path / "run.pftrace"
    ours, theirs = socket.socketpair()
    with theirs:
        proc = subprocess.Popen(
            [sys.executable, "-m", "profinfer_perfetto", "record", "--hold-fd",
             str(theirs.fileno()), "-o", str(output), "--",
             *completion(llama, model("tiny-llama"), 1, n=8)],
            pass_fds=[theirs.fileno()], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
    with ours:
        assert ours.recv(len(READY), socket.MSG_WAITALL) == READY
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == ExitCode.BAD_INPUT, err
    assert "the run's turn never came" in err and "Traceback" not in err
    assert not output.exists() and not list(tmp_path.iterdir())
    held = re.search(r"tracing pid (\d+)", err)
    assert held is not None and not Path(f"/proc/{held.group(1)}").exists()
