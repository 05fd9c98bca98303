"""Compile probes/ggml.bpf.c with BCC, attach it to a target and read what it sends.

Uprobes are attached through libbcc's `bpf_attach_uprobe` with all seven of its arguments.
Debian's BCC 0.26 Python binding declares six, so the seventh, `ref_ctr_offset`, arrives as
whatever is in the register: the kernel then takes that file offset of the probed library as
a USDT semaphore, increments it in the target's memory and refuses other tracers on the same
function. We pass 0: no semaphore, nothing written into the target.
"""

from __future__ import annotations

import ctypes
import os
import platform
import select
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from profinfer_perfetto.capture.events import EVENT, N_SRC, NODE, OP_STATS
from profinfer_perfetto.capture.ggml import GgmlInfo
from profinfer_perfetto.capture.ringbuf import RingReader
from profinfer_perfetto.capture.target import Probe
from profinfer_perfetto.errors import ProfinferError

# perf_event_open types and configs by the names `perf list` uses.
SOFTWARE_COUNTERS = {
    "cpu-clock": 0,
    "task-clock": 1,
    "page-faults": 2,
    "context-switches": 3,
    "cpu-migrations": 4,
    "minor-faults": 5,
    "major-faults": 6,
}
HARDWARE_COUNTERS = {
    "cycles": 0,
    "instructions": 1,
    "cache-references": 2,
    "cache-misses": 3,
    "branch-instructions": 4,
    "branch-misses": 5,
    "bus-cycles": 6,
    "stalled-cycles-frontend": 7,
    "stalled-cycles-backend": 8,
    "ref-cycles": 9,
}
_PERF_TYPE_HARDWARE = 0
_PERF_TYPE_SOFTWARE = 1
MAX_COUNTERS = 2
REFRESH_EVERY = 32
"""A node whose own bytes did not change is described again at every 32nd use."""
_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}


@dataclass(frozen=True)
class RingSizes:
    event_pages: int = 4096
    node_pages: int = 4096


@dataclass(frozen=True)
class Selection:
    """Which ops are traced: token steps first <= step < last (0: no end), every
    `every`-th of them; op types in `ops` or tensor names starting with `name_prefix`."""

    first: int = 0
    last: int = 0
    every: int = 1
    ops: tuple[str, ...] = ()
    name_prefix: str = ""
    aggregate: bool = False
    """Sum op shares into per-tensor statistics in BPF instead of sending op events."""
    barriers: bool = True
    """Probe the barrier calls that end each thread's share; without, an op lasts until the
    thread's next op (wait included) and each op costs one trap instead of about two."""
    detach: bool = False
    """Attach the op probes only around the chosen steps (their traps then cost the other steps
    nothing); removing them takes the kernel about a second, so this suits sampling periods of
    seconds (a server monitor), and a chosen step can be missed when steps come faster."""

    def selected(self, step: int) -> bool:
        return (step >= self.first and (self.last == 0 or step < self.last)
                and (step - self.first) % self.every == 0)

    def next_selected(self, step: int) -> int | None:
        """The first chosen step at or after `step`, None when there is none."""
        start = max(step, self.first)
        nxt = start + (-(start - self.first)) % self.every
        return nxt if self.last == 0 or nxt < self.last else None

    @property
    def gated(self) -> bool:
        return (self.first, self.last, self.every) != (0, 0, 1)

    @property
    def filtered(self) -> bool:
        return bool(self.ops or self.name_prefix)

    @staticmethod
    def parse(tokens: str | None, sample: int, ops: str | None, detach: bool = False,
              aggregate: bool = False, barriers: bool = True) -> Selection:
        """From --tokens A:B, --sample N and --ops MUL_MAT,ffn_*."""
        first = last = 0
        if tokens:
            try:
                a, _, b = tokens.partition(":")
                first, last = int(a or 0), int(b or 0)
            except ValueError:
                raise ProfinferError(f"--tokens takes FIRST:LAST step numbers, not {tokens!r}"
                                     ) from None
            if first < 0 or last < 0 or (last and last <= first):
                raise ProfinferError(f"--tokens {tokens} selects no token step")
        if sample < 1:
            raise ProfinferError(f"--sample takes a number of steps >= 1, not {sample}")
        names = [o.strip() for o in (ops or "").split(",") if o.strip()]
        prefixes = [o[:-1] for o in names if o.endswith("*")]
        if len(prefixes) > 1 or any(not p for p in prefixes):
            raise ProfinferError("--ops takes op names and at most one tensor-name prefix "
                                 "ending in * (e.g. MUL_MAT,ffn_*)")
        if detach and not (tokens or sample > 1):
            raise ProfinferError("--detach goes with --tokens or --sample")
        if aggregate and names:
            raise ProfinferError("--aggregate counts every op: it does not go with --ops")
        return Selection(first, last, sample, tuple(o for o in names if not o.endswith("*")),
                         prefixes[0] if prefixes else "", aggregate, barriers, detach)


def probe_source() -> str:
    """The BPF C source shipped with the package (or beside it, in a source checkout)."""
    packaged = resources.files("profinfer_perfetto").joinpath("probes/ggml.bpf.c")
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parents[2] / "probes" / "ggml.bpf.c").read_text()


def program_text(ggml: GgmlInfo, counters: list[str], rings: RingSizes,
                 selection: Selection = Selection(), graph_builds: bool = False) -> str:
    """The exact program BCC compiles: our definitions, then probes/ggml.bpf.c."""
    layout, runtime = ggml.layout, ggml.runtime
    defines = {
        "T_TYPE": layout.type,
        "T_NE": layout.ne,
        "T_OP": layout.op,
        "T_OP_PARAMS": layout.op_params,
        "T_FLAGS": layout.flags,
        "T_SRC": layout.src,
        "T_VIEW_SRC": layout.view_src,
        "T_DATA": layout.data,
        "REFRESH_EVERY": REFRESH_EVERY,
        "GRAPH_BUILDS": int(graph_builds),
        "T_NAME": layout.name,
        "T_SIZE": layout.size,
        "CGRAPH_N_NODES": runtime.cgraph_n_nodes,
        "CPLAN_N_THREADS": runtime.cplan_n_threads,
        "BATCH_EXT_TOKENS": runtime.batch_ext_tokens,
        "BATCH_EXT_TOKEN_SIZE": runtime.batch_ext_token_size,
        "N_SRC": min(N_SRC, layout.n_src),
        "N_COUNTERS": len(counters),
        "EVENT_PAGES": rings.event_pages,
        "NODE_PAGES": rings.node_pages,
        "MAX_CPUS": os.cpu_count() or 1,
        "GATED": int(selection.gated),
        "DETACH": int(selection.detach),
        "FIRST_STEP": selection.first,
        "LAST_STEP": selection.last,
        "SAMPLE_EVERY": selection.every,
        "OP_FILTER": int(selection.filtered),
        "NAME_PREFIX": '"' + selection.name_prefix.replace('"', "") + '"',
        "NAME_PREFIX_LEN": len(selection.name_prefix.encode()),
        "AGGREGATE": int(selection.aggregate),
    }
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    return head + probe_source()


def counter_config(name: str) -> tuple[int, int]:
    if name in SOFTWARE_COUNTERS:
        return _PERF_TYPE_SOFTWARE, SOFTWARE_COUNTERS[name]
    if name in HARDWARE_COUNTERS:
        return _PERF_TYPE_HARDWARE, HARDWARE_COUNTERS[name]
    known = ", ".join([*SOFTWARE_COUNTERS, *HARDWARE_COUNTERS])
    raise ProfinferError(f"unknown counter {name!r} (known: {known})")


def _syscall(numbers: dict[str, int], *args: Any) -> int:
    """A raw system call by its number on this architecture; -1 where none is listed."""
    number = numbers.get(platform.machine())
    if number is None:
        return -1
    return int(ctypes.CDLL(None, use_errno=True).syscall(number, *args))


def counter_opens(counter: str) -> bool:
    """Can this process open the counter for itself (perf_event_open(2))?"""
    kind, config = counter_config(counter)
    attr = (ctypes.c_uint8 * 128)()
    ctypes.memmove(attr, (ctypes.c_uint32 * 2)(kind, 128), 8)
    ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint64 * 1)(config), 8)
    fd = _syscall(_PERF_EVENT_OPEN, attr, 0, -1, -1, 0)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _import_bcc() -> Any:
    try:
        import bcc
    except ImportError:
        raise ProfinferError(
            "BCC's Python module is not importable: install Debian's python3-bpfcc "
            "(run `profinfer-perfetto doctor`)"
        ) from None
    return bcc


def _attach_uprobe_fn(lib: ctypes.CDLL) -> Any:
    fn = lib.bpf_attach_uprobe
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.c_int,  # prog fd
        ctypes.c_int,  # attach type: 0 entry, 1 return
        ctypes.c_char_p,  # event name
        ctypes.c_char_p,  # binary path
        ctypes.c_uint64,  # file offset
        ctypes.c_int,  # pid, -1 for all
        ctypes.c_uint32,  # ref_ctr_offset
    ]
    return fn


_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_ENABLE_STATS = 32
_BPF_STATS_RUN_TIME = 0


def _enable_run_time_stats() -> int | None:
    """Have the kernel time every BPF program run while the returned fd is open
    (BPF_ENABLE_STATS, Linux 5.8+); None where it cannot."""
    attr = ctypes.c_uint32(_BPF_STATS_RUN_TIME)
    fd = _syscall(_SYS_BPF, _BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    return fd if fd >= 0 else None


@dataclass(frozen=True)
class ProbeCost:
    """What one BPF program of ours cost: its runs and their summed time (kernel-measured,
    without the uprobe trap around each run)."""

    runs: int
    ns: int


class ProbeSession:
    """The loaded program, its uprobes on one process and the readers of its rings."""

    def __init__(self, text: str, counters: list[str], rings: RingSizes,
                 traced_ops: list[int] | None = None, steered: bool = False) -> None:
        bcc = _import_bcc()
        self._counters = counters
        configs = [counter_config(c) for c in counters]
        for name, (kind, _) in zip(counters, configs, strict=True):
            if not counter_opens(name):
                raise ProfinferError(
                    f"counter {name} cannot be opened on this machine"
                    + (" (it has no hardware PMU)" if kind == _PERF_TYPE_HARDWARE else "")
                )
        try:
            self._bpf = bcc.BPF(text=text.encode())
        except Exception as exc:
            raise ProfinferError(f"the BPF program did not load: {exc}") from exc
        for table, (kind, config) in zip(("counter0", "counter1"), configs, strict=False):
            try:
                self._bpf[table.encode()].open_perf_event(kind, config)
            except Exception as exc:
                raise ProfinferError(f"counter {counters[int(table[-1])]}: {exc}") from None
        page = os.sysconf("SC_PAGE_SIZE")
        self.events = RingReader(self._bpf[b"events"].map_fd, rings.event_pages * page, EVENT)
        self.nodes = RingReader(self._bpf[b"nodes"].map_fd, rings.node_pages * page, NODE)
        self._steer: RingReader | None = None
        self._steer_poll = select.poll()
        if steered:
            fd = self._bpf[b"steer"].map_fd
            self._steer = RingReader(fd, page, np.dtype("<u8"))
            self._steer_poll.register(fd, select.POLLIN)
        if traced_ops:
            table = self._bpf[b"op_traced"]
            for op in traced_ops:
                table[table.Key(op)] = table.Leaf(1)
        libbcc = ctypes.CDLL("libbcc.so.0")
        self._attach = _attach_uprobe_fn(libbcc)
        self._close_perf_event = libbcc.bpf_close_perf_event_fd
        self._attached: dict[Probe, bytes] = {}
        self._stats_fd = _enable_run_time_stats()

    def attach(self, probes: tuple[Probe, ...], pid: int) -> None:
        for probe in probes:
            fn = self._bpf.load_func(probe.fn.encode(), self._bpf.KPROBE)
            ev_name = b"pi_%s_%d_%x_%d" % (probe.fn.encode(), pid, probe.offset, probe.ret)
            fd = self._attach(
                fn.fd, int(probe.ret), ev_name, str(probe.path).encode(), probe.offset, pid, 0
            )
            if fd < 0:
                raise ProfinferError(
                    f"cannot attach a uprobe to {probe.where} in {probe.path}: "
                    f"{os.strerror(ctypes.get_errno() or 22)}"
                )
            # BCC's own bookkeeping, so that its cleanup detaches these probes too.
            self._bpf._add_uprobe_fd(ev_name, fd)
            self._attached[probe] = ev_name

    def detach(self, probes: tuple[Probe, ...]) -> None:
        """Remove probes, all at once: removing one waits for the kernel (Linux 6.18: 0.7-0.9 s
        for the seven op probes in all), and a probe still in place keeps trapping meanwhile."""
        names = [self._attached.pop(p) for p in probes if p in self._attached]
        fds = [self._bpf.uprobe_fds[name] for name in names]
        with ThreadPoolExecutor(max(len(fds), 1)) as pool:  # ctypes calls run without the GIL
            list(pool.map(self._close_perf_event, fds))
        for name in names:
            self._bpf._del_uprobe_fd(name)  # BCC's bookkeeping, as detach_uprobe_event does

    def op_stats(self) -> np.ndarray:
        """The --aggregate statistics so far, one row per tensor."""
        table = self._bpf[b"op_stats"]
        try:
            items = list(table.items_lookup_batch())  # one system call (Linux 5.6+)
        except Exception:
            items = list(table.items())
        rows = [(int(getattr(k, "value", k)), v.count, v.work_ns, v.wait_ns, v.max_work_ns,
                 tuple(v.hist))
                for k, v in items]
        return np.array(rows, OP_STATS)

    def gate(self) -> tuple[int, bool]:
        """Token steps begun so far, and whether the op probes count as attached."""
        return int(self._bpf[b"gate"][0].step), bool(self._bpf[b"armed"][0].value)

    def wait_for_steer(self, timeout_s: float) -> None:
        """With --detach: sleep until a token begin says the op probes should come or go."""
        self._steer_poll.poll(timeout_s * 1000)
        if self._steer is not None:
            self._steer.read()

    def arm(self, armed: bool) -> None:
        table = self._bpf[b"armed"]
        table[table.Key(0)] = table.Leaf(int(armed))

    def lost(self) -> tuple[int, int]:
        """Events and node descriptors dropped because a ring was full."""
        table = self._bpf[b"lost"]
        return tuple(int(sum(table[table.Key(i)])) for i in range(2))  # type: ignore[return-value]

    def read(self) -> tuple[np.ndarray, np.ndarray]:
        return self.events.read(), self.nodes.read()

    def costs(self) -> dict[str, ProbeCost]:
        """Per BPF program that ran: runs and time, from its fdinfo (empty without stats)."""
        costs = {}
        for name, fn in self._bpf.funcs.items():
            try:
                info = Path(f"/proc/self/fdinfo/{fn.fd}").read_text()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in info.splitlines() if ":\t" in line)
            runs = int(fields.get("run_cnt", "0"))
            if runs:
                costs[name.decode()] = ProbeCost(runs, int(fields.get("run_time_ns", "0")))
        return costs

    def close(self) -> None:
        if self._stats_fd is not None:
            os.close(self._stats_fd)
        self.events.close()
        self.nodes.close()
        if self._steer is not None:
            self._steer.close()
        self._bpf.cleanup()

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
