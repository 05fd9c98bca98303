"""What a command that overran its test's timeout and the processes under it were doing, read
from /proc before they are killed: each thread's state, the kernel function it waits in and its
kernel stack (root reads it), so that a hang in CI says where it hung."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from profinfer_perfetto.capture.process import process_cmdline, stat_fields, thread_name, threads


def descendants(root: int) -> list[int]:
    """`root` and every process under it, parents first."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        if (fields := stat_fields(proc.name)) is not None:
            children.setdefault(int(fields[1]), []).append(int(proc.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        tree.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return tree


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError as exc:
        return f"({exc.strerror})"


def thread_states(pid: int) -> str:
    """One process's threads: id, name, state, CPU time so far and kernel wait, then the kernel
    stack."""
    lines = [f"process {pid}: {' '.join(process_cmdline(pid))}"]
    for tid in sorted(threads(pid)):
        task = Path(f"/proc/{pid}/task/{tid}")
        fields = stat_fields(f"{pid}/task/{tid}") or ["?"]
        cpu = f"user {fields[11]} system {fields[12]} ticks" if len(fields) > 12 else ""
        lines.append(f"  thread {tid} {thread_name(pid, tid) or '?'} state {fields[0]} {cpu} "
                     f"wchan {_read(task / 'wchan')} syscall {_read(task / 'syscall')}")
        lines.extend("    " + frame for frame in _read(task / "stack").splitlines())
    return "\n".join(lines)


def states_then_kill(root: int) -> str:
    """The threads of `root` and its descendants, then SIGKILL to every one of them, parents
    first: a parent killed after its child could reap it and exit on its own meanwhile (a
    shell's `wait` returns 0 once its child is gone)."""
    tree = descendants(root)
    said = "\n".join(thread_states(pid) for pid in tree)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return said
