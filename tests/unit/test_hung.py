"""The hung-run report of the test harness (tests/hung.py): every process under the command is
named with its threads, then killed."""

from __future__ import annotations

import subprocess
import time

from tests import hung


def test_a_hung_tree_is_described_then_killed() -> None:
    root = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    deadline = time.monotonic() + 30
    while len(hung.descendants(root.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    tree = hung.descendants(root.pid)
    said = hung.states_then_kill(root.pid)
    assert root.wait() == -9
    assert len(tree) == 2 and all(f"process {pid}: " in said for pid in tree)
    assert said.count("  thread ") == 2 and "sleep 60" in said
