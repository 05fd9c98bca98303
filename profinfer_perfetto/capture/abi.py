"""The probe ABI in C, generated from its one definition, capture/events.py.

The BPF program gets every event kind and shared constant as a #define from here (it defines
none of them itself), and a `_Static_assert` on the offset and size of every field of every
struct that crosses to user space, and on each struct's size. A C struct that drifts from
its numpy dtype then fails BCC's compile with a message naming the field, instead of
garbling recordings.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from profinfer_perfetto.capture.events import (
    BATCH,
    BATCH_RUNS,
    BATCH_SCAN,
    BATCH_SLOTS,
    COUNTER_UNREAD,
    HIST_BUCKETS,
    LLAMA_BATCH,
    MAX_COUNTERS,
    N_SRC,
    NODE,
    OP_SHARES,
    ROUTE,
    ROUTE_CHUNKS,
    ROUTE_EXPERTS,
    ROUTE_TOKENS,
    SCHED,
    SRC,
    STOP,
    Backend,
    Kind,
    Missed,
    Ring,
    SchedKind,
    StopReason,
    TokenEntry,
    event_dtype,
)


def structs(counters: int) -> dict[str, np.dtype]:
    """C struct name -> the dtype that reads it (probes/ggml.bpf.c), for a recording that reads
    `counters` perf counters."""
    return {"event": event_dtype(counters), "src": SRC, "node": NODE, "op_stats": OP_SHARES,
            "route": ROUTE, "batch": BATCH}

WATCH_STRUCTS: Mapping[str, np.dtype] = {"stop": STOP}
"""The same, for probes/watch.bpf.c."""
SCHED_STRUCTS: Mapping[str, np.dtype] = {"sched_event": SCHED}
"""The same, for probes/sched.bpf.c."""


def constants() -> dict[str, int | str]:
    """Every name the probes and user space must agree on, with its value."""
    return {
        **{f"EV_{kind.name}": kind.value for kind in Kind},
        **{f"BACKEND_{backend.name}": backend.value for backend in Backend},
        **{f"TOKEN_{entry.name}": entry.value for entry in TokenEntry},
        **{f"RING_{ring.name}": ring.value for ring in Ring},
        **{f"STOP_{reason.name}": reason.value for reason in StopReason},
        **{f"MISSED_{why.name}": why.value for why in Missed},
        **{f"SCHED_{kind.name}": kind.value for kind in SchedKind},
        "N_RINGS": len(Ring),
        **{f"BATCH_{field}": offset for field, offset in LLAMA_BATCH.items()},
        "BATCH_SCAN": BATCH_SCAN,
        "BATCH_RUNS": BATCH_RUNS,
        "BATCH_SLOTS": BATCH_SLOTS,
        "ROUTE_TOKENS": ROUTE_TOKENS,
        "ROUTE_EXPERTS": ROUTE_EXPERTS,
        "ROUTE_CHUNKS": ROUTE_CHUNKS,
        "N_SRC": N_SRC,
        "MAX_COUNTERS": MAX_COUNTERS,
        "COUNTER_UNREAD": f"{COUNTER_UNREAD}ULL",
        "HIST_BUCKETS": HIST_BUCKETS,
    }


def c_defines(values: Mapping[str, int | str]) -> str:
    return "".join(f"#define {name} {value}\n" for name, value in values.items())


def header() -> str:
    """The constants as #defines, to precede the probes' source."""
    return "// The probe ABI, from profinfer_perfetto/capture/events.py\n" + c_defines(constants())


def _assert(condition: str, fact: str) -> str:
    return f'_Static_assert({condition}, "probe ABI: capture/events.py has {fact}");\n'


def layout_checks(structs: Mapping[str, np.dtype]) -> str:
    """Compile-time checks that each C struct has its dtype's layout; they follow the probes'
    source, where the structs are declared."""
    lines = ["// The probe ABI: its structs have the layout of their dtypes\n"]
    for struct, dtype in structs.items():
        for name, (field, offset, *_) in (dtype.fields or {}).items():
            member = f"((struct {struct} *)0)->{name}"
            lines.append(_assert(f"__builtin_offsetof(struct {struct}, {name}) == {offset}",
                                 f"struct {struct} field {name} at byte {offset}"))
            lines.append(_assert(f"sizeof({member}) == {field.itemsize}",
                                 f"struct {struct} field {name} of {field.itemsize} bytes"))
        lines.append(_assert(f"sizeof(struct {struct}) == {dtype.itemsize}",
                             f"struct {struct} of {dtype.itemsize} bytes"))
    return "".join(lines)
