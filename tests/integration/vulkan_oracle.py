"""What a run of the Vulkan build (setup.sh's build-vulkan) did, as llama.cpp itself and
bpftrace tell it, outside the profiler: the oracles a trace of such a run is held against."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from profinfer_perfetto.analysis.elf import ElfFile
from scripts import assets
from tests.integration.bpftrace_count import BpftraceCount

PROMPT = "Paris is"


def completion(name: str, layers: int, tokens: int) -> list[str]:
    """llama-completion of the Vulkan build, greedy, with `layers` layers on the device."""
    return [str(assets.llama_bin("llama-completion", "vulkan")), "-m", str(assets.model(name)),
            "-p", PROMPT, "-n", str(tokens), "-t", "2", "-no-cnv", "--no-warmup", "-s", "1",
            "--temp", "0", "--ignore-eos", "-ngl", str(layers)]


@dataclass(frozen=True)
class Node:
    """A node the scheduler assigned, as GGML_SCHED_DEBUG prints it (views are not printed)."""

    index: int
    """Its index in the graph llama.cpp built (the index of the whole graph, not the split's)."""
    op: str
    """ggml_op_desc, cut to 10 characters: MUL_MAT, SILU (a unary op's own name), FLASH_ATTN."""
    name: str
    """The tensor's name, cut to 20 characters."""


@dataclass(frozen=True)
class Split:
    """A slice of a graph that one backend computes, its inputs copied in first."""

    backend: str
    """ggml_backend_name: Vulkan0, CPU."""
    inputs: int
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class Graph:
    """One graph as the scheduler split it."""

    splits: tuple[Split, ...]
    reserved: bool
    """Split to reserve memory only (llama.cpp's graph_reserve), never computed."""


_RESERVE = re.compile(r"graph_reserve: reserving a graph")
_SPLIT = re.compile(r"^## SPLIT #(\d+): (.+) # (\d+) inputs")
# "node #%3d (%10.10s): %20.20s (%5.5s) [%5.5s %8.8s] use=%d,c=%d:": fixed widths, so a name
# with spaces or brackets in it is read whole.
_NODE = re.compile(r"^node #\s*(\d+) \((.{10})\): (.{20}) \(.{5}\) \[.{5} .{8}\] use=")


def parse_sched_debug(text: str) -> list[Graph]:
    """The graphs of GGML_SCHED_DEBUG=2's printout (ggml_backend_sched_print_assignments), in
    order; `text` is llama.cpp's debug log, whose graph_reserve line marks a reserved graph."""
    graphs: list[Graph] = []
    splits: list[Split] = []
    reserve_next = reserved = False
    for line in text.splitlines():
        if _RESERVE.search(line):
            reserve_next = True
        elif split := _SPLIT.match(line):
            if split[1] == "0":
                if splits:
                    graphs.append(Graph(tuple(splits), reserved))
                splits, reserved, reserve_next = [], reserve_next, False
            splits.append(Split(split[2], int(split[3]), ()))
        elif (node := _NODE.match(line)) and splits:
            last = splits[-1]
            found = Node(int(node[1]), node[2].strip(), node[3].strip())
            splits[-1] = Split(last.backend, last.inputs, (*last.nodes, found))
    if splits:
        graphs.append(Graph(tuple(splits), reserved))
    return graphs


def sched_splits(command: Sequence[str | Path], env: Mapping[str, str]) -> list[Graph]:
    """The graphs `command` (a llama.cpp tool) computed, one per graph compute, each split as
    the scheduler assigned it (GGML_SCHED_DEBUG=2, printed at debug verbosity, each log call
    without a prefix, so that the printout's pieces join into its lines). llama.cpp reuses a
    token step's graph without splitting it again (and without printing it):
    LLAMA_GRAPH_REUSE_DISABLE has it build and split every step's graph, the same graph."""
    debug = {"GGML_SCHED_DEBUG": "2", "LLAMA_ARG_LOG_VERBOSITY": "5",
             "LLAMA_ARG_LOG_PREFIX": "0", "LLAMA_ARG_LOG_TIMESTAMPS": "0",
             "LLAMA_GRAPH_REUSE_DISABLE": "1"}
    run = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                         errors="replace", env={**os.environ, **env, **debug},
                         stdin=subprocess.DEVNULL, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return [g for g in parse_sched_debug(run.stderr) if not g.reserved]


VULKAN_COUNTED = {
    # The backend's graph_compute: one per split the scheduler gives the Vulkan backend.
    "graph_compute": "_ZL29ggml_backend_vk_graph_computeP12ggml_backendP11ggml_cgraph",
    # Records one node into a command buffer (nodes fused into an earlier one are not passed).
    "build_graph":
        "_Z19ggml_vk_build_graphP23ggml_backend_vk_contextP11ggml_cgraphiP11ggml_tensoribbb",
    "submit": "_Z14ggml_vk_submitRSt10shared_ptrI17vk_context_structEN2vk5FenceE",
    # The host waiting for the device to finish what was submitted.
    "wait_for_fence": "_Z22ggml_vk_wait_for_fenceP23ggml_backend_vk_context",
    # Host-device copies: through a Vulkan buffer, or queued on the backend's stream.
    "buffer_set_tensor":
        "_Z33ggml_backend_vk_buffer_set_tensorP19ggml_backend_bufferP11ggml_tensorPKvmm",
    "buffer_get_tensor":
        "_Z33ggml_backend_vk_buffer_get_tensorP19ggml_backend_bufferPK11ggml_tensorPvmm",
    "buffer_cpy_tensor":
        "_Z33ggml_backend_vk_buffer_cpy_tensorP19ggml_backend_bufferPK11ggml_tensorPS1_",
    "set_tensor_async": "_ZL32ggml_backend_vk_set_tensor_asyncP12ggml_backendP11ggml_tensorPKvmm",
    "get_tensor_async": "_ZL32ggml_backend_vk_get_tensor_asyncP12ggml_backendPK11ggml_tensorPvmm",
    "cpy_tensor_async":
        "_ZL32ggml_backend_vk_cpy_tensor_asyncP12ggml_backendS0_PK11ggml_tensorPS1_",
}
"""Functions of libggml-vulkan, by the names vulkan_counts gives their counts: mangled C++
names from its .symtab, matched exactly (gcc splits each hot function's cold paths into a
`.cold` twin, which is no entry of the function)."""
DISPATCH = "_Z25ggml_vk_dispatch_pipeline"
"""The template that records each vkCmdDispatch: `dispatch` counts all its instances (one per
push-constants type, about 50)."""
BASE_COUNTED = {"backend_graph_compute_async": "ggml_backend_graph_compute_async"}
"""libggml-base's: the scheduler hands each split to its backend through it."""


def _counted(elf: ElfFile) -> dict[str, str]:
    """VULKAN_COUNTED, and each instance of DISPATCH (dispatch_0, dispatch_1...)."""
    missing = set(VULKAN_COUNTED.values()) - set(elf.symbols)
    assert not missing, f"{elf.path} has no {missing}"
    dispatch = sorted(s for s in elf.symbols if s.startswith(DISPATCH) and not s.endswith(".cold"))
    assert dispatch, f"{elf.path} has no {DISPATCH}"
    return {**VULKAN_COUNTED, **{f"dispatch_{i}": s for i, s in enumerate(dispatch)}}


def vulkan_counts(command: Sequence[str | Path], env: Mapping[str, str]) -> dict[str, int]:
    """How often `command` (a tool of the Vulkan build) entered each function of VULKAN_COUNTED,
    DISPATCH (`dispatch`, all its instances) and BASE_COUNTED, as bpftrace counts them."""
    libs = Path(command[0]).parent
    vulkan = ElfFile((libs / "libggml-vulkan.so.0").resolve())
    counters = [BpftraceCount.entries(vulkan.path, _counted(vulkan)),
                BpftraceCount.entries((libs / "libggml-base.so.0").resolve(), BASE_COUNTED)]
    proc = subprocess.Popen([str(c) for c in command], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace",
                            env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    _, err = proc.communicate(timeout=600)
    counts = {name: n for counter in counters for name, n in counter.stop(proc.pid).items()}
    assert proc.returncode == 0, err[-2000:]
    out = {name: counts.get(name, 0) for name in (*VULKAN_COUNTED, *BASE_COUNTED)}
    out["dispatch"] = sum(n for name, n in counts.items() if name.startswith("dispatch_"))
    return out
