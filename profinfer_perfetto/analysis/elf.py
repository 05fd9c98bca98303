"""Symbols, segments, sections and function bounds of an ELF file: what the probes attach to.

A uprobe is placed at a file offset. Exported functions come from `.dynsym` (kept when a
library is stripped), static ones from `.symtab` when present. Function bounds come from
`.eh_frame` (binutils' `objdump --dwarf=frames` reads them), so call sites are found in stripped
libraries too (analysis/code.py).

The file may be controlled by the target (a process in a container, under `record --pid`): it is
read once, and only if it is a regular file of at most MAX_FILE_BYTES (never a FIFO or
/dev/zero); every table is read within the file, and a malformed one is one sentence naming the
file. objdump runs on a private copy of the bytes read, not on a path the target could swap.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import struct
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from profinfer_perfetto.errors import ProfinferError

_ELF_MAGIC = b"\x7fELF"
_PT_LOAD = 1
_PT_INTERP = 3
_SHT_SYMTAB = 2
_SHT_RELA = 4
_SHT_NOTE = 7
_SHT_DYNSYM = 11
_NT_GNU_BUILD_ID = 3
_R_X86_64_RELATIVE = 8
_R_AARCH64_RELATIVE = 1027
_JUMP_SLOTS = (7, 1026)
"""R_X86_64_JUMP_SLOT and R_AARCH64_JUMP_SLOT: the GOT slots a PLT stub jumps through."""
_SHT_NOBITS = 8
_SHF_EXECINSTR = 4
_SHN_UNDEF = 0
_STT_OBJECT = 1
_STT_FUNC = 2
_STT_GNU_IFUNC = 10

_FDE = re.compile(r"\bFDE\b.*pc=([0-9a-f]+)\.\.([0-9a-f]+)")
MAX_FILE_BYTES = 4 << 30
"""The largest file read: a library is far smaller, a bigger file is refused."""
_SYM_SIZE = 24
_RELA_SIZE = 24

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _parsing(method: Callable[Concatenate[ElfFile, _P], _T]
             ) -> Callable[Concatenate[ElfFile, _P], _T]:
    """A method that reads the file's tables: a malformed table is one sentence naming it."""
    @functools.wraps(method)
    def parse(elf: ElfFile, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(elf, *args, **kwargs)
        except (struct.error, IndexError, ValueError, OverflowError) as exc:
            raise ProfinferError(f"{elf.path} is a malformed ELF file ({exc})") from None
    return parse


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ProfinferError(f"{path} is not a regular file")
            if st.st_size > MAX_FILE_BYTES:
                raise ProfinferError(f"{path} is larger than {MAX_FILE_BYTES >> 30} GiB, "
                                     "the most an ELF file is read")
            return f.read(st.st_size)
    except OSError as exc:
        raise ProfinferError(f"cannot read {path}: {exc.strerror}") from exc


@dataclass(frozen=True)
class Symbol:
    name: str
    vaddr: int
    size: int


@dataclass(frozen=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int


class ElfFile:
    """A 64-bit little-endian ELF file, read once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data = _read_regular(path)
        if len(self._data) < 64 or self._data[:4] != _ELF_MAGIC:
            raise ProfinferError(f"{path} is not an ELF file")
        if self._data[4] != 2:
            raise ProfinferError(f"{path} is a 32-bit ELF file: only 64-bit targets are supported")
        if self._data[5] != 1:
            raise ProfinferError(
                f"{path} is a big-endian ELF file: only little-endian targets are supported"
            )
        self._read_headers()

    @_parsing
    def _read_headers(self) -> None:
        (self.e_type, self.machine) = struct.unpack_from("<HH", self._data, 16)
        (phoff, shoff) = struct.unpack_from("<QQ", self._data, 32)
        (phentsize, phnum, shentsize, shnum) = struct.unpack_from("<HHHH", self._data, 54)
        self.segments: list[Segment] = []
        self.interpreted = False
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", self._data, phoff + i * phentsize
            )
            if p_type == _PT_LOAD:
                self.segments.append(Segment(p_vaddr, p_offset, p_filesz))
            self.interpreted |= p_type == _PT_INTERP
        self._sections = [
            struct.unpack_from("<IIQQQQIIQQ", self._data, shoff + i * shentsize)
            for i in range(shnum)
        ]
        self._shstrndx: int = struct.unpack_from("<H", self._data, 62)[0]

    @property
    def is_shared_library(self) -> bool:
        """A shared object one can dlopen (not a PIE executable, which has an interpreter)."""
        return self.e_type == 3 and not self.interpreted

    @cached_property
    def has_symtab(self) -> bool:
        return any(s[1] == _SHT_SYMTAB for s in self._sections)

    @cached_property
    def symbols(self) -> dict[str, Symbol]:
        """Defined function and object symbols; `.symtab` wins over `.dynsym`."""
        found: dict[str, Symbol] = {}
        for kind in (_SHT_DYNSYM, _SHT_SYMTAB):
            for sec in self._sections:
                if sec[1] == kind:
                    found.update(self._read_symbols(sec))
        return found

    def function_named(self, name: str) -> str | None:
        """The symbol of function `name`: a C one, or a C++ file-local one (`static` in a .cpp
        file, mangled `_ZL<length><name><parameters>`), as `.symtab` keeps them."""
        if name in self.symbols:
            return name
        prefix = f"_ZL{len(name)}{name}"
        return next((s for s in self.symbols
                     if s.startswith(prefix) and not s.endswith(".cold")), None)

    def _entries(self, sec: tuple[int, ...], size: int, step: int) -> range:
        """Where the entries of a table of `size`-byte entries start, `step` bytes apart."""
        offset, total = sec[4], sec[5]
        if step < size or offset + total > len(self._data):
            raise ValueError(f"the table at {offset:#x} has entries of {step} bytes or ends "
                             "past the end of the file")
        return range(offset, offset + total, step)

    def _string(self, table: tuple[int, ...], at: int) -> str:
        """The string at `at` in a string table section."""
        start, end = table[4] + at, table[4] + table[5]
        return self._data[start : self._data.index(b"\0", start, end)].decode(errors="replace")

    @_parsing
    def _read_symbols(self, sec: tuple[int, ...]) -> dict[str, Symbol]:
        strtab = self._sections[sec[6]]
        out: dict[str, Symbol] = {}
        for pos in self._entries(sec, _SYM_SIZE, sec[9]):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", self._data, pos
            )
            if st_shndx == _SHN_UNDEF or (st_info & 0xF) not in (
                _STT_FUNC,
                _STT_OBJECT,
                _STT_GNU_IFUNC,
            ):
                continue
            name = self._string(strtab, st_name)
            out[name] = Symbol(name, st_value, st_size)
        return out

    @cached_property
    def _by_address(self) -> dict[int, Symbol]:
        return {s.vaddr: s for s in self.symbols.values() if s.size}

    def symbol_at(self, vaddr: int) -> Symbol | None:
        """The sized symbol that starts at `vaddr` (a `.symtab` one in an unstripped file)."""
        return self._by_address.get(vaddr)

    @cached_property
    @_parsing
    def build_id(self) -> str:
        """The GNU build-id note in hex, or "" if the file has none."""
        for sec in self._sections:
            if sec[1] != _SHT_NOTE:
                continue
            pos, end = sec[4], min(sec[4] + sec[5], len(self._data))
            while pos + 12 <= end:
                namesz, descsz, kind = struct.unpack_from("<III", self._data, pos)
                desc = pos + 12 + (namesz + 3) // 4 * 4
                if kind == _NT_GNU_BUILD_ID and self._data[pos + 12 : pos + 15] == b"GNU":
                    return self._data[desc : desc + descsz].hex()
                pos = desc + (descsz + 3) // 4 * 4
        return ""

    def file_offset(self, vaddr: int) -> int:
        """The file offset at which the byte of virtual address `vaddr` lies."""
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return vaddr - seg.vaddr + seg.offset
        raise ProfinferError(f"address {vaddr:#x} is in no loaded segment of {self.path}")

    def read(self, vaddr: int, size: int) -> bytes:
        """Bytes of the file image at a virtual address."""
        offset = self.file_offset(vaddr)
        return self._data[offset : offset + size]

    @cached_property
    @_parsing
    def _relocations(self) -> list[tuple[int, int, int]]:
        """(r_offset, r_info, r_addend) of every entry of every RELA section."""
        return [struct.unpack_from("<QQq", self._data, pos) for sec in self._sections
                if sec[1] == _SHT_RELA for pos in self._entries(sec, _RELA_SIZE, _RELA_SIZE)]

    @cached_property
    def _relative_relocations(self) -> dict[int, int]:
        """Where the loader writes `base + addend` (pointers in position-independent code)."""
        out: dict[int, int] = {}
        for r_offset, r_info, r_addend in self._relocations:
            if (r_info & 0xFFFFFFFF) in (_R_X86_64_RELATIVE, _R_AARCH64_RELATIVE):
                out[r_offset] = r_addend
        return out

    def relocated_pointer(self, vaddr: int) -> int | None:
        """Where the pointer at `vaddr` points once loaded, if the loader relocates it there."""
        return self._relative_relocations.get(vaddr)

    def pointer_at(self, vaddr: int) -> int:
        """The pointer stored at `vaddr` once loaded, relative to the load base."""
        reloc = self._relative_relocations.get(vaddr)
        return reloc if reloc is not None else int.from_bytes(self.read(vaddr, 8), "little")

    def c_string(self, vaddr: int, limit: int = 256) -> bytes | None:
        """The NUL-terminated bytes at `vaddr`, None if that is outside the file or too long."""
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                start = vaddr - seg.vaddr + seg.offset
                end = self._data.find(b"\0", start, start + limit)
                return self._data[start:end] if end >= 0 else None
        return None

    @_parsing
    def string_at(self, vaddr: int) -> str:
        offset = self.file_offset(vaddr)
        return self._data[offset : self._data.index(b"\0", offset)].decode(errors="replace")

    @_parsing
    def _section_name(self, sec: tuple[int, ...]) -> str:
        return self._string(self._sections[self._shstrndx], sec[0])

    def section(self, name: str) -> tuple[int, bytes] | None:
        """A section's address and bytes, by name."""
        for sec in self._sections:
            if self._shstrndx and self._section_name(sec) == name:
                return sec[3], self._data[sec[4] : sec[4] + sec[5]]
        return None

    def executable_sections(self) -> list[tuple[int, bytes]]:
        """The address and bytes of every section of code."""
        return [(sec[3], self._data[sec[4] : sec[4] + sec[5]]) for sec in self._sections
                if sec[2] & _SHF_EXECINSTR and sec[1] != _SHT_NOBITS]

    @cached_property
    @_parsing
    def _dynamic_names(self) -> list[str]:
        """`.dynsym`'s names by index, undefined ones too."""
        for sec in self._sections:
            if sec[1] == _SHT_DYNSYM:
                strings = self._sections[sec[6]]
                return [self._string(strings, struct.unpack_from("<I", self._data, pos)[0])
                        for pos in self._entries(sec, _SYM_SIZE, sec[9])]
        return []

    @cached_property
    def jump_slots(self) -> dict[int, str]:
        """The GOT slots the PLT's stubs jump through, and the function each is for."""
        out: dict[int, str] = {}
        for r_offset, r_info, _ in self._relocations:
            index = r_info >> 32
            if (r_info & 0xFFFFFFFF) in _JUMP_SLOTS and index < len(self._dynamic_names):
                out[r_offset] = self._dynamic_names[index]
        return out

    @cached_property
    def function_ranges(self) -> list[tuple[int, int]]:
        """[start, end) of every function `.eh_frame` describes, in order."""
        out = self.objdump("--dwarf=frames")
        return sorted((int(a, 16), int(b, 16)) for a, b in _FDE.findall(out))

    def objdump(self, *args: str) -> str:
        """objdump's output on the bytes read, from a private copy: the path may have been
        swapped for another file since (by the target, for a file it controls)."""
        exe = shutil.which("objdump")
        if exe is None:
            raise ProfinferError("objdump (binutils) is needed to find call sites: "
                                 "install binutils")
        with tempfile.NamedTemporaryFile(prefix="profinfer-elf-") as copy:
            copy.write(self._data)
            copy.flush()
            proc = subprocess.run([exe, *args, copy.name], capture_output=True, text=True,
                                  check=False)
        if proc.returncode != 0:
            raise ProfinferError(f"objdump could not read {self.path}: {proc.stderr.strip()}")
        return proc.stdout
