"""A trace opened for queries: its engine, with the SQL package's tables a query reads built
first."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from profinfer_perfetto.model.names import ARG_KEY_PREFIX, RECORD_SLICE
from profinfer_perfetto.query.engines import AUTO, Engine, EngineChoice, Result, open_engine
from profinfer_perfetto.query.metrics import metric
from profinfer_perfetto.query.package import setup_statements


class TraceQuery:
    def __init__(self, trace: Path, engine: EngineChoice = AUTO) -> None:
        self.trace = trace
        self.engine: Engine
        self.engine, self.how = open_engine(trace, engine)
        self._built: set[str] = set()

    def metric(self, name: str) -> Result:
        return self.sql(metric(name).query)

    def sql(self, sql: str) -> Result:
        """Run `sql` (one or more statements; the last one's rows are returned), after building
        the SQL package's tables it reads."""
        for setup in setup_statements(sql, self.engine.name, self._built):
            self.engine.query(setup)
        return self.engine.query(sql)

    def recording_args(self) -> dict[str, str]:
        """The args of the trace's `record` slice, by name (empty when it has none)."""
        rows = self.engine.query(
            f"select a.key, a.display_value from slice s join args a using (arg_set_id) "
            f"where s.name = '{RECORD_SLICE}'").rows
        return {str(key).removeprefix(ARG_KEY_PREFIX): str(value) for key, value in rows}

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> TraceQuery:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


T = TypeVar("T")


def over_traces(traces: list[Path], work: Callable[[TraceQuery], T],
                engine: EngineChoice = AUTO) -> list[T]:
    """`work` on each trace opened for queries, in the traces' order; several traces at once,
    one engine each (as trace_processor's BatchTraceProcessor does, one shell per trace), up to
    one per CPU."""

    def one(trace: Path) -> T:
        with TraceQuery(trace, engine) as q:
            return work(q)

    if len(traces) == 1:
        return [one(traces[0])]
    with ThreadPoolExecutor(max_workers=min(len(traces), os.cpu_count() or 1)) as pool:
        return list(pool.map(one, traces))
