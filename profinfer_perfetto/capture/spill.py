"""A run's records kept on disk while it is captured (record's default): each drain is appended
to one file per kind of record in a folder beside the output, and read back drain by drain once
the run ends, so the recorder's memory does not grow with the run and it does nothing beside
the target but write what it drained (about 64 B per event, 480 B per node descriptor).

The appends happen on a thread of their own: a write the kernel holds up (writeback of the
gigabytes a server capture makes) then delays only that thread, while the drain thread goes on
emptying the rings (which hold about a second of a busy server's events) into a queue of at most
QUEUE_BYTES.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from profinfer_perfetto.capture.recorder import Drained, Run, drained_dtypes
from profinfer_perfetto.errors import ProfinferError

SPILL_SUFFIX = ".records"
"""The folder of a run's records, beside its trace, while `record` runs."""
QUEUE_BYTES = 48 << 20
"""The most drained bytes waiting to be written: past it the drain thread waits for the writer
(about 3 s of a llama-server's records at 250 k events/s, within the 400 MB the recorder may
use)."""


def spill_path(output: Path) -> Path:
    return output.with_name(output.name + SPILL_SUFFIX)


class Spill:
    """A sink for record(): appends each drain's records to `folder` (on a writer thread), and
    gives them back once finish() has waited for the writer."""

    def __init__(self, folder: Path, counters: int) -> None:
        """For a run that reads `counters` perf counters."""
        self.folder = folder
        self.dtypes = drained_dtypes(counters)
        shutil.rmtree(folder, ignore_errors=True)  # what a recorder killed before left
        try:
            folder.mkdir()
            self.fds = {name: os.open(folder / f"{name}.bin", os.O_RDWR | os.O_CREAT, 0o600)
                        for name in self.dtypes}
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise ProfinferError(f"cannot write {folder}: {exc.strerror}") from None
        self.counts: list[tuple[int, ...]] = []
        """Each drain's records of each kind, in self.dtypes' order (those written whole)."""
        self.failed: str | None = None
        self._queue: deque[Drained] = deque()
        self._queued_bytes = 0
        self._closed = False
        self._changed = threading.Condition()
        self._writer = threading.Thread(target=self._write, name="spill", daemon=True)
        self._writer.start()

    def __call__(self, drained: Drained, run: Run) -> str | None:
        """Queue a drain for the writer; a reason to stop the capture, if writing failed (a
        full disk)."""
        with self._changed:
            while self._queued_bytes > QUEUE_BYTES and self.failed is None:
                self._changed.wait()
            if self.failed is None:
                self._queue.append(drained)
                self._queued_bytes += _size(drained)
                self._changed.notify_all()
            return self.failed

    def _write(self) -> None:
        """The writer thread: append the queued drains in order until finish()."""
        while True:
            with self._changed:
                while not self._queue and not self._closed:
                    self._changed.wait()
                if not self._queue:
                    return
                drained = self._queue[0]
            failed: str | None = None
            try:
                for name, fd in self.fds.items():
                    write_all(fd, memoryview(getattr(drained, name)).cast("B"))
            except OSError as exc:
                failed = f"writing the run's records to {self.folder} failed ({exc.strerror})"
            with self._changed:
                self._queue.popleft()
                self._queued_bytes -= _size(drained)
                if failed is None:
                    self.counts.append(tuple(len(getattr(drained, n)) for n in self.dtypes))
                else:
                    self.failed = failed
                    self._queue.clear()
                    self._queued_bytes = 0
                self._changed.notify_all()
                if failed is not None:
                    return

    def finish(self) -> str | None:
        """Wait until every queued drain is written; why writing failed, if it did."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._writer.join()
        return self.failed

    def drains(self) -> Iterator[Drained]:
        """The drains kept (those written whole), in order; after finish()."""
        assert not self._writer.is_alive(), "finish() first"
        offsets = dict.fromkeys(self.fds, 0)
        for counts in self.counts:
            parts = {}
            for (name, fd), count in zip(self.fds.items(), counts, strict=True):
                size = count * self.dtypes[name].itemsize
                parts[name] = np.frombuffer(os.pread(fd, size, offsets[name]), self.dtypes[name])
                offsets[name] += size
            yield Drained(**parts)

    def remove(self) -> None:
        self.finish()
        for fd in self.fds.values():
            os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)


def _size(drained: Drained) -> int:
    return sum(records.nbytes for records in vars(drained).values())


def write_all(fd: int, data: memoryview) -> None:
    """Write all of `data` (os.write may write less); a full disk raises OSError (ENOSPC)."""
    while data:
        data = data[os.write(fd, data):]
