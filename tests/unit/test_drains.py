"""When the capture drains its rings: at every look while a ring fills fast, else once every
LONGEST_DRAIN_S (capture/recorder.drain_due)."""

from __future__ import annotations

from profinfer_perfetto.capture.recorder import (
    DRAIN_AT_FILL,
    DRAIN_INTERVAL_S,
    LONGEST_DRAIN_S,
    drain_due,
)


def test_a_ring_filled_past_the_mark_is_drained_at_once() -> None:
    assert drain_due(DRAIN_INTERVAL_S, DRAIN_AT_FILL)
    assert drain_due(DRAIN_INTERVAL_S, 1.0)
    assert not drain_due(DRAIN_INTERVAL_S, DRAIN_AT_FILL / 2)


def test_rings_that_fill_slowly_are_drained_before_the_longest_wait_passes() -> None:
    """Looks come every DRAIN_INTERVAL_S: the last one before LONGEST_DRAIN_S would pass
    drains, so no ring waits longer (the sleeps between looks aside)."""
    looks = [k * DRAIN_INTERVAL_S for k in range(1, 100)]
    first = next(since for since in looks if drain_due(since, 0.0))
    assert first <= LONGEST_DRAIN_S < first + DRAIN_INTERVAL_S
    assert not drain_due(0.0, 0.0)
