"""`profinfer-perfetto record`: capture a llama.cpp run into a Perfetto (or Chrome JSON) trace."""

from __future__ import annotations

import io
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.analysis.target import ProbePlan
from profinfer_perfetto.capture import process
from profinfer_perfetto.capture.affinity import leaves_a_cpu
from profinfer_perfetto.capture.counters import DEFAULT_COUNTERS, counter_config
from profinfer_perfetto.capture.events import MAX_COUNTERS
from profinfer_perfetto.capture.program import RingSizes
from profinfer_perfetto.capture.recorder import (
    RecordRequest,
    plan,
    program_of,
    record,
    require_root,
)
from profinfer_perfetto.capture.run import Recording
from profinfer_perfetto.capture.sched import sched_text
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.capture.spill import Spill, make_durable, spill_path
from profinfer_perfetto.encode import units
from profinfer_perfetto.encode.chrome import write_chrome_json
from profinfer_perfetto.encode.follow import Follower, noted
from profinfer_perfetto.encode.output import atomic_output, check_writable
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.encode.stream import Rotation, TraceStream, write_trace
from profinfer_perfetto.encode.units import UnitsWritten
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.machine import peaks
from profinfer_perfetto.model.aggregate import op_stats
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.names import PHASES
from profinfer_perfetto.model.totals import RunTotals
from profinfer_perfetto.model.trace_model import TraceModel, build

CommandArgument = Annotated[
    list[str] | None, typer.Argument(help="The command to run and trace, after --.")
]
OutputOption = Annotated[Path, typer.Option("-o", "--output", help="Trace file to write.")]
PidOption = Annotated[int | None, typer.Option(help="Attach to this running process.")]
DurationOption = Annotated[
    float | None, typer.Option(help="Stop after this many seconds.", min=0.0)
]
CounterOption = Annotated[
    list[str] | None,
    typer.Option(help="perf counter read at each op's start and end (up to 8): a perf "
                 "name (cycles, task-clock, ...) or a PMU's event, PMU/EVENT/ or "
                 "PMU/FIELD=VALUE,.../; 'none' for no counter.  [default: context-switches]"),
]
LibOption = Annotated[
    list[Path] | None,
    typer.Option(help="Also search this library for the runtime (one the target dlopens)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Write Chrome trace JSON.")]
EbpfOption = Annotated[bool, typer.Option("--ebpf", help="Print the BPF program and exit.")]
RingPagesOption = Annotated[
    int, typer.Option(help="Pages of each BPF ring buffer (a power of two).")
]
RING_PAGES = RingSizes().event_pages
TokensOption = Annotated[
    str | None,
    typer.Option(help="Trace ops only in token steps FIRST:LAST (0-based, LAST excluded)."),
]
SampleOption = Annotated[
    int, typer.Option(help="Trace ops in one token step of every N (a light monitor).")
]
OpsOption = Annotated[
    str | None,
    typer.Option(help="Trace only these op types and/or one tensor-name prefix: "
                 "MUL_MAT,FLASH_ATTN_EXT,ffn_*"),
]
AggregateOption = Annotated[
    bool,
    typer.Option("--aggregate", help="Sum ops into per-op statistics in BPF (counts, time "
                 "histograms): a summary and counter tracks, no op events."),
]
BarriersOption = Annotated[
    bool,
    typer.Option("--barriers/--no-barriers", help="Probe the barrier calls that end each "
                 "thread's share of an op (without: one trap per op, waits not separated)."),
]
InnerWaitsOption = Annotated[
    bool,
    typer.Option("--inner-waits", help="Also probe the barriers inside ops (matmuls, "
                 "CPU_REPACK, llamafile) and draw their waits within the op: two more "
                 "traps per such barrier (and, before Linux 6.6, seconds to remove the "
                 "probes at the end)."),
]
FloorOption = Annotated[
    bool,
    typer.Option("--floor", help="Attach the op probes with programs that return at once "
                 "(no op events): the traps alone, to measure the floor of tracing ops "
                 "with uprobes on this machine."),
]
ExactOption = Annotated[
    bool,
    typer.Option("--exact", help="Probe each op's begin too: two traps per op and thread, each "
                 "thread's start of an op as it happened (by default one trap, at the graph "
                 "loop's barrier calls, and each op begins at the barrier's release); always "
                 "so with --counter, --ops, --aggregate and --inner-waits."),
]
DetachOption = Annotated[
    bool,
    typer.Option("--detach", help="With --tokens/--sample: remove the op probes between "
                 "the chosen steps (lowest overhead; a step may be missed on fast targets)."),
]
MaxSizeOption = Annotated[
    str | None,
    typer.Option("--max-size", help="Write the run to a series of files of about this size "
                 "each (NAME.000.pftrace, ...; like 200M or 1G), each a whole trace."),
]
RotateOption = Annotated[
    int, typer.Option("--rotate", help="With --max-size: keep only the newest N files.")
]
StreamOption = Annotated[
    bool | None,
    typer.Option("--stream/--no-stream", help="Write the trace while the run goes (a "
                 "killed recorder leaves the run so far; the recorder works beside the "
                 "target), or keep the run's records on disk (OUTPUT.records) and write the "
                 "trace when it ends (the default, but with --max-size: nothing beside the "
                 "target while it runs). Memory stays flat either way."),
]
FollowOption = Annotated[
    bool | None,
    typer.Option("--follow/--no-follow", help="Have a process at idle priority write the "
                 "trace from the run's records while the run goes, so that it is done soon "
                 "after the run (it slows a target that leaves no core free; docs/record.md).  "
                 "[default: where the target leaves a CPU the recorder may use free: pinned "
                 "off it, or computing on fewer threads than their CPUs]",
                 show_default=False),
]
SchedOption = Annotated[
    bool,
    typer.Option("--sched", help="Also record every context switch and wakeup on the "
                 "target's CPUs: CPU tracks, thread states, the CPU of each op and the "
                 "`interference` metric."),
]
PeaksOption = Annotated[
    Path | None,
    typer.Option("--peaks", help="The machine's roofs (calibrate) to write into the trace "
                 f"for `roofline`  [default: ${peaks.PEAKS_ENV} or the user's cache, "
                 "where calibrate stores them, if there]"),
]
HoldFdOption = Annotated[
    int | None,
    typer.Option("--hold-fd", hidden=True, help="(ab's) Once the probes are attached, write "
                 "READY to this descriptor and let the target run only on GO from it."),
]
READY = b"attached\n"
"""What a run held by --hold-fd writes once its probes are attached (its target held)."""
GO = b"go\n"
"""What lets a run held by --hold-fd go; anything else (ab ended: end of file) ends its target,
and nothing is recorded."""
GpuTimestampsOption = Annotated[
    bool,
    typer.Option("--gpu-timestamps", help="With a launched command on ggml's Vulkan backend: "
                 "have the backend time each op with GPU timestamp queries "
                 "(GGML_VK_PERF_LOGGER; a barrier after each op) and draw each op's device "
                 "time on the device's track."),
]


@dataclass
class RecordCommand:
    """Trace a llama.cpp run (a command, or --pid) into a Perfetto trace."""

    request: RecordRequest
    output: Path
    json: bool = False
    ebpf: bool = False
    rotation: Rotation | None = None
    stream: bool = False
    """Write the trace while the run goes; else when it ends, from the records kept on disk."""
    follow: bool | None = None
    """With the records kept on disk: a follower process writes the trace from them as they
    come (True), never (False), or where the target leaves the recorder a CPU (None)."""
    hold_fd: int | None = None
    """A descriptor on which the run waits for its turn once its probes are attached (ab's:
    the next run of a pair is ready before the one before it ends)."""

    @staticmethod
    def cli(command: CommandArgument = None, output: OutputOption = Path("profinfer.pftrace"),
            pid: PidOption = None, duration: DurationOption = None,
            counter: CounterOption = None, lib: LibOption = None, json: JsonOption = False,
            ebpf: EbpfOption = False, ring_pages: RingPagesOption = RING_PAGES,
            tokens: TokensOption = None, sample: SampleOption = 1, ops: OpsOption = None,
            aggregate: AggregateOption = False, barriers: BarriersOption = True,
            inner_waits: InnerWaitsOption = False, floor: FloorOption = False,
            detach: DetachOption = False, max_size: MaxSizeOption = None,
            rotate: RotateOption = 0, stream: StreamOption = None, sched: SchedOption = False,
            peaks_file: PeaksOption = None,
            gpu_timestamps: GpuTimestampsOption = False,
            exact: ExactOption = False, follow: FollowOption = None,
            hold_fd: HoldFdOption = None) -> int:
        """The options, checked: the command to run."""
        counters = _counters(counter)
        rotation = _rotation(max_size, rotate, json)
        _check_modes(rotation, stream, json, sched, command, pid, ring_pages,
                     follow=follow, aggregate=aggregate)
        if gpu_timestamps and pid is not None:
            raise ProfinferError("--gpu-timestamps needs a command to launch (the backend "
                                 "reads GGML_VK_PERF_LOGGER as it starts), not --pid")
        if hold_fd is not None and not command:
            raise ProfinferError("--hold-fd holds a command it launches: give one, not --pid")
        roofs, roofs_note = peaks.for_record(peaks_file)
        request = RecordRequest(
            command=command or None,
            pid=pid,
            duration_s=duration,
            counters=tuple(counters),
            libs=tuple(lib or ()),
            rings=RingSizes(ring_pages, ring_pages),
            selection=Selection.parse(tokens, sample, ops, detach, aggregate, barriers, floor,
                                      inner_waits, exact),
            sched=sched,
            peaks=roofs,
            peaks_note=roofs_note,
            gpu_timestamps=gpu_timestamps,
        )
        return RecordCommand(request, output, json=json, ebpf=ebpf, rotation=rotation,
                             stream=bool(stream) or rotation is not None, follow=follow,
                             hold_fd=hold_fd).run()

    def run(self) -> int:
        probe_plan = plan(self.request)
        if self.ebpf:
            if probe_plan is None:
                raise ProfinferError(
                    "the ggml runtime is not among the command's own files (a wrapper, an "
                    "interpreter or a dlopened backend loads it when it runs): give --lib with "
                    "the library that defines the ops to print the program for it")
            request = self.request
            sys.stdout.write(program_of(request, probe_plan))
            if request.sched:
                sys.stdout.write("// --sched: the sched program, on the sched_switch and "
                                 "sched_waking tracepoints\n" + sched_text(os.cpu_count() or 1))
            for probe in probe_plan.probes:
                kind = "uretprobe" if probe.ret else "uprobe"
                print(f"// {kind} {probe.fn}: {probe.path} +{probe.offset:#x} ({probe.where})")
            return ExitCode.OK
        require_root()
        check_writable(self.output)
        if self.json:
            return self._whole(probe_plan)
        return self._streamed(probe_plan) if self.stream else self._spilled(probe_plan)

    def _whole(self, probe_plan: ProbePlan | None) -> int:
        """Keep the run in memory and write it when it ends (--json)."""
        model = build(record(self.request, probe_plan, self._attached))
        layout = build_layout(model)
        with atomic_output(self.output) as out:
            if self.json:
                text_out = io.TextIOWrapper(out, encoding="utf-8")
                written = write_chrome_json(layout, text_out)
                text_out.flush()
                text_out.detach()
            else:
                written = write_perfetto(layout, out)
        totals = RunTotals.of(model)
        print(summary(totals, model, self.output, written, "events" if self.json else "packets"))
        return self._timed(totals)

    def _streamed(self, probe_plan: ProbePlan | None) -> int:
        """Write the trace while the run goes (--stream, --max-size)."""
        stream = TraceStream(self.output, self.rotation)
        try:
            recording = record(self.request, probe_plan, self._attached, stream)
        except BaseException:
            stream.abandon()
            raise
        stream.finish(recording)
        return self._timed(report_written(stream))

    def _spilled(self, probe_plan: ProbePlan | None) -> int:
        """Keep the run's records on disk as they come (the default: flat memory, nothing beside
        the target but writing them) and write the trace from them when the run ends; with a
        follower (--follow, or where the target leaves the recorder a CPU), a process at idle
        priority writes it from them as they come (where it cannot, or fails, the trace is
        written after the run)."""
        spill = Spill(spill_path(self.output), len(self.request.counters))
        wanted = False if self.request.sched or self.request.selection.aggregate else self.follow
        follower_plan = _FollowerPlan(spill.folder, len(self.request.counters), wanted)
        self._prepare_units(wanted)
        try:
            recording = record(self.request, probe_plan, self._attached, spill, follower_plan)
            if (failed := spill.finish()) is not None:
                raise ProfinferError(f"{failed}: no trace written")
            ended = time.monotonic()
            followed = (follower_plan.follower.finish(recording.run, self.output)
                        if isinstance(follower_plan.follower, Follower) else None)
            stream = None if followed is not None else self._after(spill, recording)
            took = time.monotonic() - ended
        except BaseException as exc:
            if isinstance(follower_plan.follower, Follower):
                follower_plan.follower.stop()
            self._keep(spill, exc)
            raise
        spill.remove()
        if stream is not None:
            totals = report_written(stream)
            how = ("from its records" + (stream.how() if isinstance(stream, UnitsWritten) else "")
                   + follower_plan.none_why())
        else:
            assert followed is not None
            totals = followed.totals
            print(summary(totals, followed.last, self.output, followed.packets, "packets"))
            how = followed.how()
        print(f"  trace written {took:.2f} s after the run, {how}")
        return self._timed(totals)

    def _prepare_units(self, follow: bool | None) -> None:
        """Where the trace is likely to be written in units after the run (the recorder starts
        the target, so it ends with the run; no follower asked for; no --sched, whose tasks
        units cannot count), start the workers' forkserver now, beside the probes' compile,
        while the target waits: started after the run, it held the write up 0.4 s."""
        if (self.request.command and follow is not True and not self.request.sched
                and units.workers() > 0):
            units.prepare()

    def _after(self, spill: Spill, recording: Recording) -> TraceStream | UnitsWritten:
        """The trace written from the run's records once it ended: in units by one worker per
        CPU (encode/units.py) where the target has ended, in one sequence where it goes on (a
        server recorded by --pid). Beside a llama-server that went on serving on both CPUs
        (2026-12-08, 60 s captures, 4 rounds in turns) units took 0.90, 1.36, 1.05 and 1.48
        times the one sequence's time per event: their processes and extra CPU contend with
        the target's threads."""
        drains = spill.drains()
        stream = write_trace(self.output, drains, noted(recording, drains.notes),
                             workers=0 if process.goes_on(recording.run.pid) else None)
        make_durable(stream.files)
        return stream

    def _timed(self, totals: RunTotals) -> int:
        """Bad input found once the run is written: --gpu-timestamps where no device ran."""
        if self.request.gpu_timestamps and not totals.device_ops:
            raise ProfinferError(
                f"--gpu-timestamps: no op ran on a Vulkan device, so {self.output} holds the "
                "run's host work only (ggml-vulkan opened no device: a CPU-type one such as "
                "Mesa's lavapipe needs GGML_VK_VISIBLE_DEVICES=0; or -ngl put no layer on it)")
        return ExitCode.OK

    def _keep(self, spill: Spill, exc: BaseException) -> None:
        """The capture or the trace's writing failed: keep the drains written whole for
        `recover` (and say so), or nothing if there are none."""
        spill.close()
        if not spill.written:
            spill.remove()
            return
        kept = (f"the run's records stay in {spill.folder}, from which `profinfer-perfetto "
                f"recover {self.output}` writes its trace")
        if isinstance(exc, ProfinferError):
            raise ProfinferError(f"{exc}; {kept}") from None
        print(f"profinfer-perfetto: {kept}", file=sys.stderr, flush=True)

    def _attached(self, pid: int) -> None:
        print(f"profinfer-perfetto: tracing pid {pid}; Ctrl-C stops and writes {self.output}",
              file=sys.stderr, flush=True)
        if self.hold_fd is not None:
            _wait_turn(self.hold_fd)


def _wait_turn(fd: int) -> None:
    """--hold-fd: say that the probes are attached, and wait for GO."""
    got = b""
    try:
        os.write(fd, READY)
        while len(got) < len(GO) and (more := os.read(fd, len(GO) - len(got))):
            got += more
    except OSError:
        pass
    if got != GO:
        raise ProfinferError("the run's turn never came (its ab ended first): nothing recorded")


@dataclass
class _FollowerPlan:
    """A spilled run's follower, started once the target's CPUs are known (record's
    `helpers`): with --follow; by default where the target leaves the recorder a CPU free, one
    it may not use (pinned: `taskset -c 3 llama-cli ...`) or one its compute threads leave (`-t
    4` on 8 cores: known from its first graph on), where a follower costs it nothing measurable
    (docs/record.md); with --no-follow, never."""

    folder: Path
    counters: int
    wanted: bool | None
    """--follow, --no-follow, or neither (None)."""
    follower: Follower | str | None = None
    """The follower, why there is none where one could not start, or None where none was."""

    def __call__(self, cpus: list[int], threads: int) -> tuple[int, ...]:
        """The follower's pid, for a target allowed on `cpus` now and computing on `threads`:
        started the first time it is wanted (both are told again when they change)."""
        if self.follower is None and (self.wanted or (self.wanted is None
                                                      and leaves_a_cpu(cpus, threads))):
            self.follower = Follower.start(self.folder, self.counters)
        return (self.follower.proc.pid,) if isinstance(self.follower, Follower) else ()

    def none_why(self) -> str:
        """Why the trace was written from the records by record itself, for its summary."""
        if isinstance(self.follower, str):
            return ", " + self.follower
        if isinstance(self.follower, Follower):
            return ", its follower having failed"
        if self.wanted is None:
            return (" (no follower: the target may compute on every CPU the recorder may; "
                    "--follow has one anyway)")
        return ""


def _counters(names: list[str] | None) -> list[str]:
    """--counter's names, each known, context-switches where none is given."""
    counters = list(DEFAULT_COUNTERS) if names is None else [c for c in names if c != "none"]
    for name in counters:
        counter_config(name)
    if len(counters) > MAX_COUNTERS:
        raise ProfinferError(f"at most {MAX_COUNTERS} counters can be read per op")
    return counters


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


def _check_modes(rotation: Rotation | None, stream: bool | None, json: bool, sched: bool,
                 command: list[str] | None, pid: int | None, ring_pages: int, *,
                 follow: bool | None = None, aggregate: bool = False) -> None:
    """The options that go together, and --ring-pages."""
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
    if follow and (stream or rotation is not None or json or sched or aggregate):
        raise ProfinferError("--follow writes the trace from the records kept on disk: "
                             "leave out --stream, --max-size, --json, --sched and --aggregate")


def report_written(stream: TraceStream | UnitsWritten) -> RunTotals:
    """Say what was recorded and where it went; the run's totals."""
    assert stream.last is not None, "finish() writes the run's last chunk"
    print(summary(stream.totals, stream.last, stream.files[-1], stream.packets, "packets"))
    if len(stream.files) > 1:
        print(f"  the run is in {len(stream.files)} files, {stream.files[0].name} to "
              f"{stream.files[-1].name}, each a whole trace")
    return stream.totals


def _aggregate_table(model: TraceModel, top: int = 15) -> list[str]:
    stats = op_stats(model)
    rows = [["op", "role", "count", "total ms", "mean us", "p90 us <=", "max us", "wait"]]
    for s in stats[:top]:
        rows.append([s.op, s.role, str(s.count), f"{s.work_ns / 1e6:.2f}",
                     f"{s.work_ns / max(s.count, 1) / 1e3:.1f}", f"{s.p90_ns / 1e3:.1f}",
                     f"{s.max_work_ns / 1e3:.1f}",
                     f"{s.wait_ns / max(s.work_ns + s.wait_ns, 1):.0%}"])
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    out = [f"  op statistics (--aggregate; {len(stats)} op kinds, top {min(top, len(stats))}):"]
    out += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]
    return out


def _peak_mb() -> float:
    """This process's peak resident memory (its own: getrusage's ru_maxrss outlives an exec, so
    it can say the peak of whatever ran in the process before)."""
    return process.status_number("self", "VmHWM") / 1024


def summary(totals: RunTotals, model: TraceModel, output: Path, written: int, unit: str) -> str:
    """What record says when it is done; `model`: the run's (last chunk's) model."""
    steps = sum(totals.steps.values())
    by_phase = ", ".join(f"{totals.steps[p]} {p}" for p in PHASES if totals.steps[p])
    size = output.stat().st_size
    lines = [
        f"recorded {model.run.process_name} (pid {model.run.pid}): {model.run.status}",
        f"  token steps {steps}" + (f" ({by_phase}; {totals.tokens} tokens)" if steps else ""),
        f"  graphs {totals.graphs}, "
        + ("ops summed in BPF (--aggregate)" if model.run.aggregate
           else f"ops {totals.ops} on {len(totals.op_threads)} threads")
        + f", DAG edges {totals.edges}",
        f"  events {totals.events}, lost {model.run.lost_events} events and "
        f"{model.run.lost_nodes} node descriptors, {totals.dropped_ops} ops outside graphs",
        f"  recorder CPU {model.run.recorder_cpu_s:.2f} s, peak memory {_peak_mb():.0f} MB, over "
        f"{(model.run.end_ns - model.run.begin_ns) / 1e9:.2f} s of capture, drains at most "
        f"{model.run.drain_gap_s * 1000:.0f} ms apart",
    ]
    if model.run.probe_costs:
        lines.append("  BPF time per probe run (kernel-timed, traps not included): " + ", ".join(
            f"{fn} {c.runs} runs at {c.ns / c.runs:.0f} ns"
            for fn, c in sorted(model.run.probe_costs.items())))
    lines += [f"  note: {note}" for note in model.run.notes]
    if model.run.aggregate:
        lines += _aggregate_table(model)
    lines.append(f"wrote {output} ({size / 1024:.1f} KiB, {written} {unit}): "
                 "open it in https://ui.perfetto.dev")
    return "\n".join(lines)
