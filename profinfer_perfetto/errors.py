"""The one error type the CLI turns into a single sentence, and the exit codes of every command
(as memray maps its errors in one place): cli.main is the only place that exits."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    REGRESSION = 1
    """A verdict failed: `check` found a regression (`doctor`: the machine is not ready)."""
    BAD_INPUT = 2
    """A ProfinferError: the user's input or machine, stated in one sentence."""
    INTERNAL = 3
    """Anything else: a bug, with its traceback on stderr."""
    INTERRUPTED = 130


class ProfinferError(Exception):
    """A problem with the user's input or machine, stated as one sentence."""
