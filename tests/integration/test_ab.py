"""`profinfer-perfetto ab`: real runs recorded in pairs and checked on them.

Whether two builds pass depends on them; what holds by construction is that the same command
as baseline and candidate, recorded in pairs, passes: with two pairs the t interval of their
ratios is wide (one degree of freedom), and nothing differs between the sides.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

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
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)  # what record says goes to stderr
    assert not doc["failed"] and doc["verdicts"]
    traces = {p.name: p.stat().st_mtime_ns for p in runs.iterdir()}
    assert sorted(traces) == ["base-00.pftrace", "base-01.pftrace", "cand-00.pftrace",
                              "cand-01.pftrace"]
    # A then B, then B then A.
    assert (traces["base-00.pftrace"] < traces["cand-00.pftrace"]
            < traces["cand-01.pftrace"] < traces["base-01.pftrace"])
