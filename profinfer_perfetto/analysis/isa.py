"""Machine code as this project reads it, whatever the architecture: a few effects per instruction.

Capstone decodes x86-64 and AArch64 (analysis/x86.py, analysis/arm64.py); each decoder says what an
instruction does to registers and memory in the small vocabulary below, so that one evaluator
(analysis/dataflow.py) finds the field offsets and constants in ggml's accessors for both, and for
gcc's and clang's code alike (clang merges stores and passes values through other registers).
Nothing here runs code: it is read as bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True)
class Mem:
    """A memory operand: base + index * scale + disp, of `size` bytes ("" for no register; a
    pc-relative operand is resolved to an absolute disp with no base)."""

    base: str
    index: str
    scale: int
    disp: int
    size: int


@dataclass(frozen=True)
class Reg:
    name: str


@dataclass(frozen=True)
class Imm:
    value: int


@dataclass(frozen=True)
class Load:
    """The value read from memory."""

    mem: Mem


@dataclass(frozen=True)
class Addr:
    """The address a memory operand computes, without reading it (x86 lea, arm64 add/adrp)."""

    mem: Mem


class Op(Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    SHL = "shl"
    OR = "or"


@dataclass(frozen=True)
class Bin:
    op: Op
    left: Expr
    right: Expr


Expr = Reg | Imm | Load | Addr | Bin


@dataclass(frozen=True)
class Set:
    """A register gets a value (None: one this project does not follow; dest "": a value read
    that goes nowhere this project follows, such as a vector register)."""

    dest: str
    value: Expr | None


@dataclass(frozen=True)
class Store:
    mem: Mem
    value: Expr | None


@dataclass(frozen=True)
class Compare:
    left: Expr
    right: Expr


Effect = Set | Store | Compare


class Flow(Enum):
    """What an instruction does to the flow of control."""

    NEXT = "next"
    CALL = "call"
    JUMP = "jump"
    BRANCH = "branch"
    """A conditional branch."""
    RETURN = "return"


@dataclass(frozen=True)
class Insn:
    address: int
    text: str
    size: int
    effects: tuple[Effect, ...]
    flow: Flow = Flow.NEXT
    target: int | None = None
    """Where a direct call, jump or branch goes."""

    def __str__(self) -> str:
        return f"`{self.text}` at {self.address:#x}"


class Arch(Protocol):
    """One architecture's decoder and the rules of its uprobes."""

    name: str
    args: tuple[str, ...]
    """The registers of the integer arguments, in order."""
    result: str
    """The register a function returns its value in."""
    call_clobbers: frozenset[str]

    def decode(self, code: bytes, address: int) -> list[Insn]:
        """The instructions of `code` loaded at `address`, up to the first byte that is none."""
        ...

    def single_stepped(self, code: bytes, address: int) -> bool:
        """Whether a uprobe on the instruction at `address` costs a second exception."""
        ...

    def refused(self, code: bytes, address: int) -> bool:
        """Whether the kernel refuses a uprobe on the instruction at `address`."""
        ...

    def entry_probe_address(self, code: bytes, address: int) -> int:
        """Where a uprobe on entering the function at `address` goes."""
        ...

    def return_probe_address(self, code: bytes, address: int) -> int:
        """Where a uretprobe of the function at `address` goes."""
        ...

    def calls_to(self, code: bytes, address: int, targets: frozenset[int],
                 tail: bool = False) -> list[int]:
        """Where in `code` (at `address`) a direct call to one of `targets` (`tail`: or a jump,
        a tail call) may be: candidates found without decoding (each still to be checked by
        decoding its function)."""
        ...
