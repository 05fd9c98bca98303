"""Shared fixtures: the CLI as a subprocess, and the llama.cpp build and models from setup; the
session's own roofs and cache."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts import assets
from tests import hung

SESSION_DIR = Path(tempfile.mkdtemp(prefix="profinfer-tests-"))
"""The test session's own state, set before any test runs (the CLI's subprocesses inherit
it): roofs at an absent $PROFINFER_PEAKS and an empty cache, so that a `calibrate` run on this
machine puts no `peak` instants into the traces the tests record. ($PROFINFER_CACHE, the
llama.cpp builds and models, stays.)"""
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # A suite started from a script's background job (`cmd &`: SIGINT ignored) or under nohup:
    # every recorder the tests start would inherit the ignored SIGINT and keep it (signals.py),
    # and the tests stop recorders with SIGINT. The session takes it back (its children get the
    # default, as from a terminal).
    signal.signal(signal.SIGINT, signal.default_int_handler)
os.environ["PROFINFER_PEAKS"] = str(SESSION_DIR / "peaks.json")
os.environ["XDG_CACHE_HOME"] = str(SESSION_DIR / "cache")
atexit.register(shutil.rmtree, SESSION_DIR, ignore_errors=True)

Cli = Callable[..., subprocess.CompletedProcess[str]]


TIMEOUT = float(os.environ.get("PROFINFER_TEST_TIMEOUT", "300"))
"""Seconds a CLI run may take before the test fails (longer in an emulated machine, where BCC
alone compiles the probes for minutes)."""


def run_cli(*args: str | Path, timeout: float = TIMEOUT, user: str | None = None,
            cpu: int | None = None) -> subprocess.CompletedProcess[str]:
    """`profinfer-perfetto ARGS` in a subprocess, as an end user runs it (pinned to `cpu`, with
    what it launches, when given)."""
    cmd = [sys.executable, "-m", "profinfer_perfetto", *map(str, args)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace", stdin=subprocess.DEVNULL) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            states = hung.states_then_kill(proc.pid)
            out, err = proc.communicate()
            pytest.fail(f"{' '.join(cmd)} did not end in {timeout:g} s; its processes then:\n"
                        f"{states}\nits stdout:\n{out}\nits stderr:\n{err}", pytrace=False)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture
def cli() -> Cli:
    return run_cli


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup.sh first")
    return path


BUILD = os.environ.get("PROFINFER_LLAMA_BUILD", "shared")
"""The build the tests record by default: `shared`, or another of scripts/assets.py's (in an
emulated arm64 machine, scripts/guest.sh, the tests record the arm64 builds)."""


@pytest.fixture
def llama() -> Callable[..., Path]:
    """A llama.cpp tool of the default build (BUILD) or another one (static, blas, ...)."""
    return lambda tool, build=BUILD: _require(assets.llama_bin(tool, build))


@pytest.fixture
def model() -> Callable[[str], Path]:
    return lambda name: _require(assets.model(name))


@pytest.fixture(autouse=True)
def _needs_root(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("root") and os.geteuid() != 0:
        pytest.fail("this test attaches real probes: run the suite as root")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--matrix", action="store_true",
                     help="also record the llama.cpp versions only the version matrix tests "
                          "(nox -s matrix)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--matrix"):
        return
    skip = pytest.mark.skip(reason="a version only the version matrix records: nox -s matrix")
    for item in items:
        if item.get_closest_marker("matrix"):
            item.add_marker(skip)
