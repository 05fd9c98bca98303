"""`record -- COMMAND` where COMMAND is not llama.cpp itself: a wrapper (taskset, numactl, env,
nice, a shell script) or Python loading llama.cpp through llama-cpp-python's bindings (ctypes
dlopen). The recorder follows the command's processes and probes the one that maps the ggml
runtime, from before its first op: the op events are every entry of the op function that an
independent bpftrace counts in that process, and only that process's threads are in the trace,
even with another llama.cpp running on the same library beside it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from profinfer_perfetto.analysis.target import FUSED_SYMBOL, OP_SYMBOL
from scripts import assets
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.bpftrace_count import BpftraceCount, recorded_pid

pytestmark = pytest.mark.root

PROMPT = "Paris is the capital of"
TOKENS = 4
BINDINGS_SCRIPT = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_threads=2, verbose=False, seed=1)
for _ in range(int(sys.argv[4])):
    print(llm(sys.argv[2], max_tokens=int(sys.argv[3]), temperature=0.0)["choices"][0]["text"])
"""


def completion(*extra: str, tokens: int = TOKENS, build: str = "shared") -> list[str]:
    return [str(assets.llama_bin("llama-completion", build)), "-m", str(assets.model("tiny-llama")),
            "-p", PROMPT, "-n", str(tokens), "-t", "2", "-no-cnv", "--no-warmup", "-s", "1",
            *extra]


def cpu_lib() -> Path:
    return assets.VERSIONS[assets.LLAMA_CPP_PYTHON_VERSION].cpu_lib_path()


def record_counted(cli: Cli, out: Path, lib: Path, command: list[str]
                   ) -> tuple[trace_reader.Trace, int, dict[str, int]]:
    """Record `command`; the trace, the recorded pid and bpftrace's op counts for that pid."""
    bpftrace = BpftraceCount.entries(lib, {"ops": OP_SYMBOL, "fused": FUSED_SYMBOL})
    result = cli("record", "-o", out, "--", *command)
    counts = bpftrace.stop(recorded_pid(result.stdout))
    assert result.returncode == 0, result.stderr
    return trace_reader.read(out), recorded_pid(result.stdout), counts


def check_one_process(trace: trace_reader.Trace, pid: int, counts: dict[str, int]) -> None:
    (rec,) = [s for s in trace.slices if s.name == "record"]
    assert rec.args["status"] == "complete" and rec.args["events_lost"] == 0
    ops = [s for s in trace.slices if "node" in s.args]
    assert counts["ops"] > 0 and len(ops) == counts["ops"] + counts.get("fused", 0)
    assert {t.thread.pid for t in trace.tracks.values() if t.HasField("thread")} == {pid}
    # Probed before the runtime's first instruction: the first step is the prompt's.
    assert next(s.name for s in trace.slices if s.name in ("prefill", "decode")) == "prefill"


WRAPPERS = (
    ["taskset", "-c", "0-1"],
    ["numactl", "--localalloc"],
    ["env", "PROFINFER_TEST=1"],
    ["nice", "-n", "1"],
)
"""Each execs the next: the recorder follows the chain to the process that loads llama.cpp."""


def test_a_chain_of_wrappers(cli: Cli, tmp_path: Path) -> None:
    for command in WRAPPERS:
        if shutil.which(command[0]) is None:
            pytest.fail(f"{command[0]} is not installed: run scripts/setup.sh first")
    trace, pid, counts = record_counted(cli, tmp_path / "run.pftrace", cpu_lib(),
                                        [*(arg for w in WRAPPERS for arg in w), *completion()])
    check_one_process(trace, pid, counts)
    assert [t.process.process_name for t in trace.tracks.values() if t.HasField("process")] \
        == ["llama-completion"]


def test_a_wrapper_of_a_static_build(cli: Cli, tmp_path: Path) -> None:
    """No dynamic loader to report anything: the executable is read when it is executed."""
    static = assets.llama_bin("llama-completion", "static")
    trace, pid, counts = record_counted(cli, tmp_path / "run.pftrace", static,
                                        ["env", "PROFINFER_TEST=1", *completion(build="static")])
    check_one_process(trace, pid, counts)


def test_a_shell_script_that_forks_it(cli: Cli, tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text('#!/bin/sh\necho "before"\n"$@"\necho "after: $?"\n')
    script.chmod(0o755)
    trace, pid, counts = record_counted(cli, tmp_path / "run.pftrace", cpu_lib(),
                                        [str(script), *completion()])
    check_one_process(trace, pid, counts)


def test_python_bindings(cli: Cli, tmp_path: Path) -> None:
    python = assets.bindings_python()
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/setup.sh first")
    # The wheel holds copies, not links, of each library under its names: the soname is mapped.
    (lib,) = assets.BINDINGS.glob("lib/python*/site-packages/llama_cpp/lib/libggml-cpu.so.0")
    script = tmp_path / "generate.py"
    script.write_text(BINDINGS_SCRIPT)
    trace, pid, counts = record_counted(
        cli, tmp_path / "run.pftrace", lib,
        [str(python), str(script), str(assets.model("tiny-llama")), PROMPT, str(TOKENS), "2"])
    check_one_process(trace, pid, counts)
    # The bindings' batches carry positions: the second generation starts again at the
    # prompt (its cached prefix skipped), not after every token decoded so far.
    steps = [s.args for s in trace.slices if s.name in ("prefill", "decode")]
    second = next(i for i in range(1, len(steps))
                  if steps[i]["pos"] != steps[i - 1]["pos"] + steps[i - 1]["n_tokens"])
    assert steps[second]["pos"] < sum(a["n_tokens"] for a in steps[:second])
    assert all(a["sequences"] == 1 for a in steps)


def test_another_llama_cpp_beside_it_is_not_recorded(cli: Cli, tmp_path: Path) -> None:
    """The op probes are on the library file, which another process maps too: only the
    recorded process's ops are in the trace, while the other one runs ops of its own."""
    # Generation without end (-n -1 with context shift): it runs until it is killed.
    beside = subprocess.Popen(completion("--ignore-eos", "--context-shift", "-c", "256",
                                         tokens=-1),
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        bpftrace = BpftraceCount.entries(cpu_lib(), {"ops": OP_SYMBOL})
        out = tmp_path / "run.pftrace"
        result = cli("record", "-o", out, "--", "env", "PROFINFER_TEST=1", *completion())
        assert result.returncode == 0, result.stderr
        pid = recorded_pid(result.stdout)
        assert beside.poll() is None, "the other llama.cpp ended before the recording did"
        beside_counts = bpftrace.stop(beside.pid)
    finally:
        beside.kill()
        beside.wait()
    trace = trace_reader.read(out)
    assert beside_counts["ops"] > 0
    assert {t.thread.pid for t in trace.tracks.values() if t.HasField("thread")} == {pid}
