"""ggml facts read statically from a build's files: a stand-in ggml compiled here, whose struct
offsets are unlike any real ggml's and whose constructor creates a file if anything loads it."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from profinfer_perfetto.analysis import x86
from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.ggml import GgmlInfo, RuntimeLayout, TensorLayout, read_ggml_info
from profinfer_perfetto.analysis.target import plan_probes
from profinfer_perfetto.errors import ProfinferError
from tests.conftest import Cli

FIXTURE = Path(__file__).parents[1] / "fixtures" / "fake_ggml.c"
FAKE_LAYOUT = TensorLayout(type=0, ne=16, nb=48, op=96, op_params=100, flags=164, src=168,
                           n_src=6, view_src=216, data=232, name=240, name_len=48, size=304)
"""offsetof in tests/fixtures/fake_ggml.c, as its comments give them."""


def _gcc(tmp_path: Path, source: Path, out: str, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the fixture")
    target = tmp_path / out
    subprocess.run(["gcc", "-O2", "-fPIC", *flags, "-o", str(target), str(source)], check=True)
    return target


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "constructor-ran"


@pytest.fixture
def fake(tmp_path: Path, marker: Path) -> Path:
    return _gcc(tmp_path, FIXTURE, "libfake-ggml.so", "-shared", f'-DMARKER="{marker}"')


@pytest.fixture
def cet(tmp_path: Path, marker: Path) -> Path:
    """The fake built as Ubuntu's and Fedora's compilers build (every function after endbr64)."""
    return _gcc(tmp_path, FIXTURE, "libfake-ggml-cet.so", "-shared", "-fcf-protection=full",
                f'-DMARKER="{marker}"')


def _stripped(lib: Path) -> Path:
    copy = lib.with_name("stripped-" + lib.name)
    shutil.copy(lib, copy)
    subprocess.run(["strip", "--strip-all", str(copy)], check=True)
    return copy


def assert_the_fake_s_facts(info: GgmlInfo) -> None:
    """What tests/fixtures/fake_ggml.c declares, whoever compiled it."""
    assert info.layout == FAKE_LAYOUT
    assert info.runtime == RuntimeLayout(cgraph_n_nodes=8, cplan_n_threads=24,
                                         batch_ext_tokens=72, batch_ext_token_size=40)
    assert info.ops == ("NONE", "DUP", "ADD", "MUL", "UNARY", "GLU")
    assert info.unary_ops == ("ABS", "SGN", "NEG") and info.glu_ops == ("REGLU", "GEGLU")
    assert info.types == ("f32", "f16", "q4_0")
    assert info.type_sizes == ((1, 4), (1, 2), (32, 18))
    assert (info.version, info.commit) == ("9.9.9-fake", "fake") and len(info.build_id) == 40


def test_facts_come_from_the_code_and_nothing_is_loaded(fake: Path, marker: Path) -> None:
    info = read_ggml_info([ElfFile(fake)])
    assert_the_fake_s_facts(info)
    how = {s.fact: s.how for s in info.sources}
    assert how["tensor.name"].startswith("ggml_get_name in libfake-ggml.so: `leaq 0xf0(%rdi)")
    assert how["ops count"].startswith(".symtab: GGML_OP_NAME is 48 bytes")
    assert not marker.exists()


def test_a_stripped_library_gives_the_same_facts(fake: Path, marker: Path) -> None:
    stripped = _stripped(fake)
    assert not ElfFile(stripped).has_symtab
    info = read_ggml_info([ElfFile(stripped)])
    assert info == read_ggml_info([ElfFile(fake)])
    how = {s.fact: s.how for s in info.sources}
    assert all("(stripped)" in how[f"{k} count"] for k in ("ops", "unary_ops", "glu_ops", "types"))
    assert not marker.exists()


def test_record_with_the_library_as_lib_never_loads_it(cli: Cli, fake: Path,
                                                       marker: Path) -> None:
    result = cli("record", "--ebpf", "--lib", fake, "--", "/bin/true")
    assert result.returncode == 0, result.stderr
    assert "#define T_OP 96\n" in result.stdout and "#define T_OP_PARAMS 100\n" in result.stdout
    assert f"uprobe op_begin: {fake}" in result.stdout
    assert not marker.exists()


def test_doctor_reports_each_fact_and_where_it_was_read(cli: Cli, fake: Path,
                                                        marker: Path) -> None:
    result = cli("doctor", fake)
    assert "tensor.src" in result.stdout and "ggml_add in libfake-ggml.so" in result.stdout
    assert "ggml 9.9.9-fake" in result.stdout
    assert not marker.exists()


def test_a_build_with_control_flow_protection_is_probed_past_endbr64(cet: Path,
                                                                      fake: Path) -> None:
    facts = [read_ggml_info([ElfFile(lib)]) for lib in (cet, fake)]
    assert replace(facts[0], build_id="", sources=()) == replace(facts[1], build_id="", sources=())
    for lib, skipped in ((cet, len(x86.ENDBR64)), (fake, 0)):
        elf = ElfFile(lib)
        graph = elf.symbols["ggml_graph_compute"].vaddr
        assert (elf.read(graph, 4) == x86.ENDBR64) == bool(skipped)
        at = {(p.fn, p.offset) for p in plan_probes([lib]).probes}
        assert {("graph_begin", elf.file_offset(graph + skipped)),
                ("graph_end", elf.file_offset(graph + skipped))} <= at


def test_an_op_function_whose_entry_is_single_stepped_is_probed_at_its_calls(
        cet: Path, fake: Path) -> None:
    """The fake's op function starts with a load (after endbr64 in the -fcf-protection build):
    its one call, in the node loop, is probed instead."""
    for lib in (fake, cet):
        elf = ElfFile(lib)
        (op,) = [p for p in plan_probes([lib]).probes if p.fn == "op_begin"]
        assert op.where.startswith("call ggml_cpu_extra_compute_forward at ")
        call = elf.read(int(op.where.rsplit(" ", 1)[1], 16), 16)
        assert not x86.ARCH.single_stepped(call, 0) and call[0] == 0xE8


def test_a_single_stepped_op_entry_with_no_call_to_probe_is_noted(tmp_path: Path, marker: Path,
                                                                   fake: Path) -> None:
    """Without the node loop the op function has no direct call: its probe stays on the entry
    and the plan says what that costs."""
    lib = _gcc(tmp_path, FIXTURE, "libfake-ggml-noloop.so", "-shared", "-DNO_NODE_LOOP",
               f'-DMARKER="{marker}"')
    plan = plan_probes([lib])
    (op,) = [p for p in plan.probes if p.fn == "op_begin"]
    assert op.where == "ggml_cpu_extra_compute_forward"
    (note,) = [n for n in plan.notes if "single-steps" in n]
    assert note.startswith("the op probe sits on an instruction the kernel single-steps "
                           "(ggml_cpu_extra_compute_forward at 0x")
    assert not any("single-steps" in n for n in plan_probes([fake]).notes)


def test_which_probed_instructions_the_kernel_single_steps() -> None:
    emulated = ["55", "4155", "e800000000", "7500", "0f8500000000", "eb00", "90"]
    stepped = ["f30f1efa", "4889f8", "8b4660", "ff1500000000", "ffd0", "6a01", "c3"]
    assert not any(x86.ARCH.single_stepped(bytes.fromhex(c), 0x1000) for c in emulated)
    assert all(x86.ARCH.single_stepped(bytes.fromhex(c), 0x1000) for c in stepped)


def test_a_probe_stays_on_endbr64_where_a_jump_lands_past_it() -> None:
    endbr_then_push = x86.ENDBR64 + bytes.fromhex("55c3")  # push %rbp; ret
    loop = x86.ENDBR64 + bytes.fromhex("ffcf75fcc3")  # 1: dec %edi; jne 1b; ret
    assert x86.ARCH.entry_probe_address(endbr_then_push, 0x1000) == 0x1004
    assert x86.ARCH.entry_probe_address(loop, 0x1000) == 0x1000
    assert x86.ARCH.entry_probe_address(bytes.fromhex("55c3"), 0x1000) == 0x1000


def _refused(path: Path, expected: str) -> None:
    with pytest.raises(ProfinferError, match=expected) as caught:
        read_ggml_info([ElfFile(path)])
    assert "\n" not in str(caught.value)


def _other(tmp_path: Path) -> Path:
    """C source of an unrelated library (no headers: it builds for -m32 without multilib)."""
    source = tmp_path / "other.c"
    source.write_text("int other(int x) { return x + 1; }\n")
    return source


def test_a_32_bit_file_is_refused(tmp_path: Path) -> None:
    try:
        obj = _gcc(tmp_path, _other(tmp_path), "other32.o", "-m32", "-c")
    except subprocess.CalledProcessError:
        pytest.skip("gcc cannot build 32-bit code here")
    _refused(obj, "is a 32-bit ELF file: only 64-bit targets are supported")


def test_a_big_endian_file_is_refused(fake: Path) -> None:
    data = bytearray(fake.read_bytes())
    data[5] = 2  # EI_DATA: ELFDATA2MSB
    fake.write_bytes(data)
    _refused(fake, "is a big-endian ELF file: only little-endian targets are supported")


def test_a_library_without_the_accessors_is_refused(tmp_path: Path) -> None:
    lib = _stripped(_gcc(tmp_path, _other(tmp_path), "libother.so", "-shared"))
    _refused(lib, "cannot derive the tensor's name offset: ggml_get_name is not defined in "
                  "stripped-libother.so")


def test_the_cli_says_one_sentence_and_exits_2(cli: Cli, tmp_path: Path) -> None:
    lib = _gcc(tmp_path, _other(tmp_path), "libother.so", "-shared")
    result = cli("doctor", lib)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ggml_get_name is not defined in libother.so" in lines[0]


def test_doctor_reads_a_running_process_s_files(cli: Cli, fake: Path, tmp_path: Path) -> None:
    """--pid reads the files the process maps, through /proc/PID/root (the test runs the
    process, and so its constructor: the recorder itself only reads)."""
    main = tmp_path / "main.c"
    main.write_text("#include <unistd.h>\nint main(void) { pause(); return 0; }\n")
    exe = _gcc(tmp_path, main, "uses-fake", "-Wl,--no-as-needed", f"-L{tmp_path}",
               "-lfake-ggml", f"-Wl,-rpath,{tmp_path}")
    proc = subprocess.Popen([exe])
    try:
        maps = Path(f"/proc/{proc.pid}/maps")
        for _ in range(200):
            if "libfake-ggml.so" in maps.read_text():
                break
            time.sleep(0.01)
        result = cli("doctor", "--pid", str(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert "ggml 9.9.9-fake" in result.stdout, result.stderr
    assert "ggml_get_name in libfake-ggml.so" in result.stdout
