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
    GRAPH_CHANGED = 4
    """`check`: no regression, but the candidate's graph is not the baseline's (its ops,
    weights, backends or work differ: check/graph.py, docs/graph-diff.md). A regression is 1
    even where the graph changed too, so that a CI that accepts 4 (an intended change) never
    lets a slower build through."""
    INTERRUPTED = 130


class ProfinferError(Exception):
    """A problem with the user's input or machine, stated as one sentence."""
