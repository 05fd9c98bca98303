"""What small x86-64 functions do with their arguments: the field offsets and constants in them.

Capstone decodes each instruction into its operands (base and index register, scale,
displacement, immediate, access size), so a pattern matches what an instruction does rather than
how a disassembler spells it (objdump's text changes with binutils versions: `callq`/`call`,
symbolized targets, `# comments`). Nothing here runs the code: it is read as bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import capstone
from capstone import x86 as cx

_GPRS = ("ax", "bx", "cx", "dx", "si", "di", "bp", "sp")


def _full_names() -> dict[str, str]:
    """Every name of a general-purpose register's low part, to its 64-bit name."""
    out: dict[str, str] = {}
    for r in _GPRS:
        out.update({f"r{r}": f"r{r}", f"e{r}": f"r{r}", r: f"r{r}"})
    out.update({"al": "rax", "bl": "rbx", "cl": "rcx", "dl": "rdx", "sil": "rsi", "dil": "rdi",
                "bpl": "rbp", "spl": "rsp"})
    for n in range(8, 16):
        out.update({f"r{n}{s}": f"r{n}" for s in ("", "d", "w", "b")})
    return out


_FULL = _full_names()


@dataclass(frozen=True)
class Mem:
    """A memory operand: base + index * scale + disp (a RIP-relative one is resolved: no base)."""

    base: str
    index: str
    scale: int
    disp: int
    size: int


Operand = str | int | Mem
"""A 64-bit register name, an immediate, or a memory operand."""


@dataclass(frozen=True)
class Insn:
    address: int
    text: str
    kind: int
    """Capstone's instruction id (cx.X86_INS_MOV, ...), whatever the suffix or syntax."""
    operands: tuple[Operand, ...]
    """In AT&T order: sources first, the destination last."""
    size: int
    """Bytes of the destination operand (a move of 8 copies a pointer; of 4 zero-extends)."""
    written: frozenset[str]

    def __str__(self) -> str:
        return f"`{self.text}` at {self.address:#x}"


def _reg(insn: capstone.CsInsn, reg: int) -> str:
    name = str(insn.reg_name(reg))
    return _FULL.get(name, name)


def _operand(insn: capstone.CsInsn, op: capstone.x86.X86Op) -> Operand:
    if op.type == cx.X86_OP_REG:
        return _reg(insn, op.reg)
    if op.type == cx.X86_OP_IMM:
        return int(op.imm)
    base = _reg(insn, op.mem.base) if op.mem.base else ""
    index = _reg(insn, op.mem.index) if op.mem.index else ""
    if base == "rip":
        return Mem("", index, op.mem.scale, insn.address + insn.size + op.mem.disp, op.size)
    return Mem(base, index, op.mem.scale, op.mem.disp, op.size)


def decode(code: bytes, address: int) -> list[Insn]:
    """The instructions of `code` loaded at `address`, up to the first byte that is none."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    md.syntax = capstone.CS_OPT_SYNTAX_ATT
    out = []
    for i in md.disasm(code, address):
        ops = i.operands
        out.append(Insn(
            address=i.address,
            text=f"{i.mnemonic} {i.op_str}".strip(),
            kind=i.id,
            operands=tuple(_operand(i, o) for o in ops),
            size=ops[-1].size if ops else 0,
            written=frozenset(_reg(i, r) for r in i.regs_access()[1]),
        ))
    return out


ENDBR64 = bytes.fromhex("f30f1efa")
"""The landing pad that builds with control-flow protection (`-fcf-protection`, the default of
Ubuntu's and Fedora's compilers) put first in every function."""


_BRANCHES = frozenset({cx.X86_INS_CALL, cx.X86_INS_JMP, cx.X86_INS_JA, cx.X86_INS_JAE,
                       cx.X86_INS_JB, cx.X86_INS_JBE, cx.X86_INS_JE, cx.X86_INS_JNE,
                       cx.X86_INS_JG, cx.X86_INS_JGE, cx.X86_INS_JL, cx.X86_INS_JLE,
                       cx.X86_INS_JO, cx.X86_INS_JNO, cx.X86_INS_JP, cx.X86_INS_JNP,
                       cx.X86_INS_JS, cx.X86_INS_JNS})


def single_stepped(code: bytes, address: int) -> bool:
    """Whether a uprobe on the instruction at `address` (`code` starts there) is single-stepped.

    Linux's x86 uprobes emulate a pushed register, a direct call or jump (conditional too) and
    a nop in the kernel; any other probed instruction is copied out of line and single-stepped,
    a second exception on every hit (on this project's nested VM a probe hit costs 1.1 us on a
    push and 14 us on endbr64 or a mov)."""
    first = decode(code[:16], address)[:1]
    if not first:
        return True
    insn = first[0]
    operand = insn.operands[0] if insn.operands else None
    if insn.kind == cx.X86_INS_PUSH:
        return not isinstance(operand, str)
    if insn.kind in _BRANCHES:
        return not isinstance(operand, int)
    return bool(insn.kind != cx.X86_INS_NOP)


def entry_probe_address(code: bytes, address: int) -> int:
    """Where a uprobe on entering the function at `address` (whose bytes are `code`) costs one
    trap where it can: past a leading endbr64 (single_stepped), unless a jump in the function
    lands there. endbr64 does nothing to registers or stack, so a probe on the instruction
    after it sees the function's arguments and return address as at its entry."""
    if not code.startswith(ENDBR64):
        return address
    after = address + len(ENDBR64)
    jumped_to = any(after in insn.operands for insn in decode(code, address))
    return address if jumped_to else after


RETURNED = "returned"
"""Instead of a register: the pointer the last call returned (in %rax right after it)."""


def _aliases(insns: list[Insn], reg: str) -> Iterator[tuple[Insn, frozenset[str]]]:
    """Each instruction with the registers that hold the 64-bit value `reg` had on entry (or,
    for RETURNED, that the latest call returned)."""
    held = frozenset() if reg == RETURNED else frozenset({reg})
    for insn in insns:
        yield insn, held
        ops = insn.operands
        copy = (insn.kind == cx.X86_INS_MOV and insn.size == 8 and len(ops) == 2
                and isinstance(ops[0], str) and ops[0] in held and isinstance(ops[1], str))
        held = held - insn.written
        if copy:
            held = held | {str(ops[1])}
        if reg == RETURNED and insn.kind == cx.X86_INS_CALL:
            held = frozenset({"rax"})


@dataclass(frozen=True)
class Access:
    """An instruction that reads or writes memory at a field of a pointer argument."""

    insn: Insn
    offset: int
    imm: int | None
    """The immediate the instruction compares, stores or ORs, if any."""
    stores: bool


def accesses(insns: list[Insn], reg: str) -> Iterator[Access]:
    """Memory accesses at `pointer + offset` (no index) through a copy of the pointer in `reg`."""
    for insn, held in _aliases(insns, reg):
        if insn.kind in (cx.X86_INS_LEA, cx.X86_INS_NOP):
            continue
        for pos, op in enumerate(insn.operands):
            if isinstance(op, Mem) and op.base in held and not op.index:
                imm = next((o for o in insn.operands if isinstance(o, int)), None)
                stores = pos == len(insn.operands) - 1 and insn.kind != cx.X86_INS_CMP
                yield Access(insn, op.disp, imm, stores)


def field_address(insns: list[Insn], reg: str) -> tuple[Insn, int] | None:
    """The first `lea offset(reg)`: a function that returns the address of a field."""
    for insn, held in _aliases(insns, reg):
        ops = insn.operands
        if insn.kind == cx.X86_INS_LEA and isinstance(ops[0], Mem) and ops[0].base in held:
            return insn, ops[0].disp
    return None


def immediate_to(insns: list[Insn], kind: int, dest: str = "") -> tuple[Insn, int] | None:
    """The first instruction of `kind` (mov, cmp) between an immediate and register `dest`
    (any register if none is given)."""
    for insn in insns:
        ops = insn.operands
        if (insn.kind == kind and len(ops) == 2 and isinstance(ops[0], int)
                and isinstance(ops[1], str) and ops[1] == (dest or ops[1])):
            return insn, ops[0]
    return None


def rip_address(insns: list[Insn], dest: str) -> tuple[Insn, int] | None:
    """The first `lea X(%rip), dest`: the address of a constant (a returned string)."""
    for insn in insns:
        ops = insn.operands
        if (insn.kind == cx.X86_INS_LEA and isinstance(ops[0], Mem) and not ops[0].base
                and not ops[0].index and ops[1] == dest):
            return insn, ops[0].disp
    return None


@dataclass(frozen=True)
class Indexed:
    """A memory access at `table + stride * index + field`, the index being an argument."""

    insn: Insn
    table: int | None
    """The table's address, when the code computes it from %rip (None: a loaded pointer)."""
    stride: int
    field: int


@dataclass(frozen=True)
class _Linear:
    """A register's value as `coef * index + const` (const an address or 0)."""

    coef: int
    const: int


def indexed_access(insns: list[Insn], index: str) -> Indexed | None:
    """The first memory access whose address depends on the argument in register `index`.

    A tiny forward evaluation of the moves, leas, adds, subs, shifts and multiplies that scale
    the index (gcc writes `i * 56` as `lea (,%rdi,8),%rax; sub %rdi,%rax; ... (,%rax,8)`).
    """
    known: dict[str, _Linear] = {index: _Linear(1, 0)}
    for insn in insns:
        for op in insn.operands:
            found = _indexed(insn, op, known) if insn.kind != cx.X86_INS_LEA else None
            if found is not None:
                return found
        result = _evaluate(insn, known)
        for reg in insn.written:
            known.pop(reg, None)
        if result is not None:
            known[result[0]] = result[1]
    return None


def element_field(insns: list[Insn], index: str, stride: int, lea: bool = False
                  ) -> tuple[Insn, int] | None:
    """The field of `vector[index]` (elements of `stride` bytes, the vector's data a pointer the
    code loaded) that the first store (or, with `lea`, the first address taken) reaches, as
    (instruction, offset in the element): for code that adds the scaled index to the loaded
    pointer before it accesses the field (`lea (%rcx,%rsi,1),%rax; mov %edx,0x50(%rax)`)."""
    known: dict[str, _Linear] = {index: _Linear(1, 0)}
    for insn in insns:
        last = len(insn.operands) - 1
        for pos, op in enumerate(insn.operands):
            if not isinstance(op, Mem):
                continue
            at = _address(op, known, pointers=True)
            if at is None or at.coef != stride:
                continue
            if (insn.kind == cx.X86_INS_LEA) if lea else (
                    pos == last and insn.kind == cx.X86_INS_MOV):
                return insn, op.disp
        result = _evaluate(insn, known, pointers=True)
        for reg in insn.written:
            known.pop(reg, None)
        if result is not None:
            known[result[0]] = result[1]
    return None


_POINTER = _Linear(0, 0)
"""With `pointers`, what an unknown register holds: a pointer the code loaded (its value does not
matter, only the multiples of the index added to it)."""


def _address(mem: Mem, known: dict[str, _Linear], pointers: bool = False) -> _Linear | None:
    """`base + index * scale` (without the displacement), None if a register is not known
    (unless `pointers`: then an unknown register is a loaded pointer)."""
    if not pointers and ((mem.base and mem.base not in known)
                         or (mem.index and mem.index not in known)):
        return None
    base = known.get(mem.base, _POINTER) if mem.base else _Linear(0, 0)
    index = known.get(mem.index, _POINTER) if mem.index else _Linear(0, 0)
    return _Linear(base.coef + index.coef * mem.scale, base.const + index.const * mem.scale)


def _indexed(insn: Insn, op: Operand, known: dict[str, _Linear]) -> Indexed | None:
    if not isinstance(op, Mem):
        return None
    at = _address(op, known)
    if at is not None:
        return Indexed(insn, at.const or None, at.coef, op.disp) if at.coef else None
    if op.index in known and known[op.index].coef:
        # the base is a pointer the code loaded (a std::vector's data): only the stride is known
        return Indexed(insn, None, known[op.index].coef * op.scale, op.disp)
    return None


def _evaluate(insn: Insn, known: dict[str, _Linear], pointers: bool = False
              ) -> tuple[str, _Linear] | None:
    """The linear value an instruction gives its destination register, if it has one (with
    `pointers`, unknown registers are loaded pointers: see _address)."""

    def value(reg: str) -> _Linear | None:
        return known.get(reg, _POINTER if pointers else None)

    ops = insn.operands
    if not ops or not isinstance(ops[-1], str):
        return None
    dest, src = ops[-1], ops[0]
    if insn.kind == cx.X86_INS_LEA and isinstance(src, Mem):
        at = _address(src, known, pointers)
        return (dest, _Linear(at.coef, at.const + src.disp)) if at is not None else None
    if insn.kind in (cx.X86_INS_MOV, cx.X86_INS_MOVSXD) and isinstance(src, str):
        moved = value(src)
        return (dest, moved) if moved is not None else None
    if insn.kind == cx.X86_INS_IMUL and len(ops) == 3 and isinstance(src, int):
        factor = value(ops[1]) if isinstance(ops[1], str) else None
        if factor is not None:
            return dest, _Linear(factor.coef * src, factor.const * src)
        return None
    d = value(dest)
    if d is None:
        return None
    if insn.kind == cx.X86_INS_SHL and isinstance(src, int):
        return dest, _Linear(d.coef << src, d.const << src)
    added = value(src) if isinstance(src, str) else None
    if insn.kind in (cx.X86_INS_ADD, cx.X86_INS_SUB) and added is not None:
        sign = 1 if insn.kind == cx.X86_INS_ADD else -1
        return dest, _Linear(d.coef + sign * added.coef, d.const + sign * added.const)
    return None
