"""x86-64 machine code in the terms of analysis/isa.py, and where its uprobes cost one trap.

Capstone decodes each instruction into its operands (base and index register, scale,
displacement, immediate, access size), so a pattern matches what an instruction does rather than
how a disassembler spells it (objdump's text changes with binutils versions).
"""

from __future__ import annotations

import capstone
import numpy as np
from capstone import x86 as cx

from profinfer_perfetto.analysis.isa import (
    Addr,
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

ENDBR64 = bytes.fromhex("f30f1efa")
"""The landing pad that builds with control-flow protection (`-fcf-protection`, the default of
Ubuntu's and Fedora's compilers) put first in every function."""

_JCC = frozenset({cx.X86_INS_JA, cx.X86_INS_JAE, cx.X86_INS_JB, cx.X86_INS_JBE, cx.X86_INS_JE,
                  cx.X86_INS_JNE, cx.X86_INS_JG, cx.X86_INS_JGE, cx.X86_INS_JL, cx.X86_INS_JLE,
                  cx.X86_INS_JO, cx.X86_INS_JNO, cx.X86_INS_JP, cx.X86_INS_JNP, cx.X86_INS_JS,
                  cx.X86_INS_JNS})
_ARITH = {cx.X86_INS_ADD: Op.ADD, cx.X86_INS_SUB: Op.SUB, cx.X86_INS_IMUL: Op.MUL,
          cx.X86_INS_SHL: Op.SHL, cx.X86_INS_SAL: Op.SHL, cx.X86_INS_OR: Op.OR}
_MOVES = frozenset({cx.X86_INS_MOV, cx.X86_INS_MOVABS, cx.X86_INS_MOVZX, cx.X86_INS_MOVSX,
                    cx.X86_INS_MOVSXD})


def _reg(insn: capstone.CsInsn, reg: int) -> str:
    name = str(insn.reg_name(reg))
    return _FULL.get(name, name)


def _mem(insn: capstone.CsInsn, op: capstone.x86.X86Op) -> Mem:
    base = _reg(insn, op.mem.base) if op.mem.base else ""
    index = _reg(insn, op.mem.index) if op.mem.index else ""
    if base == "rip":
        return Mem("", index, op.mem.scale, insn.address + insn.size + op.mem.disp, op.size)
    return Mem(base, index, op.mem.scale, op.mem.disp, op.size)


def _expr(insn: capstone.CsInsn, op: capstone.x86.X86Op) -> Expr:
    if op.type == cx.X86_OP_REG:
        return Reg(_reg(insn, op.reg))
    if op.type == cx.X86_OP_IMM:
        return Imm(int(op.imm))
    return Load(_mem(insn, op))


def _put(insn: capstone.CsInsn, dest: capstone.x86.X86Op, value: Expr | None) -> Effect:
    """`dest` (a register or memory, AT&T's last operand) gets `value`."""
    if dest.type == cx.X86_OP_MEM:
        return Store(_mem(insn, dest), value)
    return Set(_reg(insn, dest.reg), value)


def _effects(i: capstone.CsInsn) -> tuple[Effect, ...]:
    """What one instruction does, in the terms of analysis/isa.py; AT&T order: sources first."""
    ops = list(i.operands)
    if i.id in _MOVES and len(ops) == 2:
        return (_put(i, ops[1], _expr(i, ops[0])),)
    if i.id == cx.X86_INS_LEA:
        return (Set(_reg(i, ops[1].reg), Addr(_mem(i, ops[0]))),)
    if i.id == cx.X86_INS_IMUL and len(ops) == 3:
        return (_put(i, ops[2], Bin(Op.MUL, _expr(i, ops[1]), _expr(i, ops[0]))),)
    if i.id in _ARITH and len(ops) == 2:
        return (_put(i, ops[1], Bin(_ARITH[i.id], _expr(i, ops[1]), _expr(i, ops[0]))),)
    if i.id == cx.X86_INS_XOR and len(ops) == 2 and ops[0].type == ops[1].type == cx.X86_OP_REG \
            and ops[0].reg == ops[1].reg:
        return (Set(_reg(i, ops[1].reg), Imm(0)),)
    if i.id == cx.X86_INS_CMP and len(ops) == 2:
        return (Compare(_expr(i, ops[1]), _expr(i, ops[0])),)
    if i.id == cx.X86_INS_TEST and len(ops) == 2 and ops[0].type == ops[1].type == cx.X86_OP_REG \
            and ops[0].reg == ops[1].reg:
        return (Compare(Reg(_reg(i, ops[0].reg)), Imm(0)),)
    return _other(i, ops)


def _other(i: capstone.CsInsn, ops: list[capstone.x86.X86Op]) -> tuple[Effect, ...]:
    """An instruction not followed: its memory operands still count as accesses, and the
    registers it writes hold nothing known."""
    out: list[Effect] = []
    for op in ops:
        if op.type == cx.X86_OP_MEM and i.id not in (cx.X86_INS_NOP, cx.X86_INS_LEA):
            mem = _mem(i, op)
            out.append(Store(mem, None) if op.access & capstone.CS_AC_WRITE
                       else Set("", Load(mem)))
    out += [Set(_reg(i, r), None) for r in i.regs_access()[1] if _reg(i, r) != "rsp"]
    return tuple(out)


def _flow(i: capstone.CsInsn) -> tuple[Flow, int | None]:
    ops = i.operands
    target = int(ops[0].imm) if ops and ops[0].type == cx.X86_OP_IMM else None
    if i.id == cx.X86_INS_CALL:
        return Flow.CALL, target
    if i.id == cx.X86_INS_JMP:
        return Flow.JUMP, target
    if i.id in _JCC:
        return Flow.BRANCH, target
    if i.id == cx.X86_INS_RET:
        return Flow.RETURN, None
    return Flow.NEXT, None


def _disassembler() -> capstone.Cs:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    md.syntax = capstone.CS_OPT_SYNTAX_ATT
    return md


class X86_64:
    """The x86-64 System V ABI and Linux's x86 uprobes."""

    name = "x86-64"
    args: tuple[str, ...] = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
    result = "rax"
    call_clobbers = frozenset({"rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"})

    def decode(self, code: bytes, address: int) -> list[Insn]:
        out = []
        for i in _disassembler().disasm(code, address):
            flow, target = _flow(i)
            out.append(Insn(i.address, f"{i.mnemonic} {i.op_str}".strip(), i.size, _effects(i),
                            flow, target))
        return out

    def single_stepped(self, code: bytes, address: int) -> bool:
        """Linux's x86 uprobes emulate a pushed register, a direct call or jump (conditional
        too) and a nop in the kernel; any other probed instruction is copied out of line and
        single-stepped, a second exception on every hit (on this project's nested VM a probe
        hit costs 1.1 us on a push and 14 us on endbr64 or a mov)."""
        first = next(_disassembler().disasm(code[:16], address), None)
        if first is None:
            return True
        ops = first.operands
        if first.id == cx.X86_INS_PUSH:
            return not (ops and ops[0].type == cx.X86_OP_REG)
        if first.id in _JCC or first.id in (cx.X86_INS_CALL, cx.X86_INS_JMP):
            return not (ops and ops[0].type == cx.X86_OP_IMM)
        return bool(first.id != cx.X86_INS_NOP)

    def refused(self, code: bytes, address: int) -> bool:
        """Only bytes that are no instruction: the entries and direct calls probed here are
        instructions x86 uprobes take (they refuse far calls, int3 and a few prefixes)."""
        return next(_disassembler().disasm_lite(code[:16], address), None) is None

    def entry_probe_address(self, code: bytes, address: int) -> int:
        """Past a leading endbr64 (single-stepped), unless a jump in the function lands
        there: endbr64 does nothing to registers or stack, so a probe on the instruction after
        it sees the function's arguments and return address as at its entry."""
        if not code.startswith(ENDBR64):
            return address
        after = address + len(ENDBR64)
        jumped_to = any(insn.target == after for insn in self.decode(code, address))
        return address if jumped_to else after

    def return_probe_address(self, code: bytes, address: int) -> int:
        """The return address stays on the stack's top until the first push: a uretprobe can
        go where the entry probe goes."""
        return self.entry_probe_address(code, address)

    def calls_to(self, code: bytes, address: int, targets: frozenset[int],
                 tail: bool = False) -> list[int]:
        """Every 0xe8 byte (`tail`: and 0xe9, a jmp) whose rel32 lands on a target (most are no
        call: decode to check)."""
        raw = np.frombuffer(code, dtype=np.uint8)
        at = np.flatnonzero((raw[:-4] == 0xE8) | (tail & (raw[:-4] == 0xE9)))
        rel = np.zeros(len(at), dtype=np.int64)
        for k in range(4):
            rel |= raw[at + 1 + k].astype(np.int64) << (8 * k)
        rel -= (rel >= 1 << 31) * (1 << 32)
        dest = address + at + 5 + rel
        return [address + int(a) for a in at[np.isin(dest, list(targets))]]


ARCH = X86_64()
