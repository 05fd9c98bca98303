"""The node each barrier call of the graph loop finished, found in every cached llama.cpp build's
code (analysis/loop.py), read statically on this machine (nothing is loaded or run); and the
calls whose node cannot be known by construction get none."""

from __future__ import annotations

import pytest

from profinfer_perfetto.analysis import x86
from profinfer_perfetto.analysis.loop import LoopBarrier, barrier_in
from profinfer_perfetto.analysis.target import plan_probes
from profinfer_perfetto.capture.program import barrier_programs
from scripts.assets import CACHE

X86_64 = frozenset({f"r{r}" for r in ("ax", "bx", "cx", "dx", "si", "di", "bp")}
                   | {f"r{n}" for n in range(8, 16)})
ARM64 = frozenset(f"x{n}" for n in range(29))
BUILDS = {
    # build: (its files, the registers of its architecture, calls after the loop). Which
    # registers the compiler chose depends on the machine that built it (native builds: the
    # static build's index and graph were in r14 and none on one machine, in r13 and r12 on
    # another, 2026-11-27), so the test holds what any build must have; test_barrier_nodes.py
    # checks the nodes read against bpftrace.
    "0.3.36/build-shared": (("libggml-cpu.so", "libggml-base.so"), X86_64, 1),
    "0.3.36/build-blas": (("libggml-cpu.so", "libggml-base.so"), X86_64, 1),
    "0.3.36/build-vulkan": (("libggml-cpu.so", "libggml-base.so"), X86_64, 1),
    "0.3.36/build-static": (("llama-completion",), X86_64, 1),  # OpenMP: GOMP_barrier
    "0.3.36/build-arm64": (("libggml-cpu.so", "libggml-base.so"), ARM64, 2),
    "0.3.36/build-arm64-bti": (("libggml-cpu.so", "libggml-base.so"), ARM64, 2),
    "0.3.14/build-shared": (("libggml-cpu.so", "libggml-base.so"), X86_64, 1),
}


def _plan_of(build: str, files: tuple[str, ...]) -> tuple[list[str], tuple[LoopBarrier, ...]]:
    version, folder = build.split("/")
    bin_dir = CACHE / f"llama.cpp-{version}" / folder / "bin"
    if not all((bin_dir / f).is_file() for f in files):
        pytest.skip(f"llama.cpp {build} is not built")
    plan = plan_probes([bin_dir / f for f in files])
    return [p.fn for p in plan.probes if "barrier" in p.fn], plan.loop_barriers


@pytest.mark.parametrize("build", BUILDS)
def test_the_loop_s_barrier_says_the_node_it_ends(build: str) -> None:
    """One call inside the loop: nodes[index - 1], index the register the loop compared with
    n_nodes (the graph in another register, or, where the call's code overwrote it, from
    graph_begin's map); the call(s) the function returns after: the graph's end; the barriers
    of ops inlined into the loop's function: no node (barrier_enter, as before)."""
    files, registers, n_last = BUILDS[build]
    fns, barriers = _plan_of(build, files)
    (inside,) = [b for b in barriers if not b.last]
    assert inside.index in registers and inside.offset == -1
    assert inside.cgraph is None or inside.cgraph in registers - {inside.index}
    last = [b for b in barriers if b.last]
    assert len(last) == n_last and all(b.index is None and b.cgraph is None for b in last)
    assert sorted(f for f in fns if f != "barrier_enter") == sorted(b.fn for b in barriers)
    assert "barrier_enter" in fns


def test_a_clang_build_that_inlines_ggml_barrier_has_no_barrier_call() -> None:
    fns, barriers = _plan_of("0.3.36/build-clang", ("libggml-cpu.so", "libggml-base.so"))
    assert fns == [] and barriers == ()


ASM = (
    "4439 6004"      # cmp %r12d, 0x4(%rax)      n_nodes vs the index
    "7f 06"          # jg inside
    "e8 00000000"    # call (after the loop)
    "c3"             # ret
    "{clobber}"      # inside: what runs before the call
    "e8 00000000"    # call (inside the loop)
    "eb fe"          # jmp (on with the loop)
)


@pytest.mark.parametrize(("clobber", "expected"), [
    ("", ("r12", "rax")),
    ("31c0", ("r12", None)),   # xor %eax, %eax: the graph from graph_begin's map
    ("4531e4", None),          # xor %r12d, %r12d: the index is gone, no node
])
def test_a_register_written_before_the_call_is_not_read(
        clobber: str, expected: tuple[str, str | None] | None) -> None:
    code = bytes.fromhex(ASM.replace("{clobber}", clobber).replace(" ", ""))
    insns = x86.ARCH.decode(code, 0x1000)
    calls = [i.address for i in insns if i.text.startswith("call")]
    found = barrier_in(insns, calls[1], 4)
    assert (found.index, found.cgraph) == expected if found else expected is None
    after = barrier_in(insns, calls[0], 4)
    assert after is not None and after.last


def test_the_compare_s_other_side_is_no_loop_barrier() -> None:
    """`jle` to the call: there the index is not below n_nodes (not the loop's barrier)."""
    code = bytes.fromhex(ASM.replace("{clobber}", "").replace(" ", "").replace("7f06", "7e06"))
    insns = x86.ARCH.decode(code, 0x1000)
    calls = [i.address for i in insns if i.text.startswith("call")]
    assert barrier_in(insns, calls[1], 4) is None
    assert barrier_in(insns, calls[1], 8) is None  # nor a compare with another field


def test_each_call_gets_a_program_with_its_registers() -> None:
    text = barrier_programs((LoopBarrier(0x1A6B0, "r12", -1, "rax", False),
                             LoopBarrier(0x187C8, "x21", -1, None, False),
                             LoopBarrier(0x1A667, None, 0, None, True)))
    assert "int barrier_node_1a6b0(struct pt_regs *ctx) {\n    return at_barrier_node(" \
           "(s64)(s32)ctx->r12 + -1, (const u8 *)ctx->ax, 0);" in text
    assert "at_barrier_node((s64)(s32)ctx->regs[21] + -1, 0, 0);" in text
    assert "int barrier_node_1a667(struct pt_regs *ctx) {\n    return at_barrier_node(0, 0, 1);" \
           in text
