"""A function's code in an ELF file, decoded for the file's architecture, and the calls in it.

x86-64 and AArch64 are read (analysis/x86.py, analysis/arm64.py); any other machine is refused in
one sentence. A function that ends by jumping to another (clang's tail call: `ggml_add` is
`xor %ecx,%ecx; jmp ggml_add_impl`) is read on into the function it jumps to, with the
registers as they were: the facts are in the callee.
"""

from __future__ import annotations

import bisect
import platform

from profinfer_perfetto.analysis import arm64, dataflow, x86
from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.isa import Arch, Flow, Insn
from profinfer_perfetto.errors import ProfinferError

EM_X86_64 = 62
EM_AARCH64 = 183
ARCHES: dict[int, Arch] = {EM_X86_64: x86.ARCH, EM_AARCH64: arm64.ARCH}

_LIMIT = 512
"""Bytes read of a function without a sized symbol (a stripped library's .dynsym has sizes)."""
_TAIL_CALLS = 2
"""How many tail calls in a row are followed."""


_MACHINES = {"x86_64": x86.ARCH.name, "aarch64": arm64.ARCH.name}


def require_host(arch: str) -> None:
    """Refuse to probe code of another architecture than this machine's (a uprobe is a trap in
    code the CPU runs: an emulated process is not probed this way)."""
    host = platform.machine()
    if _MACHINES.get(host) != arch:
        raise ProfinferError(f"the target is {arch} code and this machine is {host}: record "
                             "on a machine that runs it")


def arch_of(elf: ElfFile) -> Arch:
    found = ARCHES.get(elf.machine)
    if found is None:
        raise ProfinferError(
            f"{elf.path.name} is code for ELF machine {elf.machine}, not x86-64 or AArch64 "
            "(the architectures whose ggml code can be read)"
        )
    return found


def _tail_call(insns: list[Insn], start: int, end: int) -> int | None:
    """Where the function jumps for good before it returns: a jump out of [start, end)."""
    for insn in insns:
        if insn.flow is Flow.RETURN:
            return None
        if insn.flow is Flow.JUMP and insn.target is not None \
                and not start <= insn.target < end:
            return insn.target
    return None


def function_code(elf: ElfFile, arch: Arch, symbol: str) -> list[Insn]:
    """The instructions of `symbol`, and of the functions it tail-calls."""
    start = elf.symbols[symbol].vaddr
    size = elf.symbols[symbol].size or _LIMIT
    insns = arch.decode(elf.read(start, min(size, _LIMIT)), start)
    out = list(insns)
    for _ in range(_TAIL_CALLS):
        target = _tail_call(insns, start, start + size)
        if target is None:
            break
        callee = elf.symbol_at(target)
        start, size = target, (callee.size if callee is not None else 0) or _LIMIT
        insns = arch.decode(elf.read(start, min(size, _LIMIT)), start)
        out += insns
    return out


_PLT_STUB = 16
"""Bytes of a PLT stub (x86-64's .plt and .plt.sec, AArch64's .plt): stubs start 16-aligned."""


def plt_stubs(elf: ElfFile, arch: Arch) -> dict[str, int]:
    """The PLT stub of each function the file calls through its GOT: the stub that loads the
    function's GOT slot (`jmp *slot(%rip)`; `adrp x16, slot; ldr x17, [x16, #lo12]`)."""
    slots = elf.jump_slots
    out: dict[str, int] = {}
    for name in (".plt", ".plt.sec"):
        section = elf.section(name)
        if section is None:
            continue
        start, code = section
        for e in dataflow.events(arch, arch.decode(code, start)):
            if isinstance(e, dataflow.Global) and e.address in slots:
                out.setdefault(slots[e.address], e.insn.address - (e.insn.address - start)
                               % _PLT_STUB)
    return out


def _targets(elf: ElfFile, stubs: dict[str, int], name: str) -> set[int]:
    """Where a direct call of function `name` goes: the function, or its PLT stub."""
    found = {stubs[name]} if name in stubs else set()
    return found | ({elf.symbols[name].vaddr} if name in elf.symbols else set())


def _functions_calling(elf: ElfFile, arch: Arch, targets: frozenset[int], tail: bool = False
                       ) -> list[tuple[int, int]]:
    """The functions (bounded by their `.eh_frame` entries) with a direct call to `targets`
    (`tail`: or a jump)."""
    ranges = elf.function_ranges
    starts = [r[0] for r in ranges]
    callers: set[tuple[int, int]] = set()
    for address, code in elf.executable_sections():
        for site in arch.calls_to(code, address, targets, tail):
            k = bisect.bisect_right(starts, site) - 1
            if k >= 0 and site < ranges[k][1]:
                callers.add(ranges[k])
    return sorted(callers)


def _calls(elf: ElfFile, arch: Arch, function: tuple[int, int],
           flows: tuple[Flow, ...] = (Flow.CALL,)) -> list[Insn]:
    """The direct calls (or other `flows`) in a function."""
    start, end = function
    return [i for i in arch.decode(elf.read(start, end - start), start)
            if i.flow in flows and i.target is not None]


def call_sites(elf: ElfFile, caller_calls: str, callees: tuple[str, ...]) -> dict[str, list[int]]:
    """Addresses of direct calls to each of `callees` (to the function, or to its PLT stub) in
    every function that calls `caller_calls`."""
    arch = arch_of(elf)
    stubs = plt_stubs(elf, arch)
    wanted = {t: name for name in (caller_calls, *callees) for t in _targets(elf, stubs, name)}
    sites: dict[str, list[int]] = {c: [] for c in callees}
    callers = frozenset(_targets(elf, stubs, caller_calls))
    for function in _functions_calling(elf, arch, callers):
        calls = [(i.address, wanted[i.target]) for i in _calls(elf, arch, function)
                 if i.target in wanted]
        if any(name == caller_calls for _, name in calls):
            for address, name in calls:
                if name in sites:
                    sites[name].append(address)
    return sites


def inner_calls(elf: ElfFile, callee: str, loop_calls: str) -> list[Insn]:
    """The direct calls of `callee`, and the jumps to it (tail calls), in every function that
    does not call `loop_calls`: a barrier inside an op's own function, not in the graph loop
    that calls the ops."""
    arch = arch_of(elf)
    stubs = plt_stubs(elf, arch)
    callee_at, loop_at = _targets(elf, stubs, callee), _targets(elf, stubs, loop_calls)
    found: list[Insn] = []
    for function in _functions_calling(elf, arch, frozenset(callee_at), tail=True):
        branches = _calls(elf, arch, function, (Flow.CALL, Flow.JUMP))
        if not any(i.flow is Flow.CALL and i.target in loop_at for i in branches):
            found += [i for i in branches if i.target in callee_at]
    return found
