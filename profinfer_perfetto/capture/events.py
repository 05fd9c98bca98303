"""The columnar event records that cross from the probes (probes/ggml.bpf.c) to user space.

This is the probe ABI's one definition: each numpy dtype is the layout of one C struct, and
capture/abi.py turns the dtypes, kinds and constants below into the program's #defines and
compile-time layout checks. A recording is a few arrays of these records.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

N_SRC = 6
"""Sources described per graph node."""
MAX_COUNTERS = 8
"""Perf counters a recording can read (--counter): each event carries one slot per counter
read, so a recording without counters has the smallest events."""
COUNTER_UNREAD = 1 << 63
"""A counter slot whose read failed (and anything above it: a negative errno)."""
HIST_BUCKETS = 32
"""--aggregate: log2 buckets of an op share's work time."""


class Kind(IntEnum):
    TOKEN_BEGIN = 1
    TOKEN_END = 2
    GRAPH_BEGIN = 3
    GRAPH_END = 4
    OP_BEGIN = 5
    BARRIER = 6
    """A thread calls ggml_barrier in the graph loop: `arg0` the node it has just finished
    (0: unknown, a call whose node the loop's registers do not say), `arg1` 1 at the barrier
    after the loop (the thread has finished the graph; `arg0` then the graph's last node, 0
    where the loop skips it), else 0."""
    OP_SKIP = 7
    """An op the --ops filter left out: it only ends the previous op's barrier wait."""
    BLAS_NODE = 8
    """A MUL_MAT or OUT_PROD node of a BLAS graph split, sent (in order) as the split begins."""
    BLAS_CALL = 9
    """A return of cblas_sgemm: one plane of a BLAS node done."""
    INNER_WAIT_BEGIN = 10
    """A call of ggml_barrier inside an op (a matmul's, once its threads have converted their
    share of the input): the thread waits for the others within the op."""
    INNER_WAIT_END = 11
    """That call's return."""
    VK_NODE = 12
    """ggml_vk_build_graph's entry: the Vulkan backend records node `arg0` (its index in the
    split, `aux`); `arg1`: the last node fused into the node it recorded before (0: none)."""
    VK_NODE_END = 13
    """Its return (`arg0`: whether it recorded the node)."""
    HOST_CALL_BEGIN = 14
    """A GPU backend's host call begins (`aux`: HostCall; `arg0`: a copy's bytes)."""
    HOST_CALL_END = 15
    """Its return (`aux`: HostCall)."""
    VK_TIMESTAMP = 16
    """A GPU timestamp the Vulkan backend read back after a split (record --gpu-timestamps):
    `arg0` the device's value (ticks), `aux` its query's index, `arg1` how many it read."""
    LOOP_ENTER = 17
    """A thread enters the graph loop's function (one trap per op: where its first node's work
    begins; the thread pool's wake-up is before it)."""


class Backend(IntEnum):
    """Which backend ran a graph (a GRAPH_BEGIN's aux)."""

    CPU = 0
    BLAS = 1
    VULKAN = 2


class HostCall(IntEnum):
    """What a GPU backend's host call does (a HOST_CALL_BEGIN's aux)."""

    SUBMIT = 0
    """Command buffers handed to the device's queue (ggml_vk_submit)."""
    WAIT = 1
    """The host waits for the device to finish (ggml_vk_wait_for_fence)."""
    TO_DEVICE = 2
    """A copy from the host into a device buffer (ggml_backend_vk_buffer_set_tensor, or the
    backend's ggml_backend_vk_set_tensor_async)."""
    FROM_DEVICE = 3
    """A copy from a device buffer to the host (ggml_backend_vk_buffer_get_tensor, or
    ggml_backend_vk_get_tensor_async)."""
    COPY_ASYNC = 4
    """A tensor copied into a device buffer from another backend's buffer or this device's
    (ggml_backend_vk_cpy_tensor_async), queued with the graph's work."""


BATCH_SCAN = 2048
"""Tokens of a batch whose sequence ids the token probe reads (llama.cpp's default n_batch)."""
LLAMA_BATCH = {"N_TOKENS": 0, "POS": 24, "SEQ_ID": 40}
"""Offsets in llama.h's `struct llama_batch` (n_tokens, token, embd, pos, n_seq_id, seq_id,
logits: the same since 2023)."""
UNKNOWN_POS = 0xFFFFFFFF
"""A TOKEN_BEGIN's arg1 low half when the batch leaves positions to the KV cache."""
BATCH_RUNS = 16
"""Sequences (runs of one sequence id) a batch record names; more are counted, not named."""
BATCH_SLOTS = 32
"""A batch record's arrays: BATCH_RUNS runs, the start of the next, and a slot for the rest."""


class TokenEntry(IntEnum):
    """Whether a token step decodes (llama_decode, llama_process DECODE) or encodes."""

    DECODE = 0
    ENCODE = 1


class Ring(IntEnum):
    """The two rings, by their index in the probes' count of records lost to a full ring."""

    EVENTS = 0
    NODES = 1
    ROUTES = 2
    BATCHES = 3


def event_dtype(counters: int) -> np.dtype:
    """The event record of a recording that reads `counters` perf counters: each counter's
    total on the event's CPU when it was sent, scaled by the kernel's enabled / running times
    (a counter multiplexed with others counts only part of the time)."""
    return np.dtype(
        [
            ("ts", "<u8"),
            ("arg0", "<u8"),
            ("arg1", "<u8"),
            ("pid", "<u4"),
            ("tid", "<u4"),
            ("cpu", "<u2"),
            ("kind", "u1"),
            ("ith", "u1"),
            ("aux", "<u4"),
            ("counter", "<u8", (counters,)),
        ]
    )


def compute_threads(events: np.ndarray) -> int:
    """The most threads that a CPU graph beginning among `events` computes on (a GRAPH_BEGIN's
    `arg1`: its node count, and its threads above bit 32); 0 where none began."""
    began = events[(events["kind"] == Kind.GRAPH_BEGIN) & (events["aux"] == Backend.CPU)]
    return int((began["arg1"] >> 32).max(initial=0))


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

OP_SHARES = np.dtype(
    [
        ("count", "<u8"),
        ("work_ns", "<u8"),
        ("wait_ns", "<u8"),
        ("max_work_ns", "<u8"),
        ("hist", "<u8", (HIST_BUCKETS,)),
    ]
)
"""What --aggregate sums per tensor in BPF (struct op_stats, the value of the op_stats map)."""

class StopReason(IntEnum):
    """Why a process of a launched command was stopped (probes/watch.bpf.c)."""

    EXEC = 1
    """It ran execve: its new program is mapped (with its loader), nothing of it has run."""
    LOADER = 2
    """Its dynamic loader called _dl_debug_state: objects were mapped or are about to be."""


STOP = np.dtype([("tgid", "<u4"), ("reason", "<u4")])
"""A process of the launched command that the watch program stopped (struct stop)."""


class Missed(IntEnum):
    """The watch program's `missed` array: the stops it could not make, and why."""

    SIGNAL = 0
    """The kernel refused the SIGSTOP (bpf_send_signal)."""
    RING = 1
    """The ring of stops was full."""
    ERROR = 2
    """The last error bpf_send_signal gave (a negative errno)."""


ROUTE_TOKENS = 8
"""Tokens per routing record."""
ROUTE_EXPERTS = 16
"""Experts per token a routing record holds (more are cut)."""
ROUTE_CHUNKS = 64
"""Routing records per op: tokens past ROUTE_TOKENS * ROUTE_CHUNKS (512) are cut."""

ROUTE = np.dtype(
    [
        ("ts", "<u8"),
        ("node", "<u8"),
        ("first_token", "<u4"),
        ("n_tokens", "<u4"),
        ("n_used", "<u4"),
        ("pad", "<u4"),
        ("ids", "<i4", (ROUTE_TOKENS, ROUTE_EXPERTS)),
    ]
)
"""The experts a Mixture-of-Experts op sent ROUTE_TOKENS tokens to (struct route)."""

class SchedKind(IntEnum):
    """What a scheduling record (probes/sched.bpf.c) is."""

    SWITCH = 1
    """sched_switch: `tid` was switched in on `cpu`; the current task (prev_*) out."""
    WAKING = 2
    """sched_waking: `tid` was woken, by the current task (prev_*) on `cpu`, to `target_cpu`."""


SCHED = np.dtype(
    [
        ("ts", "<u8"),
        ("prev_state", "<i8"),
        ("prev_tid", "<u4"),
        ("prev_tgid", "<u4"),
        ("tid", "<u4"),
        ("prio", "<i4"),
        ("cpu", "<u2"),
        ("target_cpu", "<u2"),
        ("kind", "<u4"),
        ("comm", "S16"),
    ]
)
"""A context switch or a wakeup (struct sched_event); `comm` is the switched-in or woken task's."""

BATCH = np.dtype(
    [
        ("ts", "<u8"),
        ("tid", "<u4"),
        ("n_runs", "<u4"),
        ("scanned", "<u4"),
        ("pos_known", "<u4"),
        ("seq", "<i4", (BATCH_SLOTS,)),
        ("pos", "<i4", (BATCH_SLOTS,)),
        ("start", "<u4", (BATCH_SLOTS,)),
    ]
)
"""The sequences of a token step's batch (struct batch): each run of one sequence id among its
first BATCH_SCAN tokens (`scanned`), its sequence, first position (where `pos_known`) and first
token; run r < BATCH_RUNS in slot r, the start of run BATCH_RUNS in slot BATCH_RUNS. `ts` is the
step's TOKEN_BEGIN's."""

OP_STATS = np.dtype([("node", "<u8"), *OP_SHARES.descr])
"""One row per tensor: its pointer (the map's key), then its summed shares."""

assert event_dtype(0).itemsize == 40 and NODE.itemsize == 480 and SCHED.itemsize == 56
