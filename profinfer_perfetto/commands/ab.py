"""`profinfer-perfetto ab`: record a baseline and a candidate command in pairs, one right after
the other, and judge the candidate on the pairs (`check --paired`, check/paired.py)."""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto import signals
from profinfer_perfetto.capture.recorder import RecordRequest
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
from profinfer_perfetto.commands.record import RecordCommand
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.machine import peaks
from profinfer_perfetto.query.engines import EngineChoice

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
        roofs, roofs_note = peaks.for_record(None)
        request = RecordRequest(sched=self.sched, peaks=roofs, peaks_note=roofs_note)
        width = max(2, len(str(self.runs - 1)))
        for i in range(self.runs):
            # A then B, then B then A: what the first run of a pair gains or loses (a warm
            # cache, a CPU's clock still rising) falls on each side alike.
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                output = self.folder / f"{side}-{i:0{width}d}.pftrace"
                self._record(replace(request, command=commands[side]), output)
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

    def _record(self, request: RecordRequest, output: Path) -> None:
        """One run, as `record --no-follow -o OUTPUT -- COMMAND` makes it (nothing beside the
        target it times but the drains, as when the gate's error rates were measured:
        docs/ab.md); what record and the target say goes to stderr (stdout is the check's,
        which `--format json` keeps a JSON document)."""
        print(f"profinfer-perfetto: ab: {output.name}: {shlex.join(request.command or [])}",
              file=sys.stderr, flush=True)
        with _stdout_to_stderr():
            RecordCommand(request, output, follow=False).run()
        signals.raise_if_noted()  # a signal ended that capture: the pairs end with it


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 onto 2 for a while: this process's writes and the target's it starts."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
