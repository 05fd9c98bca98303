"""What a small function does with its arguments, found by following values through its code.

One pass over the instructions in address order (ggml's accessors are a few straight lines;
where a forward branch lands, a register that the code on the way lost, say to a call of
ggml_abort that never returns, gets back the value it had at the branch), each register
holding a symbolic value: an argument as it came in,
what the latest call returned, a value loaded from a field, or a number (`coef` times the index
argument plus a constant, which is how a table is indexed). The facts come out as events: a
field read, written, compared or OR'ed; a value compared with a constant; the value returned.
The same events come from x86-64 and AArch64 code, from gcc's and from clang's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from profinfer_perfetto.analysis.isa import (
    Addr,
    Arch,
    Bin,
    Compare,
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

RETURNED = "ret"
"""The pointer the latest call returned (in place of an argument's name, "a0", "a1", ...)."""
_LOADED = "mem"
_UNKNOWN = "?"


def arg(n: int) -> str:
    """The name of argument `n`'s value on entry."""
    return f"a{n}"


@dataclass(frozen=True)
class Value:
    """base + coef * index + const; base None for a number."""

    base: str | None = None
    """arg(n), RETURNED, a value loaded from memory, or None: a number."""
    coef: int = 0
    const: int = 0
    field: tuple[str, int] | None = None
    """The (pointer, offset) a loaded value was read from."""
    ored: int | None = None
    """The constant OR'ed into a loaded field's value."""

    @property
    def number(self) -> int | None:
        """The constant, if this is one."""
        return self.const if self.base is None and not self.coef else None


_NOTHING = Value(_UNKNOWN)


class Kind(Enum):
    LOAD = "load"
    STORE = "store"
    COMPARE = "compare"
    """A field compared with a constant (in memory, or loaded into a register first)."""
    OR = "or"
    """A field set to itself OR a constant."""


@dataclass(frozen=True)
class Access:
    """An instruction that reads, writes, compares or ORs a field of a pointer argument."""

    insn: Insn
    pointer: str
    offset: int
    size: int
    kind: Kind
    imm: int | None
    """The constant compared, stored or OR'ed, if any."""
    stored: Value | None = None
    """What a store writes."""


@dataclass(frozen=True)
class Compared:
    """A value that is no field compared with a constant (a loop bound, an argument's range)."""

    insn: Insn
    value: Value
    imm: int


@dataclass(frozen=True)
class Returned:
    insn: Insn
    """The instruction that put the value in the result register (or the return itself)."""
    value: Value


@dataclass(frozen=True)
class Indexed:
    """A memory access at `element 0 + stride * index`, the index being an argument."""

    insn: Insn
    loaded: bool
    """Whether element 0 is a pointer the code loaded (a std::vector's data), not a constant."""
    stride: int
    offset: int
    """The address accessed for index 0 (a table's entry plus the field read), or, where the
    table was loaded, how far past the loaded pointer."""

    @property
    def at(self) -> int | None:
        """The address accessed for index 0 of a constant table."""
        return None if self.loaded else self.offset


@dataclass(frozen=True)
class Global:
    """A load from a constant address (a global, a GOT slot)."""

    insn: Insn
    address: int


@dataclass(frozen=True)
class Called:
    """A call, with the values in the argument registers."""

    insn: Insn
    args: tuple[Value, ...]


Event = Access | Compared | Returned | Indexed | Called | Global


def _add(a: Value, b: Value, sign: int = 1) -> Value:
    if a.base is not None and b.base is not None:
        # the same argument less itself is a number; two loaded values may be any two
        if sign < 0 and a.base == b.base and a.base not in (_UNKNOWN, _LOADED):
            return Value(None, a.coef - b.coef, a.const - b.const)
        return _NOTHING
    if sign < 0 and b.base is not None:
        return _NOTHING
    base = a.base if a.base is not None else b.base
    return Value(base, a.coef + sign * b.coef, a.const + sign * b.const)


def _scale(a: Value, factor: int) -> Value:
    if a.base is not None:
        return _NOTHING
    return Value(None, a.coef * factor, a.const * factor)


class _Evaluator:
    def __init__(self, arch: Arch, index: int | None) -> None:
        self.arch = arch
        self.regs = {r: Value(arg(n)) for n, r in enumerate(arch.args)}
        if index is not None:
            self.regs[arch.args[index]] = Value(None, 1, 0)
        self.events: list[Event] = []
        self.origin: dict[str, Insn] = {}
        """The instruction that last wrote each register."""
        self.branched: dict[int, dict[str, Value]] = {}
        """The registers at the first forward branch to each address."""

    def reg(self, name: str) -> Value:
        return self.regs.get(name, _NOTHING)

    def address(self, mem: Mem) -> Value:
        base = self.reg(mem.base) if mem.base else Value()
        index = _scale(self.reg(mem.index), mem.scale) if mem.index else Value()
        return _add(_add(base, index), Value(None, 0, mem.disp))

    def access(self, insn: Insn, mem: Mem, kind: Kind, imm: int | None,
               stored: Value | None = None) -> Value:
        """Note an access to `mem` (a field, an indexed element); its address."""
        at = self.address(mem)
        if at.base not in (None, _UNKNOWN, _LOADED) and not at.coef:
            self.events.append(Access(insn, str(at.base), at.const, mem.size, kind, imm, stored))
        elif at.coef and at.base in (None, _LOADED):
            self.events.append(Indexed(insn, at.base == _LOADED, at.coef, at.const))
        elif at.number is not None and kind is Kind.LOAD:
            self.events.append(Global(insn, at.number))
        return at

    def value(self, insn: Insn, expr: Expr | None) -> Value:
        if expr is None:
            return _NOTHING
        if isinstance(expr, Reg):
            return self.reg(expr.name)
        if isinstance(expr, Imm):
            return Value(None, 0, expr.value)
        if isinstance(expr, Addr):
            return self.address(expr.mem)
        if isinstance(expr, Load):
            at = self.access(insn, expr.mem, Kind.LOAD, None)
            field = (at.base, at.const) if at.base is not None and not at.coef else None
            return Value(_LOADED, field=field)
        return self.binary(insn, expr)

    def binary(self, insn: Insn, expr: Bin) -> Value:
        left, right = self.value(insn, expr.left), self.value(insn, expr.right)
        n = right.number
        if expr.op is Op.ADD:
            return _add(left, right)
        if expr.op is Op.SUB:
            return _add(left, right, -1)
        if expr.op is Op.OR:
            return Value(_LOADED, field=left.field, ored=n) if n is not None else _NOTHING
        if n is None:
            return _scale(right, left.number) if expr.op is Op.MUL and left.number else _NOTHING
        return _scale(left, n if expr.op is Op.MUL else 1 << n)

    def store(self, insn: Insn, effect: Store) -> None:
        value = self.value(insn, effect.value)
        at = self.address(effect.mem)
        ored = value.ored is not None and value.field == (at.base, at.const)
        kind, imm = (Kind.OR, value.ored) if ored else (Kind.STORE, value.number)
        self.access(insn, effect.mem, kind, imm, value)

    def compare(self, insn: Insn, effect: Compare) -> None:
        left, right = self.value(insn, effect.left), self.value(insn, effect.right)
        if left.number is not None and right.number is None:
            left, right = right, left
        if right.number is None:
            return
        if left.field is not None:
            pointer, offset = left.field
            loads = [e.mem.size for e in (effect.left, effect.right) if isinstance(e, Load)]
            size = loads[0] if loads else 0
            self.events.append(Access(insn, pointer, offset, size, Kind.COMPARE, right.number))
        else:
            self.events.append(Compared(insn, left, right.number))

    def join(self, insn: Insn) -> None:
        """Where a forward branch lands: what is unknown here is what it was there."""
        for reg, value in self.branched.pop(insn.address, {}).items():
            if self.reg(reg) == _NOTHING:
                self.regs[reg] = value
        if insn.flow in (Flow.BRANCH, Flow.JUMP) and insn.target is not None \
                and insn.target > insn.address:
            self.branched.setdefault(insn.target, dict(self.regs))

    def step(self, insn: Insn) -> None:
        self.join(insn)
        sets: list[tuple[str, Value]] = []
        for effect in insn.effects:
            if isinstance(effect, Set):
                value = self.value(insn, effect.value)
                if effect.dest:
                    sets.append((effect.dest, value))
            elif isinstance(effect, Store):
                self.store(insn, effect)
            else:
                self.compare(insn, effect)
        self.regs.update(sets)
        self.origin.update((dest, insn) for dest, _ in sets)
        if insn.flow is Flow.CALL:
            self.events.append(Called(insn, tuple(self.reg(r) for r in self.arch.args)))
            self.regs.update(dict.fromkeys(self.arch.call_clobbers, _NOTHING))
            self.regs[self.arch.result] = Value(RETURNED)
        elif insn.flow is Flow.RETURN:
            result = self.arch.result
            self.events.append(Returned(self.origin.get(result, insn), self.reg(result)))


def events(arch: Arch, insns: list[Insn], index: int | None = None) -> list[Event]:
    """What the code does, in order; with `index`, argument `index` is the index a table or a
    vector is indexed with (a number, not a pointer)."""
    ev = _Evaluator(arch, index)
    for insn in insns:
        ev.step(insn)
    return ev.events


def accesses(arch: Arch, insns: list[Insn], pointer: str) -> Iterator[Access]:
    """The accesses to fields of `pointer` (arg(n) or RETURNED), in order."""
    return (e for e in events(arch, insns) if isinstance(e, Access) and e.pointer == pointer)


def returned(arch: Arch, insns: list[Insn]) -> Returned | None:
    """The value the function returns at its first return."""
    return next((e for e in events(arch, insns) if isinstance(e, Returned)), None)


def compared(arch: Arch, insns: list[Insn]) -> Iterator[Compared]:
    return (e for e in events(arch, insns) if isinstance(e, Compared))


def calls(arch: Arch, insns: list[Insn]) -> Iterator[Called]:
    return (e for e in events(arch, insns) if isinstance(e, Called))


def indexed(arch: Arch, insns: list[Insn], index: int) -> Indexed | None:
    """The first memory access whose address depends on argument `index`."""
    return next((e for e in events(arch, insns, index) if isinstance(e, Indexed)), None)


def element_field(arch: Arch, insns: list[Insn], index: int, stride: int, address: bool = False
                  ) -> tuple[Insn, int] | None:
    """The field of `vector[index]` (elements of `stride` bytes, the vector's data a pointer the
    code loaded) that the first store reaches, as (instruction, offset in the element); with
    `address`, the field whose address is the first argument of the first call made with one
    (a C++ method called on a member: `tokens[i].seq_ids.insert(...)`)."""
    for e in events(arch, insns, index):
        if address and isinstance(e, Called) and e.args[0].base == _LOADED \
                and e.args[0].coef == stride:
            return e.insn, e.args[0].const
        if not address and isinstance(e, Indexed) and e.loaded and e.stride == stride \
                and _stores(e.insn):
            return e.insn, e.offset
    return None


def _stores(insn: Insn) -> bool:
    return any(isinstance(effect, Store) for effect in insn.effects)

