"""The names a trace gives its slices, tracks and args: the one contract between the layout that
writes them and the SQL, `check`, benchmarks and tests that read them.

trace_processor stores a debug annotation NAME under the arg key `debug.` + NAME with every `.`,
`[` and `]` replaced by `_` (`arg_key`); the built-in engine applies the same rule. The names
written here avoid those characters, so what a user finds in the file, the UI and `args` is the
same string. tests/unit/test_names.py checks that every name the SQL and `check` read is one the
layout writes.
"""

from __future__ import annotations

from profinfer_perfetto.capture.events import HostCall

RECORDING_TRACK = "profinfer-perfetto"
RECORD_SLICE = "record"
"""The recording itself: status, losses, settings, probe costs."""
PEAK_SLICE = "peak"
"""An instant on the recording track per roof of the machine (`calibrate`), with args
PEAK_ARGS: its kind (memory, compute), weight type, threads and value (GB/s, GFLOP/s)."""
PEAK_ARGS = ("peak_kind", "peak_dtype", "peak_threads", "peak_value", "peak_how")
WAIT_SLICE = "barrier wait"
"""A thread's wait at the barrier after its share of an op."""
INNER_WAIT_SLICE = "barrier wait in op"
"""A thread's wait at a barrier inside its share of an op (a matmul's threads wait there for
each other once they have converted the input): part of the op's time, drawn within it."""
SEQUENCE_TRACK = "sequence"
"""A track per sequence id (`sequence 1`): a slice per token step that held its tokens, named
PROMPT_SLICE (several of its tokens) or GENERATE_SLICE (one), with args SEQ_ARGS. (Not the
phase names: a step is found by its args or its name, and these are not steps.)"""
PROMPT_SLICE = "prompt"
GENERATE_SLICE = "generate"
SEQ_ARGS = ("seq", "token_step", "seq_tokens", "seq_pos")
DESC_ARG = "description"
"""An op slice's arg: the number of its node's description (op, tensor, role, layer, shapes,
flops, bytes; the routing of a MoE op), unique in its file. The first op slice of a file with
that number carries the description's args beside it; the later ones only the number (a node
is computed alike in graph after graph; its description repeated on every one was a third of a
trace's bytes)."""
CPU_ARG = "cpu"
"""With --sched: an op slice's arg, the CPU its thread began the op on."""
NODE_ARG = "node"
"""An op slice's arg: its node's position in the graph."""
NODE_ARGS = ("op", "tensor", "role", "layer", "dtype", "src0_dtype", "shape", "flops", "bytes",
             "subop")
"""A node's description: its op, tensor, role, layer, type, first source's type, shape, work
(flops, bytes) and, for UNARY and GLU, its sub-op; then a `src_arg` per source."""
ROUTING_ARGS = ("experts", "routed_tokens", "experts_per_token", "routing_cut")
"""A Mixture-of-Experts op's description also has its routing: each token's experts, the
tokens, the experts per token and, where the probe cut the list, what it kept."""
PHASES = ("prefill", "decode", "mixed", "encode")
"""The names of token step slices, by what the step computed (model/trace_model.token_phase)."""
STEP_ARGS = ("phase", "n_tokens", "sequences", "pos", "step", "complete")
"""A token step slice's args (named by its phase, PHASES): `pos` only where the batch says it."""
GRAPH_ARGS = ("graph", "backend", "token_step", "n_nodes", "n_threads", "complete")
"""A graph slice's args."""
HOST_CALL_SLICES = {
    HostCall.SUBMIT: "submit",
    HostCall.WAIT: "wait for device",
    HostCall.TO_DEVICE: "copy to device",
    HostCall.FROM_DEVICE: "copy from device",
    HostCall.COPY_ASYNC: "copy async",
}
"""A GPU backend's host calls, each a slice on its thread inside whatever holds it: an op (the
Vulkan backend submits while it records a node), a graph or a token step."""
COPY_ARGS = ("copy_bytes", "direction")
"""A copy's slice's args: its bytes and COPY_DIRECTIONS's direction."""
COPY_DIRECTIONS = {
    HostCall.TO_DEVICE: "host_to_device",
    HostCall.FROM_DEVICE: "device_to_host",
    HostCall.COPY_ASYNC: "to_device",
}
"""Which way a copy goes (an async copy's source is another backend's buffer or the device's)."""
DEVICE_TIME_ARG = ("device_time", "the backend's GPU timestamp queries (a barrier after each "
                   "op): back to back, the last ending when the host read them back; the "
                   "device's clock is not the host's")
"""An arg of each device slice (record --gpu-timestamps): where its time comes from."""
BUILD_ID_ARG = "ggml_build_id"
RECORD_ARGS = ("status", "complete", "events", "events_lost", "nodes_lost", "ops_dropped",
               "recorder_cpu_ms", "longest_drain_gap_ms", "tool", "ggml_version", "ggml_commit",
               BUILD_ID_ARG, "counters", "command")
"""The record slice's args (BUILD_ID_ARG only where the build has one); then SCHED_ARGS with
--sched, `counted_arg`s, `probe_args` and a `note_arg` per note."""
SCHED_ARGS = ("sched_cpus", "sched_records", "sched_lost")
TOKENS_TRACK = "tokens/s"
"""The counter track of each complete step's tokens per second."""

ARG_KEY_PREFIX = "debug."
COUNTER_ARG_PREFIX = "counter_"
PROBE_ARG_PREFIX = "probe_"

_FLATTENED = str.maketrans({".": "_", "[": "_", "]": "_"})


def src_arg(index: int) -> str:
    """A node description's arg: the type and shape of its source `index`."""
    return f"src{index}"


def note_arg(index: int) -> str:
    """The record slice's arg: a note of the run."""
    return f"note{index}"


def work_track(op: str) -> str:
    """With --aggregate: the counter track of an op type's summed work, in ms."""
    return f"{op} work ms"


def experts_track(layer: int) -> str:
    """The track of a layer's Mixture-of-Experts routing slices."""
    return f"experts layer {layer}"


def counter_track(counter: str, tid: int) -> str:
    """The counter track of a perf counter's running total on one thread."""
    return f"{counter} {tid}"


def graph_slice(backend: str) -> str:
    """A graph computed by one backend."""
    return f"graph {backend}"


def counter_arg(counter: str) -> str:
    """An op slice's arg: a perf counter's count during the op's work."""
    return COUNTER_ARG_PREFIX + counter.translate(_FLATTENED)


def counted_arg(counter: str) -> str:
    """The record slice's arg: the share of the capture the kernel counted a perf counter (under
    1 where it multiplexed it with others, and op counts are scaled estimates)."""
    return counter_arg(counter) + "_counted"


def probe_args(program: str) -> tuple[str, str]:
    """The record slice's args for one BPF program: its runs and its mean ns per run."""
    return f"{PROBE_ARG_PREFIX}{program}_runs", f"{PROBE_ARG_PREFIX}{program}_ns_per_run"


def arg_key(name: str) -> str:
    """The `args.key` under which trace_processor (and so the built-in engine) stores a debug
    annotation named `name`."""
    return ARG_KEY_PREFIX + name.translate(_FLATTENED)
