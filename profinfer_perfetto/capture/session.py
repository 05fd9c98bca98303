"""The BCC session: compile the program, attach its uprobes to a target, read its rings and
tables, and take it all down again.

Uprobes are attached through libbcc's `bpf_attach_uprobe` with all seven of its arguments.
Debian's BCC 0.26 Python binding declares six, so the seventh, `ref_ctr_offset`, arrives as
whatever is in the register: the kernel then takes that file offset of the probed library as
a USDT semaphore, increments it in the target's memory and refuses other tracers on the same
function. We pass 0: no semaphore, nothing written into the target.
"""

from __future__ import annotations

import ctypes
import os
import select
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from profinfer_perfetto.analysis.target import Probe
from profinfer_perfetto.capture.counters import (
    counted_share,
    counting_fd,
    enable_run_time_stats,
    opened_configs,
)
from profinfer_perfetto.capture.events import BATCH, NODE, OP_STATS, ROUTE, Ring, event_dtype
from profinfer_perfetto.capture.links import UPROBE_MULTI, link_uprobes
from profinfer_perfetto.capture.program import RingSizes
from profinfer_perfetto.capture.ringbuf import RingReader
from profinfer_perfetto.capture.run import ProbeCost
from profinfer_perfetto.errors import ProfinferError

DESCRIBER_CALLERS = frozenset({b"graph_begin", b"vk_graph_begin"})
"""The programs that tail-call describe_more (describe_graph in probes/ggml.bpf.c): the programs
that share a program array share its attach type (Linux 6.18 refuses to load graph_begin for
uprobe_multi beside the plain describe_more), so they are attached as perf events."""


def import_bcc() -> Any:
    try:
        import bcc
    except ImportError:
        raise ProfinferError(
            "BCC's Python module is not importable: install Debian's python3-bpfcc "
            "(run `profinfer-perfetto doctor`)"
        ) from None
    return bcc


class UprobeAttacher:
    """Attaches a program's uprobes through libbcc's seven-argument bpf_attach_uprobe."""

    def __init__(self) -> None:
        fn = ctypes.CDLL("libbcc.so.0").bpf_attach_uprobe
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
        self._fn = fn

    def __call__(self, bpf: Any, probe: Probe, pid: int) -> bytes:
        """Attach `probe` for process `pid` (-1: every process); returns its event name, under
        which BCC's own cleanup detaches it too."""
        try:
            prog = bpf.load_func(probe.fn.encode(), bpf.KPROBE)
        except Exception as exc:  # BCC raises Exception, with the verifier's word in it
            raise ProfinferError(f"the kernel refused the probe for {probe.where}: {exc}") from None
        name = b"pi_%s_%d_%x_%d" % (probe.fn.encode(), pid, probe.offset, probe.ret)
        fd = self._fn(prog.fd, int(probe.ret), name, str(probe.path).encode(), probe.offset, pid,
                      0)
        if fd < 0:
            raise ProfinferError(
                f"cannot attach a uprobe to {probe.where} in {probe.path}: "
                f"{os.strerror(ctypes.get_errno() or 22)}"
            )
        bpf._add_uprobe_fd(name, fd)
        return name


def program_costs(bpf: Any) -> dict[str, ProbeCost]:
    """Per BPF program of `bpf` that ran: runs and time, from its fdinfo (empty without
    stats)."""
    costs = {}
    for name, fn in bpf.funcs.items():
        try:
            info = Path(f"/proc/self/fdinfo/{fn.fd}").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in info.splitlines() if ":\t" in line)
        runs = int(fields.get("run_cnt", "0"))
        if runs:
            costs[name.decode()] = ProbeCost(runs, int(fields.get("run_time_ns", "0")))
    return costs


class ProbeSession:
    """The loaded program, its uprobes on one process and the readers of its rings."""

    def __init__(self, text: str, counters: list[str], rings: RingSizes,
                 traced_ops: list[int] | None = None, steered: bool = False) -> None:
        bcc = import_bcc()
        configs = opened_configs(counters)
        try:
            self._bpf = bcc.BPF(text=text.encode())
        except Exception as exc:
            raise ProfinferError(f"the BPF program did not load: {exc}") from exc
        self._chain_describer()
        self._counter_fds: dict[str, list[int]] = {}
        for i, (name, (kind, config)) in enumerate(zip(counters, configs, strict=True)):
            self._counter_fds[name] = self._count(self._bpf[f"counter{i}".encode()], name, kind,
                                                  config)
        page = os.sysconf("SC_PAGE_SIZE")
        self.events = RingReader(self._bpf[b"events"].map_fd, rings.event_pages * page,
                                 event_dtype(len(counters)))
        self.nodes = RingReader(self._bpf[b"nodes"].map_fd, rings.node_pages * page, NODE)
        self.batches = RingReader(self._bpf[b"batches"].map_fd, rings.batch_pages * page, BATCH)
        self.routes: RingReader | None = None
        try:  # only a build with Mixture-of-Experts ops has the ring
            fd = self._bpf[b"routes"].map_fd
        except KeyError:
            pass
        else:
            self.routes = RingReader(fd, rings.route_pages * page, ROUTE)
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
        self._attach = UprobeAttacher()
        self._close_perf_event = ctypes.CDLL("libbcc.so.0").bpf_close_perf_event_fd
        self._attached: dict[Probe, bytes | int] = {}
        """Each probe's perf event (BCC's name for it) or link (its fd)."""
        self._linked: set[bytes] = set()
        """The programs loaded for links."""
        self._stats_fd = enable_run_time_stats()

    def _chain_describer(self) -> None:
        """Put describe_more, which graph_begin tail-calls to describe a graph's nodes chunk by
        chunk, in its program array (a program without one, as --aggregate's, has no chain)."""
        try:
            chain = self._bpf[b"describe_chunks"]
        except KeyError:
            return
        try:
            fn = self._bpf.load_func(b"describe_more", self._bpf.KPROBE)
        except Exception as exc:  # BCC raises Exception, with the verifier's word in it
            raise ProfinferError(f"the kernel refused the graph describer: {exc}") from None
        chain[ctypes.c_int(0)] = ctypes.c_int(fn.fd)

    def attach(self, probes: tuple[Probe, ...], pid: int) -> None:
        """Attach probes: those of one program in one file as one link where the kernel can
        (capture/links.py), else one by one. Detach them as they were attached."""
        groups: dict[tuple[str, Path, bool], list[Probe]] = {}
        for probe in probes:
            groups.setdefault((probe.fn, probe.path, probe.ret), []).append(probe)
        for group in groups.values():
            if not self._link(group, pid):
                for probe in group:
                    self._attached[probe] = self._attach(self._bpf, probe, pid)

    def _link(self, group: list[Probe], pid: int) -> bool:
        """Attach probes of one program in one file as a link; False where the kernel cannot
        (its program is then loaded anew for attaching them one by one)."""
        fn = group[0].fn.encode()
        if fn in DESCRIBER_CALLERS or (fn in self._bpf.funcs and fn not in self._linked):
            return False  # a describer's caller, or loaded for one-by-one probes before
        try:
            prog = self._bpf.load_func(fn, self._bpf.KPROBE, attach_type=UPROBE_MULTI)
        except Exception:  # BCC raises Exception; the probes are tried one by one
            return False
        fd = link_uprobes(prog.fd, group[0].path, [p.offset for p in group], group[0].ret, pid)
        if fd < 0:
            os.close(self._bpf.funcs.pop(fn).fd)
            self._linked.discard(fn)
            return False
        self._linked.add(fn)
        self._attached |= dict.fromkeys(group, fd)
        return True

    def detach(self, probes: tuple[Probe, ...]) -> None:
        """Remove probes, all at once: removing them waits for the kernel (Linux 6.18, --exact's
        seven op probes: 0.07-0.08 s as five links, 0.56-0.92 s one by one), and a probe still in
        place keeps trapping meanwhile."""
        taken = [self._attached.pop(p) for p in probes if p in self._attached]
        names = [t for t in taken if isinstance(t, bytes)]
        links = {t for t in taken if isinstance(t, int)}
        if links & set(self._attached.values()):
            raise ValueError("a link's probes are detached together")
        fds = [self._bpf.uprobe_fds[name] for name in names]
        workers = min(max(len(fds) + len(links), 1), 64)
        with ThreadPoolExecutor(workers) as pool:  # ctypes calls and close() drop the GIL
            list(pool.map(self._close_perf_event, fds))
            list(pool.map(os.close, links))
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

    def lost(self) -> dict[Ring, int]:
        """Records dropped because their ring was full, by ring."""
        table = self._bpf[b"lost"]
        return {r: int(sum(table[table.Key(r)])) for r in Ring}

    def fill(self) -> float:
        """How full the fullest ring is (0 to 1)."""
        rings = (self.events, self.nodes, self.batches, self.routes)
        return max(ring.fill() for ring in rings if ring is not None)

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The events, node descriptors, routing and batch records since the last read."""
        routes = self.routes.read() if self.routes is not None else np.empty(0, ROUTE)
        return self.events.read(), self.nodes.read(), routes, self.batches.read()

    def costs(self) -> dict[str, ProbeCost]:
        return program_costs(self._bpf)

    def _count(self, table: Any, name: str, kind: int, config: int) -> list[int]:
        """The perf array `table` counts the counter on every online CPU; its fds."""
        fds: list[int] = []
        for cpu in import_bcc().utils.get_online_cpus():
            fd = counting_fd(kind, config, cpu=cpu)
            if fd < 0:
                for opened in fds:
                    os.close(opened)
                raise ProfinferError(f"counter {name} cannot be counted on CPU {cpu} "
                                     f"({os.strerror(ctypes.get_errno())})")
            fds.append(fd)
            table[table.Key(cpu)] = table.Leaf(fd)
        return fds

    def counted_shares(self) -> dict[str, float]:
        """Per counter, the share of the capture it was counted (under 1: multiplexed)."""
        return {name: counted_share(fds) for name, fds in self._counter_fds.items()}

    def close(self) -> None:
        # All at once: BCC's cleanup removes its probes one by one, 0.1-0.2 s each here (the
        # inner barriers' 230, where the kernel refuses their links, took 21 s even so).
        self.detach(tuple(self._attached))
        for fds in self._counter_fds.values():
            for fd in fds:
                os.close(fd)
        if self._stats_fd is not None:
            os.close(self._stats_fd)
        self.events.close()
        self.nodes.close()
        self.batches.close()
        if self.routes is not None:
            self.routes.close()
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
