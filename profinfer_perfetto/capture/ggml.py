"""What a ggml build is: its version, `struct ggml_tensor` layout and the names of ops and types.

The names come from the library itself (`ggml_op_name` and friends), never from a table of
ours, so a trace names ops exactly as that build does. The tensor layout cannot be read from a
release build; it is known per ggml version, and an unknown version is refused.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass

from profinfer_perfetto.capture.elf import ElfFile, objdump
from profinfer_perfetto.errors import ProfinferError


@dataclass(frozen=True)
class TensorLayout:
    """Byte offsets inside `struct ggml_tensor`."""

    type: int = 0
    ne: int = 16
    nb: int = 48
    op: int = 80
    op_params: int = 84
    flags: int = 148
    src: int = 152
    n_src: int = 10
    view_src: int = 232
    data: int = 248
    name: int = 256
    name_len: int = 64
    size: int = 336


@dataclass(frozen=True)
class RuntimeLayout:
    """Byte offsets in the graph and batch structs the graph and token probes read."""

    cgraph_n_nodes: int = 4
    cplan_n_threads: int = 16
    batch_ext_tokens: int = 64
    """llama_batch_ext: its std::vector of tokens (begin, end pointers)."""
    batch_ext_token_size: int = 96


@dataclass(frozen=True)
class GgmlVersion:
    layout: TensorLayout
    runtime: RuntimeLayout
    op_count: int
    unary_op_count: int
    glu_op_count: int
    type_count: int


# ggml_object header that ggml_tensor_overhead() adds to sizeof(struct ggml_tensor).
_OBJECT_SIZE = 32

KNOWN_VERSIONS: dict[str, GgmlVersion] = {
    "0.25.3": GgmlVersion(TensorLayout(), RuntimeLayout(), 101, 22, 7, 43),
}


@dataclass(frozen=True)
class GgmlInfo:
    version: str
    commit: str
    layout: TensorLayout
    runtime: RuntimeLayout
    ops: tuple[str, ...]
    unary_ops: tuple[str, ...]
    glu_ops: tuple[str, ...]
    types: tuple[str, ...]
    type_sizes: tuple[tuple[int, int], ...]
    """(elements per block, bytes per block) of each type."""

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


def _known(version: str, where: str) -> GgmlVersion:
    known = KNOWN_VERSIONS.get(version)
    if known is None:
        raise ProfinferError(
            f"{where} is ggml {version}, which this profiler does not know "
            f"(known: {', '.join(sorted(KNOWN_VERSIONS))})"
        )
    return known


def read_ggml_info(elf: ElfFile) -> GgmlInfo:
    """Read the build facts from the file that defines `ggml_op_name`."""
    if elf.is_shared_library:
        return _from_shared_library(elf)
    return _from_executable(elf)


def _from_shared_library(elf: ElfFile) -> GgmlInfo:
    try:
        lib = ctypes.CDLL(str(elf.path), mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        raise ProfinferError(f"cannot load {elf.path} to read its op names: {exc}") from exc

    def text(fn: str) -> Callable[[int], str]:
        func = getattr(lib, fn)
        func.restype = ctypes.c_char_p
        func.argtypes = [ctypes.c_int]
        return lambda i: bytes(func(i)).decode()

    def number(fn: str) -> Callable[[int], int]:
        func = getattr(lib, fn)
        func.restype = ctypes.c_int64
        func.argtypes = [ctypes.c_int]
        return lambda i: int(func(i))

    version_fn = lib.ggml_version
    version_fn.restype = ctypes.c_char_p
    commit_fn = lib.ggml_commit
    commit_fn.restype = ctypes.c_char_p
    version = bytes(version_fn()).decode()
    known = _known(version, str(elf.path))
    overhead = lib.ggml_tensor_overhead
    overhead.restype = ctypes.c_size_t
    if overhead() - _OBJECT_SIZE != known.layout.size:
        raise ProfinferError(
            f"{elf.path} says ggml {version} but its tensors are "
            f"{overhead() - _OBJECT_SIZE} bytes, not {known.layout.size}"
        )
    return GgmlInfo(
        version=version,
        commit=bytes(commit_fn()).decode(),
        layout=known.layout,
        runtime=known.runtime,
        ops=tuple(map(text("ggml_op_name"), range(known.op_count))),
        unary_ops=tuple(map(text("ggml_unary_op_name"), range(known.unary_op_count))),
        glu_ops=tuple(map(text("ggml_glu_op_name"), range(known.glu_op_count))),
        types=tuple(map(text("ggml_type_name"), range(known.type_count))),
        type_sizes=tuple(
            (number("ggml_blck_size")(t), number("ggml_type_size")(t))
            for t in range(known.type_count)
        ),
    )


_RIP_TARGET = re.compile(r"#\s+([0-9a-f]+)")


def _from_executable(elf: ElfFile) -> GgmlInfo:
    """A static build: read the name tables the library functions index into."""
    if not elf.has_symtab:
        raise ProfinferError(
            f"{elf.path} links ggml statically and is stripped: its op names cannot be read"
        )

    def returned_string(fn: str) -> str:
        sym = elf.symbols[fn]
        start, stop = f"--start-address={sym.vaddr:#x}", f"--stop-address={sym.vaddr + 16:#x}"
        m = _RIP_TARGET.search(objdump(elf.path, "-d", start, stop))
        if m is None:
            raise ProfinferError(f"cannot read what {fn} returns in {elf.path}")
        return elf.string_at(int(m.group(1), 16))

    def table(symbol: str, stride: int = 8) -> tuple[str, ...]:
        sym = elf.symbols[symbol]
        slots = range(sym.vaddr, sym.vaddr + sym.size, stride)
        return tuple(elf.string_at(elf.pointer_at(slot)) for slot in slots)

    version = returned_string("ggml_version")
    known = _known(version, str(elf.path))
    types = elf.symbols["type_traits"]
    stride = types.size // known.type_count
    # struct ggml_type_traits: type_name, int64 blck_size, int64 blck_size_interleave, size_t
    # type_size, ...
    traits = [elf.read(types.vaddr + t * stride, 32) for t in range(known.type_count)]
    return GgmlInfo(
        version=version,
        commit=returned_string("ggml_commit"),
        layout=known.layout,
        runtime=known.runtime,
        ops=table("GGML_OP_NAME"),
        unary_ops=table("GGML_UNARY_OP_NAME"),
        glu_ops=table("GGML_GLU_OP_NAME"),
        types=table("type_traits", stride),
        type_sizes=tuple(
            (int.from_bytes(b[8:16], "little"), int.from_bytes(b[24:32], "little"))
            for b in traits
        ),
    )
