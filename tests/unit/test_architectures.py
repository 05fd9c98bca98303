"""The same ggml facts and probe rules from every compiler and architecture: the stand-in ggml of
test_facts.py built by gcc and clang for x86-64 and AArch64 (and with Arm's branch protection),
read statically on this machine (nothing is loaded or run)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from profinfer_perfetto.analysis import arm64, x86
from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.ggml import read_ggml_info
from profinfer_perfetto.analysis.target import plan_probes
from profinfer_perfetto.errors import ProfinferError
from tests.unit.test_facts import FIXTURE, assert_the_fake_s_facts

COMPILERS = {
    "gcc-x86-64": ("gcc",),
    "clang-x86-64": ("clang",),
    "gcc-arm64": ("aarch64-linux-gnu-gcc",),
    "gcc-arm64-bti": ("aarch64-linux-gnu-gcc", "-mbranch-protection=standard"),
    "clang-arm64": ("clang", "--target=aarch64-linux-gnu"),
    "clang-arm64-bti": ("clang", "--target=aarch64-linux-gnu", "-mbranch-protection=standard"),
}
"""The compilers setup.sh installs, as Debian packages them (clang cross-compiles for AArch64
with the headers and libraries of gcc-aarch64-linux-gnu)."""
ARM64 = [k for k in COMPILERS if "arm64" in k]
BL = 0b100101
"""The top six bits of an AArch64 BL instruction."""


def build(tmp_path: Path, name: str, *flags: str) -> Path:
    """The fake ggml, built by compiler `name` as a shared library."""
    compiler, *options = COMPILERS[name]
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is needed (scripts/setup.sh installs it)")
    lib = tmp_path / f"libfake-{name}.so"
    subprocess.run([compiler, *options, "-O2", "-fPIC", "-shared", *flags, "-o", str(lib),
                    str(FIXTURE)], check=True)
    return lib


def _stripped(lib: Path) -> Path:
    copy = lib.with_name("stripped-" + lib.name)
    strip = "aarch64-linux-gnu-strip" if ElfFile(lib).machine == 183 else "strip"
    subprocess.run([strip, "--strip-all", "-o", str(copy), str(lib)], check=True)
    return copy


@pytest.mark.parametrize("name", COMPILERS)
def test_every_compiler_gives_the_same_facts(tmp_path: Path, name: str) -> None:
    lib = build(tmp_path, name)
    info = read_ggml_info([ElfFile(lib)])
    assert_the_fake_s_facts(info)
    stripped = read_ggml_info([ElfFile(_stripped(lib))])
    assert replace(stripped, sources=()) == replace(info, sources=())


def test_clang_s_tail_call_is_followed(tmp_path: Path) -> None:
    """clang compiles the fake's ggml_add to a jump into ggml_add_impl (as it compiles ggml's):
    the op it stores is read from the function it jumps to."""
    lib = build(tmp_path, "clang-x86-64")
    elf = ElfFile(lib)
    add = elf.symbols["ggml_add"]
    assert x86.ARCH.decode(elf.read(add.vaddr, add.size), add.vaddr)[-1].text.startswith("jmp")
    how = {s.fact: s.how for s in read_ggml_info([elf]).sources}
    assert how["GGML_OP_ADD"].startswith("ggml_add in libfake-clang-x86-64.so: `movl $2, 0x60(")


@pytest.mark.parametrize("name", ARM64)
def test_the_arm64_op_probe_goes_on_its_bl(tmp_path: Path, name: str) -> None:
    """The op function's entry is single-stepped on arm64 (a load, or `bti c` then a load): its
    call in the node loop, a BL the kernel simulates, is probed instead."""
    lib = build(tmp_path, name)
    elf = ElfFile(lib)
    (op,) = [p for p in plan_probes([lib]).probes if p.fn == "op_begin"]
    assert op.where.startswith("call ggml_cpu_extra_compute_forward at ")
    site = int(op.where.rsplit(" ", 1)[1], 16)
    word = int.from_bytes(elf.read(site, 4), "little")
    assert word >> 26 == BL and elf.file_offset(site) == op.offset
    assert not arm64.ARCH.single_stepped(elf.read(site, 4), site)


@pytest.mark.parametrize("name", ["gcc-arm64-bti", "clang-arm64-bti"])
def test_entry_probes_skip_the_landing_pad_and_return_probes_do_not(tmp_path: Path,
                                                                     name: str) -> None:
    """With branch protection every function starts with `bti c` or `paciasp`: an entry probe
    goes after it (the arguments are the same), a uretprobe on it (before paciasp signs x30)."""
    lib = build(tmp_path, name)
    elf = ElfFile(lib)
    graph = elf.symbols["ggml_graph_compute"].vaddr
    assert arm64.ARCH.decode(elf.read(graph, 4), graph)[0].text in ("bti c", "paciasp")
    at = {(p.fn, p.offset) for p in plan_probes([lib]).probes}
    assert {("graph_begin", elf.file_offset(graph + 4)),
            ("graph_end", elf.file_offset(graph))} <= at


def _words(*words: int) -> list[bytes]:
    return [w.to_bytes(4, "little") for w in words]


def test_which_arm64_instructions_the_kernel_simulates_steps_or_refuses() -> None:
    simulated = _words(0x14000000, 0x94000000, 0x54000001, 0xB4000000, 0x36000000, 0x10000000,
                       0x90000000, 0xD61F0000, 0xD63F0000, 0xD65F03C0)  # b bl b.ne cbz tbz
    # adr adrp br blr ret; then stp x29, x30, [sp, #-16]!, bti c, paciasp, nop, mov x29, sp
    stepped = _words(0xA9BF7BFD, 0xD503245F, 0xD503233F, 0xD503201F, 0x910003FD)
    refused = _words(0xC85F7C20, 0xD50323BF, 0x58000000, 0xD4000001, 0xD503205F)
    # ldxr, autiasp, ldr literal, svc, wfe
    a = arm64.ARCH
    assert not any(a.single_stepped(w, 0x1000) or a.refused(w, 0x1000) for w in simulated)
    assert all(a.single_stepped(w, 0x1000) and not a.refused(w, 0x1000) for w in stepped)
    assert all(a.refused(w, 0x1000) for w in refused)


def test_code_of_another_architecture_is_refused(tmp_path: Path) -> None:
    lib = build(tmp_path, "gcc-x86-64")
    data = bytearray(lib.read_bytes())
    data[18:20] = (243).to_bytes(2, "little")  # e_machine: EM_RISCV
    lib.write_bytes(data)
    with pytest.raises(ProfinferError, match="is code for ELF machine 243, not x86-64 or "
                                             "AArch64") as caught:
        read_ggml_info([ElfFile(lib)])
    assert "\n" not in str(caught.value)
