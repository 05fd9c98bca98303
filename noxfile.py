"""Sessions run in the project's venv (.venv, made by scripts/setup.sh): nox -s lint tests.

Tools run as `python -m TOOL` with the interpreter nox runs on, so `.venv/bin/nox` uses the
venv's tools whatever PATH says.
"""

from __future__ import annotations

import os
import sys
import time

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]

PACKAGE = "profinfer_perfetto"


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy --strict on everything: the package, tests, benchmarks and scripts (the
    files pyproject.toml names)."""
    session.run(sys.executable, "-m", "ruff", "check", PACKAGE, "tests", "scripts", "bench",
                "noxfile.py")
    session.run(sys.executable, "-m", "mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests, then integration tests with real probes (needs root and scripts/setup.sh);
    the slowest 25 named at the end (the suite keeps to a budget of 30 minutes)."""
    session.run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=25",
                *session.posargs)


def _fuzz_tests(session: nox.Session) -> list[str]:
    collected = session.run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "--collect-only", "tests/unit", silent=True) or ""
    return [line for line in collected.splitlines() if "::test_fuzz_" in line]


@nox.session
def fuzz(session: nox.Session) -> None:
    """The fuzz tests (tests/unit's test_fuzz_*: one or more a parser) on random inputs: each
    test run after run (of $FUZZ_EXAMPLES inputs, default 500) for $FUZZ_SECONDS (default 600:
    10 minutes a test); posargs name the tests to run (default: all of them)."""
    seconds = float(os.environ.get("FUZZ_SECONDS", "600"))
    for test in session.posargs or _fuzz_tests(session):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            session.run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test,
                        env={"HYPOTHESIS_PROFILE": "fuzz"})


@nox.session
def matrix(session: nox.Session) -> None:
    """`record` on every llama.cpp version of scripts/assets.py that is built (as root; setup.sh
    builds two of the four)."""
    session.run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--matrix",
                "tests/integration/test_matrix.py", *session.posargs)


GUEST_TESTS = (
    "tests/integration/test_record.py::test_record_a_generation[2]",
    "tests/integration/test_routing.py::test_expert_ids_are_the_ones_llama_cpp_computed"
    "[tiny-qwen3moe]",
    "tests/integration/test_pmu.py",
    "tests/integration/test_barrier_nodes.py",
    "tests/integration/test_one_trap.py",
)
"""What runs in an emulated machine: a 2-thread tiny-llama generation against bpftrace's op
count in the same guest, tiny-qwen3moe's expert ids against llama-eval-callback's, the
hardware counters per op against perf stat (where the machine has Arm's PMU), the node each
barrier names against the op begins (one trap per op on that architecture's registers), and the
ops modelled from the barriers alone against the ones recorded with both traps."""


def _in_guest(session: nox.Session, arch: str, kernel: str, build: str,
              tests: tuple[str, ...] = GUEST_TESTS, timeout_s: int = 1800) -> None:
    """`tests` on llama.cpp build `build`, as root in an emulated `arch` machine that boots
    Debian's `kernel` (scripts/guest.sh); a CLI run past `timeout_s` fails its test with what
    its processes were doing (tests/hung.py)."""
    session.run("bash", "scripts/guest.sh", arch, kernel, "--", "env",
                f"PROFINFER_LLAMA_BUILD={build}", f"PROFINFER_TEST_TIMEOUT={timeout_s}",
                "python3", "-m",
                "pytest", "-q", "--color=no",
                "-p", "no:cacheprovider", *tests, *session.posargs, external=True)


@nox.session
def guest(session: nox.Session) -> None:
    """One arm64 run, in the README's test command: the 2-thread record test and the ops
    derived from one trap per op against both traps', on the arm64 build under Debian's 6.1
    kernel (about 5 minutes once the guest image is cached)."""
    # 600 s: a record run takes 2-3 minutes there, both vCPUs on one host thread (2026-12-03)
    _in_guest(session, "arm64", "6.1", "arm64", (GUEST_TESTS[0], GUEST_TESTS[-1]), 600)


@nox.session
def arm64(session: nox.Session) -> None:
    """The record tests on both arm64 builds (plain, and with BTI and PAC) in an emulated arm64
    machine under Debian's 6.1 and 6.12 kernels (as root, after scripts/setup.sh)."""
    for build in ("arm64", "arm64-bti"):
        for kernel in ("6.1", "6.12"):
            _in_guest(session, "arm64", kernel, build)


@nox.session
def kernels(session: nox.Session) -> None:
    """The record test on the shared build for x86-64-v3 in an emulated x86-64 machine under
    Debian's 5.10, 6.1 and 6.12 kernels (qemu's `-cpu max` runs AVX2 but not the AVX-512 that a
    build native to this machine may use), then the clang build's (x86-64-v3 too, its CPU
    backend dlopened)."""
    for kernel in ("5.10", "6.1", "6.12"):
        _in_guest(session, "x86_64", kernel, "x86-64-v3", GUEST_TESTS[:1])
    for kernel in ("5.10", "6.1", "6.12"):
        _in_guest(session, "x86_64", kernel, "clang", (
            "tests/integration/test_record.py::"
            "test_record_a_clang_build_whose_cpu_backend_is_dlopened",))


@nox.session
def protos(session: nox.Session) -> None:
    """Regenerate the Python module of protos/profinfer_trace.proto."""
    session.run(sys.executable, "-m", "grpc_tools.protoc", "-Iprotos",
                f"--python_out={PACKAGE}/encode", f"--pyi_out={PACKAGE}/encode",
                "protos/profinfer_trace.proto")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (as root, after scripts/setup.sh): bench/results.json and docs/benchmarks.md."""
    session.run(sys.executable, "-m", "bench.run", *session.posargs)
