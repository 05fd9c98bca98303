"""bpftrace as an independent count of how often a library's functions are entered."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

RESEND = 20
"""Seconds before bpftrace is sent SIGINT again (BpftraceCount.stop). Harmless while it
detaches: its handler stays (a resent SIGINT ended a missed one with the counts whole,
test_vulkan_build 2026-11-27)."""


class BpftraceCount:
    """bpftrace counting per process (entries of one library's functions, or what a program
    keys by pid): the count of one pid stays right while other runs of the same tool (another
    test run) go on beside it."""

    def __init__(self, program: str) -> None:
        """bpftrace running `program`, whose counts are keyed by a pid, once it has attached."""
        # bpftrace prints "Attaching N probes..." before it attaches them; with this variable
        # (what bpftrace's own runtime tests wait for) it says when they are all attached.
        self.proc = subprocess.Popen(["bpftrace", "-e", program], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "__BPFTRACE_NOTIFY_PROBES_ATTACHED": "1"})
        assert self.proc.stdout is not None
        said = [self.proc.stdout.readline()]
        while said[-1] and "__BPFTRACE_NOTIFY_PROBES_ATTACHED" not in said[-1]:
            said.append(self.proc.stdout.readline())
        assert said[-1], f"bpftrace did not attach: {''.join(said)}"

    @classmethod
    def entries(cls, lib: Path, functions: dict[str, str]) -> BpftraceCount:
        """Entries of the functions of `lib` (by the names given to them)."""
        return cls("".join(f"uprobe:{lib}:{fn} {{ @{name}[pid] = count(); }}\n"
                           for name, fn in functions.items()))

    def stop(self, pid: int) -> dict[str, int]:
        """Stop counting; the counts of process `pid`, by the names given to the functions."""
        # bpftrace detaches its probes before it prints: slow on a loaded machine (over 120 s
        # where other recorders attached and detached uprobes beside it). bpftrace 0.17 once in
        # some runs misses the SIGINT and waits for events for good (2026-11-27: a second one
        # ended it), so the signal is sent again every RESEND s; 600 s in all is a guard against
        # a hang, not a bound on time.
        for _ in range(600 // RESEND):
            self.proc.send_signal(signal.SIGINT)
            try:
                out, _ = self.proc.communicate(timeout=RESEND)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            self.proc.kill()
            raise RuntimeError("bpftrace did not stop in 600 s")
        return {m[1]: int(m[2]) for m in re.finditer(rf"^@(\w+)\[{pid}\]: (\d+)$", out, re.M)}


def recorded_pid(stdout: str) -> int:
    """The pid `record`'s summary names (-1 when there is no summary)."""
    found = re.search(r"recorded \S+ \(pid (\d+)\)", stdout)
    return int(found[1]) if found else -1
