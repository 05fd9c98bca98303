"""Symbols, segments, sections and function bounds of an ELF file: what the probes attach to.

A uprobe is placed at a file offset. Exported functions come from `.dynsym` (kept when a
library is stripped), static ones from `.symtab` when present. Function bounds come from
`.eh_frame` (binutils' `objdump --dwarf=frames` reads them), so call sites are found in stripped
libraries too (capture/code.py).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

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
        try:
            self._data = path.read_bytes()
        except OSError as exc:
            raise ProfinferError(f"cannot read {path}: {exc.strerror}") from exc
        if len(self._data) < 64 or self._data[:4] != _ELF_MAGIC:
            raise ProfinferError(f"{path} is not an ELF file")
        if self._data[4] != 2:
            raise ProfinferError(f"{path} is a 32-bit ELF file: only 64-bit targets are supported")
        if self._data[5] != 1:
            raise ProfinferError(
                f"{path} is a big-endian ELF file: only little-endian targets are supported"
            )
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

    def _read_symbols(self, sec: tuple[int, ...]) -> dict[str, Symbol]:
        _, _, _, _, offset, size, link, _, _, entsize = sec
        strtab = self._sections[link]
        str_off = strtab[4]
        out: dict[str, Symbol] = {}
        for pos in range(offset, offset + size, entsize):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", self._data, pos
            )
            if st_shndx == _SHN_UNDEF or (st_info & 0xF) not in (
                _STT_FUNC,
                _STT_OBJECT,
                _STT_GNU_IFUNC,
            ):
                continue
            end = self._data.index(b"\0", str_off + st_name)
            name = self._data[str_off + st_name : end].decode(errors="replace")
            out[name] = Symbol(name, st_value, st_size)
        return out

    @cached_property
    def _by_address(self) -> dict[int, Symbol]:
        return {s.vaddr: s for s in self.symbols.values() if s.size}

    def symbol_at(self, vaddr: int) -> Symbol | None:
        """The sized symbol that starts at `vaddr` (a `.symtab` one in an unstripped file)."""
        return self._by_address.get(vaddr)

    @cached_property
    def build_id(self) -> str:
        """The GNU build-id note in hex, or "" if the file has none."""
        for sec in self._sections:
            if sec[1] != _SHT_NOTE:
                continue
            pos, end = sec[4], sec[4] + sec[5]
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
    def _relocations(self) -> list[tuple[int, int, int]]:
        """(r_offset, r_info, r_addend) of every entry of every RELA section."""
        return [struct.unpack_from("<QQq", self._data, pos) for sec in self._sections
                if sec[1] == _SHT_RELA for pos in range(sec[4], sec[4] + sec[5], 24)]

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

    def string_at(self, vaddr: int) -> str:
        offset = self.file_offset(vaddr)
        return self._data[offset : self._data.index(b"\0", offset)].decode(errors="replace")

    def _section_name(self, sec: tuple[int, ...]) -> str:
        names = self._sections[self._shstrndx][4]
        end = self._data.index(b"\0", names + sec[0])
        return self._data[names + sec[0] : end].decode(errors="replace")

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
    def _dynamic_names(self) -> list[str]:
        """`.dynsym`'s names by index, undefined ones too."""
        for sec in self._sections:
            if sec[1] == _SHT_DYNSYM:
                _, _, _, _, offset, size, link, _, _, entsize = sec
                strings = self._sections[link][4]
                return [self._data[strings + n : self._data.index(b"\0", strings + n)].decode(
                    errors="replace") for n in (struct.unpack_from("<I", self._data, pos)[0]
                                                for pos in range(offset, offset + size, entsize))]
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
        out = objdump(self.path, "--dwarf=frames")
        return sorted((int(a, 16), int(b, 16)) for a, b in _FDE.findall(out))


def objdump(path: Path, *args: str) -> str:
    exe = shutil.which("objdump")
    if exe is None:
        raise ProfinferError("objdump (binutils) is needed to find call sites: install binutils")
    proc = subprocess.run([exe, *args, str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ProfinferError(f"objdump could not read {path}: {proc.stderr.strip()}")
    return proc.stdout
