"""A trace opened for queries: its engine, with the profinfer prelude tables built on demand."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from profinfer_perfetto.query.engines import Engine, Result, open_engine
from profinfer_perfetto.query.metrics import metric, prelude


class TraceQuery:
    def __init__(self, trace: Path, engine: str = "auto", tp_bin: str | None = None) -> None:
        self.trace = trace
        self.engine: Engine
        self.engine, self.how = open_engine(trace, engine, tp_bin)
        self._prelude_done = False

    def _prelude(self) -> None:
        if not self._prelude_done:
            self.engine.query(prelude().sql)
            self._prelude_done = True

    def metric(self, name: str) -> Result:
        sql = metric(name).sql
        self._prelude()
        return self.engine.query(sql)

    def sql(self, sql: str) -> Result:
        self._prelude()
        return self.engine.query(sql)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> TraceQuery:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
