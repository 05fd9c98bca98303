"""ElfFile on files a target controls: a FIFO, a device, a file too large, or an ELF file
mutated by hypothesis ends in a result or one ProfinferError sentence, never another exception,
a wait or a read without end."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profinfer_perfetto.analysis import elf
from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.target import plan_probes
from profinfer_perfetto.errors import ProfinferError

SEED = Path("/bin/true").read_bytes()
"""A small real ELF file: an executable with .dynsym, relocations and notes."""
_PHOFF, _SHOFF = struct.unpack_from("<QQ", SEED, 32)
_HEADERS = st.one_of(st.integers(0, 63), st.integers(_PHOFF, _PHOFF + 13 * 56),
                     st.integers(_SHOFF, len(SEED) - 1), st.integers(0, len(SEED) - 1))
"""Where a mutation lands: mostly in the ELF, program and section headers."""


def _read_all(f: ElfFile) -> None:
    """Every table of the file, as the probe plan reads them."""
    _ = (f.symbols, f.has_symtab, f.build_id, f.jump_slots, f.is_shared_library,
         f.executable_sections(), f.section(".text"), f.relocated_pointer(0))
    for symbol in f.symbols.values():
        f.read(symbol.vaddr, 16)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(_HEADERS, st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.integers(64, len(SEED)))
def test_fuzz_elf_file_is_read_or_refused_in_one_sentence(
        tmp_path: Path, changes: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(SEED)
    for at, value in changes:
        data[at] = value
    path = tmp_path / "mutated"
    path.write_bytes(bytes(data[:cut]))
    try:
        _read_all(ElfFile(path))
        plan_probes([path])
    except ProfinferError as exc:
        assert "\n" not in str(exc)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "lib.so"
    os.mkfifo(fifo)
    with pytest.raises(ProfinferError, match="is not a regular file"):
        ElfFile(fifo)


def test_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    with pytest.raises(ProfinferError, match="/dev/zero is not a regular file"):
        ElfFile(Path("/dev/zero"))


def test_a_file_larger_than_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.so"
    with big.open("wb") as f:  # sparse: no disk taken
        f.write(SEED[:64])
        f.truncate(elf.MAX_FILE_BYTES + 1)
    with pytest.raises(ProfinferError, match="larger than 4 GiB"):
        ElfFile(big)


def test_a_table_reaching_past_the_end_is_one_sentence(tmp_path: Path) -> None:
    data = bytearray(SEED)
    shentsize, shnum = struct.unpack_from("<HH", SEED, 58)
    for i in range(shnum):  # every section 1 TiB long
        struct.pack_into("<Q", data, _SHOFF + i * shentsize + 32, 1 << 40)
    path = tmp_path / "long-tables"
    path.write_bytes(bytes(data))
    with pytest.raises(ProfinferError, match=f"{path} is a malformed ELF file"):
        _ = ElfFile(path).symbols


def test_objdump_reads_the_bytes_read_not_what_the_path_holds_later(tmp_path: Path) -> None:
    lib = tmp_path / "lib.so"
    lib.write_bytes(SEED)
    f = ElfFile(lib)
    lib.unlink()
    lib.symlink_to("/etc/passwd")  # the target swaps the path for another file
    assert f.function_ranges == ElfFile(Path("/bin/true")).function_ranges != []
