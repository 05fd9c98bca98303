"""Run a capture: start or find the target, attach the probes, drain the rings until it ends.

The result is a `Recording`: the events and node descriptors as numpy arrays, and what is
known about the process, its threads and how the capture ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from profinfer_perfetto import signals
from profinfer_perfetto.analysis import target
from profinfer_perfetto.analysis.code import require_host
from profinfer_perfetto.analysis.ggml import GgmlInfo
from profinfer_perfetto.analysis.loop import BARRIER_NODE_PREFIX
from profinfer_perfetto.analysis.target import LOOP_ENTRY, Probe, ProbePlan
from profinfer_perfetto.capture import process
from profinfer_perfetto.capture.affinity import KeptOff, target_cpus
from profinfer_perfetto.capture.counters import DEFAULT_COUNTERS
from profinfer_perfetto.capture.events import SCHED, Ring, StopReason, compute_threads
from profinfer_perfetto.capture.program import RingSizes, program_text
from profinfer_perfetto.capture.redact import redact
from profinfer_perfetto.capture.run import (
    Drained,
    ProbeCost,
    Recording,
    Run,
    Task,
    drained_dtypes,
    scheduling,
)
from profinfer_perfetto.capture.sched import (
    SchedProbes,
    kernel,
    programs_of,
    tasks_of,
)
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.capture.session import ProbeSession
from profinfer_perfetto.capture.watch import (
    Watcher,
    loader_probe,
    process_state,
    resume,
    send,
)
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.machine.peaks import Peak

DRAIN_INTERVAL_S = 0.1
"""How often the capture looks whether to stop and how full its rings are."""
LONGEST_DRAIN_S = 1.0
"""The longest the rings go undrained. A drain costs the recorder about a millisecond of CPU
whatever it holds (the rings, the target's threads and CPUs from /proc, the spill): the
recorder took 2.0 % of a core drained ten times a second, 0.75 % drained as now (Gemma-3-270M at 2
threads, 43 k events/s, 2026-12-06, in turns), CPU taken from the target where it computes on
every CPU."""
DRAIN_AT_FILL = 1 / 8
"""A ring this full is drained at the next look: a ring that fills this much between two looks
is drained at every look, as all were before LONGEST_DRAIN_S."""
RUNTIME_WAIT_S = 30.0
"""Without --duration: how long a followed command has to load the ggml runtime."""
WATCH_POLL_S = 0.05
STOP_SHOWS_S = 0.5
"""How long a process sent SIGSTOP may take to show as stopped (a guard, not a timing)."""
STOP_POLL_S = 0.001
"""How often _stopped looks."""
STEER_WAIT_S = 0.2
"""--detach: the longest the steering thread sleeps before it looks whether to stop."""
END_WAIT_S = 10.0
"""How long a launched command has to end on the signal the recorder sends it, before SIGKILL."""
INNER_WAIT_PROBES = frozenset({"inner_wait_begin", "inner_wait_end"})
BARRIER_PROBES = frozenset({"barrier_enter"}) | INNER_WAIT_PROBES
OP_PROBES = frozenset({"op_begin", "fused_op_begin"}) | BARRIER_PROBES


GPU_TIMESTAMPS_ENV = {"GGML_VK_PERF_LOGGER": "1"}
"""What makes ggml-vulkan time each node it records with GPU timestamp queries (read at run
time: a barrier after each node, each split waited for, per-split totals on stderr)."""


GPU_TIMESTAMPS_NOTE = (
    "--gpu-timestamps: the device times come from the Vulkan backend's own GPU timestamp "
    "queries (GGML_VK_PERF_LOGGER), which add a barrier after each op and wait for each split: "
    "ops run slower than without them")


@dataclass(frozen=True)
class RecordRequest:
    command: list[str] | None = None
    pid: int | None = None
    duration_s: float | None = None
    counters: tuple[str, ...] = DEFAULT_COUNTERS
    libs: tuple[Path, ...] = ()
    rings: RingSizes = field(default_factory=RingSizes)
    selection: Selection = field(default_factory=Selection)
    sched: bool = False
    """Also record every context switch and wakeup on the target's CPUs (capture/sched.py)."""
    peaks: tuple[Peak, ...] = ()
    """This machine's roofs (machine/peaks.py), written into the trace for `roofline`."""
    peaks_note: str | None = None
    """Where no roofs were found, where they were looked for (a note of the run)."""
    gpu_timestamps: bool = False
    """Run the command with the Vulkan backend's GPU timestamps on (GPU_TIMESTAMPS_ENV) and
    read them back (a launched command whose libraries have the Vulkan backend)."""

    def environment(self) -> dict[str, str] | None:
        """The launched command's environment: the recorder's, with what the request adds."""
        return {**os.environ, **GPU_TIMESTAMPS_ENV} if self.gpu_timestamps else None


def plan(request: RecordRequest) -> ProbePlan | None:
    """Where the probes go, from the target's files; None for a command whose own files do not
    hold the ggml runtime (it is found when the command runs: `record` follows it)."""
    extra, inner = list(request.libs), request.selection.inner_waits
    if request.command:
        objects = target.objects_of_command(request.command, extra)
        if not target.runtime_in(objects):
            return None
        return _timed(request, target.plan_probes(objects, inner))
    if request.pid is None:
        raise ProfinferError("give a command to run or --pid of a running process")
    return target.plan_probes(target.objects_of_process(request.pid, extra), inner)


def _timed(request: RecordRequest, probe_plan: ProbePlan) -> ProbePlan:
    """The plan, checked to read the GPU timestamps that --gpu-timestamps asks for (before the
    command is launched)."""
    if request.gpu_timestamps and not probe_plan.times_vulkan:
        raise ProfinferError("--gpu-timestamps needs ggml's Vulkan backend and the Vulkan "
                             f"loader's {target.VULKAN_QUERY} in the command's libraries: "
                             "this command has no such backend")
    return probe_plan


def drain_due(since_drain_s: float, fill: float) -> bool:
    """Whether a look at the rings drains them: the fullest is `fill` full (0 to 1), and the
    last drain was `since_drain_s` ago (the next look would leave them undrained longer than
    LONGEST_DRAIN_S)."""
    return fill >= DRAIN_AT_FILL or since_drain_s + DRAIN_INTERVAL_S > LONGEST_DRAIN_S


def require_root() -> None:
    if os.geteuid() != 0:
        raise ProfinferError("recording attaches eBPF probes and needs root: run it with sudo")


def _op_id(ggml: GgmlInfo, name: str) -> int:
    op = ggml.op_id(name)
    if op < 0:
        raise ProfinferError(f"--ops: {name} is no op of ggml {ggml.version} "
                             "(op names are like MUL_MAT, FLASH_ATTN_EXT)")
    return op


def boot_ns() -> int:
    """Now on the clock the probes use (bpf_ktime_get_boot_ns)."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


# Run in the child: wait for the go byte on the pipe, then become the command (same PID). If
# the recorder is gone first (end of file), exit instead: the command never runs unprofiled.
# A stop byte (the recorder ends it: a setup failure, a signal) or a Ctrl-C meanwhile ends it
# quietly (the recorder says what happened).
_HOLD_THEN_EXEC = """
import os, signal, sys
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
byte = os.read(int(sys.argv[1]), 1)
if byte == b"s":
    sys.exit(1)
if byte != b"g":
    sys.exit(f"profinfer-perfetto: the recorder ended first: {sys.argv[2]} not run")
os.execvp(sys.argv[2], sys.argv[2:])
"""


def _launch_paused(command: list[str], env: dict[str, str] | None = None
                   ) -> tuple[subprocess.Popen[bytes], int]:
    """Start the command held before its exec until the probes are attached (in `env`, or
    the recorder's environment)."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD_THEN_EXEC, str(read_fd), *command], pass_fds=(read_fd,),
            env=env, process_group=None if _in_terminal_foreground() else 0)
    except OSError as exc:
        os.close(write_fd)
        raise ProfinferError(f"cannot run {command[0]}: {exc.strerror}") from exc
    finally:
        os.close(read_fd)
    return proc, write_fd


def _in_terminal_foreground() -> bool:
    """Whether this process is in the foreground of its controlling terminal.

    There a launched command stays in the recorder's process group, so that the terminal's
    Ctrl-C and reads reach it as they would without the recorder. Elsewhere (a CI job, a
    script's background job) it gets a process group of its own, whose parent is the recorder:
    the kernel sends SIGHUP and SIGCONT to a process group that is left without a parent in
    another group of its session while one of its processes is stopped (POSIX's orphaned
    process groups), which killed a process held stopped for its probes when the shell that had
    started the recorder exited (2026-12-06, in the gate bench). The command's own group is
    orphaned only when the recorder dies, and then the same rule ends what it held stopped."""
    try:
        tty = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(tty) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(tty)


class _Launched:
    """A launched command, held before its exec until `release`. `found`: in watch mode, the
    process of it that maps the runtime, held stopped until the probes are in place."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        self.command = command
        self.proc, self._go = _launch_paused(command, env)
        self.found: int | None = None

    def release(self) -> None:
        self._close_go(b"g")

    def _close_go(self, byte: bytes) -> None:
        """Say `byte` to a command held before its exec (g: go on, s: stop) and close the pipe."""
        if self._go >= 0:
            with contextlib.suppress(BrokenPipeError):  # it was killed: ended() says so
                os.write(self._go, byte)
            os.close(self._go)
            self._go = -1

    def ended(self) -> str | None:
        """How the command ended, or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        return "complete" if code == 0 else f"target {_exit_status(code)}"

    def end(self, sig: int) -> None:
        """End the command: `sig` to it (and to the process found in it), then SIGKILL to
        whatever of them still runs END_WAIT_S later; returns once they have ended."""
        self._close_go(b"s")  # held before its exec, it exits at once
        self._signal(sig)
        if not self._ended_by(time.monotonic() + END_WAIT_S):
            self._signal(signal.SIGKILL)
            self._ended_by(time.monotonic() + END_WAIT_S)
        self.proc.wait()

    def _signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        if self.found is not None and self._found_runs():
            send(self.found, sig)

    def _found_runs(self) -> bool:
        return self.found is not None and self.found != self.proc.pid and _runs(self.found)

    def _ended_by(self, deadline: float) -> bool:
        """Wait until the command and the process found in it have ended, or the deadline."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(max(deadline - time.monotonic(), 0))
        while self._found_runs() and time.monotonic() < deadline:
            time.sleep(WATCH_POLL_S)
        return self.proc.poll() is not None and not self._found_runs()


def _exit_status(code: int) -> str:
    """How a process ended, from its Popen return code."""
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def _runs(pid: int) -> bool:
    """The process is there and not yet ended (a zombie has ended)."""
    return process_state(pid) not in (None, "Z", "X")


def _objects_at_stop(watcher: Watcher, tgid: int, reason: int) -> list[Path] | None:
    """The objects a stopped process of the tree maps (None if it is gone already); from its
    exec on, its dynamic loader's reports stop it too."""
    try:
        objects = target.objects_of_process(tgid, [])
    except ProfinferError:  # it is gone already
        return None
    if reason == StopReason.EXEC:
        loader = target.loader_in(objects)
        if loader is not None:
            watcher.watch_loader(loader_probe(loader))
    return objects


def _await_runtime(launched: _Launched, request: RecordRequest) -> tuple[int, ProbePlan]:
    """Release the command and follow its processes until one maps the ggml runtime; that
    process (`launched.found`) is returned stopped, before any of the runtime's code ran."""
    wait_s = request.duration_s or RUNTIME_WAIT_S
    deadline = time.monotonic() + wait_s
    name = Path(launched.command[0]).name
    with Watcher(launched.proc.pid) as watcher:
        launched.release()
        while True:
            for tgid, reason in watcher.stops(WATCH_POLL_S).tolist():
                objects = _objects_at_stop(watcher, tgid, reason)
                if objects is None or not target.runtime_in(objects):
                    watcher.resume(tgid)
                    continue
                launched.found = tgid  # before take(): held by one of them at every moment
                watcher.take(tgid)
                notes = tuple(n for n in (_hold(tgid, name), watcher.missed()) if n)
                found = target.plan_probes(objects + list(request.libs),
                                           request.selection.inner_waits)
                return tgid, replace(found, notes=(*found.notes, *notes))
            ended = launched.ended()
            if ended is not None or time.monotonic() > deadline:
                raise ProfinferError(_not_loaded(name, ended, wait_s, watcher.missed()))


def _not_loaded(name: str, ended: str | None, wait_s: float, missed: str | None) -> str:
    """Why a launched command's runtime was not found, in a sentence."""
    why = f" ({missed})" if missed else ""
    if ended is not None:
        return (f"{name} ended ({ended}) without loading the ggml runtime{why}: is it a llama.cpp "
                "(ggml) program?")
    return (f"{name} did not load the ggml runtime in its first {wait_s:g} s{why} (use "
            "--duration to wait longer)")


def record(
    request: RecordRequest,
    probe_plan: ProbePlan | None,
    on_attached: Callable[[int], None] | None = None,
    sink: Sink | None = None,
    helpers: Callable[[list[int], int], Sequence[int]] | None = None,
) -> Recording:
    """Capture until the target ends, the duration passes or a SIGINT, SIGTERM or SIGHUP comes.

    With no `probe_plan` (the runtime is not among the command's own files: a wrapper, an
    interpreter, a dlopened backend) the command is followed until one of its processes maps
    the runtime, and that process is recorded. `on_attached(pid)` runs once the probes are in
    place, before the target runs on. With a `sink`, each drain goes there as it comes and the
    Recording returned holds the run only; else it holds every record. `helpers(cpus,
    threads)` runs once the target's CPUs are known, before it runs on, and again when they or
    its compute threads (0 until its first graph) change: the processes of the recorder's own
    it starts for the run (a follower), kept off a pinned target's CPUs with its threads.

    A launched command is ended (SIGKILL) if anything fails or a signal comes before the
    capture begins, and (the signal passed on, or SIGTERM) if the capture fails or a signal
    ends it: docs/signals.md.
    """
    require_root()
    with signals.handled(), contextlib.ExitStack() as stack:
        launched: _Launched | None = None
        try:
            with signals.deferred():  # started whole, so that a signal meanwhile ends it below
                launched = (_Launched(request.command, request.environment())
                            if request.command else None)
            capture, kept = _prepare(stack, request, probe_plan, launched, sink)
        except BaseException:
            if launched is not None:
                with signals.deferred():
                    launched.end(signal.SIGKILL)
            raise
        with signals.noted() as stop:  # from here on a signal ends the capture, written
            try:
                if on_attached is not None:
                    on_attached(capture.pid)
                capture.pinning = KeptOff(helpers)
                capture.pinning.look(target_cpus(capture.pid))
                _release(launched)
                run = capture.run(stop)
            except BaseException:
                if launched is not None:
                    launched.end(signal.SIGTERM)
                raise
            finally:
                capture.pinning.restore()
        sched = None if run.sched_cpus is None else scheduling(kept.joined("sched"), run)
        return Recording(
            events=kept.joined("events"),
            nodes=kept.joined("nodes"),
            routes=kept.joined("routes"),
            batches=kept.joined("batches"),
            sched=kept.joined("sched") if sched is None else sched.records,
            run=run,
            op_stats=capture.op_stats,
            scheduling=sched,
        )


def _prepare(stack: contextlib.ExitStack, request: RecordRequest, probe_plan: ProbePlan | None,
             launched: _Launched | None, sink: Sink | None) -> tuple[_Capture, _Keep]:
    """Find the target, compile and attach the probes: the capture, ready to begin (a launched
    target still held) and the sink that keeps the records when there is no `sink`."""
    pid, probe_plan = _target(request, probe_plan, launched)
    session = stack.enter_context(_session(request, probe_plan))
    try:
        _attach(session, request, probe_plan, pid)
    except ProfinferError:
        if _runs(pid):
            raise
        raise ProfinferError(_gone(pid, launched)) from None
    if launched is not None and launched.found is not None and process_state(pid) != "T":
        raise ProfinferError(f"{Path(launched.command[0]).name} (pid {pid}) ran on while its "
                             "probes were compiled (something resumed it): nothing recorded")
    sched, sched_note = stack.enter_context(_sched_probes(request, pid))
    kept = _Keep(len(request.counters))
    named = launched is not None and launched.found is None
    capture = _Capture(session, request, probe_plan, pid, launched, named, sched, sink or kept)
    if sched_note:
        capture.extra_notes.append(sched_note)
    return capture, kept


def _gone(pid: int, launched: _Launched | None) -> str:
    """Why nothing was recorded of a target that ended before its probes were in place (the
    kernel then refuses them for want of the process): how it ended, where it is the launched
    command's own process."""
    name = Path(launched.command[0]).name if launched is not None else "the process"
    code = launched.proc.poll() if launched is not None and launched.proc.pid == pid else None
    how = "" if code is None else f" ({_exit_status(code)})"
    return f"{name} (pid {pid}) ended{how} before its probes were attached: nothing recorded"


def _hold(pid: int, name: str) -> str | None:
    """Make sure the process found is stopped: its own probe stopped it (None), or, where that
    stop did not hold (seen twice in about a hundred wrapped runs on 2026-11-27: the target ran
    on unprobed while its probes compiled), the recorder stops it now and says so in a note."""
    if _stopped(pid):
        return None
    begin = time.monotonic()
    send(pid, signal.SIGSTOP)
    if not _stopped(pid):
        raise ProfinferError(f"{name} (pid {pid}) could not be held stopped while its probes were "
                             "attached: nothing recorded")
    return (f"the target's stop at its loader's report did not hold: the recorder stopped it "
            f"itself {1e3 * (time.monotonic() - begin):.0f} ms later, before its probes were "
            "attached (what it ran meanwhile, if anything, is not in the trace)")


def _stopped(pid: int) -> bool:
    """Whether `pid` shows as stopped within STOP_SHOWS_S."""
    deadline = time.monotonic() + STOP_SHOWS_S
    while process_state(pid) != "T":
        if time.monotonic() > deadline:
            return False
        time.sleep(STOP_POLL_S)
    return True


def _target(request: RecordRequest, probe_plan: ProbePlan | None,
            launched: _Launched | None) -> tuple[int, ProbePlan]:
    """The process to probe and where the probes go."""
    if probe_plan is None:
        assert launched is not None, "plan() plans a running process from its memory map"
        pid, found = _await_runtime(launched, request)
        return pid, _timed(request, found)
    if launched is not None:
        return launched.proc.pid, probe_plan
    assert request.pid is not None
    if not process.is_alive(request.pid):
        raise ProfinferError(f"no process with PID {request.pid}")
    return request.pid, probe_plan


def _release(launched: _Launched | None) -> None:
    """Let a launched target run on: resume the process found, or release the command."""
    if launched is None:
        return
    if launched.found is not None:
        resume(launched.found)
    else:
        launched.release()


@contextlib.contextmanager
def _sched_probes(request: RecordRequest, pid: int
                  ) -> Iterator[tuple[SchedProbes | None, str | None]]:
    """With --sched, the sched program on the target's CPUs (or, where the kernel cannot, none
    and a warning for the recording's notes)."""
    if not request.sched:
        yield None, None
        return
    try:
        probes = SchedProbes(target_cpus(pid))
    except ProfinferError as exc:
        yield None, f"warning: --sched: {exc}; the trace has no scheduling data"
        return
    with probes:
        yield probes, None


def program_of(request: RecordRequest, probe_plan: ProbePlan) -> str:
    """The BPF program a recording compiles (and `record --ebpf` prints)."""
    return program_text(probe_plan.ggml, list(request.counters), request.rings,
                        request.selection, probe_plan.sees_graph_builds, probe_plan.traces_blas,
                        probe_plan.traces_vulkan, probe_plan.loop_barriers)


def exact_because(request: RecordRequest, probe_plan: ProbePlan) -> str | None:
    """Why a run probes each op's begin as well as its barrier (two traps per op and thread;
    --no-barriers: the op begin alone), None where the graph loop's barrier calls whose node is
    known are enough (one trap: the default)."""
    selection = request.selection
    asked = {"--exact": selection.exact, "--aggregate": selection.aggregate,
             "--ops": selection.filtered, "--inner-waits": selection.inner_waits,
             "--no-barriers": not selection.barriers,
             "--counter": request.counters not in ((), DEFAULT_COUNTERS)}
    if options := [name for name, given in asked.items() if given]:
        return ", ".join(options)
    if not any(b.index for b in probe_plan.loop_barriers):
        return "the build's graph loop has no barrier call whose node is known"
    if probe_plan.openmp:
        return "an OpenMP build's graph loop skips its barrier at 1 thread"
    return None


def _session(request: RecordRequest, probe_plan: ProbePlan) -> ProbeSession:
    require_host(probe_plan.arch)
    selection = request.selection
    traced_ops = [_op_id(probe_plan.ggml, name) for name in selection.ops]
    return ProbeSession(program_of(request, probe_plan), list(request.counters), request.rings,
                        traced_ops, steered=selection.detach)


def _attach(session: ProbeSession, request: RecordRequest, probe_plan: ProbePlan,
            pid: int) -> None:
    """The probes the selection wants from the start (with --detach, the op probes come
    later)."""
    selection = request.selection
    probes = _probes(request, probe_plan)
    session.attach(tuple(p for p in probes
                         if not (selection.detach and _op_probe(p.fn))), pid)
    if selection.gated and not selection.detach:
        session.arm(True)


def _op_probe(fn: str) -> bool:
    return fn in OP_PROBES or fn == LOOP_ENTRY or fn.startswith(BARRIER_NODE_PREFIX)


def _probes(request: RecordRequest, probe_plan: ProbePlan) -> tuple[Probe, ...]:
    """The plan's probes that the request keeps: no barriers with --no-barriers, the waits
    inside ops only with --inner-waits; of the op probes only the barrier calls whose node is
    known and the graph loop's entry, unless the run is exact (exact_because)."""
    selection = request.selection
    one_trap = exact_because(request, probe_plan) is None
    return tuple(p for p in probe_plan.probes
                 if (selection.barriers or not (p.fn in BARRIER_PROBES
                                                or p.fn.startswith(BARRIER_NODE_PREFIX)))
                 and (selection.inner_waits or p.fn not in INNER_WAIT_PROBES)
                 and not (one_trap and p.fn in OP_PROBES)
                 and (one_trap or p.fn != LOOP_ENTRY))


def traps_per_op(request: RecordRequest, probe_plan: ProbePlan) -> str:
    """The run's note on the traps each op costs each thread (besides inner waits), and why
    where it is not the default's one."""
    because = exact_because(request, probe_plan)
    if because is None:
        entry = any(p.fn == LOOP_ENTRY for p in probe_plan.probes)
        return ("traps per op and thread: 1 (the graph loop's barrier calls; --exact: 2)"
                + ", and 1 per graph and thread (the loop's entry)" * entry)
    if request.selection.barriers:
        return f"traps per op and thread: 2 (op begin and barrier: {because})"
    return "traps per op and thread: 1 (op begin only: --no-barriers)"


def _folded(costs: dict[str, ProbeCost]) -> dict[str, ProbeCost]:
    """The costs with the programs of the barrier calls whose node is known (one per call)
    counted as one with the other barrier calls', barrier_enter."""
    out = {fn: c for fn, c in costs.items() if not fn.startswith(BARRIER_NODE_PREFIX)}
    for fn, c in costs.items():
        if fn.startswith(BARRIER_NODE_PREFIX):
            had = out.get("barrier_enter", ProbeCost(0, 0))
            out["barrier_enter"] = ProbeCost(had.runs + c.runs, had.ns + c.ns)
    return out


class Sink(Protocol):
    """Takes each drain while the capture runs (`run`: what is known of it so far, `end_ns`
    now), and says why the capture must stop, if it must; record() keeps nothing of what a
    sink takes."""

    def __call__(self, drained: Drained, run: Run) -> str | None: ...


class _Keep:
    """The sink that keeps everything, for a Recording of the whole run."""

    def __init__(self, counters: int) -> None:
        self.dtypes = drained_dtypes(counters)
        self.parts: dict[str, list[np.ndarray]] = {f: [] for f in self.dtypes}

    def __call__(self, drained: Drained, run: Run) -> str | None:
        for name, parts in self.parts.items():
            array = getattr(drained, name)
            if array.size:
                parts.append(array)
        return None

    def joined(self, name: str) -> np.ndarray:
        parts = self.parts[name]
        return np.concatenate(parts) if parts else np.empty(0, self.dtypes[name])


class _Capture:
    """Drains the rings into a sink until the target ends, then says how the run went.

    The capture began at `begin` (boot ns, with the recorder's CPU time at `cpu_at_begin`), once
    the probes were in place and before the target ran on. `named`: the target is the command
    itself (its name is the command's), not a process found by following it.
    """

    def __init__(self, session: ProbeSession, request: RecordRequest, probe_plan: ProbePlan,
                 pid: int, launched: _Launched | None, named: bool,
                 sched: SchedProbes | None, sink: Sink) -> None:
        self.session, self.request, self.probe_plan = session, request, probe_plan
        self.pid, self.launched, self.sched, self.sink = pid, launched, sched, sink
        self.op_stats: list[tuple[int, np.ndarray]] = []
        self.threads: dict[int, str] = {}
        self.compute_threads = 0
        """The most threads a graph of the target's computed on so far (0: none began yet)."""
        self.sched_tasks: dict[int, Task] = {}
        self.sched_programs: dict[int, str] = {}
        self.kernel = kernel()
        self.extra_notes: list[str] = []
        self.pinning = KeptOff()
        """The recorder kept off the target's CPUs (record's, with its helpers)."""
        if named and launched is not None:
            self.process_name = Path(launched.command[0]).name
            self.cmdline = redact(launched.command)
        else:
            self.cmdline = redact(process.process_cmdline(pid))
            self.process_name = (Path(self.cmdline[0]).name if self.cmdline
                                 else process.process_name(pid))
        self.begin, self.cpu_at_begin = boot_ns(), time.process_time()
        self.last_drain, self.drain_gap = time.monotonic(), 0.0

    def drain(self) -> str | None:
        """Hand the records since the last drain to the sink; why to stop, if the sink says."""
        now = time.monotonic()
        self.drain_gap, self.last_drain = max(self.drain_gap, now - self.last_drain), now
        events, nodes, routes, batches = self.session.read()
        for tid in np.unique(events["tid"]).tolist():
            if tid not in self.threads:
                self.threads[tid] = process.thread_name(self.pid, tid) or self.process_name
        self.compute_threads = max(self.compute_threads, compute_threads(events))
        self.pinning.look(target_cpus(self.pid, self.threads), self.compute_threads)
        if self.request.selection.aggregate:
            self.op_stats.append((boot_ns(), self.session.op_stats()))
        sched = self.sched.read() if self.sched is not None else np.empty(0, SCHED)
        self.look_up(sched)
        return self.sink(Drained(events, nodes, routes, batches, sched),
                         self.run_so_far("running"))

    def look_up(self, sched: np.ndarray) -> None:
        """The tasks that `sched` names first, and their programs, while they are there (new
        dicts: the sinks keep the runs they were handed)."""
        tasks = tasks_of(sched, self.sched_tasks)
        if tasks:
            self.sched_tasks = self.sched_tasks | tasks
            self.sched_programs = self.sched_programs | programs_of(tasks)

    def until_end(self, stop: signals.Note) -> str:
        """Drain until the target ends, the duration passes or the recorder is stopped; how
        the capture ended."""
        duration = self.request.duration_s
        deadline = None if duration is None else time.monotonic() + duration
        while True:
            time.sleep(DRAIN_INTERVAL_S)
            refused = self.drain() if self.due() else None
            if refused is not None:
                self.end(signal.SIGTERM)
                return f"capture stopped: {refused}"
            if self.launched is not None and (ended := self.launched.ended()) is not None:
                return ended
            if self.launched is None and not process.is_alive(self.pid):
                return "complete"
            if stop.signal is not None:
                self.end(stop.signal)
                return f"recorder stopped by {signal.Signals(stop.signal).name}"
            if deadline is not None and time.monotonic() >= deadline:
                if self.launched is None:
                    return "complete"
                self.end(signal.SIGTERM)
                return "duration reached"

    def due(self) -> bool:
        """Whether to drain at this look: every look until the target's first graph (the
        drains keep the recorder off a pinned target's CPUs and start a follower by the
        threads it computes on) and with --aggregate (its op counts are sampled at each drain);
        else as drain_due says."""
        if self.compute_threads == 0 or self.request.selection.aggregate:
            return True
        fill = self.session.fill()
        if self.sched is not None:
            fill = max(fill, self.sched.fill())
        return drain_due(time.monotonic() - self.last_drain, fill)

    def end(self, sig: int) -> None:
        """End a launched target (a target given by --pid runs on)."""
        if self.launched is not None:
            self.launched.end(sig)

    def steer(self, done: threading.Event) -> None:
        """With --detach: op probes attached only while a chosen step runs or is next.

        Runs in its own thread, asleep until the probes ask for a change (or the capture
        ends): detaching uprobes waits for the kernel (0.05-0.08 s on Linux 6.18),
        so chosen steps closer than that can be missed.
        """
        selection, session = self.request.selection, self.session
        op_probes = tuple(p for p in _probes(self.request, self.probe_plan)
                          if _op_probe(p.fn))
        while not done.is_set():
            session.wait_for_steer(STEER_WAIT_S)
            step, armed = session.gate()
            want = selection.selected(step) or (step > 0 and selection.selected(step - 1))
            if want and not armed:
                session.attach(op_probes, self.pid)
                session.arm(True)
            elif armed and not want:
                session.arm(False)
                session.detach(op_probes)

    def run(self, stop: signals.Note) -> Run:
        """Capture until the end; the run as it went."""
        done = threading.Event()
        steerer = threading.Thread(target=self.steer, args=(done,), daemon=True)
        if self.request.selection.detach:
            steerer.start()
        status = self.until_end(stop)
        done.set()
        if steerer.is_alive():
            steerer.join()
        self.drain()
        return self.run_so_far(status, final=True)

    def notes(self, lost: dict[Ring, int], sched_lost: int) -> list[str]:
        pinned = self.pinning.note()
        notes = list(self.probe_plan.notes) + self.extra_notes + ([pinned] if pinned else [])
        notes.append(traps_per_op(self.request, self.probe_plan))
        if self.request.peaks_note is not None:
            notes.append(self.request.peaks_note)
        if self.request.gpu_timestamps:
            notes.append(GPU_TIMESTAMPS_NOTE)
        if not self.request.selection.barriers:
            notes.append("--no-barriers: an op lasts until its thread's next op, barrier wait "
                         "included")
        if self.request.selection.floor:
            notes.append("--floor: the op probes returned at once (the traps alone), no op "
                         "events")
        if lost[Ring.ROUTES]:
            notes.append(f"{lost[Ring.ROUTES]} routing records lost to a full ring: some "
                         "Mixture-of-Experts ops have no expert ids")
        if lost[Ring.BATCHES]:
            notes.append(f"{lost[Ring.BATCHES]} batch records lost to a full ring: some token "
                         "steps do not say their sequences")
        if sched_lost:
            notes.append(f"{sched_lost} scheduling records lost to a full ring: CPU tracks "
                         "have gaps")
        for name, share in self.session.counted_shares().items():
            if share < 1:
                notes.append(f"counter {name} was counted {share:.0%} of the time (the kernel "
                             "multiplexed it with others): its counts are scaled to the whole "
                             "time, estimates")
        return notes

    def costs(self) -> dict[str, ProbeCost]:
        """What each BPF program cost (read from the kernel: once, at the end)."""
        return {**_folded(self.session.costs()), **(self.sched.costs() if self.sched else {})}

    def run_so_far(self, status: str, final: bool = False) -> Run:
        """The run as known now (with its losses, notes and costs when `final`)."""
        lost = self.session.lost() if final else dict.fromkeys(Ring, 0)
        sched_lost = self.sched.lost() if final and self.sched is not None else 0
        return Run(
            ggml=self.probe_plan.ggml,
            pid=self.pid,
            process_name=self.process_name,
            cmdline=self.cmdline,
            threads=self.threads,
            counters=list(self.request.counters),
            lost_events=lost[Ring.EVENTS],
            lost_nodes=lost[Ring.NODES],
            begin_ns=self.begin,
            end_ns=boot_ns(),
            status=status,
            notes=self.notes(lost, sched_lost) if final else [],
            recorder_cpu_s=round(time.process_time() - self.cpu_at_begin, 3),
            drain_gap_s=round(self.drain_gap, 3),
            aggregate=self.request.selection.aggregate,
            probe_costs=self.costs() if final else {},
            from_start=self.launched is not None,
            sched_cpus=self.sched.cpus if self.sched is not None else None,
            sched_lost=sched_lost,
            peaks=self.request.peaks,
            counted=self.session.counted_shares() if final else {},
            kernel=self.kernel,
            sched_tasks=self.sched_tasks,
            sched_programs=self.sched_programs,
        )


