"""Sessions run in the project's venv (.venv, made by scripts/setup.sh): nox -s lint tests.

Tools run as `python -m TOOL` with the interpreter nox runs on, so `.venv/bin/nox` uses the
venv's tools whatever PATH says.
"""

from __future__ import annotations

import sys

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
    """Unit tests, then integration tests with real probes (needs root and scripts/setup.sh)."""
    session.run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def matrix(session: nox.Session) -> None:
    """`record` on every llama.cpp version of scripts/assets.py that is built (as root; setup.sh
    builds two of the four)."""
    session.run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--matrix",
                "tests/integration/test_matrix.py", *session.posargs)


@nox.session
def protos(session: nox.Session) -> None:
    """Regenerate the Python module of protos/profinfer_trace.proto."""
    session.run(sys.executable, "-m", "grpc_tools.protoc", "-Iprotos",
                f"--python_out={PACKAGE}/encode", f"--pyi_out={PACKAGE}/encode",
                "protos/profinfer_trace.proto")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (as root, after scripts/setup.sh): bench/results.json and bench/results.md."""
    session.run(sys.executable, "-m", "bench.run", *session.posargs)
