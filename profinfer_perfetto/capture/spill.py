"""A run's records kept on disk while it is captured (record's default): each drain is appended
to one file per kind of record in a folder beside the output, and read back drain by drain once
the run ends, so the recorder's memory does not grow with the run and it does nothing beside
the target but write what it drained (about 64 B per event, 480 B per node descriptor).

The appends happen on a thread of their own: a write the kernel holds up (writeback of the
gigabytes a server capture makes) then delays only that thread, while the drain thread goes on
emptying the rings (which hold about a second of a busy server's events) into a queue of at most
QUEUE_BYTES.

The folder says on its own what it holds, so a recorder that is killed leaves a run that
`recover` writes as a trace: after a drain's records are appended whole, the run as known then
replaces RUN_FILE (JSON) and the drain's record counts are appended to INDEX_FILE. A drain cut
short by the kill has no index row, and is left out.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import types
import typing
from collections import deque
from collections.abc import Iterator
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from profinfer_perfetto.capture.recorder import Drained, Run, drained_dtypes
from profinfer_perfetto.errors import ProfinferError

SPILL_SUFFIX = ".records"
"""The folder of a run's records, beside its trace, while `record` runs."""
RUN_FILE = "run.json"
"""The run as known at the last drain written whole (Run, as JSON)."""
INDEX_FILE = "drains.bin"
"""A row per drain written whole: its records of each kind (int64, in drained_dtypes' order)."""
FORMAT = 1
"""RUN_FILE's format: a folder of another one is not read."""
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
        if folder.exists():
            raise ProfinferError(
                f"{folder} holds the records of a recorder that was killed (or is running): "
                f"`profinfer-perfetto recover {folder.name.removesuffix(SPILL_SUFFIX)}` writes "
                "their trace; remove the folder to record anew")
        self.folder = folder
        self.dtypes = drained_dtypes(counters)
        try:
            folder.mkdir()
            self.fds = {name: _created(folder / f"{name}.bin") for name in self.dtypes}
            self.index_fd = _created(folder / INDEX_FILE)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise ProfinferError(f"cannot write {folder}: {exc.strerror}") from None
        self.failed: str | None = None
        self._run_text = ""
        self._queue: deque[tuple[Drained, Run]] = deque()
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
                # The capture goes on adding to the run's threads while the writer reads them.
                self._queue.append((drained, replace(run, threads=dict(run.threads))))
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
                drained, run = self._queue[0]
            failed: str | None = None
            try:
                self._append(drained, run)
            except OSError as exc:
                failed = f"writing the run's records to {self.folder} failed ({exc.strerror})"
            with self._changed:
                self._queue.popleft()
                self._queued_bytes -= _size(drained)
                if failed is not None:
                    self.failed = failed
                    self._queue.clear()
                    self._queued_bytes = 0
                self._changed.notify_all()
                if failed is not None:
                    return

    def _append(self, drained: Drained, run: Run) -> None:
        """One drain's records, then the run as known, then the drain's index row."""
        for name, fd in self.fds.items():
            write_all(fd, memoryview(getattr(drained, name)).cast("B"))
        text = json.dumps({"format": FORMAT, "run": _plain(run)})
        if text != self._run_text:
            partial = self.folder / f".{RUN_FILE}.partial"
            partial.write_text(text)
            os.replace(partial, self.folder / RUN_FILE)
            self._run_text = text
        row = np.array([len(getattr(drained, name)) for name in self.dtypes], np.int64)
        write_all(self.index_fd, memoryview(row.tobytes()))

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
        return read_drains(self.folder, self.dtypes)

    def remove(self) -> None:
        self.finish()
        for fd in [*self.fds.values(), self.index_fd]:
            os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)


def read_drains(folder: Path, dtypes: dict[str, np.dtype]) -> Iterator[Drained]:
    """The drains written whole to a records folder, in order."""
    index = np.fromfile(folder / INDEX_FILE, np.int64)
    rows = index[:len(index) // len(dtypes) * len(dtypes)].reshape(-1, len(dtypes))
    for (name, dtype), count in zip(dtypes.items(), rows.sum(axis=0).tolist(), strict=True):
        path = folder / f"{name}.bin"
        if path.stat().st_size < count * dtype.itemsize:
            raise ProfinferError(f"{path} holds fewer records than {folder / INDEX_FILE} says: "
                                 "the folder was changed after the recorder wrote it")
    files = {name: (folder / f"{name}.bin").open("rb") for name in dtypes}
    try:
        for row in rows.tolist():
            yield Drained(**{name: np.frombuffer(files[name].read(count * dtype.itemsize), dtype)
                             for (name, dtype), count in zip(dtypes.items(), row, strict=True)})
    finally:
        for file in files.values():
            file.close()


def left_run(folder: Path) -> Run:
    """The run as known at the last drain a recorder wrote whole to `folder` (one it left when
    it was killed)."""
    if not folder.is_dir():
        raise ProfinferError(f"{folder} does not exist: there are no records to recover")
    try:
        doc = json.loads((folder / RUN_FILE).read_text())
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')}")
        run = _typed(Run, doc["run"])
    except FileNotFoundError:
        raise ProfinferError(f"{folder} holds no drain written whole: there is nothing to "
                             "recover") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProfinferError(f"{folder / RUN_FILE} is not a run this version of "
                             f"profinfer-perfetto wrote ({exc})") from None
    assert isinstance(run, Run)
    return run


def _plain(value: Any) -> Any:
    """A dataclass tree as JSON values (dict keys as strings; _typed reads them back)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _typed(hint: Any, value: Any) -> Any:
    """`value` (from _plain, through JSON) as the type `hint` says."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: _typed(hints[f.name], value[f.name])
                       for f in fields(hint) if f.name in value})
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _typed(inner, value)
    if origin is dict:
        key, item = args
        return {_typed(key, k): _typed(item, v) for k, v in value.items()}
    if origin is list:
        return [_typed(args[0], v) for v in value]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(args[0], v) for v in value)
        return tuple(_typed(a, v) for a, v in zip(args, value, strict=True))
    if isinstance(hint, type) and issubclass(hint, Enum | int | float | str):
        return hint(value)
    raise TypeError(f"cannot read a {hint!r}")


def _created(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)


def _size(drained: Drained) -> int:
    return sum(records.nbytes for records in vars(drained).values())


def write_all(fd: int, data: memoryview) -> None:
    """Write all of `data` (os.write may write less); a full disk raises OSError (ENOSPC)."""
    while data:
        data = data[os.write(fd, data):]
