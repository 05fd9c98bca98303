"""The names a trace gives its slices, tracks and args: the one contract between the layout that
writes them and the SQL, `check`, benchmarks and tests that read them.

trace_processor stores a debug annotation NAME under the arg key `debug.` + NAME with every `.`,
`[` and `]` replaced by `_` (`arg_key`); the built-in engine applies the same rule. The names
written here avoid those characters, so what a user finds in the file, the UI and `args` is the
same string. tests/unit/test_names.py checks that every name the SQL and `check` read is one the
layout writes.
"""

from __future__ import annotations

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

ARG_KEY_PREFIX = "debug."
COUNTER_ARG_PREFIX = "counter_"
PROBE_ARG_PREFIX = "probe_"

_FLATTENED = str.maketrans({".": "_", "[": "_", "]": "_"})


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
