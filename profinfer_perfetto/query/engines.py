"""The engines that answer SQL on a trace: Perfetto's trace_processor, or a built-in SQLite one.

trace_processor is the engine. Its binary comes from `--trace-processor PATH`, then
`PROFINFER_TP_BIN`, then the perfetto Python API's own download. Where none of those works
(an air-gapped machine), the built-in engine imports the trace into SQLite tables with
trace_processor's names and columns (query/importer.py), so the same SQL runs on both.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query import importer

TP_BIN_ENV = "PROFINFER_TP_BIN"
ENGINES = ("auto", "trace_processor", "builtin")


@dataclass(frozen=True)
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]


class Engine(Protocol):
    name: str

    def query(self, sql: str) -> Result: ...

    def close(self) -> None: ...


def statements(sql: str) -> list[str]:
    """SQL split at the `;` ending each statement (our SQL has none inside strings)."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


class BuiltinEngine:
    name = "builtin"

    def __init__(self, trace: Path) -> None:
        self._db = importer.load(trace)

    def query(self, sql: str) -> Result:
        result = Result([], [])
        try:
            for statement in statements(sql):
                cursor = self._db.execute(statement)
                if cursor.description is not None:
                    result = Result([d[0] for d in cursor.description], cursor.fetchall())
        except sqlite3.Error as exc:
            raise ProfinferError(f"SQL error: {exc}") from None
        return result

    def close(self) -> None:
        self._db.close()


class TraceProcessorEngine:
    name = "trace_processor"

    def __init__(self, trace: Path, bin_path: str | None) -> None:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

        with _quiet():
            self._tp = TraceProcessor(trace=str(trace),
                                      config=TraceProcessorConfig(bin_path=bin_path))

    def query(self, sql: str) -> Result:
        from perfetto.trace_processor import TraceProcessorException

        result = Result([], [])
        try:
            for statement in statements(sql):
                it = self._tp.query(statement)
                rows = [tuple(getattr(r, c) for c in it.column_names) for r in it]
                result = Result(list(it.column_names), rows)
        except TraceProcessorException as exc:
            raise ProfinferError(f"SQL error: {str(exc).strip().splitlines()[-1]}") from None
        return result

    def close(self) -> None:
        self._tp.close()


@contextmanager
def _quiet() -> Iterator[None]:
    """Keep the perfetto API's download chatter (and curl's) off our stdout and stderr."""
    with tempfile.TemporaryFile() as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def open_engine(trace: Path, choice: str = "auto", tp_bin: str | None = None
                ) -> tuple[Engine, str]:
    """An engine loaded with the trace, and a sentence on how it was chosen.

    choice: "auto" (trace_processor if it can be had, else builtin), "trace_processor" or
    "builtin".
    """
    if not trace.is_file():
        raise ProfinferError(f"no trace at {trace}")
    if choice == "builtin":
        return BuiltinEngine(trace), "builtin engine (asked for)"
    bin_path = tp_bin or os.environ.get(TP_BIN_ENV) or None
    if bin_path is not None and not Path(bin_path).is_file():
        raise ProfinferError(f"no trace_processor binary at {bin_path}")
    try:
        engine = TraceProcessorEngine(trace, bin_path)
        return engine, f"trace_processor ({bin_path or 'downloaded by the perfetto API'})"
    except Exception as exc:  # the API raises bare Exceptions for download and load failures
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if choice == "trace_processor" or bin_path is not None:
            raise ProfinferError(f"trace_processor could not load {trace}: {reason}") from None
    return BuiltinEngine(trace), "builtin engine (trace_processor unavailable: no binary)"
