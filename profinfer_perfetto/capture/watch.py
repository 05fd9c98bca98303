"""Follow a launched command until one of its processes maps the ggml runtime.

A wrapper (`taskset`, `numactl`, `env`, `nice`, a shell script), an interpreter that loads
llama.cpp through its bindings, or a build that dlopens its CPU backend: none of them shows the
runtime in the files the command names. The watch program (probes/watch.bpf.c) stops each
process of the command's tree when it executes a program and whenever its dynamic loader maps
objects, before any of their code runs; `Watcher.stops` hands each stop to the recorder, which
reads the process's memory map, and either attaches the op probes there or resumes it.

Every process the watch program stops is held by the `Watcher` until the recorder resumes it or
takes it (the one it probes): closing the watcher resumes every process still held, or, when
the recorder is ending the launched command (a failure or a signal), kills it (docs/signals.md).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from pathlib import Path
from types import TracebackType

import numpy as np

from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.target import LOADER_SYMBOL, Probe
from profinfer_perfetto.capture import abi
from profinfer_perfetto.capture.events import STOP, Missed
from profinfer_perfetto.capture.process import stat_fields
from profinfer_perfetto.capture.program import probe_source
from profinfer_perfetto.capture.ringbuf import RingReader
from profinfer_perfetto.capture.session import UprobeAttacher, import_bcc
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.signals import deferred

DRAIN_AFTER_CLOSE_S = 0.005
"""After the tree is emptied, how long a probe that already chose to stop a process has to say
so (a few instructions' worth, with room to spare)."""


def watch_text() -> str:
    """The exact watch program BCC compiles."""
    return abi.header() + probe_source("watch.bpf.c") + abi.layout_checks(abi.WATCH_STRUCTS)


class Watcher:
    """The watch program, loaded, following the process tree rooted at `root`."""

    def __init__(self, root: int) -> None:
        bcc = import_bcc()
        try:
            self._bpf = bcc.BPF(text=watch_text().encode())
        except Exception as exc:
            raise ProfinferError(f"the BPF watch program did not load: {exc}") from exc
        self._tree = self._bpf[b"tree"]
        self._tree[self._tree.Key(root)] = self._tree.Leaf(1)
        fd = self._bpf[b"stops"].map_fd
        self._ring = RingReader(fd, os.sysconf("SC_PAGE_SIZE"), STOP)
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._attach = UprobeAttacher()
        self._loaders: set[tuple[int, int]] = set()
        self._held: set[int] = set()

    def watch_loader(self, probe: Probe) -> None:
        """Stop the tree's processes at this dynamic loader's reports (once per loader file)."""
        st = probe.path.stat()
        if (st.st_dev, st.st_ino) in self._loaders:
            return
        self._attach(self._bpf, probe, -1)
        self._loaders.add((st.st_dev, st.st_ino))

    def stops(self, timeout_s: float) -> np.ndarray:
        """The stops since the last call (STOP records), waiting up to `timeout_s` for one; each
        process stopped is held until `resume` or `take`."""
        self._poll.poll(timeout_s * 1000)
        stops = self._ring.read()
        self._held.update(stops["tgid"].tolist())
        return stops

    def missed(self) -> str | None:
        """The stops the watch program could not make so far, in a sentence for the run's notes
        (None: it made every one). A process that went on past one was not looked at there."""
        table = self._bpf[b"missed"]
        return missed_stops(*(int(table[table.Key(why)].value) for why in Missed))

    def resume(self, tgid: int) -> None:
        self._held.discard(tgid)
        resume(tgid)

    def take(self, tgid: int) -> None:
        """Hand a stopped process over to the caller, who resumes or ends it."""
        self._held.discard(tgid)

    def close(self, end: bool = False) -> None:
        """Stop following the tree, and resume every process still stopped for us (with `end`:
        kill it, the command being ended)."""
        with deferred():
            self._tree.clear()
            time.sleep(DRAIN_AFTER_CLOSE_S)
            self._held.update(self._ring.read()["tgid"].tolist())
            for tgid in self._held:
                send(tgid, signal.SIGKILL if end else signal.SIGCONT)
            self._held.clear()
            self._ring.close()
            self._bpf.cleanup()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(end=exc_type is not None)


def missed_stops(refused: int, full: int, error: int) -> str | None:
    """The watch program's `missed` array in a sentence; None where it missed none."""
    said = ([f"{refused} refused by the kernel ({os.strerror(-error)})"] if refused else []) + (
        [f"{full} lost to a full ring"] if full else [])
    if not said:
        return None
    return "the watch program missed stops of the launched command: " + ", ".join(said)


def resume(tgid: int) -> None:
    send(tgid, signal.SIGCONT)


def send(tgid: int, sig: int) -> None:
    """Send a signal to a process, if it is still there."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(tgid, sig)


def process_state(pid: int) -> str | None:
    """A process's state as /proc/PID/stat says it (R, S, T when stopped, Z, ...); None once it
    is gone."""
    fields = stat_fields(pid)
    return None if fields is None else fields[0]


def loader_probe(path: Path) -> Probe:
    """The uprobe on a dynamic loader's _dl_debug_state."""
    f = ElfFile(path)
    return Probe("loader_state", path, f.file_offset(f.symbols[LOADER_SYMBOL].vaddr),
                 LOADER_SYMBOL)
