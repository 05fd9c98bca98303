"""The engines that answer SQL on a trace: Perfetto's trace_processor, or a built-in SQLite one.

trace_processor is the engine. Its binary comes from `--trace-processor PATH`, then
`PROFINFER_TP_BIN`, then the perfetto Python API's own download. Where none of those works
(an air-gapped machine), the built-in engine imports the trace into SQLite tables with
trace_processor's names and columns (query/importer.py), so the same SQL runs on both.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query import importer
from profinfer_perfetto.query.import_scan import check_expansion
from profinfer_perfetto.query.package import FOLDER
from profinfer_perfetto.query.trace_file import check_whole

TP_BIN_ENV = "PROFINFER_TP_BIN"
ENGINES = ("auto", "trace_processor", "builtin")


@dataclass(frozen=True)
class EngineChoice:
    """Which engine answers (--engine) and the trace_processor_shell binary given for it
    (--trace-processor; None: $PROFINFER_TP_BIN or the perfetto API's own)."""

    name: str = "auto"
    """auto (trace_processor if a binary can be had, else builtin), trace_processor or builtin."""
    tp_bin: str | None = None

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ProfinferError(f"unknown engine {self.name!r} (known: {', '.join(ENGINES)})")


AUTO = EngineChoice()
"""The default: trace_processor if a binary can be had, else builtin."""


@dataclass(frozen=True)
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]


class Engine(Protocol):
    name: str

    def query(self, sql: str) -> Result: ...

    def close(self) -> None: ...


def _tidy(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row as both engines give it: SQLite builds differ in whether ROUND of a tiny negative
    number is -0.0 or 0.0 (trace_processor's gives -0.0), and a zero is written 0.0."""
    return tuple(0.0 if isinstance(v, float) and v == 0.0 else v for v in row)


def statements(sql: str) -> list[str]:
    """SQL split at the `;` ending each statement, not at one inside a string, a quoted name or
    a comment (sqlite3.complete_statement tells them apart); lines of comment left out."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    found, current = [], ""
    for piece in "\n".join(lines).split(";"):
        current += piece
        if sqlite3.complete_statement(current + ";"):
            found.append(current)
            current = ""
        else:
            current += ";"
    found.append(current.removesuffix(";"))
    return [s.strip() for s in found if s.strip()]


class BuiltinEngine:
    name = "builtin"

    def __init__(self, trace: Path, data: bytes) -> None:
        """The trace's bytes, as open_engine read them for its whole-file check."""
        self._db = importer.load(trace, data)

    def query(self, sql: str) -> Result:
        result = Result([], [])
        try:
            for statement in statements(sql):
                cursor = self._db.execute(statement)
                if cursor.description is not None:
                    result = Result([d[0] for d in cursor.description],
                                    [_tidy(row) for row in cursor.fetchall()])
        except sqlite3.Error as exc:
            raise ProfinferError(f"SQL error: {exc}") from None
        return result

    def close(self) -> None:
        self._db.close()


class TraceProcessorEngine:
    name = "trace_processor"

    def __init__(self, trace: Path, data: bytes, bin_path: str) -> None:
        """Load `trace` (its bytes, `data`) into the trace_processor_shell at `bin_path`; a trace
        it rejects, or reads only in part (an error or data-loss entry in its `stats`), is an
        error."""
        self._shell = _Shell(bin_path)
        try:
            self._load(trace, data)
        except BaseException:  # a Ctrl-C too: the shell, with the trace, ends with us
            self._shell.stop()
            raise

    def _load(self, trace: Path, data: bytes) -> None:
        from perfetto.trace_processor import TraceProcessor

        try:
            self._tp = TraceProcessor(trace=_chunks(data), remote=self._shell.addr)
        except Exception as exc:  # the API raises bare Exceptions too
            raise ProfinferError(f"trace_processor could not load {trace}: {_first_line(exc)}"
                                 ) from None
        problems = self.query(_STATS_PROBLEMS).rows
        if problems:
            said = ", ".join(f"{name}{'' if idx is None else f'[{idx}]'} = {value} ({severity})"
                             for name, idx, severity, value in problems)
            raise ProfinferError(f"trace_processor read {trace} only in part: its stats say {said}")

    def query(self, sql: str) -> Result:
        from perfetto.trace_processor import TraceProcessorException

        result = Result([], [])
        try:
            for statement in statements(sql):
                it = self._tp.query(statement)
                rows = [_tidy(tuple(getattr(r, c) for c in it.column_names)) for r in it]
                result = Result(list(it.column_names), rows)
        except TraceProcessorException as exc:
            raise ProfinferError(f"SQL error: {str(exc).strip().splitlines()[-1]}") from None
        return result

    def close(self) -> None:
        self._tp.close()
        self._shell.stop()


CHUNK_BYTES = 16 << 20
"""The trace goes to trace_processor in pieces this big (the perfetto API reads a file in 1 MiB
pieces, one HTTP request each)."""
SHELL_START_S = 30.0


def _chunks(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for at in range(0, len(data), CHUNK_BYTES):
        yield bytes(view[at:at + CHUNK_BYTES])


def _ending_with_us() -> list[str]:
    """What runs a command so that it gets SIGKILL when the thread that started it ends, however
    it ends (a SIGTERM or SIGKILL to us runs no cleanup): util-linux's setpriv, where there."""
    return ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


class _Shell:
    """trace_processor_shell serving its HTTP RPC on a free local port, started here rather than
    by the perfetto API, whose start-up check sleeps a whole second whenever the shell is not
    listening yet (nearly always): here the check repeats every 10 ms. It ends when we do: on
    any way out of its start and load, and, where setpriv is, when we are killed."""

    def __init__(self, bin_path: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.addr = f"127.0.0.1:{port}"
        if not os.access(bin_path, os.X_OK):
            raise ProfinferError(f"cannot run trace_processor {bin_path}: it is not executable")
        try:
            self._proc = subprocess.Popen([*_ending_with_us(), bin_path, "-D", "--http-port",
                                           str(port), "--add-sql-package", str(FOLDER)],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        except OSError as exc:
            raise ProfinferError(f"cannot run trace_processor {bin_path}: {exc.strerror}"
                                 ) from None
        try:
            deadline = time.monotonic() + SHELL_START_S
            while not self._listening():
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise ProfinferError(f"trace_processor {bin_path} did not start serving")
                time.sleep(0.01)
        except BaseException:  # a Ctrl-C too
            self.stop()
            raise

    def _listening(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.addr}/status", timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """End the shell (it holds nothing to save) and reap it."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()


_STATS_PROBLEMS = """
select name, idx, severity, value from stats
where severity in ('error', 'data_loss') and value > 0 order by name, idx
"""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def find_trace_processor(tp_bin: str | None = None) -> tuple[str | None, str]:
    """The trace_processor_shell to use, and where it came from (or why there is none).

    `tp_bin` (--trace-processor), then $PROFINFER_TP_BIN, both of which must name a file; then
    the perfetto API's own pinned binary, downloaded once and cached (an air-gapped machine has
    none).
    """
    for path, source in ((tp_bin, "--trace-processor"), (os.environ.get(TP_BIN_ENV), TP_BIN_ENV)):
        if path:
            if not Path(path).is_file():
                raise ProfinferError(f"no trace_processor binary at {path} (from {source})")
            return path, path
    from perfetto.trace_processor.platform import PlatformDelegate

    try:
        with _quiet():
            path = PlatformDelegate().get_shell_path(bin_path=None)
    except subprocess.CalledProcessError as exc:  # its download runs curl
        return None, f"the perfetto API's download failed (curl exit code {exc.returncode})"
    except Exception as exc:  # and raises bare Exceptions for the rest
        return None, f"the perfetto API could not get one: {_first_line(exc)}"
    return path, f"{path}, the perfetto API's own"


_QUIET = threading.Lock()
"""`_quiet` swaps the process's stdout and stderr: one thread at a time."""


@contextmanager
def _quiet() -> Iterator[None]:
    """Keep the perfetto API's download chatter (and curl's) off our stdout and stderr."""
    with _QUIET, tempfile.TemporaryFile() as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def open_engine(trace: Path, choice: EngineChoice = AUTO) -> tuple[Engine, str]:
    """An engine loaded with the trace, and a sentence on how it was chosen.

    Only a missing binary falls back to builtin (choice "auto"): a trace that trace_processor
    rejects or reads in part is an error.
    """
    if not trace.is_file():
        raise ProfinferError(f"no trace at {trace}")
    try:
        data = trace.read_bytes()
    except OSError as exc:
        raise ProfinferError(f"cannot read {trace}: {exc.strerror}") from None
    whole = check_whole(trace, data)
    cut = "" if whole == len(data) else (
        f"; the recording was cut short (its recorder was killed): its last {len(data) - whole} "
        "bytes, a packet it was writing, are left out")
    data = data[:whole]
    if choice.name == "builtin":
        return BuiltinEngine(trace, data), "builtin engine (asked for)" + cut
    bin_path, source = find_trace_processor(choice.tp_bin)
    if bin_path is not None:
        check_expansion(trace, data)
        return TraceProcessorEngine(trace, data, bin_path), f"trace_processor ({source})" + cut
    if choice.name == "trace_processor":
        raise ProfinferError(f"no trace_processor binary: {source}; give --trace-processor PATH "
                             f"or set {TP_BIN_ENV}")
    return (BuiltinEngine(trace, data),
            f"builtin engine (no trace_processor binary: {source})" + cut)
