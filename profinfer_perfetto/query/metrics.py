"""The canned ProfStat metrics: one `.sql` file each in query/sql/, headed by what it answers."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from profinfer_perfetto.errors import ProfinferError

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


def prelude() -> Metric:
    return _all()[PRELUDE]


def metric(name: str) -> Metric:
    found = canned().get(name)
    if found is None:
        raise ProfinferError(f"unknown metric {name!r} (known: {', '.join(canned())})")
    return found
