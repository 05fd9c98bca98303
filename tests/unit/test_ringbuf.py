"""RingReader on a file laid out as the kernel maps a BPF ring buffer: a consumer page, a
producer page, then the data pages twice in a row (written here by hand, as the kernel's
double mapping shows them)."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from profinfer_perfetto.capture.ringbuf import Fence, RingReader

PAGE = mmap.PAGESIZE
SIZE = PAGE
"""The data pages: one (a power of two, as the kernel wants)."""
RECORD = np.dtype([("ts", "<u8"), ("tid", "<u4")])
STRIDE = 24
"""An 8-byte header and the 12-byte record, rounded up to 8 bytes."""
BUSY, DISCARD = 1 << 31, 1 << 30


class Ring:
    """The ring's file: its positions and records, as a BPF program and the kernel leave them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = bytearray(SIZE)
        self.producer = 0
        path.write_bytes(bytes(2 * PAGE + 2 * SIZE))

    def reserve(self, ts: int, tid: int, flags: int = 0) -> int:
        """A record at the producer position (`flags`: BUSY while not committed, DISCARD);
        where it is."""
        at = self.producer
        framed = struct.pack("<II", RECORD.itemsize | flags, 0) + struct.pack("<QI", ts, tid)
        for i, byte in enumerate(framed.ljust(STRIDE, b"\0")):
            self.data[(at + i) % SIZE] = byte
        self.producer += STRIDE
        self.flush()
        return at

    def commit(self, at: int) -> None:
        self.data[(at + 3) % SIZE] &= 0x7F  # the length's top bit: BUSY
        self.flush()

    def flush(self) -> None:
        """The producer position and the data pages (twice) into the file, in place: the
        consumer page is the reader's to write."""
        with self.path.open("r+b") as f:
            f.seek(PAGE)
            f.write(struct.pack("<Q", self.producer).ljust(PAGE, b"\0") + bytes(self.data) * 2)

    def read_consumer(self) -> int:
        (at,) = struct.unpack_from("<Q", self.path.read_bytes())
        return int(at)

    def set_ts(self, at: int, ts: int) -> None:
        """A record's data written again (its `ts`; a record that does not wrap)."""
        self.data[at + 8:at + 16] = struct.pack("<Q", ts)
        self.flush()

    def set_busy(self, at: int) -> None:
        """A committed record made busy again (commit's undoing)."""
        self.data[(at + 3) % SIZE] |= 0x80
        self.flush()


def _reader(ring: Ring, fence: Callable[[], None] | None = None) -> RingReader:
    with ring.path.open("r+b") as f:
        return RingReader(f.fileno(), SIZE, RECORD, fence)  # the mappings outlive the fd


def _pairs(records: np.ndarray) -> list[tuple[int, int]]:
    return [(int(r["ts"]), int(r["tid"])) for r in records]


def test_committed_records_are_read_in_order_and_handed_back(tmp_path: Path) -> None:
    ring = Ring(tmp_path / "ring")
    reader = _reader(ring)
    assert _pairs(reader.read()) == [] and ring.read_consumer() == 0
    for i in range(3):
        ring.reserve(100 + i, 7)
    assert _pairs(reader.read()) == [(100, 7), (101, 7), (102, 7)]
    assert ring.read_consumer() == 3 * STRIDE
    assert _pairs(reader.read()) == []
    reader.close()


def test_fill_counts_reserved_records_until_they_are_read(tmp_path: Path) -> None:
    """A record counts from its reservation, committed or not; a read hands the committed
    ones back, and a busy one still counts, with the records after it."""
    ring = Ring(tmp_path / "ring")
    reader = _reader(ring)
    assert reader.fill() == 0
    ring.reserve(1, 1)
    busy = ring.reserve(2, 2, BUSY)
    assert reader.fill() == 2 * STRIDE / SIZE
    reader.read()
    assert reader.fill() == STRIDE / SIZE
    ring.commit(busy)
    reader.read()
    assert reader.fill() == 0
    reader.close()


def test_a_discarded_record_is_skipped_and_its_space_handed_back(tmp_path: Path) -> None:
    ring = Ring(tmp_path / "ring")
    reader = _reader(ring)
    ring.reserve(1, 1)
    ring.reserve(2, 2, DISCARD)
    ring.reserve(3, 3)
    assert _pairs(reader.read()) == [(1, 1), (3, 3)]
    assert ring.read_consumer() == 3 * STRIDE
    reader.close()


def test_reading_stops_at_a_record_not_yet_committed(tmp_path: Path) -> None:
    """The records after a busy one wait for it: the consumer position stops there."""
    ring = Ring(tmp_path / "ring")
    reader = _reader(ring)
    ring.reserve(1, 1)
    busy = ring.reserve(2, 2, BUSY)
    ring.reserve(3, 3)
    assert _pairs(reader.read()) == [(1, 1)]
    assert ring.read_consumer() == STRIDE
    ring.commit(busy)
    assert _pairs(reader.read()) == [(2, 2), (3, 3)]
    assert ring.read_consumer() == 3 * STRIDE
    reader.close()


def test_records_that_wrap_past_the_end_of_the_data_pages(tmp_path: Path) -> None:
    """Positions only grow; a record's place is the position modulo the data size, and one
    that runs past the end reads on in the second mapping."""
    ring = Ring(tmp_path / "ring")
    reader = _reader(ring)
    fits = SIZE // STRIDE
    for i in range(fits):
        ring.reserve(i, 0)
    assert len(reader.read()) == fits
    for i in range(3):  # the first of them straddles the end (SIZE is no multiple of 24)
        ring.reserve(1000 + i, i)
    assert (fits * STRIDE) % SIZE + STRIDE > SIZE
    assert _pairs(reader.read()) == [(1000, 0), (1001, 1), (1002, 2)]
    assert ring.read_consumer() == (fits + 3) * STRIDE
    reader.close()


def test_each_step_of_a_read_comes_after_the_fence_before_it(tmp_path: Path) -> None:
    """The fences' places, by a fence that changes the ring when called: the headers are read
    after the first (a record made busy then is left), the records after the second (a record
    written again then is read as it is then; a header made busy then is not read again) and
    the space is handed back after the third."""
    ring = Ring(tmp_path / "ring")
    first, second, third = (ring.reserve(ts, 1) for ts in (1, 2, 3))
    consumers: list[int] = []

    def changing() -> None:
        step = len(consumers)
        consumers.append(ring.read_consumer())
        if step == 0:
            ring.set_busy(third)
        elif step == 1:
            ring.set_ts(first, 10)
            ring.set_busy(second)

    reader = _reader(ring, changing)
    assert _pairs(reader.read()) == [(10, 1), (2, 1)]
    assert consumers == [0, 0, 0] and ring.read_consumer() == 2 * STRIDE
    reader.close()


def test_a_read_passes_three_fences_and_an_empty_ring_none(tmp_path: Path) -> None:
    ring = Ring(tmp_path / "ring")
    calls: list[None] = []
    reader = _reader(ring, lambda: calls.append(None))
    reader.read()
    assert len(calls) == 0
    ring.reserve(1, 1)
    reader.read()
    assert len(calls) == 3
    reader.close()


def test_a_fence_cut_short_by_a_signal_leaves_the_next_call_whole() -> None:
    """A signal's exception between a call's release and its taking again (signals.py raises
    Interrupted in the recorder's blocks) leaves the lock free; the next call takes it first
    rather than fail on releasing a free lock, which would end the drain (and a watch that
    holds stopped processes) with an error."""
    fence = Fence()
    fence._lock.release()  # where a cut-short call leaves it
    fence()
    assert fence._lock.locked()
    fence()
    assert fence._lock.locked()
