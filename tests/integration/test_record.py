"""Real probes on a real llama.cpp: `profinfer-perfetto record` end to end, as a user runs it."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profinfer_perfetto.capture.counters import PMUS, SOFTWARE_COUNTERS
from profinfer_perfetto.capture.events import MAX_COUNTERS, Kind, TokenEntry
from profinfer_perfetto.capture.recorder import DRAIN_INTERVAL_S, RecordRequest, plan, record
from profinfer_perfetto.model.names import (
    INNER_WAIT_SLICE,
    WAIT_SLICE,
    counted_arg,
    probe_args,
)
from profinfer_perfetto.model.trace_model import token_phase
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from tests import trace_reader
from tests.conftest import BUILD, Cli
from tests.integration.bpftrace_count import BpftraceCount, recorded_pid
from tests.waiting import wait_until

pytestmark = pytest.mark.root

PROMPT = "Paris is"
TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
COUNTED = {"ops": "ggml_cpu_extra_compute_forward",
           "fused": "ggml_compute_forward_rms_norm_mul_fused",
           "barriers": "ggml_barrier"}


def completion(llama: Callable[..., Path], model: Path, threads: int, n: int = 16,
               build: str = BUILD) -> list[str]:
    return [str(llama("llama-completion", build)), "-m", str(model), "-p", PROMPT, "-n", str(n),
            "-t", str(threads), "-no-cnv", "--no-warmup", "-s", "1"]


def op_slices(trace: trace_reader.Trace) -> list[trace_reader.Slice]:
    """Every thread's share of every node (a `node` arg)."""
    return [s for s in trace.slices if "node" in s.args]


def described(trace: trace_reader.Trace) -> list[trace_reader.Slice]:
    """The one op slice per node that carries its description (the calling thread's)."""
    return [s for s in trace.slices if "op" in s.args]


def record_slice(trace: trace_reader.Trace) -> trace_reader.Slice:
    (rec,) = [s for s in trace.slices if s.name == "record"]
    return rec


def wait_for_a_token(recorder: subprocess.Popen[str], timeout: float = 120) -> None:
    """Read the recorder's stdout, which the launched target shares, until llama-completion
    prints past its prompt. It echoes the prompt before evaluating it and prints each token once
    sampled, so a first sampled token means the prefill has run, traced."""
    assert recorder.stdout is not None
    fd, said, deadline = recorder.stdout.fileno(), b"", time.monotonic() + timeout
    prompt = PROMPT.encode()
    while prompt not in said or not said.split(prompt, 1)[1]:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"the target printed no token in {timeout:.0f} s: {said!r}"
        chunk = os.read(fd, 4096)  # unbuffered: communicate() reads the rest from the fd
        assert chunk, f"the target's output ended before its first token: {said!r}"
        said += chunk


def start_recorder(out: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    """`record -o OUT ARGS` in the background, once it says its probes are attached."""
    recorder = subprocess.Popen(
        [sys.executable, "-m", "profinfer_perfetto", "record", "-o", str(out), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    assert recorder.stderr is not None
    line = recorder.stderr.readline()
    assert "tracing pid" in line, line
    return recorder, int(line.split("tracing pid ")[1].split(";")[0])


@pytest.mark.parametrize("threads", [1, 2])
def test_record_a_generation(cli: Cli, llama: Callable[..., Path],
                             model: Callable[[str], Path], tmp_path: Path, threads: int) -> None:
    check_a_generation(cli, llama, model, tmp_path, threads, BUILD)


def test_record_a_clang_build_whose_cpu_backend_is_dlopened(
        cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path],
        tmp_path: Path) -> None:
    """clang's code (tail calls, other registers), and libggml-cpu.so loaded by ggml itself
    once the process runs (GGML_BACKEND_DL): the probes follow it there."""
    check_a_generation(cli, llama, model, tmp_path, 2, "clang", barriers=False,
                       wait=("--duration", "900"))


def check_a_generation(cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path],
                       tmp_path: Path, threads: int, build: str, barriers: bool = True,
                       wait: tuple[str, ...] = ()) -> None:
    """With `barriers` False, the build's graph loop has ggml_barrier inlined (clang does):
    nothing ends an op before the next starts, and the record slice says so. `wait`: options
    for a runtime that ggml dlopens, which an emulated machine may take longer than record's
    30 s to reach."""
    out = tmp_path / "run.pftrace"
    # the library's unversioned name: a link in the shared builds, the module ggml dlopens in
    # a build with GGML_BACKEND_DL
    bpftrace = BpftraceCount.entries(llama("llama-completion", build).parent / "libggml-cpu.so",
                                     COUNTED)
    result = cli("record", "--inner-waits", *wait, "-o", out, "--",
                 *completion(llama, model("tiny-llama"), threads, build=build))
    counts = bpftrace.stop(recorded_pid(result.stdout))
    assert result.returncode == 0, result.stderr
    assert "recorded llama-completion" in result.stdout and "ui.perfetto.dev" in result.stdout
    trace = trace_reader.read(out)
    check_counted(trace, counts, barriers)
    steps = check_steps(trace)
    check_threads(trace, steps, threads, barriers)
    check_names_and_edges(trace, steps)
    check_inner_waits(trace, counts)


def check_inner_waits(trace: trace_reader.Trace, counts: dict[str, int]) -> None:
    """Every call of ggml_barrier (bpftrace's count) is a barrier of the graph loop or one inside
    an op's own function (a matmul's), whose wait is drawn within its op's slice."""
    rec = record_slice(trace)
    loop = rec.args.get(probe_args("barrier_enter")[0], 0)
    inner = rec.args.get(probe_args("inner_wait_begin")[0], 0)
    assert inner > 0 and loop + inner == counts["barriers"]
    # a tail call of ggml_barrier (llamafile's tinyBLAS ends so) has no return in its function
    assert 0 < rec.args[probe_args("inner_wait_end")[0]] <= inner
    waits = [s for s in trace.slices if s.name == INNER_WAIT_SLICE]
    assert len(waits) == inner
    for w in waits:
        assert w.parent is not None and "node" in w.parent.args
        assert w.parent.ts <= w.ts and w.end <= w.parent.end


def check_counted(trace: trace_reader.Trace, counts: dict[str, int], barriers: bool) -> None:
    """The record slice, and every op event the probes saw and no other: the same count as
    bpftrace's, fused included, with what the probes cost as the kernel timed it."""
    rec = record_slice(trace)
    assert rec.args["status"] == "complete" and rec.args["complete"] is True
    assert rec.args["events_lost"] == 0 and rec.args["nodes_lost"] == 0
    assert rec.args["ops_dropped"] == 0
    # the recorder sleeps 100 ms before each drain of its loop: the first comes no sooner
    assert rec.args["longest_drain_gap_ms"] >= 1000 * DRAIN_INTERVAL_S
    assert rec.args["ggml_version"] == "0.25.3" and len(rec.args["ggml_build_id"]) == 40
    ops = op_slices(trace)
    assert len(ops) == counts["ops"] + counts.get("fused", 0)
    assert counts.get("fused", 0) > 0
    # one run per op event, a positive time each
    op_runs, op_ns = probe_args("op_begin")
    assert rec.args[op_runs] == counts["ops"]
    assert rec.args[probe_args("fused_op_begin")[0]] == counts["fused"]
    if barriers:
        assert rec.args[probe_args("barrier_enter")[0]] >= len(ops)
    else:
        assert probe_args("barrier_enter")[0] not in rec.args
        assert any(str(v).startswith("no call of ggml_barrier found") for k, v in rec.args.items()
                   if k.startswith("note"))
    assert 0 < rec.args[op_ns] < 1_000_000


def check_steps(trace: trace_reader.Trace) -> list[trace_reader.Slice]:
    """One prefill of the prompt, then one decode per generated token; descriptors follow graph
    rebuilds (prefill, then decode graphs reused step after step): a token's Q projection is
    as wide as its batch. Returns the token steps."""
    steps = [s for s in trace.slices if s.name in ("prefill", "decode")]
    assert [s.name for s in steps] == ["prefill"] + ["decode"] * 15
    assert steps[0].args["n_tokens"] == 3 and all(s.args["n_tokens"] == 1 for s in steps[1:])
    for s in described(trace):
        if s.args["tensor"] == "Qcur-0" and s.args["op"] == "MUL_MAT":
            step = s.parent.parent if s.parent is not None else None
            if step is not None and step.name in ("prefill", "decode"):
                n = step.args["n_tokens"]
                assert s.args["shape"] == "256" + (f"x{n}" if n > 1 else ""), s.args
    return steps


def check_threads(trace: trace_reader.Trace, steps: list[trace_reader.Slice], threads: int,
                  barriers: bool) -> None:
    """Each thread runs its share of every node of every graph; a node is described once, on its
    calling thread's share, which every share is named after; an op is inside its graph
    inside its token step on the calling thread, inside its graph elsewhere."""
    ops = op_slices(trace)
    per_thread = Counter(trace.tracks[s.track].thread.tid for s in ops)
    assert len(per_thread) == threads and len(set(per_thread.values())) == 1
    nodes = {(s.parent.args["graph"], s.args["node"]): s for s in described(trace)
             if s.parent is not None}
    assert len(nodes) * threads == len(ops)
    assert all(s.parent is not None and nodes[s.parent.args["graph"], s.args["node"]].name
               == s.name for s in ops)
    main_tid = trace.tracks[steps[0].track].thread.tid
    for s in ops:
        assert s.parent is not None and s.parent.name == "graph CPU"
        assert s.parent.ts <= s.ts and s.end <= s.parent.end
        if trace.tracks[s.track].thread.tid == main_tid:
            assert s.parent.parent is not None and s.parent.parent.name in ("prefill", "decode")
    waits = [s for s in trace.slices if s.name == WAIT_SLICE]
    assert bool(waits) == barriers
    assert all(w.parent is not None and w.parent.name == "graph CPU" for w in waits)


def check_names_and_edges(trace: trace_reader.Trace, steps: list[trace_reader.Slice]) -> None:
    """Names: `OP tensor`, the tensor names llama.cpp gives, layers from their suffix. The DAG:
    a flow per source link between computed nodes, producer before consumer."""
    nodes = described(trace)
    tensors = {s.args["tensor"] for s in nodes}
    assert {"Qcur-0", "Kcur-3", "ffn_up-2", "result_output"} <= tensors
    for s in nodes:
        assert s.name == f"{s.args.get('subop') or s.args['op']} {s.args['tensor']}"
    assert {s.args["layer"] for s in nodes} == {-1, 0, 1, 2, 3}
    assert trace.flows
    links = {(a.args["tensor"], b.args["tensor"]) for a, b in trace.flows}
    assert ("attn_norm-1", "Qcur-1") in links and ("ffn_out-0", "l_out-0") in links
    assert all(a.ts < b.ts for a, b in trace.flows)
    per_graph = Counter(id(b.parent) for _, b in trace.flows)
    assert len(per_graph) == len(steps)


def test_record_a_static_build(cli: Cli, llama: Callable[..., Path],
                               model: Callable[[str], Path], tmp_path: Path) -> None:
    """The static build is made with -fcf-protection (setup.sh): its entry probes, uretprobes
    too, sit past each function's endbr64 (tests/integration/test_target.py)."""
    out = tmp_path / "static.pftrace"
    cmd = completion(llama, model("tiny-llama"), 2, n=4, build="static")
    result = cli("record", "-o", out, "--", *cmd)
    assert result.returncode == 0, result.stderr
    trace = trace_reader.read(out)
    assert record_slice(trace).args["events_lost"] == 0
    assert {s.args["op"] for s in described(trace)} >= {"MUL_MAT", "ROPE", "RMS_NORM+MUL"}
    assert trace.flows
    # Token steps and graphs end (their uretprobes): each op inside a graph inside a step.
    steps = [s for s in trace.slices if s.name in ("prefill", "decode")]
    assert len(steps) >= 4 and all(s.end > s.ts for s in steps)
    for s in op_slices(trace):
        assert s.parent is not None and s.parent.name == "graph CPU"
        assert s.parent.ts <= s.ts and s.end <= s.parent.end


@contextmanager
def running_server(llama: Callable[..., Path], model: Callable[[str], Path],
            *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A llama-server on tiny-llama, up and answering; its process and URL. It listens on a
    port the kernel chooses (--port 0), read back from the kernel's table of sockets."""
    server = subprocess.Popen(
        [str(llama("llama-server")), "-m", str(model("tiny-llama")), "-t", "2", "--host",
         "127.0.0.1", "--port", "0", "--no-warmup", *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{_listening_port(server)}"
        wait_until(lambda: _answers(f"{url}/health"), f"{url}/health answered")
        yield server, url
    finally:
        server.terminate()
        server.wait(timeout=30)


def stop_recorder(recorder: subprocess.Popen[str]) -> None:
    recorder.send_signal(signal.SIGINT)
    _, stderr = recorder.communicate(timeout=60)
    assert recorder.returncode == 0, stderr


def test_attach_to_a_running_server(cli: Cli, llama: Callable[..., Path],
                                    model: Callable[[str], Path], tmp_path: Path) -> None:
    out = tmp_path / "server.pftrace"
    with running_server(llama, model, "-c", "512") as (server, url):
        recorder, _ = start_recorder(out, "--pid", str(server.pid))
        bpftrace = BpftraceCount.entries(llama("llama-server").parent / "libggml-cpu.so.0", COUNTED)
        for _ in range(2):
            _post(f"{url}/completion", {"prompt": PROMPT, "n_predict": 8})
        counts = bpftrace.stop(server.pid)
        stop_recorder(recorder)
    trace = trace_reader.read(out)
    rec = record_slice(trace)
    assert rec.args["status"] == "recorder stopped by SIGINT"
    assert rec.args["events_lost"] == 0
    assert len(op_slices(trace)) == counts["ops"] + counts.get("fused", 0) > 0
    assert "ref_ctr_offset mismatch" not in _dmesg()


def test_a_server_s_steps_with_two_sequences(cli: Cli, llama: Callable[..., Path],
                                            model: Callable[[str], Path],
                                            tmp_path: Path) -> None:
    """llama-server with two slots under two clients at once: its batches carry positions and
    sequence ids, which the steps take (with --pid, where counting tokens could not know the
    positions); a batch of one token per sequence is a decode step, never a prefill."""
    out = tmp_path / "server.pftrace"
    with running_server(llama, model, "-c", "2048", "-np", "2") as (server, url):
        recorder, _ = start_recorder(out, "--pid", str(server.pid))
        body = {"prompt": PROMPT, "n_predict": 32, "ignore_eos": True}
        clients = [threading.Thread(target=_post, args=(f"{url}/completion", body))
                   for _ in range(2)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        stop_recorder(recorder)
    trace = trace_reader.read(out)
    steps = [s.args for s in trace.slices if "phase" in s.args]
    assert steps and all("pos" in a and 1 <= a["sequences"] <= 2 for a in steps)
    for a in steps:
        assert a["phase"] == token_phase(a["n_tokens"], TokenEntry.DECODE, a["sequences"])
    # Each step's sequences: as many as it says, their tokens adding up to its own, each on
    # the track of its sequence id (the server's slots are sequences 0 and 1).
    per_step: dict[int, list[dict[str, Any]]] = {}
    for s in trace.slices:
        if "seq" in s.args:
            per_step.setdefault(s.args["token_step"], []).append(s.args)
    for a in steps:
        seqs = per_step[a["step"]]
        assert len(seqs) == a["sequences"]
        assert sum(q["seq_tokens"] for q in seqs) == a["n_tokens"]
        assert a["pos"] in {q["seq_pos"] for q in seqs}  # the batch's first run's
    assert {q["seq"] for seqs in per_step.values() for q in seqs} == {0, 1}
    # sequences: one request per slot, its prompt then its decoding, on both engines alike.
    expected = []
    for seq in (0, 1):
        mine = sorted((q["token_step"], q["seq_tokens"]) for qs in per_step.values()
                      for q in qs if q["seq"] == seq)
        prompt_end = max(step for step, n in mine if n > 1)
        begin = {a["step"]: s for s, a in ((s, s.args) for s in trace.slices
                                            if "phase" in s.args)}
        expected.append((seq, 1, mine[0][0], mine[-1][0],
                         sum(n for step, n in mine if step <= prompt_end),
                         sum(1 for step, _ in mine if step <= prompt_end),
                         sum(1 for step, _ in mine if step > prompt_end),
                         begin[prompt_end].end - begin[mine[0][0]].ts))
    for engine in ("builtin", "trace_processor") if TP_BIN else ("builtin",):
        with TraceQuery(out, EngineChoice(engine)) as q:
            rows = q.metric("sequences").rows
        assert sorted(tuple(r[:8]) for r in rows) == sorted(expected), engine


def test_a_crashing_target_leaves_a_valid_trace(llama: Callable[..., Path],
                                               model: Callable[[str], Path],
                                               tmp_path: Path) -> None:
    out = tmp_path / "crash.pftrace"
    recorder, pid = start_recorder(out, "--", *completion(llama, model("medium-llama"), 2, 2000))
    wait_for_a_token(recorder)
    os.kill(pid, signal.SIGSEGV)
    stdout, stderr = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, stderr
    assert "target killed by SIGSEGV" in stdout
    trace = trace_reader.read(out)
    assert record_slice(trace).args["complete"] is False
    assert [s.name for s in trace.instants] == ["trace cut short: target killed by SIGSEGV"]
    assert op_slices(trace)


def test_sigterm_to_the_recorder_finalises_the_trace(llama: Callable[..., Path],
                                                     model: Callable[[str], Path],
                                                     tmp_path: Path) -> None:
    out = tmp_path / "term.pftrace"
    recorder, _ = start_recorder(out, "--", *completion(llama, model("medium-llama"), 2, 2000))
    wait_for_a_token(recorder)
    recorder.send_signal(signal.SIGTERM)
    _, stderr = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, stderr
    trace = trace_reader.read(out)
    assert record_slice(trace).args["status"] == "recorder stopped by SIGTERM"
    assert op_slices(trace)


def test_chrome_json(cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path],
                     tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = cli("record", "--json", "-o", out, "--",
                 *completion(llama, model("tiny-qwen3moe"), 2, n=4))
    assert result.returncode == 0, result.stderr
    events = json.loads(out.read_text())["traceEvents"]
    phases = Counter(e["ph"] for e in events)
    assert phases["B"] == phases["E"] > 0 and phases["s"] == phases["f"] > 0
    assert any(e.get("args", {}).get("op") == "MUL_MAT_ID" for e in events)


def _listening_port(process: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """The TCP port a process listens on, once it does: its socket's inode in /proc/net/tcp
    (state 0A, LISTEN), whose local address ends in the port in hex."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        inodes = _socket_inodes(process.pid)
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                return int(fields[1].rsplit(":", 1)[1], 16)
        time.sleep(0.1)
    raise AssertionError(f"the server listened on no port (exit status {process.poll()})")


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of a process's open sockets (an fd closed while read is left out)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    return inodes


def _answers(url: str) -> bool:
    """Whether `url` answers with 200 OK now."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _post(url: str, body: dict[str, object]) -> None:
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


def _dmesg() -> str:
    return subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout


def test_a_target_that_fails_early_leaves_a_valid_trace(cli: Cli, llama: Callable[..., Path],
                                                       tmp_path: Path) -> None:
    out = tmp_path / "early.pftrace"
    result = cli("record", "-o", out, "--", *completion(llama, tmp_path / "missing.gguf", 1))
    assert result.returncode == 0, result.stderr
    trace = trace_reader.read(out)
    rec = record_slice(trace)
    assert rec.args["status"] == "target exited with code 1" and rec.args["complete"] is False
    assert op_slices(trace) == []


def test_duration_stops_a_launched_target(cli: Cli, llama: Callable[..., Path],
                                          model: Callable[[str], Path], tmp_path: Path) -> None:
    out = tmp_path / "window.pftrace"
    result = cli("record", "--duration", "3", "-o", out, "--",
                 *completion(llama, model("medium-llama"), 2, n=2000))
    assert result.returncode == 0, result.stderr
    trace = trace_reader.read(out)
    rec = record_slice(trace)
    assert rec.args["status"] == "duration reached"
    # How many token steps the target finishes in 3 s depends on the machine (loading the model
    # can take most of them): every step it finished before the cut has its ops.
    ops = op_slices(trace)
    for step in [s for s in trace.slices if s.name in ("prefill", "decode") and s.end < rec.end]:
        assert any(o.parent is not None and o.parent.parent is step for o in ops), step.name


def test_as_many_counters_as_an_event_holds(cli: Cli, llama: Callable[..., Path],
                                            model: Callable[[str], Path], tmp_path: Path) -> None:
    """Every software counter at once (and the msr PMU's tsc where there is one): each that
    counted on its own per-thread counter tracks, each counted the whole capture (the kernel
    multiplexes only hardware counters); one more than an event holds is refused."""
    counters = list(SOFTWARE_COUNTERS)
    if (PMUS / "msr" / "events" / "tsc").is_file():
        counters.append("msr/tsc/")
    assert len(counters) <= MAX_COUNTERS
    out = tmp_path / "counters.pftrace"
    result = cli("record", *(a for c in counters for a in ("--counter", c)), "-o", out,
                 "--", *completion(llama, model("tiny-llama"), 2, n=4))
    assert result.returncode == 0, result.stderr
    trace = trace_reader.read(out)
    # A counter that never counted (major-faults, say) writes no sample, so has no track.
    names = {trace.track_name(u).split()[0] for u in trace.counters}
    assert {"task-clock", "cpu-clock", "tokens/s"} <= names <= {*counters, "tokens/s"}
    for clock in ("task-clock", "cpu-clock"):
        accumulated = [v for u, samples in trace.counters.items()
                       if trace.track_name(u).startswith(clock) for _, v in samples]
        assert max(accumulated) > 0  # ns of CPU time over the thread's ops
    rec = record_slice(trace)
    assert rec.args["counters"] == ",".join(counters)
    assert all(rec.args[counted_arg(c)] == 1.0 for c in counters)
    too_many = [*counters, *SOFTWARE_COUNTERS][:MAX_COUNTERS + 1]
    refused = cli("record", *(a for c in too_many for a in ("--counter", c)), "-o", out,
                  "--", "true")
    assert refused.returncode == 2
    assert f"at most {MAX_COUNTERS} counters" in refused.stderr


def test_a_pmu_event_by_name_and_raw(cli: Cli, llama: Callable[..., Path],
                                     model: Callable[[str], Path], tmp_path: Path) -> None:
    """A PMU's event as perf writes it, by its sysfs name and as raw fields: the msr PMU's time
    stamp counter, which counts on every op of every thread, the same for both spellings."""
    if not (PMUS / "msr" / "events" / "tsc").is_file():
        pytest.skip("this machine has no msr PMU with a tsc event")
    out = tmp_path / "tsc.pftrace"
    result = cli("record", "--counter", "msr/tsc/", "--counter", "msr/event=0x0/", "-o", out,
                 "--", *completion(llama, model("tiny-llama"), 2, n=4))
    assert result.returncode == 0, result.stderr
    with TraceQuery(out, EngineChoice("builtin")) as q:
        counted = q.metric("counters")
    rows = [dict(zip(counted.columns, r, strict=True)) for r in counted.rows]
    by_name = {name: {(r["op"], r["role"]): r["slices"] for r in rows if r["counter"] == name}
               for name in ("msr/tsc/", "msr/event=0x0/")}
    assert by_name["msr/tsc/"] and by_name["msr/tsc/"] == by_name["msr/event=0x0/"]
    assert all(r["total"] > 0 for r in rows)
    for bad, said in [("msr/nope/", "PMU msr has no event 'nope' (its events: "),
                      ("nopmu/x/", "this machine has no PMU 'nopmu' (its PMUs: "),
                      ("msr/tsc", "write a PMU's event as PMU/EVENT/")]:
        refused = cli("record", "--counter", bad, "-o", out, "--", "true")
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr


def test_hardware_counters_work_or_fail_clearly(cli: Cli, llama: Callable[..., Path],
                                                model: Callable[[str], Path],
                                                tmp_path: Path) -> None:
    out = tmp_path / "cycles.pftrace"
    has_pmu = "ok       hardware counters" in cli("doctor").stdout
    result = cli("record", "--counter", "cycles", "-o", out, "--",
                 *completion(llama, model("tiny-llama"), 1, n=2))
    if has_pmu:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 2
        assert result.stderr.strip() == (
            "profinfer-perfetto: counter cycles cannot be opened on this machine "
            "(it has no hardware PMU)")
        assert not out.exists()


def test_doctor(cli: Cli) -> None:
    result = cli("doctor")
    assert result.returncode == 0, result.stdout
    for check in ("root", "BCC", "kernel headers", "tracefs", "software counters"):
        assert f"ok       {check}" in result.stdout
    assert result.stdout.strip().endswith("ready to record")


def test_nodes_are_described_at_their_graph_s_begin_once_per_build(
        llama: Callable[..., Path], model: Callable[[str], Path]) -> None:
    """The op probes read no node: every descriptor is sent by the graph probe, stamped with its
    graph's begin, for a graph computed the first time after a build (or at its 32nd
    computation, a refresh); a graph reused unchanged from token to token is not described
    again, so most decode graphs send none."""
    request = RecordRequest(command=completion(llama, model("tiny-llama"), 2, n=20))
    rec = record(request, plan(request))
    graphs = rec.events[rec.events["kind"] == Kind.GRAPH_BEGIN]
    assert len(rec.nodes) and len(graphs) > 16
    assert set(rec.nodes["ts"].tolist()) <= set(graphs["ts"].tolist())
    describing = np.unique(rec.nodes["ts"])
    assert len(describing) < len(graphs) / 2, (len(describing), len(graphs))
