"""What the kernel counts for us: perf counters (perf_event_open) that the probes read into
every event, and the run time of our BPF programs (BPF_ENABLE_STATS)."""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

from profinfer_perfetto.capture.syscalls import SYS_BPF, SYS_PERF_EVENT_OPEN, syscall
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
DEFAULT_COUNTERS = ("context-switches",)
"""What `record` reads where --counter names none: its per-thread track shows when the kernel
took a thread off its CPU (per op only with two traps per op: recorder.exact_because)."""
_PERF_TYPE_HARDWARE = 0
_PERF_TYPE_SOFTWARE = 1
_READ_FORMAT_AT = 32
"""perf_event_attr.read_format, after type, size, config, sample_period and sample_type."""
_READ_TIMES = 1 | 2
"""PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING."""
_BPF_ENABLE_STATS = 32
_BPF_STATS_RUN_TIME = 0


PMUS = Path("/sys/bus/event_source/devices")
"""The kernel's PMUs: each a folder with its perf `type`, its `events` by name and the
`format` of their fields in the config."""


def counter_config(name: str) -> tuple[int, int]:
    """The perf type and config of a counter: a generic name (`perf list`'s), or a PMU's event
    as perf writes it, `PMU/EVENT/` by its name in sysfs or `PMU/FIELD=VALUE,.../` raw."""
    if name in SOFTWARE_COUNTERS:
        return _PERF_TYPE_SOFTWARE, SOFTWARE_COUNTERS[name]
    if name in HARDWARE_COUNTERS:
        return _PERF_TYPE_HARDWARE, HARDWARE_COUNTERS[name]
    if "/" in name:
        return _pmu_config(name)
    known = ", ".join([*SOFTWARE_COUNTERS, *HARDWARE_COUNTERS])
    raise ProfinferError(f"unknown counter {name!r} (known: {known}; or a PMU's event as "
                         "PMU/EVENT/ or PMU/FIELD=VALUE,.../)")


def pmu_events() -> dict[str, list[str]]:
    """Each of the kernel's PMUs and the events it names in sysfs (for --counter PMU/EVENT/)."""
    if not PMUS.is_dir():
        return {}
    return {pmu.name: sorted(e.name for e in (pmu / "events").iterdir())
            if (pmu / "events").is_dir() else [] for pmu in sorted(PMUS.iterdir())}


def _names(folder: Path) -> str:
    return ", ".join(sorted(p.name for p in folder.iterdir())) if folder.is_dir() else "none"


def _pmu_config(spec: str) -> tuple[int, int]:
    pmu, _, rest = spec.partition("/")
    if not rest.endswith("/") or rest == "/":
        raise ProfinferError(f"counter {spec!r}: write a PMU's event as PMU/EVENT/ or "
                             "PMU/FIELD=VALUE,.../")
    folder = PMUS / pmu
    if not (folder / "type").is_file():
        raise ProfinferError(f"counter {spec}: this machine has no PMU {pmu!r} (its PMUs: "
                             f"{_names(PMUS)})")
    config = 0
    for term in rest[:-1].split(","):
        if "=" in term:
            config |= _field(folder, spec, *term.split("=", 1))
            continue
        event = folder / "events" / term
        if not event.is_file():
            raise ProfinferError(f"counter {spec}: PMU {pmu} has no event {term!r} (its "
                                 f"events: {_names(folder / 'events')})")
        for part in event.read_text().strip().split(","):
            config |= _field(folder, spec, *part.split("=", 1)) if "=" in part else 0
    return int((folder / "type").read_text()), config


def _field(folder: Path, spec: str, key: str, value: str) -> int:
    """A FIELD=VALUE term's bits in the config, as the PMU's format places them
    (`config:0-7,32-35`: the value's low bits in 0-7, the next ones in 32-35)."""
    fmt = folder / "format" / key
    if not fmt.is_file():
        raise ProfinferError(f"counter {spec}: PMU {folder.name} has no field {key!r} (its "
                             f"fields: {_names(folder / 'format')})")
    where, _, ranges = fmt.read_text().strip().partition(":")
    if where != "config":
        raise ProfinferError(f"counter {spec}: field {key} is in {where}, and only fields of "
                             "config are read")
    try:
        number = int(value, 0)
    except ValueError:
        raise ProfinferError(f"counter {spec}: {key}={value} is not a number") from None
    config, used = 0, 0
    for bits in ranges.split(","):
        lo, _, hi = bits.partition("-")
        width = int(hi or lo) - int(lo) + 1
        config |= ((number >> used) & ((1 << width) - 1)) << int(lo)
        used += width
    if number >> used:
        raise ProfinferError(f"counter {spec}: {key}={value} does not fit its {used} bits")
    return config


_PERF_FLAG_FD_CLOEXEC = 8


def counting_fd(kind: int, config: int, pid: int = -1, cpu: int = -1) -> int:
    """A perf event counting (never sampling: a PMU like msr takes no sample period, which BCC's
    own opener sets) for a task (`pid`) or on a CPU (`pid` -1), whose read() gives its value
    and the times it was enabled and running; -1 where it cannot open."""
    attr = (ctypes.c_uint8 * 128)()
    ctypes.memmove(attr, (ctypes.c_uint32 * 2)(kind, 128), 8)
    ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint64 * 1)(config), 8)
    ctypes.memmove(ctypes.addressof(attr) + _READ_FORMAT_AT, (ctypes.c_uint64 * 1)(_READ_TIMES), 8)
    return syscall(SYS_PERF_EVENT_OPEN, attr, pid, cpu, -1, _PERF_FLAG_FD_CLOEXEC)


def counted_share(fds: list[int]) -> float:
    """The share of the time they were enabled that these counting fds (one counter, a CPU
    each) counted: under 1 where the kernel multiplexed the counter with others."""
    enabled = running = 0
    for fd in fds:
        _, on, counting = struct.unpack("<QQQ", os.read(fd, 24))
        enabled, running = enabled + on, running + counting
    return running / enabled if enabled else 1.0


def counter_opens(counter: str) -> bool:
    """Can this process open the counter for itself (perf_event_open(2))?"""
    fd = counting_fd(*counter_config(counter), pid=0)
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
    fd = syscall(SYS_BPF, _BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    return fd if fd >= 0 else None
