"""Which token steps and ops a recording traces (--tokens, --sample, --ops and the modes)."""

from __future__ import annotations

from dataclasses import dataclass

from profinfer_perfetto.errors import ProfinferError


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
    floor: bool = False
    """Attach the op probes with programs that return at once (no op events): the uprobe traps
    alone, the floor of any op tracer with uprobes on this machine, to read the other modes'
    cost against."""
    detach: bool = False
    """Attach the op probes only around the chosen steps (their traps then cost the other steps
    nothing); removing them takes the kernel about a second, so this suits sampling periods of
    seconds (a server monitor), and a chosen step can be missed when steps come faster."""
    inner_waits: bool = False
    """Also probe every call of ggml_barrier inside an op's own function and its return (a
    matmul's threads wait there for each other): the waits are drawn within their ops, at two
    more traps per such call and about 0.1-0.2 s per probe (some 250 in a build with llamafile)
    to remove them when the capture ends."""

    exact: bool = False
    """Probe each op's begin as well as the barrier after it (two traps per op and thread).
    Without (the default), where the build allows it (capture/recorder.py, exact_because),
    only the graph loop's barrier calls whose node is known are probed (analysis/loop.py):
    one trap per op and thread, each op derived from the barriers (model/one_trap.py: its
    begin at the previous barrier's release, its work's end at the thread's arrival)."""

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
              aggregate: bool = False, barriers: bool = True, floor: bool = False,
              inner_waits: bool = False, exact: bool = False) -> Selection:
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
        if inner_waits and (aggregate or not barriers):
            raise ProfinferError("--inner-waits draws waits between barrier events: it does not "
                                 "go with --aggregate or --no-barriers")
        if floor and (aggregate or names):
            raise ProfinferError("--floor sends no op events: it does not go with --aggregate "
                                 "or --ops")
        return Selection(first, last, sample, tuple(o for o in names if not o.endswith("*")),
                         prefixes[0] if prefixes else "", aggregate, barriers, floor, detach,
                         inner_waits, exact)
