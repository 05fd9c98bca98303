"""Waiting in tests for something another process or thread does."""

from __future__ import annotations

import time
from collections.abc import Callable

GUARD_S = 60
"""How long a wait may last: a guard against a hang, not a timing."""


def wait_until(done: Callable[[], bool], what: str, timeout: float = GUARD_S) -> None:
    """Return once `done()`; fail with `what` if it is not so within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)
