"""AArch64 machine code in the terms of analysis/isa.py, and where its uprobes cost one trap.

Linux's arm64 uprobes simulate B, BL, B.cond, CBZ/CBNZ, TBZ/TBNZ, ADR/ADRP, BR/BLR/RET (one
exception) and single-step everything else out of line (two exceptions), the usual `stp x29,
x30, [sp, #-N]!` prologue, `bti c` and `paciasp` included; it refuses to attach to exclusives
(LDXR/STXR, between which a trap would break the monitor), literal loads, and hints other than
NOP, BTI and PAC signing (AUTIASP, WFE, YIELD, ...), MSR and exception-generating instructions.
"""

from __future__ import annotations

import capstone
import numpy as np
from capstone import arm64 as ca

from profinfer_perfetto.analysis.isa import (
    Bin,
    Compare,
    Effect,
    Expr,
    Flow,
    Imm,
    Insn,
    Load,
    Mem,
    Op,
    Reg,
    Set,
    Store,
)

_ALIASES = {"fp": "x29", "lr": "x30"}
_ZERO = frozenset({"xzr", "wzr"})
_WIDTH = {"x": 8, "w": 4, "q": 16, "d": 8, "s": 4, "h": 2, "b": 1}
_SUFFIX_WIDTH = {"b": 1, "h": 2, "sb": 1, "sh": 2, "sw": 4}
_ARITH = {"add": Op.ADD, "sub": Op.SUB, "mul": Op.MUL, "smull": Op.MUL, "umull": Op.MUL,
          "lsl": Op.SHL, "orr": Op.OR}
_SIMULATED = frozenset({"b", "bl", "cbz", "cbnz", "tbz", "tbnz", "adr", "adrp", "br", "blr",
                        "ret"})
_LANDING_PADS = frozenset({"bti", "paciasp", "pacibsp"})
"""What a function built with -mbranch-protection starts with: a probe goes after it (the
arguments are the same), a uretprobe before it (paciasp signs the return address in x30 that
a uretprobe replaces)."""
_STEPPABLE_HINTS = frozenset({"nop", "bti", "paciasp", "pacibsp", "paciaz", "pacibz",
                              "pacia1716", "pacib1716", "xpaclri"})
_REFUSED_PREFIXES = ("ldxr", "ldaxr", "stxr", "stlxr", "ldxp", "ldaxp", "stxp", "stlxp", "svc",
                     "hvc", "smc", "brk", "hlt", "msr", "mrs", "wfe", "wfi", "yield", "sev",
                     "autia", "autib", "retaa", "retab", "eret")


def _name(insn: capstone.CsInsn, reg: int) -> str:
    """A general-purpose register's 64-bit name (w3 and x3 are one register)."""
    name = str(insn.reg_name(reg))
    name = _ALIASES.get(name, name)
    return "x" + name[1:] if name.startswith("w") and name != "wzr" else name


def _width(insn: capstone.CsInsn, reg: int) -> int:
    return _WIDTH.get(str(insn.reg_name(reg))[0], 8)


def _register(insn: capstone.CsInsn, op: capstone.arm64.Arm64Op) -> Expr:
    """A register operand with its shift (`x2, lsl #3`); an extension (`w0, uxtw`) keeps the
    value, and the zero register is 0."""
    name = _name(insn, op.reg)
    if name in _ZERO:
        return Imm(0)
    if op.shift.type == ca.ARM64_SFT_LSL and op.shift.value:
        return Bin(Op.SHL, Reg(name), Imm(op.shift.value))
    return Reg(name)


def _operand(insn: capstone.CsInsn, op: capstone.arm64.Arm64Op) -> Expr:
    if op.type == ca.ARM64_OP_REG:
        return _register(insn, op)
    if op.type == ca.ARM64_OP_IMM:
        shift = op.shift.value if op.shift.type == ca.ARM64_SFT_LSL else 0
        return Imm(int(op.imm) << shift)
    return Load(_mem(insn, op, 8))


def _mem(insn: capstone.CsInsn, op: capstone.arm64.Arm64Op, size: int) -> Mem:
    base = _name(insn, op.mem.base) if op.mem.base else ""
    index = _name(insn, op.mem.index) if op.mem.index else ""
    shift = op.shift.value if index and op.shift.type == ca.ARM64_SFT_LSL else 0
    return Mem(base, index, 1 << shift, op.mem.disp, size)


def _memory(i: capstone.CsInsn) -> tuple[Effect, ...]:
    """A load or store (ldr, ldp, str, stp and their sized forms): one access per register
    moved, each at its own offset; a pre- or post-indexed base holds nothing known after."""
    ops = list(i.operands)
    at = next(k for k, op in enumerate(ops) if op.type == ca.ARM64_OP_MEM)
    suffix = i.mnemonic[3:].removesuffix("r") if i.mnemonic[:3] in ("ldr", "str") else ""
    out: list[Effect] = []
    # post-indexed forms (`ldp x29, x30, [sp], #32`) add their offset only after the access
    post = at + 1 < len(ops) and ops[at + 1].type == ca.ARM64_OP_IMM
    for k, op in enumerate(ops[:at]):
        size = _SUFFIX_WIDTH.get(suffix) or _width(i, op.reg)
        mem = _mem(i, ops[at], size)
        mem = Mem(mem.base, mem.index, mem.scale, (0 if post else mem.disp) + k * size, size)
        if i.mnemonic.startswith("st"):
            out.append(Store(mem, _register(i, op)))
        else:
            out.append(Set(_name(i, op.reg), Load(mem)))
    if i.writeback or post:
        out.append(Set(_name(i, ops[at].mem.base), None))
    return tuple(out)


def _effects(i: capstone.CsInsn) -> tuple[Effect, ...]:
    """What one instruction does, in the terms of analysis/isa.py."""
    m, ops = i.mnemonic, list(i.operands)
    if any(op.type == ca.ARM64_OP_MEM for op in ops) and m[:2] in ("ld", "st"):
        return _memory(i)
    dest = _name(i, ops[0].reg) if ops and ops[0].type == ca.ARM64_OP_REG else ""
    if m in ("mov", "movz", "sxtw", "uxtw") and len(ops) == 2:
        return (Set(dest, _operand(i, ops[1])),)
    if m in ("adr", "adrp"):
        return (Set(dest, Imm(int(ops[1].imm))),)
    if m in ("ubfiz", "sbfiz") and len(ops) == 4:
        return (Set(dest, Bin(Op.SHL, _operand(i, ops[1]), Imm(int(ops[2].imm)))),)
    if m in ("madd", "smaddl", "umaddl") and len(ops) == 4:
        product = Bin(Op.MUL, _operand(i, ops[1]), _operand(i, ops[2]))
        return (Set(dest, Bin(Op.ADD, product, _operand(i, ops[3]))),)
    if m in _ARITH and len(ops) == 3:
        return (Set(dest, Bin(_ARITH[m], _operand(i, ops[1]), _operand(i, ops[2]))),)
    if m in ("cmp", "cbz", "cbnz") and ops:
        right = _operand(i, ops[1]) if m == "cmp" else Imm(0)
        return (Compare(_operand(i, ops[0]), right),)
    written = [r for r in i.regs_access()[1] if not m.startswith(("cmp", "cmn", "tst"))]
    return tuple(Set(_name(i, r), None) for r in written)


def _flow(i: capstone.CsInsn) -> tuple[Flow, int | None]:
    m, ops = i.mnemonic, i.operands
    target = int(ops[-1].imm) if ops and ops[-1].type == ca.ARM64_OP_IMM else None
    if m in ("bl", "blr"):
        return Flow.CALL, target if m == "bl" else None
    if m in ("b", "br"):
        return Flow.JUMP, target if m == "b" else None
    if m.startswith("b.") or m in ("cbz", "cbnz", "tbz", "tbnz"):
        return Flow.BRANCH, target
    if m == "ret":
        return Flow.RETURN, None
    return Flow.NEXT, None


def _disassembler() -> capstone.Cs:
    md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    md.detail = True
    return md


class Arm64:
    """The AAPCS64 and Linux's arm64 uprobes."""

    name = "arm64"
    args: tuple[str, ...] = ("x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7")
    result = "x0"
    call_clobbers = frozenset({f"x{n}" for n in range(19)} | {"x30"})

    def decode(self, code: bytes, address: int) -> list[Insn]:
        out = []
        for i in _disassembler().disasm(code, address):
            flow, target = _flow(i)
            out.append(Insn(i.address, f"{i.mnemonic} {i.op_str}".strip(), i.size, _effects(i),
                            flow, target))
        return out

    def single_stepped(self, code: bytes, address: int) -> bool:
        first = next(_disassembler().disasm(code[:4], address), None)
        return first is None or first.mnemonic.split(".")[0] not in _SIMULATED

    def refused(self, code: bytes, address: int) -> bool:
        """Whether the kernel refuses a uprobe on the instruction at `address`."""
        first = next(_disassembler().disasm(code[:4], address), None)
        if first is None:
            return True
        m = first.mnemonic
        literal = m.startswith("ldr") and any(op.type == ca.ARM64_OP_IMM for op in first.operands)
        hint = m in ("hint",) or (m.startswith(("pac", "bti", "xpac")) and
                                  m not in _STEPPABLE_HINTS)
        return literal or hint or m.startswith(_REFUSED_PREFIXES)

    def entry_probe_address(self, code: bytes, address: int) -> int:
        """Past a leading `bti c` or `paciasp`, unless a branch in the function lands there."""
        insns = list(_disassembler().disasm(code, address))
        if not insns or insns[0].mnemonic not in _LANDING_PADS:
            return address
        after = address + 4
        jumped_to = any(_flow(i)[1] == after for i in insns)
        return address if jumped_to else after

    def return_probe_address(self, code: bytes, address: int) -> int:
        """The function's first instruction: a uretprobe replaces x30 with its trampoline,
        which must happen before `paciasp` signs x30."""
        return address

    def calls_to(self, code: bytes, address: int, targets: frozenset[int],
                 tail: bool = False) -> list[int]:
        """Every aligned BL (`tail`: and B) whose offset lands on a target."""
        words = np.frombuffer(code[: len(code) // 4 * 4], dtype="<u4")
        at = np.flatnonzero(((words >> 26) == 0b100101) | (tail & ((words >> 26) == 0b000101)))
        imm = (words[at] & 0x3FFFFFF).astype(np.int64)
        imm -= (imm >= 1 << 25) * (1 << 26)
        dest = address + at * 4 + imm * 4
        return [address + 4 * int(a) for a in at[np.isin(dest, list(targets))]]


ARCH = Arm64()
