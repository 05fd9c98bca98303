"""The options several commands share, declared once (typer's Annotated form)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.query.engines import TP_BIN_ENV

TraceProcessorOption = Annotated[
    str | None,
    typer.Option("--trace-processor", help=f"trace_processor_shell binary (or ${TP_BIN_ENV})."),
]
EngineOption = Annotated[str, typer.Option(help="auto, trace_processor or builtin.")]
# What `check` and `ab` report alike.
RulesOption = Annotated[Path | None, typer.Option(help="Rules TOML (default rules otherwise).")]
FormatOption = Annotated[str, typer.Option("--format", help="table or json.")]
JunitOption = Annotated[Path | None, typer.Option(help="Also write a JUnit XML report.")]
GithubOption = Annotated[
    bool, typer.Option("--github", help="Also print GitHub Actions annotations.")
]
