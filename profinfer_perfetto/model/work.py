"""What an op is for and how much work it does: its tensor role, FLOPs and bytes.

The role groups the same op across layers: `ffn_gate-7` -> `ffn_gate`, `cache_k_l0 (view)` ->
`cache_k`, and a node ggml named automatically (`node_21`) by its op (`flash_attn_ext`).
Work is estimated from shapes and types: 2*K*M*N FLOPs for a matrix product, 4*D*n_kv*n_q*heads
for flash attention, one per output element otherwise; bytes are those of the sources read and
the output written.
"""

from __future__ import annotations

import math
import re

import numpy as np

from profinfer_perfetto.analysis.ggml import GgmlInfo

_SUFFIX = re.compile(r"(?: \(.*\))+$")
_LAYER = re.compile(r"(?:-\d+|_l\d+)$")
_AUTO = re.compile(r"^(?:node|leaf)_\d+$")


def auto_named(tensor: str) -> bool:
    """Whether ggml named the tensor itself (`node_21`, `leaf_3`): no name from the model."""
    return _AUTO.match(tensor) is not None


def role(tensor: str, op: str) -> str:
    name = _LAYER.sub("", _SUFFIX.sub("", tensor))
    return op.lower() if auto_named(name) or not name else name


def _elements(ne: np.ndarray) -> int:
    return math.prod(int(d) for d in ne)


def op_work(ggml: GgmlInfo, node: np.void) -> tuple[int, int]:
    """(FLOPs, bytes) of one graph node record (capture/events.py NODE)."""
    op = ggml.op_name(int(node["op"]))
    srcs = [s for s in node["src"] if s["ptr"]]
    out = _elements(node["ne"])
    nbytes = ggml.nbytes(int(node["type"]), out)
    nbytes += sum(ggml.nbytes(int(s["type"]), _elements(s["ne"])) for s in srcs)
    if op == "MUL_MAT" and len(srcs) >= 2:
        k, m = int(srcs[0]["ne"][0]), int(srcs[0]["ne"][1])
        flops = 2 * k * m * _elements(srcs[1]["ne"][1:])
    elif op == "MUL_MAT_ID" and len(srcs) >= 3:
        k, m = int(srcs[0]["ne"][0]), int(srcs[0]["ne"][1])
        ids = srcs[2]["ne"]
        flops = 2 * k * m * int(ids[0]) * int(ids[1])
        # Only the selected experts' weights are read, not all of them.
        experts = max(int(srcs[0]["ne"][2]), 1)
        used = min(int(ids[0]) * int(ids[1]), experts)
        weights = ggml.nbytes(int(srcs[0]["type"]), _elements(srcs[0]["ne"]))
        nbytes -= weights - weights * used // experts
    elif op == "GET_ROWS" and len(srcs) >= 2:
        # Only the rows looked up are read from the table.
        table = ggml.nbytes(int(srcs[0]["type"]), _elements(srcs[0]["ne"]))
        rows = max(int(srcs[0]["ne"][1]), 1)
        nbytes -= table - table * min(_elements(srcs[1]["ne"]), rows) // rows
        flops = out
    elif op == "SET_ROWS" and len(srcs) >= 2:
        # Only the rows set are written (into a KV cache, say), not the whole destination.
        written = _elements(srcs[0]["ne"])
        nbytes -= ggml.nbytes(int(node["type"]), out) - ggml.nbytes(int(node["type"]), written)
        flops = written
    elif op == "FLASH_ATTN_EXT" and len(srcs) >= 2:
        q, k = srcs[0]["ne"], srcs[1]["ne"]
        flops = 4 * int(q[0]) * int(k[1]) * int(q[1]) * int(q[2]) * int(q[3])
    else:
        flops = out
    return flops, nbytes
