"""Finding the probe sites and the op names in real llama.cpp builds: shared, stripped, static
(built with -fcf-protection), cross-compiled for arm64 (with and without branch protection)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from profinfer_perfetto.analysis import arm64, x86
from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.ggml import read_ggml_info
from profinfer_perfetto.analysis.target import objects_of_command, plan_probes
from profinfer_perfetto.errors import ProfinferError
from scripts.assets import CACHE


def _fns(plan_probes_result: object) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in plan_probes_result.probes:  # type: ignore[attr-defined]
        counts[p.fn] = counts.get(p.fn, 0) + 1
    return counts


def test_shared_build(llama: Callable[..., Path]) -> None:
    plan = plan_probes(objects_of_command([str(llama("llama-completion"))], []))
    fns = _fns(plan)
    assert fns["op_begin"] == 1 and fns["fused_op_begin"] == 1 and fns["barrier_enter"] >= 2
    assert fns["graph_begin"] == fns["graph_end"] == fns["graph_alloc"] == 1
    assert fns["decode_begin"] == fns["process_begin"] == 1 and fns["token_end"] == 3
    assert plan.notes == () and plan.sees_graph_builds
    assert plan.ggml.version == "0.25.3" and plan.ggml.ops[29] == "MUL_MAT"
    assert {p.path.name for p in plan.probes} == {"libggml-cpu.so.0", "libggml-base.so.0",
                                                 "libllama.so.0"}


def test_offsets_are_file_offsets_of_the_symbols(llama: Callable[..., Path]) -> None:
    lib = llama("llama-completion").parent / "libggml-cpu.so.0"
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                        text=True, check=True).stdout
    exported = {line.split()[2]: int(line.split()[0], 16) for line in nm.splitlines()}
    elf = ElfFile(lib)
    sym = elf.symbols["ggml_cpu_extra_compute_forward"]
    assert sym.vaddr == exported["ggml_cpu_extra_compute_forward"]
    assert elf.read(sym.vaddr, 16) == lib.read_bytes()[elf.file_offset(sym.vaddr):][:16]


def test_stripped_libraries_keep_their_probe_sites(llama: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    bin_dir = llama("llama-completion").parent
    for lib in ("libggml-cpu.so.0", "libggml-base.so.0"):
        shutil.copy(bin_dir / lib, tmp_path / lib)
        subprocess.run(["strip", "--strip-all", str(tmp_path / lib)], check=True)
        assert not ElfFile(tmp_path / lib).has_symtab
    plan = plan_probes([tmp_path / "libggml-cpu.so.0", tmp_path / "libggml-base.so.0"])
    unstripped = plan_probes([bin_dir / "libggml-cpu.so.0", bin_dir / "libggml-base.so.0"])
    assert [(p.fn, p.offset) for p in plan.probes] == [
        (p.fn, p.offset) for p in unstripped.probes
    ]
    assert plan.ggml == unstripped.ggml


def test_static_build_names_equal_the_shared_library_s(llama: Callable[..., Path]) -> None:
    static = ElfFile(llama("llama-completion", "static"))
    bin_dir = llama("llama-completion").parent
    shared = [ElfFile(bin_dir / f"{lib}.so.0") for lib in ("libggml-base", "libggml-cpu",
                                                          "libllama")]
    assert not static.is_shared_library and shared[0].is_shared_library
    from_static, from_shared = read_ggml_info([static]), read_ggml_info(shared)
    assert replace(from_static, build_id="") == replace(from_shared, build_id="")
    plan = plan_probes([static.path])
    fns = _fns(plan)
    assert fns["op_begin"] == 1 and fns["process_begin"] == 1
    assert fns["barrier_enter"] + len(plan.loop_barriers) >= 2
    # Built with -fcf-protection (setup.sh): the op probe goes on the push after endbr64.
    op = static.symbols["ggml_cpu_extra_compute_forward"].vaddr
    assert static.read(op, 4) == x86.ENDBR64
    assert [p.offset for p in plan.probes if p.fn == "op_begin"] == [static.file_offset(op + 4)]


@pytest.mark.parametrize("build", ["arm64", "arm64-bti"])
def test_arm64_builds_are_probed_where_the_kernel_simulates(llama: Callable[..., Path],
                                                           build: str) -> None:
    """The op function's entry (`stp x29, x30, [sp, #-N]!`, after `bti c`/`paciasp` with
    branch protection) is single-stepped: its BL in the node loop is probed instead, and so are
    the barriers' BLs (and the instructions those inside ops return to); entry probes go past a
    landing pad, uretprobes stay before it."""
    bin_dir = llama("llama-completion", build).parent
    plan = plan_probes([bin_dir / f"{lib}.so.0" for lib in ("libggml-base", "libggml-cpu",
                                                             "libllama")])
    fns = _fns(plan)
    assert fns["op_begin"] == 1 and fns["fused_op_begin"] == 1 and fns["barrier_enter"] >= 2
    assert fns["decode_begin"] == fns["process_begin"] == 1 and fns["token_end"] == 3
    assert plan.notes == () and plan.arch == "arm64"
    for probe in plan.probes:
        elf = ElfFile(probe.path)
        symbol = elf.symbols.get(probe.where)
        at = elf.read(symbol.vaddr, 4) if symbol is not None else b""
        if probe.where.startswith("call "):
            site = int(probe.where.rsplit(" ", 1)[1], 16)
            assert int.from_bytes(elf.read(site, 4), "little") >> 26 == 0b100101  # BL
            assert elf.file_offset(site) == probe.offset
        elif probe.where.startswith("jump "):  # a tail call of ggml_barrier inside an op
            site = int(probe.where.rsplit(" ", 1)[1], 16)
            assert int.from_bytes(elf.read(site, 4), "little") >> 26 == 0b000101  # B
            assert elf.file_offset(site) == probe.offset
        elif probe.where.startswith("return of call "):
            site = int(probe.where.rsplit(" ", 1)[1], 16)
            assert elf.file_offset(site + 4) == probe.offset  # the BL's return address
        elif probe.ret or arm64.ARCH.decode(at, 0)[0].text not in ("bti c", "paciasp"):
            assert probe.offset == elf.file_offset(symbol.vaddr)  # type: ignore[union-attr]
        else:
            assert build == "arm64-bti"
            assert probe.offset == elf.file_offset(symbol.vaddr + 4)  # type: ignore[union-attr]


def test_a_binary_without_the_runtime_is_refused() -> None:
    with pytest.raises(ProfinferError, match="ggml_cpu_extra_compute_forward is not defined in"):
        plan_probes(objects_of_command(["/bin/true"], []))


def _old_build(version: str) -> Path:
    root = CACHE / f"llama.cpp-{version}" / "build-shared"
    if not (root / ".complete").is_file():
        pytest.skip(f"llama.cpp of llama-cpp-python {version} is not built (nox -s matrix)")
    return root


def test_an_older_build_is_probed_at_its_local_op_entry() -> None:
    """llama.cpp 2024 (0.3.2) has no ggml_cpu_extra_compute_forward: the node loop calls the
    local ggml_compute_forward, and its one barrier is a call of GOMP_barrier beside it. That
    function starts with a load (its early return), which uprobes single-step: its one call in
    the node loop is probed instead."""
    root = _old_build("0.3.2")
    plan = plan_probes(objects_of_command([str(root / "bin" / "llama-cli")], []))
    (op,) = [p for p in plan.probes if p.fn == "op_begin"]
    assert op.where.startswith("call ggml_compute_forward at ")
    assert op.path.name == "libggml-cpu.so"
    barriers = [p.where for p in plan.probes if p.fn == "barrier_enter"]
    assert len(barriers) == 1 and barriers[0].startswith("call GOMP_barrier at")
    assert _fns(plan)["decode_begin"] == 1 and plan.notes == ()


def test_an_older_build_stripped_of_symtab_is_refused_in_one_sentence(tmp_path: Path) -> None:
    cpu = _old_build("0.3.2") / "ggml" / "src" / "ggml-cpu" / "libggml-cpu.so"
    shutil.copy(cpu, tmp_path / cpu.name)
    subprocess.run(["strip", "--strip-all", str(tmp_path / cpu.name)], check=True)
    with pytest.raises(ProfinferError, match=r"libggml-cpu\.so has no \.symtab to find the older"):
        plan_probes([tmp_path / cpu.name])
