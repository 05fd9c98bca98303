"""How query results are shown: one renderer per `--format`, each with `render(report, out)`."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from profinfer_perfetto.query.engines import Result


@dataclass
class Report:
    """Named row sets (one per metric, or `sql`), and which engine answered for which trace."""

    tables: dict[str, Result] = field(default_factory=dict)
    engines: dict[str, str] = field(default_factory=dict)


class Renderer(Protocol):
    def render(self, report: Report, out: TextIO) -> None: ...


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class TableRenderer:
    """Aligned columns for a terminal, a title per row set."""

    def render(self, report: Report, out: TextIO) -> None:
        for i, (name, result) in enumerate(report.tables.items()):
            out.write(("\n" if i else "") + f"{name} ({len(result.rows)} rows)\n")
            out.write(_aligned(result))


def _aligned(result: Result) -> str:
    cells = [result.columns, *([_cell(v) for v in row] for row in result.rows)]
    widths = [max(len(row[j]) for row in cells) for j in range(len(result.columns))]
    numeric = [all(isinstance(row[j], int | float) or row[j] is None for row in result.rows)
               for j in range(len(result.columns))]
    return "".join(
        "  ".join(v.rjust(w) if n else v.ljust(w)
                  for v, w, n in zip(row, widths, numeric, strict=True)).rstrip() + "\n"
        for row in cells
    )


class CsvRenderer:
    """CSV; several row sets come one after another, each after a `# name` line."""

    def render(self, report: Report, out: TextIO) -> None:
        writer = csv.writer(out, lineterminator="\n")
        for i, (name, result) in enumerate(report.tables.items()):
            if len(report.tables) > 1:
                out.write(("\n" if i else "") + f"# {name}\n")
            writer.writerow(result.columns)
            writer.writerows(["" if v is None else v for v in row] for row in result.rows)


class JsonRenderer:
    """{"engines": {trace: engine}, "metrics": {name: [{column: value}, ...]}}."""

    def render(self, report: Report, out: TextIO) -> None:
        doc = {
            "engines": report.engines,
            "metrics": {name: [dict(zip(r.columns, row, strict=True)) for row in r.rows]
                        for name, r in report.tables.items()},
        }
        json.dump(doc, out, indent=1)
        out.write("\n")


RENDERERS: dict[str, Renderer] = {
    "table": TableRenderer(),
    "csv": CsvRenderer(),
    "json": JsonRenderer(),
}
