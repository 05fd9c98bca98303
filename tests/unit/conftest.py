"""hypothesis' profiles for the fuzz tests (here, not in tests/conftest.py: the emulated
machines of scripts/guest.sh run integration tests only, without hypothesis)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
"""The suite's fuzzing: a short run, the same inputs every time."""
settings.register_profile("fuzz", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "500")),
                          deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""`nox -s fuzz`: random inputs, FUZZ_EXAMPLES a run (nox runs each test again and again for
its time)."""
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
