"""Benchmarks: `nox -s bench` or `python -m bench.run [--only NAME ...]` (as root, after
scripts/setup.sh). Writes bench/results.json and docs/benchmarks.md.

query   `op_summary` on a 1 M-op trace (medium-llama tiled in time), the engines in turns.
gate    the paired gate (bench/gate.py): per setup, 20 `ab --runs 3` against the same command,
        ffn_down's matmuls 10 % and 5 % slower (bench/slowed.py) and a busy loop during the
        candidate's runs ($GATE_PAIRS: another number of pairs, in rows of their own); the
        graph diff of medium-llama-down3. Recordings are kept.
overhead  decode (tg) and prefill (pp) tokens/s of llama-bench alone and under `record`, runs
        interleaved A B A B (8 pairs), for Gemma-3-270M and the medium random models at 1 and
        2 threads (1-thread runs: llama.cpp pinned to one CPU), `--floor` (the probe sites with
        empty programs: the traps alone), full tracing, `--no-barriers` and `--sample 256
        --detach`: the median slowdown with a bootstrap interval, and the recorder's CPU.
windows the recorder attached to one long generation for whole windows (`record --pid`, 6 s,
        its drain thread included) in turn with plain windows, every token step timed by
        bpftrace: each traced window's median step against the plain windows beside it, for
        the default (one trap per op) and `--exact` (two), each with its `--floor` (the same
        probe sites, programs that return at once): Gemma-3-270M and medium-llama, 1 and 2
        threads. Beside it, `inside`: the target's threads' kernel time per user time in the
        window less the plain windows' (the traps and programs run in the kernel on the
        target's threads), which the VM's speed between windows does not move.
traps   what one uprobe trap costs a thread here (a C loop calling a function with and
        without an empty uprobe on its `push`, in turns), and the share of it the kernel's tick
        accounting calls kernel time (what the `windows` bench's `inside` column counts).
one-trap  whether one trap per op would answer as two do: Gemma-3-270M at 1 and 2 threads and
        tiny- and medium-llama at 2, each recorded with both traps and modelled as recorded and
        from its barriers alone: per op key (phase, op, role) the mean and median node time,
        work, barrier wait share and thread imbalance, and each node's begin and end shift.
steps   the same cost measured inside one run, where this VM's run-to-run noise cancels: with
        `--sample 64 --detach` each traced decode step against the untraced steps just
        before it, and the kernel-timed BPF cost per probe run.
capacity  the op-event rate of the fastest target (tiny-llama, 2 threads) at the default ring
        size, and the same run with tiny rings, where events are lost and counted.
encoding  packets/s and bytes per op writing a real recording's trace, against a naive writer
        that serializes one official perfetto_trace_pb2 packet per event without args.
writer  the streamed writer's CPU per event (what `record --stream` spends beside the target):
        a real recording (Gemma-3-270M, 320 tokens, 2 threads) fed to the writer as 100 ms
        drains would bring it, in the recorder's process, timed by process CPU time.
write   record's after-run write (spilled records read back, modelled, laid out, encoded,
        deflated, written) against the capture's duration: a tiny-llama recording (2 threads)
        tiled in time to 10 s of capture at a busy server's 300 k events/s, in its drains.
after   record with a real target (tiny-llama, 10,000 tokens, 1 thread pinned to one vCPU, 1
        thread not pinned and 2 threads, in turns): the time from the run's end to the whole
        trace, by --follow's follower at idle priority and by the after-run write
        (--no-follow), against the capture's duration, and the target's eval tokens/s under
        each.
calibrate  calibrate's memory roof at each thread count against an independent STREAM-like
        Copy in C with OpenMP (bench/stream_copy.c), three rounds interleaved; its compute roof
        on Gemma-3-270M; and the `roofline` verdicts of Gemma-3-270M's decode matmuls recorded
        with those roofs.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from bench.gate import bench_gate
from bench.report import markdown
from profinfer_perfetto.capture import process
from profinfer_perfetto.capture.events import SCHED
from profinfer_perfetto.capture.recorder import RecordRequest, plan, record
from profinfer_perfetto.capture.run import Drained, Recording
from profinfer_perfetto.capture.selection import Selection
from profinfer_perfetto.capture.spill import Spill, spill_path
from profinfer_perfetto.encode import units
from profinfer_perfetto.encode.output import atomic_output
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.encode.stream import TraceStream, write_trace
from profinfer_perfetto.machine.peaks import Peak, PeakKind, compute_peaks, memory_peak
from profinfer_perfetto.model.agreement import agreement
from profinfer_perfetto.model.layout import Layout, build_layout
from profinfer_perfetto.model.names import PROBE_ARG_PREFIX
from profinfer_perfetto.model.one_trap import as_one_trap
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.engines import EngineChoice, find_trace_processor
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets

HERE = Path(__file__).resolve().parent
CACHE = assets.CACHE / "bench"
MILLION = 1_000_000


def completion(model: str, tokens: int, threads: int, *extra: str, build: str = "shared"
               ) -> list[str]:
    """A seeded llama-completion generation of `tokens` tokens (of the shared build, or another
    of assets.bin_dir's)."""
    return [str(assets.llama_bin("llama-completion", build)), "-m", str(assets.model(model)),
            "-p", "Paris is the capital of", "-n", str(tokens), "-t", str(threads), "-no-cnv",
            "--no-warmup", "-s", "1", *extra]


def medium_recording(tokens: int = 64, threads: int = 2) -> Recording:
    request = RecordRequest(command=completion("medium-llama", tokens, threads))
    return record(request, plan(request))


def tiled(rec: Recording, records: int) -> Recording:
    """The recording repeated back to back until it holds `records` records."""
    copies = -(-records // len(rec.events))
    span = int(rec.run.end_ns - rec.run.begin_ns)
    events, nodes = [], []
    for k in range(copies):
        e, n = rec.events.copy(), rec.nodes.copy()
        e["ts"] += k * span
        n["ts"] += k * span
        events.append(e)
        nodes.append(n)
    run = rec.run
    run.end_ns = run.begin_ns + copies * span
    return Recording(np.concatenate(events), np.concatenate(nodes), run=run)


def million_op_trace() -> Path:
    path = CACHE / "ops-1m.pftrace"
    if not path.exists():
        rec = medium_recording()
        model = build(tiled(rec, MILLION * len(rec.events) // len(build(rec).ops)))
        with atomic_output(path) as out:
            write_perfetto(build_layout(model), out)
    return path


def _query_once(trace: Path, engine: str) -> dict[str, float]:
    start = time.perf_counter()
    with TraceQuery(trace, EngineChoice(engine)) as q:
        loaded = time.perf_counter()
        q.metric("op_summary")
        done = time.perf_counter()
    return {"load_s": round(loaded - start, 2), "op_summary_s": round(done - start, 2)}


def bench_query(rounds: int = 3) -> dict[str, Any]:
    """op_summary on the 1 M-op trace (load included), the engines at hand in turns for
    `rounds` rounds (a loaded machine slows both alike): each round's times, and the median of
    the rounds' ratios of the built-in engine's time to trace_processor's."""
    trace = million_op_trace()
    engines = ["builtin"] + (["trace_processor"] if find_trace_processor()[0] else [])
    runs = [{engine: _query_once(trace, engine) for engine in engines} for _ in range(rounds)]
    ratios = [r["builtin"]["op_summary_s"] / r["trace_processor"]["op_summary_s"]
              for r in runs if "trace_processor" in r]
    return {"trace_mib": round(trace.stat().st_size / 2**20, 1), "rounds": runs,
            "ratio_median": round(float(np.median(ratios)), 2) if ratios else None}


def _pinned() -> list[str]:
    """The command's prefix that pins it to the last CPU (llama.cpp's `-C MASK --cpu-strict 1`
    pins none of its threads at one thread in its OpenMP builds: the benches that used it until
    2026-12-03 ran their 1-thread targets unpinned)."""
    return ["taskset", "-c", str(max(os.sched_getaffinity(0)))]


def _llama_bench(model: str, threads: int, record: list[str] | None) -> dict[str, float]:
    """tokens/s of llama-bench (pp 32, tg 64), alone or under `record` with these options."""
    import sys

    cmd = [str(assets.llama_bin("llama-bench")), "-m", str(assets.model(model)), "-p", "32",
           "-n", "64", "-t", str(threads), "-r", "1", "-o", "json"]
    if threads == 1:  # llama.cpp on one vCPU for every run (this VM's two differ by ~25 %);
        # the recorder stays free to run on the other
        cmd = [*_pinned(), *cmd]
    if record is not None:
        cmd = [sys.executable, "-m", "profinfer_perfetto", "record", "-o",
               str(CACHE / "overhead.pftrace"), *record, "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    doc, _, summary = out.partition("\nrecorded ")
    result = {("pp" if t["n_prompt"] else "tg"): float(t["avg_ts"]) for t in json.loads(doc)}
    return {**result, **_recorder_said(summary)}


def _recorder_said(summary: str) -> dict[str, float]:
    """From record's summary: its CPU share of the capture, peak memory, events and losses,
    how long the trace took after the run (where it was written then) and its follower's CPU
    per event (where it had one)."""
    said: dict[str, float] = {}
    for line in summary.splitlines():
        words = line.split()
        if line.strip().startswith("recorder CPU"):
            said["recorder_cpu_share"] = float(words[2]) / float(words[9])
            said["recorder_cpu_s"], said["capture_s"] = float(words[2]), float(words[9])
            said["peak_mb"] = float(words[6])
            said["drain_gap_ms"] = float(words[-3])
        if line.strip().startswith("trace written") and "after the run" in line:
            said["after_s"] = float(words[2])
            if "its CPU" in line:  # by a follower: "its CPU 1.23 s (0.45 µs per event)"
                said["follower_us_per_event"] = float(line.split("its CPU")[1].split()[2][1:])
        if line.strip().startswith("events "):
            said["events"] = float(words[1].rstrip(","))
            said["lost"] = float(words[3])
    return said


def _record(out: Path, command: list[str], *options: str) -> dict[str, float]:
    """Run `record` (the CLI, its own process) and what its summary said, with bytes per op."""
    import sys

    done = subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record", "-o", str(out),
                           *options, "--", *command], capture_output=True, text=True,
                          errors="replace", check=True)
    said = _recorder_said(done.stdout)
    with TraceQuery(out, EngineChoice("builtin")) as q:
        ops = q.sql("select count(*) from profinfer_op_rows").rows[0][0]
    said["bytes_per_op"] = round(out.stat().st_size / max(ops, 1), 1)
    return said


def bench_memory() -> dict[str, Any]:
    """Recorder peak memory and CPU against capture length (the Gemma demo's 32 tokens, and
    10 and 100 times that) and against event rate (models of different speeds), streamed; and
    against capture length by default (the records kept on disk, the trace written at the
    end: its peak includes the writing)."""
    results: dict[str, Any] = {}
    runs = [(model, tokens, "--stream") for model, tokens in (
        ("gemma-3-270m", 32), ("gemma-3-270m", 320), ("gemma-3-270m", 3200), ("tiny-llama", 3200),
        ("medium-llama", 320))]
    runs += [("gemma-3-270m", tokens, "") for tokens in (32, 320, 3200)]
    for model, tokens, mode in runs:
        shift = ["--context-shift", "-c", "256"] if model == "tiny-llama" else []  # n_ctx 512
        said = _record(CACHE / "memory.pftrace",
                       completion(model, tokens, 2, "--ignore-eos", *shift),
                       *([mode] if mode else []))
        said["events_per_s"] = round(said["events"] / max(said["capture_s"], 1e-9))
        name = f"{model} {tokens} tokens" + ("" if mode else ", by default")
        results[name] = said
        print(name, said, flush=True)
    return results


def bench_server(seconds: float = 600, clients: int = 3) -> dict[str, Any]:
    """record --pid on a llama-server (3 slots) under continuous load from `clients` clients for
    `seconds`, streamed and by default: peak memory, CPU, events, losses, and by default how
    long the trace took after the run."""
    results: dict[str, Any] = {}
    for mode in ("--stream", ""):
        name = f"llama-server {clients} slots, {clients} clients, {seconds:g} s"
        results[name + ("" if mode else ", by default")] = _server_capture(seconds, clients, mode)
    return results


def bench_server_follow(seconds: float = 120, clients: int = 3) -> dict[str, Any]:
    """record --pid --follow on a llama-server at 1 thread pinned to the last CPU (the others
    free for the follower), under continuous load as `server`'s: how long the trace took after
    the run, beside what the follower's CPU per event makes of the server rate."""
    name = f"llama-server {clients} slots, {clients} clients, {seconds:g} s, 1 thread pinned"
    return {name + ", --follow": _server_capture(seconds, clients, "--follow", pinned=True)}


def _server_capture(seconds: float, clients: int, mode: str, pinned: bool = False
                    ) -> dict[str, float]:
    """One capture of a loaded llama-server: at 2 threads, or (`pinned`) at 1 on the last CPU."""
    import sys
    import threading
    import urllib.request

    port = 18_500
    where = _pinned() if pinned else []
    server = subprocess.Popen(
        [*where, str(assets.llama_bin("llama-server")), "-m", str(assets.model("tiny-llama")),
         "-t", "1" if pinned else "2", "-np", str(clients), "-c", str(1024 * clients), "--host",
         "127.0.0.1", "--port", str(port), "--no-warmup"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    stop = threading.Event()

    def client() -> None:
        body = json.dumps({"prompt": "Paris is the capital of", "n_predict": 64}).encode()
        while not stop.is_set():
            request = urllib.request.Request(f"{url}/completion", body,
                                             {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    answer.read()
            except OSError:  # the server is going away at the end
                return

    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        workers = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
        for w in workers:
            w.start()
        out = CACHE / "server.pftrace"
        recorder = subprocess.run(
            [sys.executable, "-m", "profinfer_perfetto", "record", "-o", str(out),
             *([mode] if mode else []), "--pid", str(server.pid), "--duration", str(seconds)],
            capture_output=True, text=True, errors="replace", check=True)
        stop.set()
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:  # it may wait for requests in flight
            server.kill()
            server.wait()
    said = _recorder_said(recorder.stdout)
    said["events_per_s"] = round(said["events"] / max(said["capture_s"], 1e-9))
    said["trace_mb"] = round(out.stat().st_size / 2**20, 1)
    print(mode or "by default", said, flush=True)
    return said


def _median_ci(values: list[float], seed: int = 0) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    v = np.asarray(values)
    boot = np.median(v[rng.integers(0, len(v), (2000, len(v)))], axis=1)
    low, high = np.quantile(boot, [0.025, 0.975])
    return float(np.median(v)), float(low), float(high)


MODES = {"floor": ["--floor"], "full": [], "no barriers": ["--no-barriers"],
         "sample 256, detach": ["--sample", "256", "--detach"], "full + --sched": ["--sched"],
         "full + --stream": ["--stream"]}


def bench_overhead(pairs: int = 8, models: tuple[str, ...] = ("gemma-3-270m", "medium-llama",
                   "medium-qwen3moe"), threads_of: tuple[int, ...] = (1, 2),
                   modes: tuple[str, ...] = tuple(MODES)) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for model in models:
        for threads in threads_of:
            for mode in modes:
                options = MODES[mode]
                slow: dict[str, list[float]] = {"tg": [], "pp": []}
                cpu, lost = [], 0.0
                for _ in range(pairs):
                    plain = _llama_bench(model, threads, None)
                    traced = _llama_bench(model, threads, options)
                    for phase in slow:
                        slow[phase].append(1 - traced[phase] / plain[phase])
                    cpu.append(traced.get("recorder_cpu_share", 0.0))
                    lost += traced.get("lost", 0.0)
                entry: dict[str, Any] = {
                    f"{phase}_slowdown": [round(x, 4) for x in _median_ci(values)]
                    for phase, values in slow.items()
                }
                entry["recorder_cpu_share"] = round(float(np.median(cpu)), 4)
                entry["events_lost"] = int(lost)
                results[f"{model} t{threads} {mode}"] = entry
                print(model, threads, mode, entry, flush=True)
    return results


WINDOW_S = 6.0
"""How long `record --pid` is attached in the windows bench."""
SETTLE_S = 2.0
"""After a recorder exits, how long before steps count as plain (its probes' removal takes the
kernel about a second)."""
STEP_TIMER = """
uprobe:{lib}:llama_decode, uprobe:{lib}:llama_process {{
    if (@depth[tid] == 0) {{ @start[tid] = nsecs; }}
    @depth[tid]++;
}}
uretprobe:{lib}:llama_decode, uretprobe:{lib}:llama_process /@depth[tid]/ {{
    @depth[tid]--;
    if (@depth[tid] == 0) {{ printf("%llu %llu\\n", @start[tid], nsecs - @start[tid]); }}
}}
END {{ clear(@depth); clear(@start); }}
"""
"""bpftrace timing every token step (the outermost llama_decode / llama_process call), on the
monotonic clock: the project's own timing is not used."""
WINDOW_MODES = {"floor": ["--floor"], "default": [], "exact floor": ["--floor", "--exact"],
                "exact": ["--exact"]}
"""The default (one trap per op) and --exact (two), each beside its floor: the same probe sites
with programs that return at once."""


def _boot_minus_monotonic() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()


class _ThreadTimes:
    """The CPU time of a process's threads, in user and in kernel mode (the kernel's tick
    accounting in /proc/PID/task/*/stat, 10 ms units), sampled every 50 ms from a thread of
    its own: a probe's trap and program run in the kernel on the target's thread, so the
    target's kernel time per user time in a window is what the recorder took inside it, as
    the timer ticks sample it (1 % of a 6 s window at one thread is 6 units; a fifth of a
    trap falls in user mode, the `traps` bench)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            user = kernel = 0
            for tid in process.threads(self.pid):
                fields = process.stat_fields(f"{self.pid}/task/{tid}")
                if fields is not None:  # else a thread that ended, or the process
                    user, kernel = user + int(fields[11]), kernel + int(fields[12])
            self.samples.append((time.monotonic_ns(), user, kernel))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def kernel_share(self, a: int, b: int) -> float:
        """Kernel time per user time of the target's threads between monotonic a and b."""
        at = [s[0] for s in self.samples]
        first, last = (self.samples[min(bisect.bisect_left(at, t), len(at) - 1)] for t in (a, b))
        return (last[2] - first[2]) / max(last[1] - first[1], 1)


def _median_step(steps: np.ndarray, a: int, b: int) -> float:
    """The median of the token steps (start, duration) that lie within [a, b]."""
    inside = (steps[:, 0] >= a) & (steps[:, 0] + steps[:, 1] <= b)
    return float(np.median(steps[inside, 1])) if inside.any() else float("nan")


@dataclass
class _Windows:
    """One long generation with the recorder attached in windows (_windows)."""

    steps: np.ndarray
    """Each token step's monotonic start and duration (bpftrace's)."""
    traced: list[tuple[str, int, int]]
    """Each traced window's mode and the capture's monotonic begin and end."""
    said: list[dict[str, float]]
    """What record's summary said of each traced window (_recorder_said)."""
    plain: list[tuple[int, int]]
    """The plain windows, one before and one after each traced one."""
    times: _ThreadTimes
    """The target's threads' CPU times."""


def _windows(model: str, threads: int, rounds: int, build: str) -> _Windows:
    """One long generation, its steps timed by bpftrace, with `record --pid` attached for
    WINDOW_S in each mode in turn, `rounds` times, a plain window after each."""
    import sys

    steps_file = CACHE / "window-steps.txt"
    # Without end: the context shifts when it fills (medium-llama's 4096 tokens last minutes).
    target = subprocess.Popen(completion(model, 1 << 20, threads, "--ignore-eos",
                                         "--context-shift", build=build),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    run = _Windows(np.empty((0, 2), np.int64), [], [], [], _ThreadTimes(target.pid))
    with steps_file.open("w") as steps_out:
        lib = (assets.llama_bin("llama-completion", build) if build == "static"
               else assets.bin_dir(build) / "libllama.so")
        timer = subprocess.Popen(["bpftrace", "-e", STEP_TIMER.format(lib=lib)],
                                 stdout=steps_out, stderr=subprocess.DEVNULL)
    try:
        time.sleep(WINDOW_S)  # loading
        for _ in range(rounds):
            for mode, options in WINDOW_MODES.items():
                plain_begin = time.monotonic_ns()
                time.sleep(WINDOW_S)
                run.plain.append((plain_begin, time.monotonic_ns()))
                out = CACHE / "window.pftrace"
                done = subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record",
                                       "-o", str(out), "--pid", str(target.pid), "--duration",
                                       str(WINDOW_S), *options],
                                      check=True, capture_output=True, text=True)
                with TraceQuery(out, EngineChoice("builtin")) as q:
                    begin, end = q.sql("select ts, ts + dur from slice "
                                       "where name = 'record'").rows[0]
                shift = _boot_minus_monotonic()
                run.traced.append((mode, int(begin) - shift, int(end) - shift))
                run.said.append(_recorder_said(done.stdout))
                time.sleep(SETTLE_S)
        plain_begin = time.monotonic_ns()
        time.sleep(WINDOW_S)
        run.plain.append((plain_begin, time.monotonic_ns()))
    finally:
        timer.terminate()
        timer.wait()
        run.times.stop()
        target.kill()
        target.wait()
    steps = [[int(v) for v in line.split()] for line in steps_file.read_text().splitlines()
             if line[:1].isdigit()]  # bpftrace also says what it attaches
    run.steps = np.array(steps, np.int64).reshape(-1, 2)
    return run


WINDOW_SETUPS = (("gemma-3-270m", 1, "shared"), ("gemma-3-270m", 2, "shared"),
                 ("medium-llama", 1, "shared"), ("medium-llama", 2, "shared"))
"""Model, threads, build. (The static build, made with -fcf-protection, is OpenMP's: recorded
with two traps per op whatever the mode.)"""


def bench_windows(setups: tuple[tuple[str, int, str], ...] = WINDOW_SETUPS,
                  rounds: int = 4) -> dict[str, Any]:
    """The recorder attached to one long generation (`record --pid`, WINDOW_S at a time, its
    drain thread and all), in turn with plain windows: each traced window's median step (timed
    by bpftrace) against the median step of the plain windows before and after it; `floor`
    attaches the same probe sites with programs that return at once. Beside it, what the
    recorder took inside the target's threads: their kernel time per user time in the window
    less the plain windows' around it (_ThreadTimes), which the VM's speed does not move."""
    results: dict[str, Any] = {}
    for model, threads, llama_build in setups:
        run = _windows(model, threads, rounds, llama_build)
        name = f"{model} t{threads}" + ("" if llama_build == "shared" else f" {llama_build} build")
        by_mode: dict[str, dict[str, list[float]]] = {
            mode: {"slowdown": [], "inside": [], "cpu": [], "rate": []} for mode in WINDOW_MODES}
        for i, ((mode, a, b), said) in enumerate(zip(run.traced, run.said, strict=True)):
            plain = run.plain[i], run.plain[i + 1]
            around = np.mean([_median_step(run.steps, *w) for w in plain])
            plain_share = np.mean([run.times.kernel_share(*w) for w in plain])
            got = by_mode[mode]
            got["slowdown"].append(_median_step(run.steps, a, b) / float(around) - 1)
            got["inside"].append(run.times.kernel_share(a, b) - float(plain_share))
            got["cpu"].append(said["recorder_cpu_share"])
            got["rate"].append(said["events"] / said["capture_s"])
        for mode, got in by_mode.items():
            results[f"{name} {mode}"] = {
                "slowdown": [round(x, 4) for x in _median_ci(got["slowdown"])],
                "windows": [round(x, 4) for x in got["slowdown"]],
                "inside": [round(x, 4) for x in _median_ci(got["inside"])],
                "inside_windows": [round(x, 4) for x in got["inside"]],
                "recorder_cpu_share": round(float(np.median(got["cpu"])), 4),
                "events_per_s": round(float(np.median(got["rate"]))),
                "plain_step_ms": round(float(np.median([_median_step(run.steps, *w)
                                                        for w in run.plain])) / 1e6, 2),
            }
            print(name, mode, results[f"{name} {mode}"], flush=True)
    return results


ONE_TRAP_SETUPS = (("gemma-3-270m", 1), ("gemma-3-270m", 2), ("tiny-llama", 2),
                   ("medium-llama", 2))
"""(model, threads) of the one-trap comparison."""


def bench_one_trap(tokens: int = 128) -> dict[str, Any]:
    """Whether ops derived from one trap per op (model/one_trap.py: the barriers alone) agree
    with the exact ones: each setup recorded once with both probes, its model built as recorded
    and without its op begins (model/agreement.py). The derived op begins are the barrier
    releases, earlier than the recorded ones by the wake-up, the loop's steps and the op begin
    trap's entry (`op_begin_us`), which a run with one trap per op does not have."""
    results: dict[str, Any] = {}
    for name, threads in ONE_TRAP_SETUPS:
        request = RecordRequest(command=completion(name, tokens, threads),
                                selection=Selection(exact=True))
        rec = record(request, plan(request))
        results[f"{name} t{threads}"] = agreement(build(rec), build(as_one_trap(rec)))
        print(name, threads, {k: v for k, v in results[f"{name} t{threads}"].items()
                              if k != "by_key"}, flush=True)
    return results


AFTER_SAMPLE = 30
"""Steps after a sampled one that its probes' removal can still slow down."""
STEP_MODES = {"default": [], "floor": ["--floor"], "exact": ["--exact"],
              "exact floor": ["--exact", "--floor"]}


def bench_traced_steps(every: int = 64, window: int = 16) -> dict[str, Any]:
    """What tracing a decode step costs, measured inside one run: with `--sample N --detach`
    the op probes are attached only around every N-th step (steps N, 2N, ...), so each traced
    step is compared with the median of the `window` untouched steps just before it (the probes
    come one step ahead). A sample's whole cost is the extra time of the steps from the one
    before it to AFTER_SAMPLE after it (attaching, tracing, removing the probes), in untraced
    steps; over N steps that is the slowdown of `--sample N --detach`. Per STEP_MODES: the
    default (one trap per op) and --exact (two), each beside its floor (the same probe sites,
    programs that return at once: the traps alone)."""
    import sys

    results: dict[str, Any] = {}
    for model, tokens in (("gemma-3-270m", 1024), ("medium-llama", 640)):
        for threads in (1, 2):
            for mode, options in STEP_MODES.items():
                out = CACHE / "steps.pftrace"
                cmd = completion(model, tokens, threads, "--ignore-eos")
                subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record", "-o",
                                str(out), "--sample", str(every), "--detach", *options, "--",
                                *cmd], check=True, capture_output=True)
                with TraceQuery(out, EngineChoice("builtin")) as q:
                    steps = dict(q.sql("select step, dur from profinfer_step "
                                       "where phase = 'decode'").rows)
                    costs = q.recording_args()
                traced = [k for k in steps if k % every == 0]
                slowdown, sample_cost = [], []
                for k in traced:
                    before = [steps[j] for j in range(k - window - 1, k - 1) if j in steps]
                    around = [steps[j] for j in range(k - 1, k + AFTER_SAMPLE) if j in steps]
                    if len(before) == window and len(around) == AFTER_SAMPLE + 1:
                        base = float(np.median(before))
                        slowdown.append(steps[k] / base - 1)
                        sample_cost.append(sum(around) / base - len(around))
                cost = float(np.median(sample_cost))
                results[f"{model} t{threads} {mode}"] = {
                    "step_slowdown": [round(x, 4) for x in _median_ci(slowdown)],
                    "traced_steps": len(slowdown),
                    "median_step_ms": round(float(np.median(list(steps.values()))) / 1e6, 2),
                    "sample_cost_steps": round(cost, 2),
                    "sample_256_slowdown": round(cost / 256, 4),
                    "probe_ns_per_run": {k[len(PROBE_ARG_PREFIX):-len("_ns_per_run")]: int(v)
                                         for k, v in costs.items()
                                         if k.startswith(PROBE_ARG_PREFIX)
                                         and k.endswith("_ns_per_run")},
                }
                print(model, threads, mode, results[f"{model} t{threads} {mode}"], flush=True)
    return results


def bench_capacity() -> dict[str, Any]:
    import sys

    cmd = completion("tiny-llama", 400, 2)
    results: dict[str, Any] = {}
    for pages in (4096, 16):
        out = CACHE / "capacity.pftrace"
        subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record", "-o", str(out),
                        "--ring-pages", str(pages), "--", *cmd], check=True, capture_output=True)
        with TraceQuery(out, EngineChoice("builtin")) as q:
            record = q.recording_args()
            span = q.sql("select (max(ts + dur) - min(ts)) / 1e9 from profinfer_graph").rows[0][0]
        events = int(record["events"])
        results[f"ring {pages} pages"] = {
            "events": events, "events_lost": int(record["events_lost"]),
            "nodes_lost": int(record["nodes_lost"]),
            "event_rate_per_s": round(events / max(span or 1e-9, 1e-9)),
        }
    return results


def _drains(rec: Recording, every_ns: int = 100_000_000, events: int = 0) -> list[Drained]:
    """The recording's records as drains every `every_ns` would have brought them; or, with
    `events`, as drains of that many events each (what a capture at another rate would bring)."""
    def part(records: np.ndarray, a: int, b: int) -> np.ndarray:
        picked: np.ndarray = records[(records["ts"] >= a) & (records["ts"] < b)]
        return picked

    if events:
        cuts = np.sort(rec.events["ts"])[events::events].tolist()
    else:
        cuts = list(range(rec.run.begin_ns + every_ns, rec.run.end_ns + 1, every_ns))
    starts = [rec.run.begin_ns, *cuts]
    ends = [*cuts, rec.run.end_ns + 1]
    return [Drained(part(rec.events, a, b), part(rec.nodes, a, b), part(rec.routes, a, b),
                    part(rec.batches, a, b), np.empty(0, SCHED))
            for a, b in zip(starts, ends, strict=True)]


def bench_writer(tokens: int = 320, rounds: int = 3) -> dict[str, Any]:
    request = RecordRequest(command=completion("gemma-3-270m", tokens, 2))
    rec = record(request, plan(request))
    drains = _drains(rec)
    cpu = []
    out = CACHE / "writer.pftrace"
    for _ in range(rounds):
        start = time.process_time()
        stream = TraceStream(out)
        for drained in drains:
            stream(drained, rec.run)
        stream.finish(rec)
        cpu.append(time.process_time() - start)
    events = len(rec.events)
    best = min(cpu)
    return {"events": events, "cpu_s": [round(c, 3) for c in cpu],
            "us_per_event": round(best / events * 1e6, 2),
            "events_per_cpu_s": round(events / best),
            "bytes_per_event": round(out.stat().st_size / events, 2)}


SERVER_RATE = 300_000
"""Events per second of a busy llama-server capture (the server benchmark: 250-320 k)."""


def _busy_s() -> float:
    """CPU seconds the whole machine has spent so far (every process: the writer's workers too;
    /proc/stat's ticks, 100 a second)."""
    user, nice, system, _idle, _iowait, irq, softirq = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8])
    return (user + nice + system + irq + softirq) / 100


def bench_write(seconds: float = 10, rounds: int = 2) -> dict[str, Any]:
    """The after-run write of record's default (the records spilled during the run, the trace
    written from them once it ends) against the capture's duration: a real recording
    (tiny-llama, 256 tokens, 2 threads) tiled in time to `seconds` of capture at SERVER_RATE,
    cut into the drains such a capture brings (100 ms of SERVER_RATE: the chunks the writer
    models are as long as a server capture's, not as the recording's own slower rate made
    them), spilled to disk (a temporary folder), then read back and written as the trace, in
    one sequence (the pipelined threads) and in units by worker processes (one per CPU, two at
    least: encode/units.py), in turns (wall time, best round; the machine's CPU time beside
    it)."""
    request = RecordRequest(command=completion("tiny-llama", 256, 2))
    rec = record(request, plan(request))
    rec = tiled(rec, int(seconds * SERVER_RATE))
    modes = {"one sequence": 0, "units": max(2, units.workers())}
    wall: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    size = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "write.pftrace"
        spill = Spill(spill_path(out), len(rec.run.counters))
        for drained in _drains(rec, events=SERVER_RATE // 10):
            spill(drained, rec.run)
        spill.finish()
        for _ in range(rounds):
            for mode, workers in modes.items():
                out.unlink(missing_ok=True)
                start, cpu_start = time.perf_counter(), _busy_s()
                write_trace(out, spill.drains(), rec, workers=workers)
                wall[mode].append(time.perf_counter() - start)
                cpu[mode].append(_busy_s() - cpu_start)
                size[mode] = out.stat().st_size
        spill.remove()
    events = len(rec.events)
    capture_s = events / SERVER_RATE
    return {"events": events, "capture_s_at_server_rate": round(capture_s, 2),
            "cpus": len(os.sched_getaffinity(0)), "workers": modes["units"],
            "modes": {mode: {"write_s": [round(w, 2) for w in wall[mode]],
                             "cpu_s": [round(c, 2) for c in cpu[mode]],
                             "events_per_s": round(events / min(wall[mode])),
                             "share_of_capture": round(min(wall[mode]) / capture_s, 3),
                             "bytes_per_event": round(size[mode] / events, 2)}
                      for mode in modes}}


AFTER_SETUPS = ((1, True), (1, False), (2, False))
"""The `after` bench's targets: threads, pinned to the last CPU (by taskset; the other is free
for the follower) or not (one thread leaves a CPU too, wherever the scheduler puts it)."""


def _after(threads: int, pinned: bool, tokens: int, follower: bool) -> dict[str, float]:
    """One real `record` (the CLI) of a tiny-llama generation, with --follow or with the trace
    written after the run (--no-follow): how long the trace took after the run
    ended and the capture's length (record's summary), and the target's own eval tokens/s."""
    import re
    import sys

    command = completion("tiny-llama", tokens, threads, "--ignore-eos", "--context-shift", "-c",
                         "256")
    if pinned:
        command = [*_pinned(), *command]
    for _ in range(3):  # llama.cpp's log thread now and then loses its last lines at exit
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record",
                                   "--follow" if follower else "--no-follow", "-o",
                                   str(Path(tmp) / "after.pftrace"), "--", *command],
                                  capture_output=True, text=True, errors="replace", check=True)
        speed = re.search(r"\s eval time =.*?([\d.]+) tokens per second", done.stderr)
        if speed is not None:
            break
    took = re.search(r"trace written ([\d.]+) s after the run", done.stdout)
    assert took is not None and speed is not None, done.stdout + done.stderr
    said = _recorder_said(done.stdout)
    return {"after_s": float(took.group(1)), "capture_s": said["capture_s"],
            "events": said["events"], "eval_tokens_s": float(speed.group(1))}


def bench_after(tokens: int = 10_000, rounds: int = 6) -> dict[str, Any]:
    """record's default: the trace's completion after the run, its follower at idle priority
    against the old after-run write, and the target's speed under each (in turns, the first of
    a round alternating; the follower's as the ratio to the after-run's in the same round,
    where this VM's speed from run to run cancels)."""
    results: dict[str, Any] = {"tokens": tokens, "load_before": os.getloadavg()[0]}
    for threads, pinned in AFTER_SETUPS:
        runs: dict[str, list[dict[str, float]]] = {"follower": [], "after-run": []}
        for r in range(rounds):  # which runs first alternates, so a round's warm-up falls on both
            for mode in list(runs)[::-1] if r % 2 else list(runs):
                runs[mode].append(_after(threads, pinned, tokens, mode == "follower"))
        setup = f"{threads} thread{'s' * (threads > 1)}{', pinned' * pinned}"
        for mode, said in runs.items():
            results[f"{setup}, {mode}"] = {
                "after_s": [r["after_s"] for r in said],
                "share_of_capture": [round(r["after_s"] / r["capture_s"], 3) for r in said],
                "capture_s": [r["capture_s"] for r in said],
                "events_per_s": [round(r["events"] / r["capture_s"]) for r in said],
                "eval_tokens_s": [r["eval_tokens_s"] for r in said]}
        ratios = [f["eval_tokens_s"] / a["eval_tokens_s"]
                  for f, a in zip(runs["follower"], runs["after-run"], strict=True)]
        results[f"{setup}, follower"]["eval_ratio"] = round(float(np.median(ratios)), 3)
    results["load_after"] = os.getloadavg()[0]
    return results


def bench_encoding(rounds: int = 5) -> dict[str, Any]:
    """write_perfetto against a naive per-event writer on one layout, in turns; the best round
    of each (wall time, with the load average before and after: the machine may be shared)."""
    import io

    model = build(medium_recording(tokens=32))
    layout = build_layout(model)
    ours_s, ours_cpu, naive_s = [], [], []
    load = os.getloadavg()[0]
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        ours = io.BytesIO()
        packets = write_perfetto(layout, ours)
        ours_s.append(time.perf_counter() - wall)
        ours_cpu.append(time.process_time() - cpu)
        start = time.perf_counter()
        naive = _naive(layout)
        naive_s.append(time.perf_counter() - start)
    ops = len(model.ops)
    size = len(ours.getvalue())
    return {
        "packets": packets, "op_slices": ops, "events_recorded": model.event_count,
        "ours_packets_per_s": round(packets / min(ours_s)),
        "ours_cpu_us_per_packet": round(min(ours_cpu) / packets * 1e6, 3),
        "ours_bytes_per_op": round(size / ops, 1),
        "ours_bytes_per_event": round(size / model.event_count, 1),
        "naive_packets_per_s": round(len(layout) / min(naive_s)),
        "naive_bytes_per_packet": round(len(naive) / len(layout), 1),
        "speedup_over_naive": round((packets / min(ours_s)) / (len(layout) / min(naive_s)), 2),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def _naive(layout: Layout) -> bytes:
    """Each event as a perfetto_trace_pb2 TracePacket of its own (no args, flows or counters)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

    naive = bytearray()
    uuids = [t.uuid for t in layout.tracks]
    for ts, typ, track, name in zip(layout.ts.tolist(), layout.type.tolist(),
                                    layout.track.tolist(), layout.name.tolist(), strict=True):
        packet = official.TracePacket(timestamp=ts, trusted_packet_sequence_id=1)
        packet.track_event.type = typ
        packet.track_event.track_uuid = uuids[track]
        if name >= 0:
            packet.track_event.name_iid = name + 1
        body = packet.SerializeToString()
        naive += bytes([0x0A, len(body)]) + body
    return bytes(naive)


def _trap_loop(loop: Path, calls: int, probed: bool) -> list[float]:
    """bench/trap_loop.c's wall, user and kernel ns per call; `probed`: with bpftrace's empty
    uprobe on the function's entry (its `push`, which the kernel emulates)."""
    tracer = None
    if probed:
        script = f'BEGIN {{ printf("attached\\n"); }} uprobe:{loop}:probed {{ }}'
        tracer = subprocess.Popen(["bpftrace", "-B", "line", "-e", script],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert tracer.stdout is not None
        while tracer.stdout.readline() not in ("attached\n", ""):  # BEGIN runs once attached
            pass
    try:
        said = subprocess.run([str(loop), str(calls)], capture_output=True, text=True,
                              check=True).stdout
    finally:
        if tracer is not None:
            tracer.terminate()
            tracer.wait()
    return [float(v) for v in said.split()]


def bench_traps(rounds: int = 5) -> dict[str, Any]:
    """What one uprobe trap costs the probed thread on this machine, and how much of it the
    kernel's tick accounting calls kernel time (the `windows` bench's `inside` column counts
    the kernel time alone): a loop of calls to a function with and without an empty uprobe on
    its entry, in turns (bench/trap_loop.c)."""
    loop = CACHE / "trap_loop"
    subprocess.run(["gcc", "-O2", "-fno-omit-frame-pointer", "-fcf-protection=none", "-o",
                    str(loop), str(HERE / "trap_loop.c")], check=True)
    plain, probed = [], []
    for _ in range(rounds):
        plain.append(_trap_loop(loop, 100_000_000, False))
        probed.append(_trap_loop(loop, 3_000_000, True))
    wall, user, kernel = (np.median(np.array(probed)[:, i]) for i in range(3))
    trap = float(wall - np.median(np.array(plain)[:, 0]))
    return {"plain_ns_per_call": [round(p[0], 2) for p in plain],
            "probed_ns_per_call": [round(p[0], 1) for p in probed],
            "probed_user_kernel_ns": [[round(p[1], 1), round(p[2], 1)] for p in probed],
            "trap_ns": round(trap, 1),
            "kernel_share_of_trap": round(float(kernel) / trap, 3),
            "user_ns": round(float(user), 1)}


def bench_calibrate(rounds: int = 3) -> dict[str, Any]:
    threads = list(range(1, len(os.sched_getaffinity(0)) + 1))
    stream = CACHE / "stream_copy"
    subprocess.run(["gcc", "-O2", "-fopenmp", "-o", str(stream), str(HERE / "stream_copy.c")],
                   check=True)
    memory: dict[int, dict[str, list[float]]] = {n: {"ours": [], "stream": []} for n in threads}
    for _ in range(rounds):
        for n in threads:
            memory[n]["ours"].append(memory_peak(n).value)
            copied = subprocess.run([str(stream)], capture_output=True, text=True, check=True,
                                    env={**os.environ, "OMP_NUM_THREADS": str(n)}).stdout
            memory[n]["stream"].append(float(copied))
    gemma = assets.model("gemma-3-270m")
    compute = compute_peaks(assets.llama_bin("llama-bench"), gemma, threads)
    peaks = tuple(Peak(PeakKind.MEMORY, n, float(np.median(m["ours"])))
                  for n, m in memory.items()) + tuple(compute)
    request = RecordRequest(command=completion("gemma-3-270m", 32, threads[-1]), peaks=peaks)
    path = CACHE / "roofline.pftrace"
    with atomic_output(path) as out:
        write_perfetto(build_layout(build(record(request, plan(request)))), out)
    with TraceQuery(path, EngineChoice("builtin")) as q:
        result = q.metric("roofline")
    rows = [dict(zip(result.columns, r, strict=True)) for r in result.rows]
    return {
        "memory": {str(n): {"ours_gb_s": float(np.median(m["ours"])),
                            "stream_gb_s": float(np.median(m["stream"])),
                            "ratio": round(float(np.median(np.array(m["ours"])
                                                           / np.array(m["stream"]))), 3)}
                   for n, m in memory.items()},
        "compute": {f"{p.dtype} t{p.threads}": p.value for p in compute},
        "decode_matmuls": [{k: r[k] for k in ("role", "dtype", "intensity", "ridge",
                                              "gbyte_per_s", "roof_share", "verdict")}
                           for r in rows if r["phase"] == "decode" and r["op"] == "MUL_MAT"],
    }


BENCHES: dict[str, Callable[[], dict[str, Any]]] = {
    "overhead": bench_overhead,
    "memory": bench_memory,
    "server": bench_server,
    "server-follow": bench_server_follow,
    "steps": bench_traced_steps,
    "windows": bench_windows,
    "traps": bench_traps,
    "one-trap": bench_one_trap,
    "capacity": bench_capacity,
    "encoding": bench_encoding,
    "writer": bench_writer,
    "write": bench_write,
    "after": bench_after,
    "query": bench_query,
    "gate": lambda: bench_gate(completion),
    "calibrate": bench_calibrate,
}


MERGED = {"gate"}
"""Benches whose rows are kept where a run measures only some of them ($GATE_SETUPS)."""


def _when_measured(name: str, when: str) -> str:
    """When and where a bench was measured; of a merged bench measured in part, which part."""
    setups = os.environ.get("GATE_SETUPS")
    pairs = os.environ.get("GATE_PAIRS")
    if name in MERGED and setups:
        part = f"{setups}, {pairs} pairs" if pairs else setups
        return f"{when} ({part}; the other rows earlier)"
    return when


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), default=sorted(BENCHES))
    args = parser.parse_args()
    results_path = HERE / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    when = (f"{date.today().isoformat()} on {platform.machine()} Linux {platform.release()}, "
            f"{len(os.sched_getaffinity(0))} cores")
    CACHE.mkdir(parents=True, exist_ok=True)  # where the benches keep their traces
    for name in args.only:
        fresh = BENCHES[name]()
        results[name] = {**results.get(name, {}), **fresh} if name in MERGED else fresh
        results.setdefault("measured", {})[name] = _when_measured(name, when)
        print(name, json.dumps(fresh))
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    header = ("Generated by `nox -s bench` (bench/run.py) from bench/results.json: do not edit; "
              "docs/internals.md says what each table measures.\n\n")
    (HERE.parent / "docs" / "benchmarks.md").write_text(header + markdown(results))


if __name__ == "__main__":
    main()
