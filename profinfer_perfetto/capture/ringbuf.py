"""Bulk reader of a BPF ring buffer whose records all have one size.

The kernel maps a ring buffer as a consumer page (ours to write), a producer page and the data
pages mapped twice in a row, so a record that wraps is still contiguous. Because every record
of our rings has the same size, the committed records between the consumer and producer
positions are one strided numpy array: no callback and no Python object per event.

The two positions are read and written whole, one 8-byte access each (a memoryview of format
Q, which copies a native uint64), never with `struct`: its pack_into zeroes the eight bytes and
then writes them one by one, and the kernel, which reads the consumer position without a lock
on every reserve, then saw it for a moment as far behind the producer and refused records as
if the ring were full (tests/integration/test_ring_reader.py); read byte by byte, a producer
position that moves meanwhile can come out below the consumer's.

The reader's loads and its store keep the order the ring's protocol needs (libbpf's reader
keeps it with acquire loads and a release store): the producer position before the headers it
covers, a header before the record it says is committed, the records copied before their space
is handed back. x86-64 keeps loads in order with loads, and stores with older loads; arm64 may
reorder them. Python has no barrier of its own, so a Fence goes between the steps: a held lock
released and taken again. Its release is a store-release and its taking a load-acquire, which
arm64 keeps in order with each other (POSIX has sem_post and sem_wait, on which CPython's lock
stands, synchronize memory; CPython 3.13's own lock does it with sequentially consistent
atomics): nothing before it moves after it, nor after it before. About 0.2 us, three per
read of a ring that holds records.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Callable

import numpy as np

_BUSY = 1 << 31
_DISCARD = 1 << 30
_HEADER = 8


class Fence:
    """A full memory barrier for the reader's thread (above): call it between two accesses to
    keep them in order. One thread at a time calls it (a reader's own). A call never raises
    nor blocks: one cut short by a signal's exception (Interrupted, between the release and
    the taking) leaves the lock free, and the next call takes it first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def __call__(self) -> None:
        if not self._lock.locked():
            self._lock.acquire()
        self._lock.release()
        self._lock.acquire()


class RingReader:
    def __init__(self, map_fd: int, data_size: int, record: np.dtype,
                 fence: Callable[[], None] | None = None) -> None:
        page = mmap.PAGESIZE
        self._fence = fence or Fence()
        self._size = data_size
        self._stride = (_HEADER + record.itemsize + 7) & ~7
        self._consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._producer = mmap.mmap(
            map_fd, page + 2 * data_size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page
        )
        self._data_offset = page
        self._consumer_pos = memoryview(self._consumer).cast("Q")
        self._producer_pos = memoryview(self._producer)[:8].cast("Q")
        self._framed = np.dtype(
            {
                "names": ["len", "record"],
                "formats": ["<u4", record],
                "offsets": [0, _HEADER],
                "itemsize": self._stride,
            }
        )

    def fill(self) -> float:
        """How full the ring is (0 to 1): the bytes between the positions, records not yet
        committed included (a look, no fence: a read a moment later may find more)."""
        return (self._producer_pos[0] - self._consumer_pos[0]) / self._size

    def read(self) -> np.ndarray:
        """Copy out every committed record and hand their space back to the kernel."""
        consumer, producer = self._consumer_pos[0], self._producer_pos[0]
        count = (producer - consumer) // self._stride
        if count == 0:
            return np.empty(0, self._framed["record"])
        start = self._data_offset + (consumer & (self._size - 1))
        framed = np.frombuffer(self._producer, self._framed, count, start)
        self._fence()  # the producer position, then the headers below it
        lengths = framed["len"].copy()
        busy = np.flatnonzero(lengths & _BUSY)
        ready = int(busy[0]) if busy.size else count
        self._fence()  # the headers, then the records they say are committed
        records: np.ndarray = framed["record"][:ready][(lengths[:ready] & _DISCARD) == 0].copy()
        self._fence()  # the records copied, then their space handed back
        self._consumer_pos[0] = consumer + ready * self._stride
        return records

    def close(self) -> None:
        self._consumer_pos.release()
        self._producer_pos.release()
        self._consumer.close()
        self._producer.close()
