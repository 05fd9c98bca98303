"""Raw system calls that neither Python nor BCC wraps, by their numbers on each architecture."""

from __future__ import annotations

import ctypes
import platform
from typing import Any

SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
SYS_BPF = {"x86_64": 321, "aarch64": 280}


def syscall(numbers: dict[str, int], *args: Any) -> int:
    """A raw system call by its number on this architecture (errno kept for ctypes.get_errno);
    -1 where none is listed."""
    number = numbers.get(platform.machine())
    if number is None:
        return -1
    return int(ctypes.CDLL(None, use_errno=True).syscall(number, *args))
