"""The command line: thin typer wiring over the command classes in profinfer_perfetto/commands."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto import __version__
from profinfer_perfetto.capture.counters import counter_config
from profinfer_perfetto.capture.events import MAX_COUNTERS
from profinfer_perfetto.capture.program import RingSizes
from profinfer_perfetto.capture.recorder import RecordRequest
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.check.baseline import from_traces
from profinfer_perfetto.commands import doctor
from profinfer_perfetto.commands.ab import AbCommand
from profinfer_perfetto.commands.calibrate import CalibrateCommand
from profinfer_perfetto.commands.check import CheckCommand
from profinfer_perfetto.commands.draw import DagCommand, PlotCommand
from profinfer_perfetto.commands.open import DEFAULT_PORT, OpenCommand
from profinfer_perfetto.commands.query import QueryCommand, expand
from profinfer_perfetto.commands.record import RecordCommand
from profinfer_perfetto.commands.recover import RecoverCommand
from profinfer_perfetto.draw.dag import Fill
from profinfer_perfetto.draw.plot import FIGURES
from profinfer_perfetto.encode.stream import Rotation
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.machine import peaks
from profinfer_perfetto.query.engines import TP_BIN_ENV, EngineChoice
from profinfer_perfetto.signals import handled

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="eBPF operator-level profiler for llama.cpp / ggml that writes Perfetto traces.",
)

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


@app.command()
def record(
    command: Annotated[
        list[str] | None, typer.Argument(help="The command to run and trace, after --.")
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Trace file to write.")] = Path(
        "profinfer.pftrace"
    ),
    pid: Annotated[int | None, typer.Option(help="Attach to this running process.")] = None,
    duration: Annotated[
        float | None, typer.Option(help="Stop after this many seconds.", min=0.0)
    ] = None,
    counter: Annotated[
        list[str] | None,
        typer.Option(help="perf counter read at each op's start and end (up to 8): a perf "
                     "name (cycles, task-clock, ...) or a PMU's event, PMU/EVENT/ or "
                     "PMU/FIELD=VALUE,.../; 'none' for no counter.  [default: context-switches]"),
    ] = None,
    lib: Annotated[
        list[Path] | None,
        typer.Option(help="Also search this library for the runtime (one the target dlopens)."),
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="Write Chrome trace JSON.")] = False,
    ebpf: Annotated[bool, typer.Option("--ebpf", help="Print the BPF program and exit.")] = False,
    ring_pages: Annotated[
        int, typer.Option(help="Pages of each BPF ring buffer (a power of two).")
    ] = RingSizes().event_pages,
    tokens: Annotated[
        str | None,
        typer.Option(help="Trace ops only in token steps FIRST:LAST (0-based, LAST excluded)."),
    ] = None,
    sample: Annotated[
        int, typer.Option(help="Trace ops in one token step of every N (a light monitor).")
    ] = 1,
    ops: Annotated[
        str | None,
        typer.Option(help="Trace only these op types and/or one tensor-name prefix: "
                     "MUL_MAT,FLASH_ATTN_EXT,ffn_*"),
    ] = None,
    aggregate: Annotated[
        bool,
        typer.Option("--aggregate", help="Sum ops into per-op statistics in BPF (counts, time "
                     "histograms): a summary and counter tracks, no op events."),
    ] = False,
    barriers: Annotated[
        bool,
        typer.Option("--barriers/--no-barriers", help="Probe the barrier calls that end each "
                     "thread's share of an op (without: one trap per op, waits not separated)."),
    ] = True,
    inner_waits: Annotated[
        bool,
        typer.Option("--inner-waits", help="Also probe the barriers inside ops (matmuls, "
                     "CPU_REPACK, llamafile) and draw their waits within the op: two more "
                     "traps per such barrier, and seconds to remove the probes at the end."),
    ] = False,
    floor: Annotated[
        bool,
        typer.Option("--floor", help="Attach the op probes with programs that return at once "
                     "(no op events): the traps alone, to measure the floor of tracing ops "
                     "with uprobes on this machine."),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="With --tokens/--sample: remove the op probes between "
                     "the chosen steps (lowest overhead; a step may be missed on fast targets)."),
    ] = False,
    max_size: Annotated[
        str | None,
        typer.Option("--max-size", help="Write the run to a series of files of about this size "
                     "each (NAME.000.pftrace, ...; like 200M or 1G), each a whole trace."),
    ] = None,
    rotate: Annotated[
        int, typer.Option("--rotate", help="With --max-size: keep only the newest N files.")
    ] = 0,
    stream: Annotated[
        bool | None,
        typer.Option("--stream/--no-stream", help="Write the trace while the run goes (a "
                     "killed recorder leaves the run so far; the recorder works beside the "
                     "target), or keep the run's records on disk (OUTPUT.records) and write the "
                     "trace when it ends (the default, but with --max-size: nothing beside the "
                     "target while it runs). Memory stays flat either way."),
    ] = None,
    sched: Annotated[
        bool,
        typer.Option("--sched", help="Also record every context switch and wakeup on the "
                     "target's CPUs: CPU tracks, thread states, the CPU of each op and the "
                     "`interference` metric."),
    ] = False,
    peaks_file: Annotated[
        Path | None,
        typer.Option("--peaks", help="The machine's roofs (calibrate) to write into the trace "
                     f"for `roofline`  [default: ${peaks.PEAKS_ENV} or the user's cache, "
                     "where calibrate stores them, if there]"),
    ] = None,
) -> None:
    """Trace a llama.cpp run (a command, or --pid) into a Perfetto trace."""
    counters = ["context-switches"] if counter is None else [c for c in counter if c != "none"]
    for name in counters:
        counter_config(name)
    if len(counters) > MAX_COUNTERS:
        raise ProfinferError(f"at most {MAX_COUNTERS} counters can be read per op")
    rotation = _rotation(max_size, rotate, json)
    if rotation is not None and stream is False:
        raise ProfinferError("--max-size writes the trace as the run goes: leave out --no-stream")
    if stream and json:
        raise ProfinferError("--stream writes Perfetto traces as the run goes: leave out --json")
    if sched and json:
        raise ProfinferError("--sched needs the Perfetto format: Chrome JSON has no CPU "
                             "scheduling (leave out --json)")
    if bool(command) == (pid is not None):
        raise ProfinferError("give either a command to run (after --) or --pid, not both")
    if ring_pages <= 0 or ring_pages & (ring_pages - 1):
        raise ProfinferError(f"--ring-pages must be a power of two, not {ring_pages}")
    roofs, roofs_note = peaks.for_record(peaks_file)
    request = RecordRequest(
        command=command or None,
        pid=pid,
        duration_s=duration,
        counters=tuple(counters),
        libs=tuple(lib or ()),
        rings=RingSizes(ring_pages, ring_pages),
        selection=Selection.parse(tokens, sample, ops, detach, aggregate, barriers, floor,
                                  inner_waits),
        sched=sched,
        peaks=roofs,
        peaks_note=roofs_note,
    )
    raise typer.Exit(RecordCommand(request, output, json=json, ebpf=ebpf, rotation=rotation,
                                   stream=bool(stream) or rotation is not None).run())


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _rotation(max_size: str | None, rotate: int, json: bool) -> Rotation | None:
    if max_size is None:
        if rotate:
            raise ProfinferError("--rotate keeps the newest of the files --max-size makes: give "
                                 "--max-size too")
        return None
    if json:
        raise ProfinferError("--max-size writes Perfetto traces as the run goes: leave out --json")
    text = max_size.strip().upper().removesuffix("B")
    unit = text[-1:] if text[-1:] in _UNITS else ""
    try:
        size = int(float(text.removesuffix(unit)) * _UNITS[unit])
    except ValueError:
        size = 0
    if size < 1 << 20:
        raise ProfinferError(f"--max-size {max_size}: give a size of 1M or more (like 200M or 1G)")
    if rotate < 0:
        raise ProfinferError(f"--rotate {rotate}: give how many files to keep")
    return Rotation(size, rotate)


@app.command()
def recover(
    output: Annotated[Path, typer.Argument(help="The trace a killed `record -o OUTPUT` was to "
                                           "write.")],
) -> None:
    """Write the trace of a run whose recorder was killed (SIGKILL, out of memory) from the
    records it kept in OUTPUT.records, up to the last drain it wrote whole."""
    raise typer.Exit(RecoverCommand(output).run())


@app.command()
def query(
    trace: Annotated[str, typer.Argument(help="A trace, or a quoted glob of traces.")],
    metrics: Annotated[
        list[str] | None, typer.Argument(help="Canned metrics to run; none lists them.")
    ] = None,
    sql: Annotated[str | None, typer.Option("--sql", help="Ad-hoc SQL on the same tables.")] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="table, csv or json.")
    ] = "table",
    engine: Annotated[
        str, typer.Option(help="auto (trace_processor if it can be had), trace_processor, builtin.")
    ] = "auto",
    trace_processor: TraceProcessorOption = None,
    save_baseline: Annotated[
        Path | None,
        typer.Option(help="Also save the traces' samples (each trace a run) as a baseline."),
    ] = None,
) -> None:
    """Run canned ProfStat metrics (or --sql) on traces; with no metric, list them."""
    choice = EngineChoice(engine, trace_processor)
    if save_baseline is not None:
        from_traces(expand(trace), choice).save(save_baseline)
        print(f"saved baseline {save_baseline}", file=sys.stderr)
        if not metrics and sql is None:
            return
    command = QueryCommand(trace, list(metrics or []), sql, output_format, choice)
    raise typer.Exit(command.run())


@app.command()
def check(
    trace: Annotated[str, typer.Argument(help="The candidate trace, or a quoted glob of runs.")],
    baseline: Annotated[
        str, typer.Option(help="A baseline (query --save-baseline), or traces to compare with: "
                          "a quoted glob, or a folder of past runs.")
    ],
    rules: RulesOption = None,
    output_format: FormatOption = "table",
    junit: JunitOption = None,
    github: GithubOption = False,
    engine: EngineOption = "auto",
    trace_processor: TraceProcessorOption = None,
    last: Annotated[
        int, typer.Option(help="Keep only the newest N baseline runs (a folder or glob of "
                          "runs, by modification time); 0: all.")
    ] = 0,
    trend: Annotated[
        Path | None, typer.Option(help="Also write each key's median run by run (JSON).")
    ] = None,
    trend_plot: Annotated[
        Path | None, typer.Option(help="Also draw each key's trend (SVG).")
    ] = None,
    paired: Annotated[
        bool, typer.Option("--paired", help="The i-th baseline run and the i-th candidate run "
                           "(by name) were recorded one right after the other: judge each key "
                           "on the pairs' ratios (docs/ab.md).")
    ] = False,
) -> None:
    """Compare a trace with a baseline: exit 0 pass, 1 regression, 2 bad input, 3 internal error,
    4 the graph changed (docs/graph-diff.md)."""
    raise typer.Exit(CheckCommand(trace, baseline, rules=rules, output_format=output_format,
                                  junit=junit, github=github,
                                  engine=EngineChoice(engine, trace_processor), last=last,
                                  trend=trend, trend_plot=trend_plot, paired=paired).run())


@app.command()
def ab(
    command: Annotated[
        list[str], typer.Argument(help="The candidate command to record, after --.")
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Folder to keep the runs' traces in.")
    ],
    baseline_cmd: Annotated[
        str, typer.Option("--baseline-cmd", help="The baseline command to record, quoted.")
    ],
    runs: Annotated[int, typer.Option(help="Pairs of runs to record.")] = 3,
    sched: Annotated[
        bool, typer.Option("--sched", help="Record with --sched (what a task beside the target "
                           "stalls is judged too).")
    ] = False,
    rules: RulesOption = None,
    output_format: FormatOption = "table",
    junit: JunitOption = None,
    github: GithubOption = False,
    engine: EngineOption = "auto",
    trace_processor: TraceProcessorOption = None,
) -> None:
    """Record a baseline and a candidate command in pairs, one right after the other (A B, then
    B A, ...), and check the candidate on the pairs (check --paired): its exit code."""
    check_command = CheckCommand("", "", rules=rules, output_format=output_format, junit=junit,
                                 github=github, engine=EngineChoice(engine, trace_processor),
                                 paired=True)
    raise typer.Exit(AbCommand(output, runs, baseline_cmd, command, sched, check_command).run())


@app.command()
def calibrate(
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Where to store the roofs  [default: "
                                  f"${peaks.PEAKS_ENV} or the user's cache]")
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
        list[Path] | None, typer.Option("--model", help="A GGUF model whose main weight type's "
                                        "matmul roof to measure (repeat it).")
    ] = None,
    mib: Annotated[int, typer.Option(help="MiB of each array the memory roof copies.",
                                     min=16)] = 256,
) -> None:
    """Measure this machine's roofs (memory GB/s; ggml matmul GFLOP/s per weight type) at 1..N
    threads and store them; record writes them into its traces for the `roofline` metric."""
    command = CalibrateCommand(output or peaks.default_path(), list(threads or []), llama_bench,
                               list(model or []), mib)
    raise typer.Exit(command.run())


@app.command()
def dag(
    trace: Annotated[Path, typer.Argument(help="The trace.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="NAME.svg, or NAME.dot.")],
    graph: Annotated[
        int | None, typer.Option(help="The graph to draw (default: the first decode graph).")
    ] = None,
    fill: Annotated[
        str, typer.Option(help="What a node's colour says: " + ", ".join(f"{f.value}"
                                                                        for f in Fill) + ".")
    ] = Fill.TIME.value,
    engine: EngineOption = "auto",
    trace_processor: TraceProcessorOption = None,
) -> None:
    """Draw one graph of a run as its DAG (graphviz): nodes by layer, filled by their time."""
    raise typer.Exit(DagCommand(trace, output, graph, fill,
                                EngineChoice(engine, trace_processor)).run())


@app.command()
def plot(
    trace: Annotated[Path, typer.Argument(help="The trace.")],
    figure: Annotated[str, typer.Argument(help="The figure: " + ", ".join(FIGURES) + ".")],
    output: Annotated[Path, typer.Option("-o", "--output", help="NAME.svg.")],
    engine: EngineOption = "auto",
    trace_processor: TraceProcessorOption = None,
) -> None:
    """Draw a ProfStat figure of a trace (a metric's points) as SVG."""
    raise typer.Exit(PlotCommand(trace, figure, output,
                                 EngineChoice(engine, trace_processor)).run())


@app.command("doctor")
def doctor_command(
    target: Annotated[
        Path | None, typer.Argument(help="Also read the ggml facts of this binary or library.")
    ] = None,
    pid: Annotated[
        int | None, typer.Option(help="Also read the ggml facts of this process.")
    ] = None,
) -> None:
    """Report what this machine offers (root, BPF, BCC, headers, counters) and how to fix gaps;
    with a binary or --pid, the ggml facts read from its files and how each was found."""
    if target is not None and pid is not None:
        raise ProfinferError("give either a binary or --pid, not both")
    raise typer.Exit(doctor.run(target, pid))


@app.command("open")
def open_command(
    trace: Annotated[Path, typer.Argument(help="The trace to open.", readable=False)],
    port: Annotated[
        int, typer.Option(help="Port to serve it on, on 127.0.0.1 (ui.perfetto.dev fetches "
                          "only from 9001).", min=1, max=65535)
    ] = DEFAULT_PORT,
    browser: Annotated[
        bool, typer.Option("--browser/--no-browser", help="Open the browser (otherwise print "
                           "the URL and how to reach it).")
    ] = True,
    timeout: Annotated[
        float | None,
        typer.Option(help="Stop serving after this many seconds (exit 2 if not fetched).",
                     min=0.0),
    ] = None,
) -> None:
    """Serve a trace on 127.0.0.1 until ui.perfetto.dev has fetched it, and open the UI on it."""
    raise typer.Exit(OpenCommand(trace, port, browser, timeout).run())


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
