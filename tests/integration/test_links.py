"""Probes of one program in one file attach as one uprobe_multi link where the kernel has them
(Linux 6.6+), one by one where it refuses; either way each runs at every call of its function
(the kernel's own count of the program's runs) and none runs once detached."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.target import Probe
from profinfer_perfetto.capture import session as session_module
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.capture.session import ProbeSession
from tests.integration.test_abi import RINGS, _text

pytestmark = pytest.mark.root

CALLS = 10


def _libc() -> Path:
    maps = Path("/proc/self/maps").read_text().split()
    return Path(next(p for p in maps if "/libc.so" in p or "/libc-" in p))


def _links() -> int:
    """This process's open uprobe_multi links."""
    infos = (Path("/proc/self/fdinfo") / fd for fd in os.listdir("/proc/self/fdinfo"))
    return sum("link_type:\tuprobe_multi" in _read(info) for info in infos)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # the listing's own fd, closed meanwhile
        return ""


def _runs(session: ProbeSession) -> int:
    cost = session.costs().get("inner_wait_begin")
    return cost.runs if cost else 0


def _has_links() -> bool:
    major, minor = (int(n) for n in platform.release().split(".")[:2])
    return (major, minor) >= (6, 6)


@pytest.mark.parametrize("refused", [False, True])
def test_a_program_s_probes_run_at_each_call_linked_or_one_by_one(
        refused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if refused:  # as a kernel before 6.6 does
        monkeypatch.setattr(session_module, "link_uprobes", lambda *_: -1)
    libc = ElfFile(_libc())
    probes = tuple(Probe("inner_wait_begin", libc.path,
                         libc.file_offset(libc.symbols[name].vaddr), name)
                   for name in ("getppid", "getpgrp"))
    with ProbeSession(_text(Selection(aggregate=True)), [], RINGS) as session:
        session.attach(probes, os.getpid())
        assert _links() == (0 if refused or not _has_links() else 1)
        before = _runs(session)
        for _ in range(CALLS):
            os.getppid()
            os.getpgrp()
        attached = _runs(session)
        session.detach(probes)
        assert _links() == 0
        os.getppid()
        assert attached - before == 2 * CALLS and _runs(session) == attached
