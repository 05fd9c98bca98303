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
short by the kill has no index row, and is left out. The records a run.json speaks for, and the
run.json, are flushed to the disk before it takes its name (then the folder is flushed): a crash
of the machine keeps them together.

The folder is made 0700 and its files 0600 (run.json holds the target's command line). The
recorder holds LOCK_FILE locked (flock) while it runs: `recover` refuses a folder a recorder
still writes. `recover` runs as root on a folder a user may have made: it reads only a folder and
files that are not symlinks, belong to root or to the user who ran it and that no one else can
write, and bounds every count by the sizes of the files.
"""

from __future__ import annotations

import fcntl
import functools
import io
import json
import os
import shutil
import stat
import threading
import types
import typing
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from profinfer_perfetto.capture.events import MAX_COUNTERS
from profinfer_perfetto.capture.run import Drained, Run, drained_dtypes
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.files import invoking_user, open_new

SPILL_SUFFIX = ".records"
"""The folder of a run's records, beside its trace, while `record` runs."""
RUN_FILE = "run.json"
"""The run as known at the last drain written whole (Run, as JSON)."""
INDEX_FILE = "drains.bin"
"""A row per drain written whole: its records of each kind (int64, in drained_dtypes' order)."""
LOCK_FILE = "lock"
"""Locked (flock) by the recorder that writes the folder, and by `recover` while it reads it."""
RUN_MAX_BYTES = 16 << 20
"""The largest RUN_FILE read (a run's threads and command line take kilobytes)."""
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
        self.folder = folder
        self.dtypes = drained_dtypes(counters)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            raise ProfinferError(
                f"{folder} holds the records of a recorder that was killed (or is running): "
                f"`profinfer-perfetto recover {folder.name.removesuffix(SPILL_SUFFIX)}` writes "
                "their trace; remove the folder to record anew") from None
        except OSError as exc:
            raise ProfinferError(f"cannot write {folder}: {exc.strerror}") from None
        try:
            self.lock_fd = open_new(folder / LOCK_FILE)
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            self.fds = {name: open_new(folder / f"{name}.bin") for name in self.dtypes}
            self.index_fd = open_new(folder / INDEX_FILE)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise ProfinferError(f"cannot write {folder}: {exc.strerror}") from None
        self.failed: str | None = None
        self.written = 0
        """The drains written whole."""
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
        """The writer thread: append the queued drains in order until finish(). Whatever stops
        it (a full disk, a bug) ends the capture, the drains written whole kept."""
        try:
            while (item := self._next()) is not None:
                self._append(*item)
                self._done(item[0])
        except OSError as exc:
            self._fail(f"writing the run's records to {self.folder} failed ({exc.strerror})")
        except Exception as exc:  # a bug: said in one sentence, not a capture waiting forever
            self._fail(f"the writer of the run's records to {self.folder} failed ({exc!r})")

    def _next(self) -> tuple[Drained, Run] | None:
        """The oldest drain queued (left queued until written); None once finish() is called
        and all are written."""
        with self._changed:
            while not self._queue and not self._closed:
                self._changed.wait()
            return self._queue[0] if self._queue else None

    def _done(self, drained: Drained) -> None:
        with self._changed:
            self._queue.popleft()
            self._queued_bytes -= _size(drained)
            self.written += 1
            self._changed.notify_all()

    def _fail(self, reason: str) -> None:
        with self._changed:
            self.failed = reason
            self._queue.clear()
            self._queued_bytes = 0
            self._changed.notify_all()

    def _append(self, drained: Drained, run: Run) -> None:
        """One drain's records, then the run as known, then the drain's index row."""
        for name, fd in self.fds.items():
            write_all(fd, memoryview(getattr(drained, name)).cast("B"))
        text = json.dumps({"format": FORMAT, "run": _plain(run)})
        if text != self._run_text:
            self._publish(text)
            self._run_text = text
        row = np.array([len(getattr(drained, name)) for name in self.dtypes], np.int64)
        write_all(self.index_fd, memoryview(row.tobytes()))

    def _publish(self, text: str) -> None:
        """RUN_FILE replaced by `text`, once the records before it are on the disk."""
        for fd in [*self.fds.values(), self.index_fd]:
            os.fdatasync(fd)
        partial = self.folder / f".{RUN_FILE}.partial"
        fd = open_new(partial)
        try:
            write_all(fd, memoryview(text.encode()))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, self.folder / RUN_FILE)
        _sync_folder(self.folder)

    def finish(self) -> str | None:
        """Wait until every queued drain is written; why writing failed, if it did."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._writer.join()
        return self.failed

    def drains(self) -> Drains:
        """The drains kept (those written whole), in order; after finish()."""
        assert not self._writer.is_alive(), "finish() first"
        return read_drains(self.folder, self.dtypes)

    def close(self) -> None:
        """Stop writing and let the folder go (its lock with it), kept for `recover`."""
        self.finish()
        if self.lock_fd >= 0:
            for fd in [*self.fds.values(), self.index_fd, self.lock_fd]:
                os.close(fd)
            self.lock_fd = -1

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class Drains:
    """The drains a records folder holds whole, read back in order as they are iterated (once)."""

    folder: Path
    files: dict[str, io.BufferedReader]
    dtypes: dict[str, np.dtype]
    rows: np.ndarray
    """Each drain's records of each kind."""
    cut: int
    """Drains at the end of the index whose records the data files lack (cut short)."""

    @property
    def notes(self) -> list[str]:
        """What the run's trace says of drains that were cut off."""
        if not self.cut:
            return []
        return [f"the records of the run's last {self.cut} drains were cut off (the files hold "
                f"fewer than {INDEX_FILE} says): the trace ends before them"]

    def __iter__(self) -> Iterator[Drained]:
        try:
            for row in self.rows.tolist():
                yield Drained(**{name: self._read(name, count)
                                 for name, count in zip(self.dtypes, row, strict=True)})
        finally:
            self.close()

    def close(self) -> None:
        """Let the files go (iterating them whole does)."""
        for file in self.files.values():
            file.close()

    def _read(self, name: str, count: int) -> np.ndarray:
        size = count * self.dtypes[name].itemsize
        data = self.files[name].read(size)
        if len(data) < size:
            raise ProfinferError(f"{self.folder / name}.bin was cut short while it was read")
        return np.frombuffer(data, self.dtypes[name])


def read_drains(folder: Path, dtypes: dict[str, np.dtype], after: int = 0) -> Drains:
    """The drains written whole to a records folder, in order, but its first `after` (read
    before, from a folder a recorder still writes): those its index has but the data files lack
    (cut short) are left out, and counted."""
    rows = index_rows(folder, len(dtypes))
    files: dict[str, io.BufferedReader] = {}
    try:
        for name in dtypes:
            fd = _opened(folder, f"{name}.bin")
            if fd is None:
                raise ProfinferError(f"{folder} has no {name}.bin: it is not a folder of records")
            files[name] = os.fdopen(fd, "rb")
        held = np.array([os.fstat(file.fileno()).st_size // dtypes[name].itemsize
                         for name, file in files.items()], np.int64)
        whole = _whole(rows, held, folder / INDEX_FILE)
        if whole == 0 < len(rows):
            short = next(name for name, n, h in zip(dtypes, rows[0], held, strict=True) if n > h)
            raise ProfinferError(f"{folder / short}.bin holds fewer records than {INDEX_FILE} "
                                 "says even for the first drain: the folder was changed after "
                                 "the recorder wrote it")
        if after > whole:
            raise ProfinferError(f"{folder} holds fewer drains than were read from it: the "
                                 "folder was changed while it was read")
        for (name, file), skipped in zip(files.items(), rows[:after].sum(axis=0).tolist(),
                                         strict=True):
            file.seek(skipped * dtypes[name].itemsize)
    except BaseException:
        for file in files.values():
            file.close()
        raise
    return Drains(folder, files, dtypes, rows[after:whole], len(rows) - whole)


def index_rows(folder: Path, kinds: int) -> np.ndarray:
    """INDEX_FILE's whole rows (a row cut short by a kill left out): each drain's record count
    of each kind (drained_dtypes' order, events first)."""
    fd = _opened(folder, INDEX_FILE)
    if fd is None:
        raise ProfinferError(f"{folder} has no {INDEX_FILE}: it is not a folder of records")
    with os.fdopen(fd, "rb") as file:
        data = file.read()
    row = kinds * np.dtype(np.int64).itemsize
    return np.frombuffer(data[:len(data) // row * row], np.int64).reshape(-1, kinds)


def _whole(rows: np.ndarray, held: np.ndarray, index: Path) -> int:
    """How many of the index's first rows the data files hold whole (`held`: the records each
    file holds, at most 2**60, so that no sum below overflows before it passes them)."""
    if (rows < 0).any():
        raise ProfinferError(f"{index} holds negative counts: it is not an index of drains")
    fits = (rows <= held).all(axis=1)
    first = len(rows) if fits.all() else int(np.argmin(fits))
    over = (np.cumsum(rows[:first], axis=0) > held).any(axis=1)
    return int(np.argmax(over)) if over.any() else first


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold a records folder's lock while its records are read (and removed): a folder a
    recorder still writes is refused."""
    fd = _opened(folder, LOCK_FILE)
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ProfinferError(f"a recorder is still writing {folder}: it writes the "
                                     "trace itself once it ends (Ctrl-C ends it)") from None
        yield
    finally:
        if fd is not None:
            os.close(fd)


def left_run(folder: Path) -> Run:
    """The run as known at the last drain a recorder wrote whole to `folder` (one it left when
    it was killed)."""
    fd = _opened(folder, RUN_FILE)
    if fd is None:
        raise ProfinferError(f"{folder} holds no drain written whole: there is nothing to "
                             "recover")
    with os.fdopen(fd, "rb") as file:
        data = file.read(RUN_MAX_BYTES + 1)
    try:
        if len(data) > RUN_MAX_BYTES:
            raise ValueError(f"over {RUN_MAX_BYTES} bytes")
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("another format")
        run = _typed(Run, doc["run"])
        if len(run.counters) > MAX_COUNTERS:
            raise ValueError(f"{len(run.counters)} counters")
    except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError,
            RecursionError) as exc:
        raise ProfinferError(f"{folder / RUN_FILE} is not a run this version of "
                             f"profinfer-perfetto wrote ({exc})") from None
    assert isinstance(run, Run)
    return run


def _opened(folder: Path, name: str) -> int | None:
    """A file of a records folder opened to read (None if it has none), once the folder and the
    file are found to be the recorder's own: no symlink, a regular file of one name, belonging
    to root or to the user who runs the command, that no one else can write."""
    try:
        folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ProfinferError(f"{folder} does not exist: there are no records to recover") from None
    except OSError as exc:
        raise ProfinferError(f"cannot read {folder} as a folder of records ({exc.strerror}; "
                             "a symlink is not read)") from None
    try:
        _check_owned(folder, os.fstat(folder_fd), stat.S_IFDIR)
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProfinferError(f"cannot read {folder / name} ({exc.strerror}): it is not a "
                             "recorder's file") from None
    finally:
        os.close(folder_fd)
    try:
        _check_owned(folder / name, os.fstat(fd), stat.S_IFREG)
    except ProfinferError:
        os.close(fd)
        raise
    return fd


def _check_owned(path: Path, st: os.stat_result, kind: int) -> None:
    user = invoking_user()
    if stat.S_IFMT(st.st_mode) != kind or (kind == stat.S_IFREG and st.st_nlink != 1):
        raise ProfinferError(f"{path} is not a recorder's: a recorder makes a folder of regular "
                             "files, each of one name")
    if st.st_uid not in (0, user):
        raise ProfinferError(f"{path} belongs to uid {st.st_uid}, neither root nor the user "
                             f"who runs this (uid {user}): it is not read")
    if st.st_mode & 0o022:
        raise ProfinferError(f"{path} can be written by other users (mode "
                             f"{stat.S_IMODE(st.st_mode):o}): it is not read")


def make_durable(files: Iterable[Path]) -> None:
    """Flush written files and the folders that name them to the disk (before the records they
    were written from are removed): a crash of the machine keeps them."""
    paths = list(files)
    try:
        for path in paths:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for folder in {path.parent for path in paths}:
            _sync_folder(folder)
    except OSError as exc:
        raise ProfinferError(f"cannot write {exc.filename}: {exc.strerror}") from None


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_json(run: Run) -> str:
    """`run` as JSON, as RUN_FILE holds it (keys sorted: runs that are alike read alike)."""
    return json.dumps(_plain(run), sort_keys=True)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """A dataclass tree as JSON values (dict keys as strings; _typed reads them back)."""
    if type(value) in _SCALARS:  # most of a run, and an enum's member is none of them
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@functools.cache
def _hints(dataclass_type: type) -> dict[str, Any]:
    """A dataclass's field types, evaluated once (typing.get_type_hints compiles each of its
    annotations' strings anew: most of a follower's CPU on a slow target, which reads the run
    back at every drain)."""
    return typing.get_type_hints(dataclass_type)


def _typed(hint: Any, value: Any) -> Any:
    """`value` (from _plain, through JSON) as the type `hint` says."""
    if type(value) is hint:  # a str, int, float or bool, as JSON gave it (most of a run)
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and is_dataclass(hint):
        hints = _hints(hint)
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


def _size(drained: Drained) -> int:
    return sum(records.nbytes for records in vars(drained).values())


def write_all(fd: int, data: memoryview) -> None:
    """Write all of `data` (os.write may write less); a full disk raises OSError (ENOSPC)."""
    while data:
        data = data[os.write(fd, data):]
