"""What a ggml build is: its `struct ggml_tensor` layout, graph offsets and op and type names.

Every fact is read from the build's own files, statically: the machine code of small exported
accessors gives the field offsets (`ggml_get_name` returns `tensor + name`), and the tables that
`ggml_op_name` and friends index into give the names, through the ELF's relocations. Exported
functions stay in `.dynsym` when a library is stripped, so this works on stripped wheels too. No
code of the target is loaded or run. A fact that cannot be found is refused in one sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

from profinfer_perfetto.analysis import dataflow
from profinfer_perfetto.analysis.code import arch_of, function_code
from profinfer_perfetto.analysis.dataflow import RETURNED, Access, Kind, arg
from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.isa import Arch, Insn
from profinfer_perfetto.errors import ProfinferError

_OBJECT_SIZE = 32
"""sizeof(struct ggml_object), which ggml_tensor_overhead() adds to the tensor: three size_t
and an enum padded to 8, unchanged in every ggml since the object header got its type (2023)."""

_OP_NAME = re.compile(rb"[A-Z][A-Z0-9_]*")
_TYPE_NAME = re.compile(rb"[\x20-\x7e]+")
_MAX_TABLE = 4096
_MAX_BLOCK = 1 << 16


@dataclass(frozen=True)
class TensorLayout:
    """Byte offsets inside `struct ggml_tensor`."""

    type: int
    ne: int
    nb: int
    op: int
    op_params: int
    flags: int
    src: int
    n_src: int
    view_src: int
    data: int
    name: int
    name_len: int
    size: int


@dataclass(frozen=True)
class RuntimeLayout:
    """Byte offsets in the graph and batch structs the graph and token probes read."""

    cgraph_n_nodes: int
    cplan_n_threads: int
    batch_ext_tokens: int
    """llama_batch_ext: its std::vector of tokens (begin, end pointers); 0 without one."""
    batch_ext_token_size: int
    batch_ext_pos: int = 0
    """A llama_batch_ext token's first position; 0 where not found."""
    batch_ext_seq_ids: int = 0
    """A llama_batch_ext token's std::unordered_set of sequence ids; 0 where not found."""
    cgraph_nodes: int = 0
    """ggml_cgraph's nodes array (`ggml_graph_node` reads it); 0 where not found."""
    blas_backend: str = ""
    """The name the BLAS backend gives itself (ggml_backend_blas_get_name); "" without one."""


@dataclass(frozen=True)
class Source:
    """How one fact was found: which function and instruction, or which table."""

    fact: str
    value: str
    how: str


@dataclass(frozen=True)
class GgmlInfo:
    version: str
    """ggml_version()'s string, or "unknown" in a build without it (see build_id)."""
    commit: str
    layout: TensorLayout
    runtime: RuntimeLayout
    ops: tuple[str, ...]
    unary_ops: tuple[str, ...]
    glu_ops: tuple[str, ...]
    types: tuple[str, ...]
    type_sizes: tuple[tuple[int, int], ...]
    """(elements per block, bytes per block) of each type."""
    build_id: str = ""
    """The GNU build-id of the file with the op names: names the build when version does not."""
    sources: tuple[Source, ...] = field(default=(), compare=False)

    def op_id(self, name: str) -> int:
        """The id of the op named `name`, -1 where this ggml has none."""
        return self.ops.index(name) if name in self.ops else -1

    def op_name(self, op: int) -> str:
        return self.ops[op] if 0 <= op < len(self.ops) else f"OP_{op}"

    def subop_name(self, op: int, subop: int) -> str:
        """The unary or GLU function of a UNARY or GLU node; empty for other ops."""
        table = {"UNARY": self.unary_ops, "GLU": self.glu_ops}.get(self.op_name(op))
        if table is None:
            return ""
        return table[subop] if 0 <= subop < len(table) else f"{self.op_name(op)}_{subop}"

    def type_name(self, dtype: int) -> str:
        return self.types[dtype] if 0 <= dtype < len(self.types) else f"type{dtype}"

    def nbytes(self, dtype: int, elements: int) -> int:
        """Bytes that `elements` values of a type take (0 for an unknown type)."""
        if not 0 <= dtype < len(self.type_sizes):
            return 0
        block, size = self.type_sizes[dtype]
        return elements // block * size if block else 0


@dataclass(frozen=True)
class _Function:
    name: str
    elf: ElfFile
    arch: Arch
    insns: list[Insn]

    def where(self, insn: Insn) -> str:
        return f"{self.name} in {self.elf.path.name}: {insn}"


class _Reader:
    """The target's files, the code of the functions they define, and what was found how."""

    def __init__(self, files: list[ElfFile]) -> None:
        self.files = files
        self.sources: list[Source] = []

    def defines(self, symbol: str) -> ElfFile | None:
        return next((f for f in self.files if symbol in f.symbols), None)

    def function(self, symbol: str, fact: str) -> _Function:
        elf = self.defines(symbol)
        if elf is None:
            names = ", ".join(f.path.name for f in self.files) or "no file"
            raise ProfinferError(
                f"cannot derive {fact}: {symbol} is not defined in {names} "
                "(not a ggml build, or stripped of its exported symbols)"
            )
        arch = arch_of(elf)
        return _Function(symbol, elf, arch, function_code(elf, arch, symbol))

    def fact(self, fact: str, value: int | str, how: str) -> None:
        shown = f"{value:#x} ({value})" if isinstance(value, int) else value
        self.sources.append(Source(fact, shown, how))


def _unmatched(fact: str, fn: _Function, expected: str) -> ProfinferError:
    return ProfinferError(
        f"cannot derive {fact}: {fn.name} in {fn.elf.path.name} does not {expected}"
    )


def _access(r: _Reader, fact: str, symbol: str, pointer: str, expected: str,
            want: Callable[[Access], bool] = lambda a: True) -> tuple[Access, _Function]:
    """The first access to a field of `pointer` (an argument, or RETURNED) that `want`s."""
    fn = r.function(symbol, fact)
    found = next((a for a in dataflow.accesses(fn.arch, fn.insns, pointer) if want(a)), None)
    if found is None:
        raise _unmatched(fact, fn, expected)
    return found, fn


def _offset(r: _Reader, fact: str, symbol: str, expected: str, pointer: str = arg(0),
            want: Callable[[Access], bool] = lambda a: True) -> int:
    found, fn = _access(r, fact, symbol, pointer, expected, want)
    r.fact(fact, found.offset, fn.where(found.insn))
    return found.offset


def _lowest(r: _Reader, fact: str, symbol: str, expected: str) -> int:
    """The first field of an array the function reads (clang may read ne[1] before ne[0])."""
    fn = r.function(symbol, fact)
    loads = [a for a in dataflow.accesses(fn.arch, fn.insns, arg(0)) if a.kind is Kind.LOAD]
    if not loads:
        raise _unmatched(fact, fn, expected)
    first = min(loads, key=lambda a: a.offset)
    r.fact(fact, first.offset, fn.where(first.insn) + " (the lowest offset read)")
    return first.offset


def _tensor_layout(r: _Reader) -> tuple[TensorLayout, dict[str, int]]:
    """The tensor's field offsets, and the op enum values the accessors compare with."""
    name, name_len = _name(r)
    op, op_params, enums = _op(r)
    src, enums["ADD"] = _src(r, op)
    view_src = _view_src(r)
    layout = TensorLayout(
        type=_offset(r, "tensor.type", "ggml_element_size", "read the tensor's type",
                     want=lambda a: a.size == 4),
        ne=_lowest(r, "tensor.ne", "ggml_nelements", "read ne[]"),
        nb=_lowest(r, "tensor.nb", "ggml_is_transposed", "read nb[]"),
        op=op,
        op_params=op_params,
        flags=_offset(r, "tensor.flags", "ggml_set_input", "set GGML_TENSOR_FLAG_INPUT",
                      want=lambda a: a.kind is Kind.OR and a.imm == 1),
        src=src,
        # ggml.h declares `src[GGML_MAX_SRC]` right before `view_src`
        n_src=(view_src - src) // 8,
        view_src=view_src,
        data=_offset(r, "tensor.data", "ggml_get_data", "read the data pointer"),
        name=name,
        name_len=name_len,
        size=_size(r),
    )
    r.fact("GGML_MAX_SRC", layout.n_src, "(view_src - src) / 8: src[] is right before view_src")
    _check_layout(layout)
    return layout, enums


def _name(r: _Reader) -> tuple[int, int]:
    """The name's offset (`ggml_get_name` returns its address) and length (`ggml_format_name`
    calls `vsnprintf(tensor->name, sizeof(tensor->name), ...)`)."""
    fn = r.function("ggml_get_name", "the tensor's name offset")
    field = dataflow.returned(fn.arch, fn.insns)
    if field is None or field.value.base != arg(0) or field.value.coef:
        raise _unmatched("the tensor's name offset", fn, "return the address of a field")
    r.fact("tensor.name", field.value.const, fn.where(field.insn))
    fn = r.function("ggml_format_name", "GGML_MAX_NAME")
    name = dataflow.Value(arg(0), 0, field.value.const)
    bound = next((c for c in dataflow.calls(fn.arch, fn.insns)
                  if c.args[0] == name and c.args[1].number), None)
    if bound is None:
        raise _unmatched("GGML_MAX_NAME", fn, "print into the name with its size")
    length = bound.args[1].number or 0
    r.fact("tensor.name length", length, fn.where(bound.insn) + " (the size it prints into)")
    return field.value.const, length


def _compared(r: _Reader, fact: str, symbol: str, op: int | None = None) -> tuple[int, int]:
    """(offset, value) of the first `cmp $value, offset(tensor)` (at offset `op` if given)."""
    found, fn = _access(r, fact, symbol, arg(0), "compare a field of the tensor with a constant",
                        lambda a: a.kind is Kind.COMPARE and a.imm is not None
                        and (op is None or a.offset == op))
    r.fact(fact, found.imm or 0, fn.where(found.insn))
    return found.offset, found.imm or 0


def _op(r: _Reader) -> tuple[int, int, dict[str, int]]:
    """op and op_params: `ggml_get_unary_op` asserts `op == GGML_OP_UNARY` and returns
    op_params[0]; `ggml_get_glu_op` (absent before 2025) the same with GGML_OP_GLU."""
    op, unary = _compared(r, "GGML_OP_UNARY", "ggml_get_unary_op")
    r.fact("tensor.op", op, "the field GGML_OP_UNARY is compared with")
    op_params = _offset(r, "tensor.op_params", "ggml_get_unary_op", "read op_params[0]",
                        want=lambda a: a.kind is Kind.LOAD and a.offset != op)
    enums = {"UNARY": unary}
    if r.defines("ggml_get_glu_op") is not None:
        enums["GLU"] = _compared(r, "GGML_OP_GLU", "ggml_get_glu_op", op)[1]
    return op, op_params, enums


def _src(r: _Reader, op: int) -> tuple[int, int]:
    """src and GGML_OP_ADD: `ggml_add` stores ADD in the op of the tensor it makes, then its
    operands in src[0] and src[1]."""
    add, fn = _access(r, "GGML_OP_ADD", "ggml_add", RETURNED,
                      "store GGML_OP_ADD in the tensor it makes",
                      lambda a: a.kind is Kind.STORE and a.imm is not None and a.offset == op)
    r.fact("GGML_OP_ADD", add.imm or 0, fn.where(add.insn))
    # src[0] = a, the first tensor argument (clang's inlined ggml_view_tensor copies other
    # fields into the new tensor first)
    a = dataflow.Value(arg(1))
    src = _offset(r, "tensor.src", "ggml_add", "store its operands in the new tensor's src",
                  RETURNED, lambda x: x.kind is Kind.STORE and x.stored == a)
    return src, add.imm or 0


def _size(r: _Reader) -> int:
    fn = r.function("ggml_tensor_overhead", "sizeof(struct ggml_tensor)")
    overhead = dataflow.returned(fn.arch, fn.insns)
    if overhead is None or overhead.value.number is None:
        raise _unmatched("sizeof(struct ggml_tensor)", fn, "return a constant")
    size = overhead.value.number - _OBJECT_SIZE
    r.fact("tensor size", size,
           fn.where(overhead.insn) + f" minus the {_OBJECT_SIZE}-byte ggml_object header")
    return size


def _view_src(r: _Reader) -> int:
    """`ggml_is_view` (exported since 2025) compares view_src with NULL; before, the first thing
    `ggml_backend_tensor_set` reads of its tensor is its view_src (to find the buffer)."""
    if r.defines("ggml_is_view") is not None:
        return _offset(r, "tensor.view_src", "ggml_is_view", "compare view_src with NULL",
                       want=lambda a: a.kind is Kind.COMPARE and a.imm == 0)
    return _offset(r, "tensor.view_src", "ggml_backend_tensor_set", "read view_src",
                   want=lambda a: a.size == 8)


def _check_layout(t: TensorLayout) -> None:
    """What every ggml_tensor since 2023 keeps: 4 dims, fields in this order, inside the size."""
    order = [t.type, t.ne, t.nb, t.op, t.op_params, t.flags, t.src, t.view_src, t.data, t.name]
    if (t.nb - t.ne != 32 or order != sorted(order) or t.n_src < 1
            or t.name + t.name_len > t.size):
        raise ProfinferError(
            f"the ggml_tensor layout derived from the code is not a ggml tensor's ({t}): "
            "this build's accessors do not look like ggml's"
        )


def _runtime_layout(r: _Reader) -> RuntimeLayout:
    n_threads = _offset(r, "cplan.n_threads", "ggml_graph_compute", "check cplan->n_threads",
                        pointer=arg(1), want=lambda a: a.size == 4)
    tokens, token_size, pos, seq_ids = 0, 0, 0, 0
    batch = "_ZN15llama_batch_ext12set_token_idEii"
    if r.defines(batch) is not None:
        tokens = _offset(r, "llama_batch_ext.tokens", batch, "read the token vector",
                         want=lambda a: a.size == 8)
        fn = r.function(batch, "llama_batch_ext's token size")
        store = dataflow.indexed(fn.arch, fn.insns, 1)
        if store is None:
            raise _unmatched("llama_batch_ext's token size", fn, "index the token vector")
        token_size = store.stride
        r.fact("llama_batch_ext token size", token_size, fn.where(store.insn))
        pos = _token_field(r, "llama_batch_ext token pos", POS_SETTER, token_size, lea=False)
        seq_ids = _token_field(r, "llama_batch_ext token seq_ids", SEQ_ADDER, token_size, lea=True)
    return RuntimeLayout(
        cgraph_n_nodes=_offset(r, "cgraph.n_nodes", "ggml_graph_n_nodes", "read n_nodes"),
        cgraph_nodes=(_offset(r, "cgraph.nodes", "ggml_graph_node", "read the nodes array",
                              want=lambda a: a.size == 8)
                      if r.defines("ggml_graph_node") else 0),
        blas_backend=_blas_name(r),
        cplan_n_threads=n_threads,
        batch_ext_tokens=tokens,
        batch_ext_token_size=token_size,
        batch_ext_pos=pos,
        batch_ext_seq_ids=seq_ids,
    )


BLAS_NAME = "ggml_backend_blas_get_name"


def _blas_name(r: _Reader) -> str:
    """The BLAS backend's own name, from the string its get_name returns; "" without one."""
    symbol = next((s for f in r.files if (s := f.function_named(BLAS_NAME))), None)
    if symbol is None:
        return ""
    return _returned_string(r, symbol)


POS_SETTER = "_ZN15llama_batch_ext13set_token_posEiPKi"
SEQ_ADDER = "_ZN15llama_batch_ext7add_seqEii"


def _token_field(r: _Reader, fact: str, symbol: str, token_size: int, lea: bool) -> int:
    """A field of llama_batch_ext's tokens, from the method that stores it (or, `lea`, takes
    its address): 0 where the build has no such method or it does not match. The token steps'
    positions and sequences need them; the ops do not."""
    if r.defines(symbol) is None:
        return 0
    fn = r.function(symbol, fact)
    found = dataflow.element_field(fn.arch, fn.insns, 1, token_size, address=lea)
    if found is None:
        return 0
    r.fact(fact, found[1], fn.where(found[0]))
    return found[1]


@dataclass(frozen=True)
class _Table:
    """An array a function indexes with its argument: where entry 0's field is read."""

    insn: Insn
    at: int
    stride: int


def _table(r: _Reader, symbol: str, fact: str) -> tuple[_Function, _Table]:
    """The table a name function indexes with its argument (`table[i]` or `table[i].field`)."""
    fn = r.function(symbol, fact)
    found = dataflow.indexed(fn.arch, fn.insns, 0)
    if found is None or found.at is None:
        raise _unmatched(fact, fn, "index a table with its argument")
    return fn, _Table(found.insn, found.at, found.stride)


def _walk(start: int, stride: int, stops: set[int], entry: Callable[[int], bool]) -> int:
    """Entries of a table without a sized symbol: up to the first that is not one, or the start
    of another known table (ggml's name tables are neighbours in .data.rel.ro)."""
    n = 0
    while n < _MAX_TABLE and (n == 0 or start + n * stride not in stops) \
            and entry(start + n * stride):
        n += 1
    return n


_RELATIVE = 4
"""The stride of a table of 32-bit offsets from the table to each string: clang makes one of a
static array of string pointers that only one function reads (a "reltable", no relocations)."""


def _target(elf: ElfFile, table: _Table, slot: int) -> int | None:
    """Where the string pointer in `slot` points once loaded (None: no pointer is there)."""
    if table.stride == _RELATIVE:
        return table.at + int.from_bytes(elf.read(slot, 4), "little", signed=True)
    return elf.relocated_pointer(slot)


def _named(elf: ElfFile, table: _Table, slot: int, pattern: re.Pattern[bytes]) -> bool:
    """Whether `slot` points to a NUL-terminated name."""
    target = _target(elf, table, slot)
    text = elf.c_string(target) if target is not None else None
    return text is not None and pattern.fullmatch(text) is not None


def _count(r: _Reader, fn: _Function, table: _Table, stops: set[int],
           entry: Callable[[int], bool], fact: str) -> int:
    sym = fn.elf.symbol_at(table.at)
    if sym is not None and sym.size % table.stride == 0:
        r.fact(fact, sym.size // table.stride,
               f".symtab: {sym.name} is {sym.size} bytes of {table.stride}-byte entries")
        return sym.size // table.stride
    n = _walk(table.at, table.stride, stops, entry)
    r.fact(fact, n, f"no sized symbol at {table.at:#x} (stripped): the entries up to the "
           "first that is not a relocated pointer to a name")
    return n


def _names(elf: ElfFile, table: _Table, count: int) -> tuple[str, ...]:
    slots = (table.at + i * table.stride for i in range(count))
    return tuple(elf.string_at(_target(elf, table, s) or elf.pointer_at(s)) for s in slots)


def _op_tables(r: _Reader, enums: dict[str, int]) -> dict[str, tuple[str, ...]]:
    """The op, unary-op and (optional) GLU-op names, each checked against the enum values the
    accessors compare with."""
    symbols = {"ops": "ggml_op_name", "unary_ops": "ggml_unary_op_name",
               "glu_ops": "ggml_glu_op_name"}
    tables = {k: _table(r, s, f"the {k.replace('_', ' ')} names") for k, s in symbols.items()
              if k != "glu_ops" or r.defines(s) is not None}
    starts = {t.at for _, t in tables.values()}
    out: dict[str, tuple[str, ...]] = {"glu_ops": ()}
    for kind, (fn, table) in tables.items():
        if table.stride not in (8, _RELATIVE):
            raise _unmatched(f"the {kind} names", fn, "index an array of string pointers")
        count = _count(r, fn, table, starts, partial(_named, fn.elf, table, pattern=_OP_NAME),
                       f"{kind} count")
        out[kind] = _names(fn.elf, table, count)
        r.fact(f"{kind} names", f"{count} names", fn.where(table.insn))
    for name, value in enums.items():
        if not 0 <= value < len(out["ops"]) or out["ops"][value] != name:
            raise ProfinferError(
                f"cannot derive the op names: the code compares with GGML_OP_{name} = {value}, "
                f"but the op table read has {len(out['ops'])} names without {name} there"
            )
    if "GLU" in enums and not out["glu_ops"]:
        raise ProfinferError("cannot derive the GLU op names: ggml_glu_op_name is missing")
    return out


def _types(r: _Reader) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """Names, block sizes and type sizes from type_traits[], which ggml_type_name, ggml_blck_size
    and ggml_type_size index (the same table and stride, a different field each; the name is
    the first field, so ggml_type_name reads where the table starts)."""
    name_fn, names = _table(r, "ggml_type_name", "the type names")
    block_fn, block = _table(r, "ggml_blck_size", "the block sizes")
    size_fn, size = _table(r, "ggml_type_size", "the type sizes")
    fields = [t.at - names.at for t in (names, block, size)]
    if not all(0 <= f < names.stride for f in fields) or not names.stride == block.stride == \
            size.stride or name_fn.elf is not block_fn.elf or block_fn.elf is not size_fn.elf:
        raise _unmatched("the type traits", size_fn, "index the table ggml_type_name indexes")
    elf = name_fn.elf
    for what, fn, t, f in (("type names", name_fn, names, fields[0]),
                           ("block sizes", block_fn, block, fields[1]),
                           ("type sizes", size_fn, size, fields[2])):
        r.fact(f"type_traits {what}", f"field +{f}, stride {t.stride}", fn.where(t.insn))

    def entry(slot: int) -> bool:
        numbers = [slot + f for f in fields[1:]]
        return _named(elf, names, slot, _TYPE_NAME) and all(
            elf.relocated_pointer(n) is None
            and 0 <= int.from_bytes(elf.read(n, 8), "little") <= _MAX_BLOCK for n in numbers)

    count = _count(r, name_fn, names, set(), entry, "types count")
    # 2024-2025 builds check the bound first (`cmp $GGML_TYPE_COUNT-1,%edi`): a cross-check
    bound = next((c for c in dataflow.compared(name_fn.arch, name_fn.insns)
                  if c.value.base == arg(0)), None)
    if bound is not None and bound.imm + 1 != count:
        raise ProfinferError(
            f"cannot derive the type count: type_traits has {count} entries but "
            f"ggml_type_name in {elf.path.name} checks for {bound.imm + 1}"
        )

    def number(t: _Table, i: int) -> int:
        return int.from_bytes(elf.read(t.at + i * t.stride, 8), "little")

    return (_names(elf, names, count),
            tuple((number(block, i), number(size, i)) for i in range(count)))


def _returned_string(r: _Reader, symbol: str) -> str:
    """What `const char * f(void)` returns (ggml_version, ggml_commit), or "unknown"."""
    if r.defines(symbol) is None:
        r.fact(symbol, "unknown", "not defined in this build")
        return "unknown"
    fn = r.function(symbol, symbol)
    found = dataflow.returned(fn.arch, fn.insns)
    if found is None or found.value.number is None:
        raise _unmatched(symbol, fn, "return a constant string")
    text = fn.elf.string_at(found.value.number)
    r.fact(symbol, text, fn.where(found.insn))
    return text


def read_ggml_info(files: list[ElfFile]) -> GgmlInfo:
    """Derive every fact from the target's files (the executable and its libraries)."""
    r = _Reader(files)
    layout, enums = _tensor_layout(r)
    runtime = _runtime_layout(r)
    tables = _op_tables(r, enums)
    types, sizes = _types(r)
    names_file = r.defines("ggml_op_name")
    return GgmlInfo(
        version=_returned_string(r, "ggml_version"),
        commit=_returned_string(r, "ggml_commit"),
        layout=layout,
        runtime=runtime,
        ops=tables["ops"],
        unary_ops=tables["unary_ops"],
        glu_ops=tables["glu_ops"],
        types=types,
        type_sizes=sizes,
        build_id=names_file.build_id if names_file is not None else "",
        sources=tuple(r.sources),
    )


def describe(info: GgmlInfo) -> Iterator[str]:
    """One line per fact: its value and where it was read."""
    width = max((len(s.fact) for s in info.sources), default=0)
    for s in info.sources:
        yield f"{s.fact:{width}}  {s.value:14}  {s.how}"
