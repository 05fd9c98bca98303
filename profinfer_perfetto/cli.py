"""The command line: registers the commands of profinfer_perfetto/commands, each a class that
declares and checks its own options (`cli`) and says what it does in its docstring (its help);
`main` maps errors to exit codes (errors.ExitCode)."""

from __future__ import annotations

import functools
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from profinfer_perfetto import __version__
from profinfer_perfetto.commands.ab import AbCommand
from profinfer_perfetto.commands.calibrate import CalibrateCommand
from profinfer_perfetto.commands.check import CheckCommand
from profinfer_perfetto.commands.doctor import DoctorCommand
from profinfer_perfetto.commands.draw import DagCommand, PlotCommand
from profinfer_perfetto.commands.open import OpenCommand
from profinfer_perfetto.commands.query import QueryCommand
from profinfer_perfetto.commands.record import RecordCommand
from profinfer_perfetto.commands.recover import RecoverCommand
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.signals import handled

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="eBPF operator-level profiler for llama.cpp / ggml that writes Perfetto traces.",
)


def _exiting(options: Callable[..., int]) -> Callable[..., None]:
    """A command's `cli` as typer calls it: its options, and its result as the exit code."""

    @functools.wraps(options)
    def command(*args: Any, **kwargs: Any) -> None:
        raise typer.Exit(options(*args, **kwargs))

    return command


def _register(name: str, command: type[Any]) -> None:
    """`command` as `profinfer-perfetto NAME`: its options from its `cli`, its help from its
    docstring."""
    app.command(name, help=inspect.getdoc(command))(_exiting(command.cli))


def recover(
    output: Annotated[Path, typer.Argument(help="The trace a killed `record -o OUTPUT` was to "
                                           "write.")],
) -> int:
    """Write the trace of a run whose recorder was killed (SIGKILL, out of memory) from the
    records it kept in OUTPUT.records, up to the last drain it wrote whole."""
    return RecoverCommand(output).run()


COMMANDS: dict[str, type[Any]] = {
    "query": QueryCommand, "check": CheckCommand, "ab": AbCommand, "calibrate": CalibrateCommand,
    "dag": DagCommand, "plot": PlotCommand, "doctor": DoctorCommand, "open": OpenCommand,
}
"""The commands after record and recover, in the order --help lists them."""

_register("record", RecordCommand)
app.command()(_exiting(recover))  # declared here: RecoverCommand has no `cli` yet
for _name, _command in COMMANDS.items():
    _register(_name, _command)


@app.command()
def version() -> None:
    """Print the version."""
    print(f"profinfer-perfetto {__version__}")


def main() -> None:
    """Run the command; exit with its code (errors.ExitCode): a ProfinferError is one sentence
    and 2, anything unexpected its traceback and 3 (never 1, which `check` means as a
    regression)."""
    try:
        with handled():  # SIGTERM and SIGHUP end it as Ctrl-C does: docs/signals.md
            app()
    except ProfinferError as exc:
        print(f"profinfer-perfetto: {exc}", file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)
    except KeyboardInterrupt:
        sys.exit(ExitCode.INTERRUPTED)
    except Exception as exc:
        traceback.print_exc()
        print(f"profinfer-perfetto: internal error ({type(exc).__name__}): a bug, please report "
              "it with the traceback above", file=sys.stderr)
        sys.exit(ExitCode.INTERNAL)
