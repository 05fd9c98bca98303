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
"""

from __future__ import annotations

import mmap

import numpy as np

_BUSY = 1 << 31
_DISCARD = 1 << 30
_HEADER = 8


class RingReader:
    def __init__(self, map_fd: int, data_size: int, record: np.dtype) -> None:
        page = mmap.PAGESIZE
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

    def read(self) -> np.ndarray:
        """Copy out every committed record and hand their space back to the kernel."""
        consumer, producer = self._consumer_pos[0], self._producer_pos[0]
        count = (producer - consumer) // self._stride
        if count == 0:
            return np.empty(0, self._framed["record"])
        start = self._data_offset + (consumer & (self._size - 1))
        framed = np.frombuffer(self._producer, self._framed, count, start)
        lengths = framed["len"]
        busy = np.flatnonzero(lengths & _BUSY)
        ready = int(busy[0]) if busy.size else count
        records: np.ndarray = framed["record"][:ready][(lengths[:ready] & _DISCARD) == 0].copy()
        self._consumer_pos[0] = consumer + ready * self._stride
        return records

    def close(self) -> None:
        self._consumer_pos.release()
        self._producer_pos.release()
        self._consumer.close()
        self._producer.close()
