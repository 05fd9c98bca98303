"""uprobe_multi links (Linux 6.6+): the uprobes of one BPF program in one file as one link,
made by one system call and removed by closing it.

A uprobe attached on its own (a perf event) is removed after a wait for the kernel of its own:
the 230 probes of --inner-waits took 21 s to remove on Linux 6.18, one after the other whatever
the threads closing them. A link's uprobes are removed together, after one wait. Its program is
loaded for the link (attach type UPROBE_MULTI) and cannot be attached as a perf event too.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from profinfer_perfetto.capture.syscalls import SYS_BPF, syscall

UPROBE_MULTI = 48
"""BPF_TRACE_UPROBE_MULTI: the attach type of a program and its link."""
_BPF_LINK_CREATE = 28
_RETURN = 1
"""BPF_F_UPROBE_MULTI_RETURN: the probes run on the function's return."""


class _LinkCreate(ctypes.Structure):
    """bpf_attr for BPF_LINK_CREATE, its uprobe_multi member (linux/bpf.h)."""

    _fields_ = [
        ("prog_fd", ctypes.c_uint32),
        ("target_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("path", ctypes.c_uint64),
        ("offsets", ctypes.c_uint64),
        ("ref_ctr_offsets", ctypes.c_uint64),
        ("cookies", ctypes.c_uint64),
        ("cnt", ctypes.c_uint32),
        ("multi_flags", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
    ]


def link_uprobes(prog_fd: int, path: Path, offsets: list[int], ret: bool, pid: int) -> int:
    """Attach program `prog_fd` (loaded for UPROBE_MULTI) at `offsets` of `path` for process
    `pid` (-1: every process), or at the returns of the functions there (`ret`); the link's fd,
    or -1 with errno set where the kernel refuses (before Linux 6.6: EINVAL)."""
    name = ctypes.create_string_buffer(bytes(path))
    at = (ctypes.c_uint64 * len(offsets))(*offsets)
    attr = _LinkCreate(prog_fd=prog_fd, attach_type=UPROBE_MULTI, path=ctypes.addressof(name),
                       offsets=ctypes.addressof(at), cnt=len(offsets), multi_flags=_RETURN * ret,
                       pid=max(pid, 0))
    return syscall(SYS_BPF, _BPF_LINK_CREATE, ctypes.byref(attr), ctypes.sizeof(attr))
