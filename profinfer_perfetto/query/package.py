"""The `profinfer` PerfettoSQL package (query/profinfer/): one copy of each canned metric and of
the tables they read, for trace_processor and the built-in engine alike.

Module `profinfer.X` is the file profinfer/X.sql (`profinfer.prelude.steps`: prelude/steps.sql).
A metric's module defines the view `profinfer_X`; the prelude's modules define the tables the
metrics read. trace_processor gets the folder with `--add-sql-package` and builds a module's
tables on `INCLUDE PERFETTO MODULE profinfer.X`. The built-in engine (SQLite) runs the same files
in include order, without their INCLUDE lines and with `CREATE PERFETTO TABLE/VIEW/INDEX` made
SQLite's `CREATE TABLE/VIEW/INDEX`. The prelude's tables are plain SQLite ones on both engines
(trace_processor takes them in a module too): their rowids and indexes are what makes them fast.
A query gets the modules of the `profinfer_` tables it names, each once per trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from profinfer_perfetto.errors import ProfinferError

NAME = "profinfer"
FOLDER = Path(__file__).resolve().parent / NAME
SUMMARY_SPEC = Path(__file__).resolve().parent / "profinfer_summary.textproto"
"""The trace summary spec (Perfetto's metrics v2) of the headline metrics."""

_INCLUDE = re.compile(r"^INCLUDE PERFETTO MODULE ([\w.]+);[ \t]*$", re.MULTILINE)
_DEFINES = re.compile(r"^CREATE (?:PERFETTO )?(?:TABLE|VIEW) (profinfer_\w+)", re.MULTILINE)
_PERFETTO = re.compile(r"^CREATE PERFETTO (TABLE|VIEW|INDEX) ", re.MULTILINE)
_NAME = re.compile(r"\bprofinfer_\w+")


@dataclass(frozen=True)
class Module:
    name: str
    """Its name in INCLUDE PERFETTO MODULE: profinfer.op_summary, profinfer.prelude.steps."""
    sql: str

    @property
    def includes(self) -> list[str]:
        return _INCLUDE.findall(self.sql)

    @property
    def defines(self) -> list[str]:
        """The tables and views it creates."""
        return _DEFINES.findall(self.sql)

    def sqlite(self) -> str:
        """Its SQL as SQLite runs it, once the modules it includes have run."""
        return _PERFETTO.sub(r"CREATE \1 ", _INCLUDE.sub("", self.sql))


@cache
def modules() -> dict[str, Module]:
    """The package's modules, by name."""
    found = {}
    for path in sorted(FOLDER.rglob("*.sql")):
        name = ".".join([NAME, *path.relative_to(FOLDER).with_suffix("").parts])
        found[name] = Module(name, path.read_text())
    return found


@cache
def _definer() -> dict[str, str]:
    return {table: m.name for m in modules().values() for table in m.defines}


def modules_read_by(sql: str) -> list[str]:
    """The modules defining the package's tables that `sql` names, in the order it names them."""
    definer = _definer()
    return list(dict.fromkeys(definer[t] for t in _NAME.findall(sql) if t in definer))


def in_include_order(names: list[str]) -> list[Module]:
    """The modules `names`, with those they include (transitively), each after its includes."""
    ordered: dict[str, Module] = {}

    def visit(name: str, via: tuple[str, ...]) -> None:
        if name in ordered:
            return
        if name not in modules() or name in via:
            raise ProfinferError(f"SQL package: {via[-1]} includes {name}, "
                                 f"{'an unknown module' if name not in modules() else 'a cycle'}")
        for included in modules()[name].includes:
            visit(included, (*via, name))
        ordered[name] = modules()[name]

    for name in names:
        visit(name, ("a query",))
    return list(ordered.values())


def setup_statements(sql: str, engine: str, done: set[str]) -> list[str]:
    """What makes the package's tables that `sql` reads on `engine` (trace_processor: INCLUDEs;
    builtin: the modules' SQLite text), leaving out the modules in `done`, which it adds to."""
    if engine == "trace_processor":
        wanted = [m for m in modules_read_by(sql) if m not in done]
        done.update(wanted)
        return [f"INCLUDE PERFETTO MODULE {m}" for m in wanted]
    todo = [m for m in in_include_order(modules_read_by(sql)) if m.name not in done]
    done.update(m.name for m in todo)
    return [m.sqlite() for m in todo]
