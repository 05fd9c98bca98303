"""The canned ProfStat metrics: one module each in the `profinfer` SQL package (query/package.py),
headed by what it answers, defining the view `profinfer_` + its name."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.package import NAME, modules


@dataclass(frozen=True)
class Metric:
    name: str
    sql: str
    """Its module's text."""

    @property
    def query(self) -> str:
        """The SQL that answers it (the package's tables it reads are built first)."""
        return f"SELECT * FROM {NAME}_{self.name}"

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
def canned() -> dict[str, Metric]:
    """The package's top-level modules, by metric name (op_summary: profinfer.op_summary)."""
    found = {}
    for module in modules().values():
        name = module.name.removeprefix(f"{NAME}.")
        if "." not in name:
            found[name] = Metric(name, module.sql)
    return found


def metric(name: str) -> Metric:
    found = canned().get(name)
    if found is None:
        raise ProfinferError(f"unknown metric {name!r} (known: {', '.join(canned())})")
    return found
