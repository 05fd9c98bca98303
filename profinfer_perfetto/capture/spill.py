"""A run's records kept on disk while it is captured (record's default): each drain is appended
to one file per kind of record in a folder beside the output, and read back drain by drain once
the run ends, so the recorder's memory does not grow with the run and it does nothing beside
the target but write what it drained (about 64 B per event, 480 B per node descriptor).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from profinfer_perfetto.capture.recorder import DRAINED_DTYPES, Drained, Run
from profinfer_perfetto.errors import ProfinferError

SPILL_SUFFIX = ".records"
"""The folder of a run's records, beside its trace, while `record` runs."""


def spill_path(output: Path) -> Path:
    return output.with_name(output.name + SPILL_SUFFIX)


class Spill:
    """A sink for record(): appends each drain's records to `folder`, and gives them back."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        shutil.rmtree(folder, ignore_errors=True)  # what a recorder killed before left
        try:
            folder.mkdir()
            self.fds = {name: os.open(folder / f"{name}.bin", os.O_RDWR | os.O_CREAT, 0o600)
                        for name in DRAINED_DTYPES}
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise ProfinferError(f"cannot write {folder}: {exc.strerror}") from None
        self.counts: list[tuple[int, ...]] = []
        """Each drain's records of each kind, in DRAINED_DTYPES' order."""
        self.failed: str | None = None

    def __call__(self, drained: Drained, run: Run) -> str | None:
        """Keep a drain; a reason to stop the capture, if writing failed (a full disk)."""
        if self.failed is None:
            try:
                for name, fd in self.fds.items():
                    write_all(fd, memoryview(getattr(drained, name)).cast("B"))
            except OSError as exc:
                self.failed = (f"writing the run's records to {self.folder} failed "
                               f"({exc.strerror})")
                return self.failed
            self.counts.append(tuple(len(getattr(drained, name)) for name in DRAINED_DTYPES))
        return self.failed

    def drains(self) -> Iterator[Drained]:
        """The drains kept (those written whole), in order."""
        offsets = dict.fromkeys(self.fds, 0)
        for counts in self.counts:
            parts = {}
            for (name, fd), count in zip(self.fds.items(), counts, strict=True):
                size = count * DRAINED_DTYPES[name].itemsize
                parts[name] = np.frombuffer(os.pread(fd, size, offsets[name]),
                                            DRAINED_DTYPES[name])
                offsets[name] += size
            yield Drained(**parts)

    def remove(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)


def write_all(fd: int, data: memoryview) -> None:
    """Write all of `data` (os.write may write less); a full disk raises OSError (ENOSPC)."""
    while data:
        data = data[os.write(fd, data):]
