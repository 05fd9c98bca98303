"""What the kernel counts for us: perf counters (perf_event_open) that the probes read into
every event, and the run time of our BPF programs (BPF_ENABLE_STATS)."""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

from profinfer_perfetto.errors import ProfinferError

# perf_event_open types and configs by the names `perf list` uses.
SOFTWARE_COUNTERS = {
    "cpu-clock": 0,
    "task-clock": 1,
    "page-faults": 2,
    "context-switches": 3,
    "cpu-migrations": 4,
    "minor-faults": 5,
    "major-faults": 6,
}
HARDWARE_COUNTERS = {
    "cycles": 0,
    "instructions": 1,
    "cache-references": 2,
    "cache-misses": 3,
    "branch-instructions": 4,
    "branch-misses": 5,
    "bus-cycles": 6,
    "stalled-cycles-frontend": 7,
    "stalled-cycles-backend": 8,
    "ref-cycles": 9,
}
_PERF_TYPE_HARDWARE = 0
_PERF_TYPE_SOFTWARE = 1
_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_ENABLE_STATS = 32
_BPF_STATS_RUN_TIME = 0


def counter_config(name: str) -> tuple[int, int]:
    if name in SOFTWARE_COUNTERS:
        return _PERF_TYPE_SOFTWARE, SOFTWARE_COUNTERS[name]
    if name in HARDWARE_COUNTERS:
        return _PERF_TYPE_HARDWARE, HARDWARE_COUNTERS[name]
    known = ", ".join([*SOFTWARE_COUNTERS, *HARDWARE_COUNTERS])
    raise ProfinferError(f"unknown counter {name!r} (known: {known})")


def _syscall(numbers: dict[str, int], *args: Any) -> int:
    """A raw system call by its number on this architecture; -1 where none is listed."""
    number = numbers.get(platform.machine())
    if number is None:
        return -1
    return int(ctypes.CDLL(None, use_errno=True).syscall(number, *args))


def counter_opens(counter: str) -> bool:
    """Can this process open the counter for itself (perf_event_open(2))?"""
    kind, config = counter_config(counter)
    attr = (ctypes.c_uint8 * 128)()
    ctypes.memmove(attr, (ctypes.c_uint32 * 2)(kind, 128), 8)
    ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint64 * 1)(config), 8)
    fd = _syscall(_PERF_EVENT_OPEN, attr, 0, -1, -1, 0)
    if fd < 0:
        return False
    os.close(fd)
    return True


def opened_configs(counters: list[str]) -> list[tuple[int, int]]:
    """The perf type and config of each counter, once it is known to open on this machine."""
    configs = [counter_config(c) for c in counters]
    for name, (kind, _) in zip(counters, configs, strict=True):
        if not counter_opens(name):
            raise ProfinferError(
                f"counter {name} cannot be opened on this machine"
                + (" (it has no hardware PMU)" if kind == _PERF_TYPE_HARDWARE else "")
            )
    return configs


def enable_run_time_stats() -> int | None:
    """Have the kernel time every BPF program run while the returned fd is open
    (BPF_ENABLE_STATS, Linux 5.8+); None where it cannot."""
    attr = ctypes.c_uint32(_BPF_STATS_RUN_TIME)
    fd = _syscall(_SYS_BPF, _BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    return fd if fd >= 0 else None
