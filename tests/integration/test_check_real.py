"""Real recordings go through the regression gate: runs checked against themselves pass.

Whether recordings of the same command, made one after another, pass depends on the machine
staying equally fast (this shared VM's runs differ by 5-30 %, and a compile beside the suite
makes a run slower, which the gate rightly reports): that rate of false alarms is measured in
the benchmark (`nox -s bench -- --only check`), not asserted here. What holds by construction is
that the same runs as baseline and candidate pass, through every step a real run takes: record,
import, the samples of each key, the bootstrap, the verdict and its exit code. The runs are
pinned to one CPU, as the README advises for a baseline.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.integration.test_record import completion

pytestmark = pytest.mark.root


def test_recordings_checked_against_themselves_pass(
    cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("run0", "run1", "run2"):
        result = cli("record", "-o", runs / f"{name}.pftrace", "--",
                     *completion(llama, model("tiny-llama"), 1, n=48),
                     cpu=max(os.sched_getaffinity(0)))
        assert result.returncode == 0, result.stderr
    result = cli("check", f"{runs}/*.pftrace", "--baseline", f"{runs}/*.pftrace",
                 "--engine", "builtin")
    assert result.returncode == 0, result.stdout
    assert "no regression in" in result.stdout
    assert "regression " not in result.stdout.replace("no regression in", "")
    assert "warning" not in result.stdout  # same model, build, threads and counters; 3 runs
