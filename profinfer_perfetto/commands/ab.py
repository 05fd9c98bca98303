"""`profinfer-perfetto ab`: record a baseline and a candidate command in pairs, one right after
the other, and judge the candidate on the pairs (`check --paired`, check/paired.py)."""

from __future__ import annotations

import glob
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.capture.recorder import RecordRequest, plan
from profinfer_perfetto.check.paired import MIN_PAIRS
from profinfer_perfetto.commands.check import CheckCommand
from profinfer_perfetto.commands.options import (
    EngineOption,
    FormatOption,
    GithubOption,
    JunitOption,
    RulesOption,
    TraceProcessorOption,
)
from profinfer_perfetto.commands.record import GO, READY
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.engines import EngineChoice

EXEC_WRAPPERS = frozenset({"env", "taskset", "nice", "numactl", "chrt", "ionice", "setarch"})
"""Commands that only set something up and exec the command they are given: held where the
runtime's loader reports it, they run nothing beside it (a shell script may: a busy loop)."""
SIDES = ("base", "cand")
"""The names of the baseline's and the candidate's traces: base-00.pftrace, cand-00.pftrace."""


@dataclass
class AbCommand:
    """Record a baseline and a candidate command in pairs, one right after the other (A B, then
    B A, ...), and check the candidate on the pairs (check --paired): its exit code."""

    folder: Path
    runs: int
    """Pairs of runs."""
    baseline: str
    """The baseline's command, as one string (shell words)."""
    candidate: list[str]
    sched: bool
    """Record with --sched."""
    check: CheckCommand
    """How the pairs are judged (its traces and baseline are the runs')."""

    @staticmethod
    def cli(
        command: Annotated[
            list[str], typer.Argument(help="The candidate command to record, after --.")
        ],
        output: Annotated[
            Path, typer.Option("-o", "--output", help="Folder to keep the runs' traces in.")
        ],
        baseline_cmd: Annotated[
            str, typer.Option("--baseline-cmd", help="The baseline command to record, quoted.")
        ],
        runs: Annotated[int, typer.Option(
            help="Pairs of runs to record (from 4, each key is judged on their median).")] = 3,
        sched: Annotated[
            bool, typer.Option("--sched", help="Record with --sched (what a task beside the "
                               "target stalls is judged too).")
        ] = False,
        rules: RulesOption = None,
        output_format: FormatOption = "table",
        junit: JunitOption = None,
        github: GithubOption = False,
        engine: EngineOption = "auto",
        trace_processor: TraceProcessorOption = None,
    ) -> int:
        """The options, checked: the command to run."""
        check = CheckCommand("", "", rules=rules, output_format=output_format, junit=junit,
                             github=github, engine=EngineChoice(engine, trace_processor),
                             paired=True)
        return AbCommand(output, runs, baseline_cmd, command, sched, check).run()

    def run(self) -> int:
        commands = self._commands()
        self.check.options()
        self._folder()
        ahead = {side: (Path(command[0]).name in EXEC_WRAPPERS
                        or plan(RecordRequest(command=command)) is not None)
                 for side, command in commands.items()}
        width = max(2, len(str(self.runs - 1)))
        for i in range(self.runs):
            # A then B, then B then A: what the first run of a pair gains or loses (a warm
            # cache, a CPU's clock still rising) falls on each side alike.
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            first, second = (_Run(commands[side], self.folder / f"{side}-{i:0{width}d}.pftrace",
                                  self.sched, ahead[side]) for side in order)
            _pair(first, second)
        where = glob.escape(str(self.folder))
        return replace(self.check, trace=f"{where}/cand-*.pftrace",
                       baseline=f"{where}/base-*.pftrace", paired=True).run()

    def _commands(self) -> dict[str, list[str]]:
        """Each side's command; bad input said before anything is recorded."""
        if self.runs < MIN_PAIRS:
            raise ProfinferError(f"--runs {self.runs}: a paired check needs {MIN_PAIRS} pairs "
                                 "at least (3 or more tell more)")
        try:
            baseline = shlex.split(self.baseline)
        except ValueError as exc:
            raise ProfinferError(f"--baseline-cmd {self.baseline!r}: {exc}") from None
        if not baseline or not self.candidate:
            raise ProfinferError("give the baseline's command (--baseline-cmd 'CMD ...') and "
                                 "the candidate's (after --)")
        return dict(zip(SIDES, (baseline, self.candidate), strict=True))

    def _folder(self) -> None:
        """The folder, made if need be, with no runs of an earlier `ab` in it (they would be
        taken for pairs)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProfinferError(f"cannot make {self.folder}: {exc.strerror}") from None
        earlier = sorted(p for side in SIDES for p in self.folder.glob(f"{side}-*.pftrace"))
        if earlier:
            raise ProfinferError(f"{self.folder} holds the runs of an earlier ab ({earlier[0]}"
                                 "): give a new or empty folder")


@dataclass(frozen=True)
class _Run:
    """A run of a pair: its command, its trace, with --sched, and whether it is made ready
    before the run before it goes: where the command's own files hold the runtime (held before
    its exec) or it is one of EXEC_WRAPPERS, but not another wrapper, which runs until the
    runtime is found in it and may start more meanwhile (the bench's busy loop beside the
    candidate would run beside the baseline)."""

    command: list[str]
    output: Path
    sched: bool
    ahead: bool


def _pair(first: _Run, second: _Run) -> None:
    """Two runs, one right after the other: each by a `record --hold-fd` of its own, the second
    (where it can be) ready, its probes compiled and attached and its target held, before the
    first goes, so that it starts within a fraction of a second of the first's end (this VM's
    speed changes from one second to the next: docs/ab.md, "Pairs close in time")."""
    turns = [_Turn.start(first)]
    try:
        if second.ahead:
            turns.append(_Turn.start(second))
        for turn in turns:
            turn.ready()
        turns[0].go()
        if len(turns) == 1:
            turns.append(_Turn.start(second))
            turns[1].ready()
        turns[1].go()
    finally:
        for turn in turns:
            turn.end()


@dataclass
class _Turn:
    """A run of a pair: `record --no-follow --hold-fd` in a process of its own (nothing beside
    the target it times but the drains, as when the gate's error rates were measured:
    docs/ab.md), which attaches the probes and holds its target until its turn. What record and
    the target say goes to stderr (stdout is the check's, which `--format json` keeps a JSON
    document)."""

    proc: subprocess.Popen[bytes]
    control: socket.socket
    name: str

    @staticmethod
    def start(run: _Run) -> _Turn:
        print(f"profinfer-perfetto: ab: {run.output.name}: {shlex.join(run.command)}",
              file=sys.stderr, flush=True)
        control, theirs = socket.socketpair()
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "profinfer_perfetto", "record", "--no-follow",
                 "--hold-fd", str(theirs.fileno()), "-o", str(run.output),
                 *(["--sched"] if run.sched else []), "--", *run.command],
                stdout=sys.stderr.fileno(), pass_fds=[theirs.fileno()])
        return _Turn(proc, control, run.output.name)

    def ready(self) -> None:
        """Once its probes are attached."""
        if self.control.recv(len(READY), socket.MSG_WAITALL) != READY:
            self._failed("before its probes were attached")

    def go(self) -> None:
        """Let its target run; returns once the trace is written."""
        self.control.sendall(GO)
        self.control.close()
        if self.proc.wait() != 0:
            self._failed("")

    def end(self) -> None:
        """Ended, whatever happened: a held target is ended by its recorder (the end of file it
        reads), and nothing recorded; a running one goes on to its end, or to the signal that
        ended `ab` where that came from a terminal (its process group), and is written."""
        self.control.close()
        self.proc.wait()

    def _failed(self, when: str) -> None:
        code = self.proc.wait()
        raise ProfinferError(f"ab: the run for {self.name} failed{' ' + when if when else ''} "
                             f"(record exited {code}; what it said is above)")
