"""The columnar event records that cross from the probes (probes/ggml.bpf.c) to user space.

Each numpy dtype mirrors one C struct field for field; a recording is a few arrays of these.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

# Sources described per graph node; N_SRC in the BPF program.
N_SRC = 6


class Kind(IntEnum):
    TOKEN_BEGIN = 1
    TOKEN_END = 2
    GRAPH_BEGIN = 3
    GRAPH_END = 4
    OP_BEGIN = 5
    BARRIER = 6
    OP_SKIP = 7
    """An op the --ops filter left out: it only ends the previous op's barrier wait."""


class TokenEntry(IntEnum):
    """Whether a token step decodes (llama_decode, llama_process DECODE) or encodes."""

    DECODE = 0
    ENCODE = 1


EVENT = np.dtype(
    [
        ("ts", "<u8"),
        ("arg0", "<u8"),
        ("arg1", "<u8"),
        ("counter", "<u8", (2,)),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("cpu", "<u2"),
        ("kind", "u1"),
        ("ith", "u1"),
        ("aux", "<u4"),
    ]
)

SRC = np.dtype(
    [
        ("ptr", "<u8"),
        ("view_src", "<u8"),
        ("ne", "<i8", (4,)),
        ("type", "<u4"),
        ("op", "<u4"),
    ]
)

NODE = np.dtype(
    [
        ("ts", "<u8"),
        ("ptr", "<u8"),
        ("view_src", "<u8"),
        ("ne", "<i8", (4,)),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("op", "<u4"),
        ("op_param0", "<i4"),
        ("type", "<u4"),
        ("flags", "<u4"),
        ("src", SRC, (N_SRC,)),
        ("name", "S64"),
    ]
)

HIST_BUCKETS = 32

OP_STATS = np.dtype(
    [
        ("node", "<u8"),
        ("count", "<u8"),
        ("work_ns", "<u8"),
        ("wait_ns", "<u8"),
        ("max_work_ns", "<u8"),
        ("hist", "<u8", (HIST_BUCKETS,)),
    ]
)
"""Per tensor, as --aggregate sums its op shares in BPF (probes/ggml.bpf.c struct op_stats)."""

assert EVENT.itemsize == 56 and NODE.itemsize == 480
