"""What /proc says of a live process and its threads: names, command line, status numbers."""

from __future__ import annotations

import os
from pathlib import Path


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return f"pid {pid}"


def thread_name(pid: int, tid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return None


def status_number(task: int | str, key: str) -> int:
    """A number of /proc/TASK/status (`task`: an id, or "self"); 0 where it is not there."""
    try:
        status = Path(f"/proc/{task}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def stat_fields(task: int | str) -> list[str] | None:
    """The fields of /proc/TASK/stat after the command name, the state first (`task`: an id,
    or "PID/task/TID" for a thread); None once it is gone."""
    try:
        stat = Path(f"/proc/{task}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def threads(pid: int | str) -> list[int]:
    """The thread ids of process `pid` (or "self"), as /proc lists them now (none once it is
    gone)."""
    return [int(task.name) for task in Path(f"/proc/{pid}/task").glob("*")]


def process_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def goes_on(pid: int) -> bool:
    """Whether process `pid` is there and not a zombie (one that exited, not yet reaped)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
