"""The canned ProfStat metrics: one `.sql` file each in query/sql/, headed by what it answers;
and the prelude's tables, which a query gets built only when it reads them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.engines import statements

PRELUDE = "prelude"


@dataclass(frozen=True)
class Metric:
    name: str
    sql: str

    @property
    def header(self) -> list[str]:
        """The leading comment lines, without their `-- `."""
        lines = []
        for line in self.sql.splitlines():
            if not line.startswith("--"):
                break
            lines.append(line[3:] if line.startswith("-- ") else line[2:])
        return lines

    @property
    def summary(self) -> str:
        """The first header line, after `name: `."""
        return self.header[0].split(": ", 1)[-1] if self.header else ""

    @property
    def when_empty(self) -> str | None:
        """What an empty answer means: the header's `when empty: ...` line."""
        return next((line.removeprefix(_WHEN_EMPTY) for line in self.header
                     if line.startswith(_WHEN_EMPTY)), None)


_WHEN_EMPTY = "when empty: "


@cache
def _all() -> dict[str, Metric]:
    folder = resources.files("profinfer_perfetto.query").joinpath("sql")
    found = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            name = entry.name[: -len(".sql")]
            found[name] = Metric(name, entry.read_text())
    return dict(sorted(found.items()))


def canned() -> dict[str, Metric]:
    return {k: v for k, v in _all().items() if k != PRELUDE}


@dataclass(frozen=True)
class PreludeTable:
    name: str
    statements: tuple[str, ...]
    """Its CREATE TABLE (or VIEW), then its indexes."""
    needs: frozenset[str]
    """The prelude tables it reads."""


_TABLE = re.compile(r"CREATE (?:TABLE|VIEW) (profinfer_\w+)", re.IGNORECASE)
_INDEX = re.compile(r"CREATE (?:UNIQUE )?INDEX \w+ ON (profinfer_\w+)", re.IGNORECASE)
_NAME = re.compile(r"\bprofinfer_\w+")


@cache
def prelude_tables() -> dict[str, PreludeTable]:
    """prelude.sql's tables in the order it creates them."""
    parts: dict[str, list[str]] = {}
    for statement in statements(_all()[PRELUDE].sql):
        made, indexed = _TABLE.match(statement), _INDEX.match(statement)
        if made:
            parts[made.group(1)] = [statement]
        elif indexed and indexed.group(1) in parts:
            parts[indexed.group(1)].append(statement)
        else:
            raise ProfinferError(f"prelude.sql: a statement makes no profinfer table: {statement}")
    return {name: PreludeTable(name, tuple(sql), frozenset(_NAME.findall(sql[0])) - {name})
            for name, sql in parts.items()}


def tables_read_by(sql: str) -> list[PreludeTable]:
    """The prelude tables `sql` reads, with the ones they read, in the order to build them."""
    tables = prelude_tables()
    wanted = {name for name in _NAME.findall(sql) if name in tables}
    while True:
        more = set().union(*(tables[name].needs for name in wanted)) - wanted
        if not more:
            return [t for name, t in tables.items() if name in wanted]
        wanted |= more


def metric(name: str) -> Metric:
    found = canned().get(name)
    if found is None:
        raise ProfinferError(f"unknown metric {name!r} (known: {', '.join(canned())})")
    return found
