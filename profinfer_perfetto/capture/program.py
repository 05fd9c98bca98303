"""The exact BPF program BCC compiles: the build's #defines, the probe ABI from capture/abi.py,
probes/ggml.bpf.c, then the ABI's layout checks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from profinfer_perfetto.analysis.ggml import GgmlInfo
from profinfer_perfetto.analysis.loop import LoopBarrier
from profinfer_perfetto.capture import abi
from profinfer_perfetto.capture.events import HostCall
from profinfer_perfetto.capture.selection import Selection

REFRESH_EVERY = 32
"""A graph's nodes whose own bytes did not change are described again at every 32nd
computation of the graph."""
MAX_GRAPHS = 1024
"""Graphs (by node array and size) whose last description the probes remember."""
MAX_OPS = 256
"""Op ids the --ops filter can choose (the op_traced map)."""
MAX_THREADS = 4096
"""Threads whose current op the probes follow at once."""
USET_FIRST = 16
"""libstdc++'s std::unordered_set: its first node (_M_before_begin._M_nxt), bytes in."""
USET_NODE_VALUE = 8
"""libstdc++'s hash node of an int without a cached hash: its value, after the next pointer."""
MAX_TENSORS = 65536
"""Tensors the probes remember as described (and sum statistics for, with --aggregate)."""
MAX_BLAS_NODES = 64
"""Nodes of one BLAS graph split the probe looks at (llama.cpp's splits have a few)."""
MAX_BLAS_OPS = 4
"""Of those, the MUL_MAT and OUT_PROD nodes it describes (a power of two)."""


EMPTY_OPS = ("NONE", "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE")
"""ggml_op_is_empty's ops: the graph loop skips their nodes (no barrier after them)."""
X86_PT_REGS = {"rax": "ax", "rbx": "bx", "rcx": "cx", "rdx": "dx", "rsi": "si", "rdi": "di",
               "rbp": "bp", "rsp": "sp"}
"""x86-64's registers as struct pt_regs names them (r8-r15 keep their names)."""


@dataclass(frozen=True)
class RingSizes:
    event_pages: int = 4096
    node_pages: int = 4096
    route_pages: int = 2048
    batch_pages: int = 64


def probe_source(name: str = "ggml.bpf.c") -> str:
    """A BPF C source shipped with the package (or beside it, in a source checkout)."""
    packaged = resources.files("profinfer_perfetto").joinpath(f"probes/{name}")
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parents[2] / "probes" / name).read_text()


def _build_defines(ggml: GgmlInfo, counters: list[str], rings: RingSizes, selection: Selection,
                  graph_builds: bool, blas: bool, vulkan: bool) -> dict[str, int | str]:
    """What this recording's program is built for: the target's struct offsets, the sizes of
    the rings and tables, and the selection."""
    layout, runtime = ggml.layout, ggml.runtime
    return {
        "T_TYPE": layout.type,
        "T_NE": layout.ne,
        "T_OP": layout.op,
        "T_OP_PARAMS": layout.op_params,
        "T_FLAGS": layout.flags,
        "T_SRC": layout.src,
        "T_N_SRC": layout.n_src,
        "T_VIEW_SRC": layout.view_src,
        "T_DATA": layout.data,
        "REFRESH_EVERY": REFRESH_EVERY,
        "GRAPH_BUILDS": int(graph_builds),
        "T_NAME": layout.name,
        "T_NB": layout.nb,
        "OP_MUL_MAT_ID": ggml.op_id("MUL_MAT_ID"),
        "OP_ADD_ID": ggml.op_id("ADD_ID"),
        "ROUTE_PAGES": rings.route_pages,
        "BATCH_PAGES": rings.batch_pages,
        "T_SIZE": layout.size,
        "CGRAPH_N_NODES": runtime.cgraph_n_nodes,
        "CPLAN_N_THREADS": runtime.cplan_n_threads,
        "BLAS": int(blas),
        "VULKAN": int(vulkan),
        **{f"HOST_{call.name}": call.value for call in HostCall},
        "CGRAPH_NODES": runtime.cgraph_nodes,
        "OP_MUL_MAT": ggml.op_id("MUL_MAT"),
        "OP_OUT_PROD": ggml.op_id("OUT_PROD"),
        "MAX_BLAS_NODES": MAX_BLAS_NODES,
        "MAX_BLAS_OPS": MAX_BLAS_OPS,
        "BATCH_EXT_TOKENS": runtime.batch_ext_tokens,
        "BATCH_EXT_TOKEN_SIZE": runtime.batch_ext_token_size,
        "BATCH_EXT_POS": runtime.batch_ext_pos,
        "BATCH_EXT_SEQ_IDS": runtime.batch_ext_seq_ids,
        "USET_FIRST": USET_FIRST,
        "USET_NODE_VALUE": USET_NODE_VALUE,
        "N_COUNTERS": len(counters),
        "EVENT_PAGES": rings.event_pages,
        "NODE_PAGES": rings.node_pages,
        "MAX_CPUS": os.cpu_count() or 1,
        "MAX_OPS": MAX_OPS,
        "MAX_THREADS": MAX_THREADS,
        "MAX_TENSORS": MAX_TENSORS,
        "MAX_GRAPHS": MAX_GRAPHS,
        "GATED": int(selection.gated),
        "DETACH": int(selection.detach),
        "FIRST_STEP": selection.first,
        "LAST_STEP": selection.last,
        "SAMPLE_EVERY": selection.every,
        "OP_FILTER": int(selection.filtered),
        "NAME_PREFIX": '"' + selection.name_prefix.replace('"', "") + '"',
        "NAME_PREFIX_LEN": len(selection.name_prefix.encode()),
        **{f"OP_{op}": ggml.op_id(op) for op in EMPTY_OPS},
        "AGGREGATE": int(selection.aggregate),
        "FLOOR": int(selection.floor),
    }


def _register(name: str) -> str:
    """A register of the probed code as the program reads it from its struct pt_regs (arm64's
    x0-x30 are regs[0-30])."""
    if name.startswith("x") and name[1:].isdigit():
        return f"ctx->regs[{int(name[1:])}]"
    return f"ctx->{X86_PT_REGS.get(name, name)}"


def barrier_programs(barriers: tuple[LoopBarrier, ...]) -> str:
    """One program per barrier call of the graph loop whose node is known (at_barrier_node),
    with that call's registers."""
    out = ["// The graph loop's barrier calls whose node is known (analysis/loop.py)\n"]
    for b in barriers:
        index = f"(s64)(s32){_register(b.index)} + {b.offset}" if b.index else "0"
        cgraph = f"(const u8 *){_register(b.cgraph)}" if b.cgraph else "0"
        out.append(f"int {b.fn}(struct pt_regs *ctx) {{\n"
                   f"    return at_barrier_node({index}, {cgraph}, {int(b.last)});\n}}\n")
    return "".join(out)


def program_text(ggml: GgmlInfo, counters: list[str], rings: RingSizes,
                 selection: Selection, graph_builds: bool, blas: bool = False,
                 vulkan: bool = False, barriers: tuple[LoopBarrier, ...] = ()) -> str:
    """The exact program BCC compiles (and `record --ebpf` prints)."""
    build = _build_defines(ggml, counters, rings, selection, graph_builds, blas, vulkan)
    return (abi.c_defines(build) + abi.header() + probe_source() + barrier_programs(barriers)
            + abi.layout_checks(abi.structs(len(counters))))
