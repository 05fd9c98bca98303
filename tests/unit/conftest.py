"""hypothesis' profiles for the fuzz tests (here, not in tests/conftest.py: the emulated
machines of scripts/guest.sh run integration tests only, without hypothesis); the package's
compiled libraries as its wheel carries them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
"""The suite's fuzzing: a short run, the same inputs every time."""
settings.register_profile("fuzz", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "500")),
                          deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""`nox -s fuzz`: random inputs, FUZZ_EXAMPLES a run (nox runs each test again and again for
its time)."""
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def wheel_library(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A compiled library of the package (its path in the package) as the wheel carries it
    (built by scripts/hatch_build.py): a wheel for this platform, no longer a pure-Python one."""
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(folder), str(Path(__file__).parents[2])],
                   check=True)
    (wheel,) = folder.glob("*.whl")
    assert not wheel.name.endswith("-none-any.whl"), wheel.name

    def library(name: str) -> Path:
        path = folder / Path(name).name
        with zipfile.ZipFile(wheel) as built:
            path.write_bytes(built.read(name))
        return path

    return library
