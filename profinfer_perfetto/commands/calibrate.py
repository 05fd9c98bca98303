"""`profinfer-perfetto calibrate`: measure this machine's roofs and store them for record."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.encode.output import check_writable
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.machine.peaks import (
    PEAKS_ENV,
    Peaks,
    compute_peaks,
    default_path,
    machine,
    memory_peak,
)


@dataclass
class CalibrateCommand:
    """Measure this machine's roofs (memory GB/s; ggml matmul GFLOP/s per weight type) at 1..N
    threads and store them; record writes them into its traces for the `roofline` metric."""

    output: Path
    threads: list[int] = field(default_factory=list)
    """Thread counts to measure at (default: 1 to the CPUs this process may use)."""
    llama_bench: Path | None = None
    models: list[Path] = field(default_factory=list)
    """Models whose weight types llama-bench times (none: the memory roof only)."""
    mib: int = 256

    @staticmethod
    def cli(
        output: Annotated[
            Path | None, typer.Option("-o", "--output", help="Where to store the roofs  "
                                      f"[default: ${PEAKS_ENV} or the user's cache]")
        ] = None,
        threads: Annotated[
            list[int] | None, typer.Option("--threads", help="A thread count to measure at "
                                           "(repeat it; default 1 to the CPUs usable).")
        ] = None,
        llama_bench: Annotated[
            Path | None, typer.Option("--llama-bench", help="The build's llama-bench, to time "
                                      "ggml's matmuls on --model.")
        ] = None,
        model: Annotated[
            list[Path] | None, typer.Option("--model", help="A GGUF model whose main weight "
                                            "type's matmul roof to measure (repeat it).")
        ] = None,
        mib: Annotated[int, typer.Option(help="MiB of each array the memory roof copies.",
                                         min=16)] = 256,
    ) -> int:
        """The options, checked: the command to run."""
        return CalibrateCommand(output or default_path(), list(threads or []), llama_bench,
                                list(model or []), mib).run()

    def run(self) -> int:
        if self.models and self.llama_bench is None:
            raise ProfinferError("--model needs --llama-bench (the build's llama-bench times "
                                 "ggml's matmuls on it)")
        for path in [*self.models, *([self.llama_bench] if self.llama_bench else [])]:
            if not path.is_file():
                raise ProfinferError(f"{path} does not exist")
        threads = self.threads or list(range(1, len(os.sched_getaffinity(0)) + 1))
        if min(threads) < 1:
            raise ProfinferError("--threads takes thread counts of 1 or more")
        with contextlib.suppress(OSError):  # check_writable says what is wrong, if anything
            self.output.parent.mkdir(parents=True, exist_ok=True)
        check_writable(self.output)  # now, not after minutes of measuring
        peaks = Peaks(machine=machine(), measured=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime()))
        for n in threads:
            peaks.peaks.append(memory_peak(n, self.mib))
        for model in self.models:
            assert self.llama_bench is not None
            peaks.peaks += compute_peaks(self.llama_bench, model, threads)
        peaks.save(self.output)
        for p in peaks.peaks:
            unit = "GB/s" if p.kind == "memory" else f"GFLOP/s ({p.dtype})"
            print(f"  {p.kind} {p.threads} threads: {p.value} {unit}  [{p.how}]")
        print(f"saved {self.output}: record writes these roofs into its traces (--peaks)",
              file=sys.stderr)
        return ExitCode.OK
