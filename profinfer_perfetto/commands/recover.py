"""`profinfer-perfetto recover`: the trace of a run whose recorder was killed, from the records
it left on disk (record's default keeps them in OUTPUT.records until the run ends)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from profinfer_perfetto.capture.run import Recording, Records, drained_dtypes
from profinfer_perfetto.capture.spill import (
    left_run,
    locked,
    make_durable,
    read_drains,
    spill_path,
)
from profinfer_perfetto.commands.record import report_written
from profinfer_perfetto.encode.output import check_writable
from profinfer_perfetto.encode.stream import write_trace
from profinfer_perfetto.errors import ExitCode

RECOVERED = "recorder killed"
"""The status of a recovered run."""


@dataclass
class RecoverCommand:
    output: Path
    """The trace the killed recorder was to write (its records are in OUTPUT.records)."""

    def run(self) -> int:
        folder = spill_path(self.output)
        with locked(folder):
            run = left_run(folder)
            check_writable(self.output)
            dtypes = drained_dtypes(len(run.counters))
            drains = read_drains(folder, dtypes)
            run = replace(run, status=RECOVERED, notes=[
                *run.notes, "recovered from the records a killed recorder left: the run up to "
                "the last drain it wrote whole; events lost to full rings are not known",
                *drains.notes])
            ended = Recording(**vars(Records.empty(len(run.counters))), run=run)
            stream = write_trace(self.output, drains, ended)
            make_durable(stream.files)
            shutil.rmtree(folder)
        report_written(stream)
        return ExitCode.OK
