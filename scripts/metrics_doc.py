"""Write docs/metrics.md from the header comments of the `profinfer` SQL package's modules, so
that the page cannot drift from the SQL (tests/unit/test_sql_package.py checks it).

    python -m scripts.metrics_doc
"""

from __future__ import annotations

from pathlib import Path

from profinfer_perfetto.query.metrics import Metric, canned
from profinfer_perfetto.query.package import NAME, in_include_order, modules

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"

INTRO = f"""\
# Metrics

<!-- Written by `python -m scripts.metrics_doc` from the SQL files' headers: edit those. -->

The canned metrics ship as a PerfettoSQL package named `{NAME}`
(`profinfer_perfetto/query/{NAME}/`; `profinfer-perfetto query --print-sql-package` prints its
path). Module `{NAME}.X` defines the view `{NAME}_X`, the metric `X`; the modules under
`{NAME}.prelude` define the tables the metrics read. Each metric's answer is the same however
it is asked for:

- `profinfer-perfetto query TRACE X` (either engine: trace_processor includes the package, the
  built-in engine runs the same files);
- `profinfer-perfetto query TRACE --sql "SELECT * FROM {NAME}_X"`, or any SQL on the package's
  tables (`{NAME}_node`, `{NAME}_step`, ...): a query gets the modules of the tables it names;
- Perfetto's own trace_processor, given the folder:

  ```sh
  trace_processor_shell query --add-sql-package "$(profinfer-perfetto query --print-sql-package)" \\
    TRACE "INCLUDE PERFETTO MODULE {NAME}.op_summary; SELECT * FROM {NAME}_op_summary;"
  ```

  (a trace_processor started with `--httpd --add-sql-package DIR TRACE` serves the Perfetto
  UI, whose query page then takes the same INCLUDE);
- the headline metrics (token latency, op time shares, thread balance), with units and
  polarity, as a trace summary (Perfetto's metrics v2):

  ```sh
  trace_processor_shell summarize --metrics-v2 all \\
    --add-sql-package "$(profinfer-perfetto query --print-sql-package)" \\
    TRACE "$(profinfer-perfetto query --print-summary-spec)"
  ```

Times are in nanoseconds; percentiles are nearest rank.
"""


def _section(module: str, metric: Metric) -> str:
    rest = metric.header[1:]
    block = "\n".join(["```text", *rest, "```", ""]) if rest else ""
    return f"### {module}\n\n{metric.summary}\n\n{block}"


def render() -> str:
    """The page, as docs/metrics.md holds it."""
    parts = [INTRO, "## Metrics\n"]
    for name, metric in canned().items():
        parts.append(_section(f"{name} (`{NAME}.{name}`)", metric))
    parts.append(f"## Shared tables (`{NAME}.prelude`)\n")
    prelude = [name for name in modules() if name.startswith(f"{NAME}.prelude.")]
    for module in in_include_order(prelude):
        parts.append(_section(f"`{module.name}`", Metric(module.name, module.sql)))
    return "\n".join(parts)


if __name__ == "__main__":
    DOC.write_text(render())
