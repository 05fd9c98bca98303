"""Bulk reader of a BPF ring buffer whose records all have one size.

The kernel maps a ring buffer as a consumer page (ours to write), a producer page and the data
pages mapped twice in a row, so a record that wraps is still contiguous. Because every record
of our rings has the same size, the committed records between the consumer and producer
positions are one strided numpy array: no callback and no Python object per event.
"""

from __future__ import annotations

import mmap
import struct

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
        (consumer,) = struct.unpack_from("<Q", self._consumer, 0)
        (producer,) = struct.unpack_from("<Q", self._producer, 0)
        count = (producer - consumer) // self._stride
        if count == 0:
            return np.empty(0, self._framed["record"])
        start = self._data_offset + (consumer & (self._size - 1))
        framed = np.frombuffer(self._producer, self._framed, count, start)
        lengths = framed["len"]
        busy = np.flatnonzero(lengths & _BUSY)
        ready = int(busy[0]) if busy.size else count
        records: np.ndarray = framed["record"][:ready][(lengths[:ready] & _DISCARD) == 0].copy()
        struct.pack_into("<Q", self._consumer, 0, consumer + ready * self._stride)
        return records

    def close(self) -> None:
        self._consumer.close()
        self._producer.close()
